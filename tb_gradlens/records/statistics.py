"""The extras of gradient, histogram and update records."""

import collections

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens.records import checks

FormatError = metadata.FormatError


GradientInfo = collections.namedtuple(
    "GradientInfo", ("variable_dtypes", "gradient_dtypes", "skipped")
)


def gradient_extras(variable_dtypes, gradient_dtypes, skipped=()):
    """Extras of a ``grad_stats`` record.

    Args:
      variable_dtypes, gradient_dtypes: dtype names per row ("none" for a
        None gradient).
      skipped: ``[{"row", "dtype", "reason"}]`` of variables given no row.
    """
    out = {
        "variable_dtypes": [str(d) for d in variable_dtypes],
        "gradient_dtypes": [str(d) for d in gradient_dtypes],
    }
    if skipped:
        out["skipped"] = [
            {"row": str(s["row"]), "dtype": str(s["dtype"]), "reason": str(s["reason"])}
            for s in skipped
        ]
    return out


def read_gradient(record, tag=None):
    """The GradientInfo of a ``grad_stats`` record (missing lists: empty)."""
    extras = record.extras
    skipped = extras.get("skipped", [])
    if not isinstance(skipped, list) or not all(
        isinstance(s, dict) and all(isinstance(s.get(k), str) for k in ("row", "dtype", "reason"))
        for s in skipped
    ):
        raise FormatError("skipped must be a list of {row, dtype, reason} strings", tag)
    return GradientInfo(
        tuple(checks.str_list(extras.get("variable_dtypes", []), record, "variable_dtypes", tag)),
        tuple(checks.str_list(extras.get("gradient_dtypes", []), record, "gradient_dtypes", tag)),
        tuple(dict(s) for s in skipped),
    )


def histogram_extras():
    """Extras of a ``grad_histogram`` record: its first exponent and the
    dtype limits the tab draws."""
    return {
        "min_exponent": metadata.MIN_EXPONENT,
        "dtype_exponent_limits": float_formats.exponent_limits(),
    }


HistogramInfo = collections.namedtuple("HistogramInfo", ("min_exponent", "dtype_exponent_limits"))


def read_histogram(record, tag=None):
    """The HistogramInfo of a ``grad_histogram`` record (missing keys: this
    version's defaults); FormatError for values of the wrong type."""
    extras = record.extras
    first = extras.get("min_exponent", metadata.MIN_EXPONENT)
    if not checks.is_int(first):
        raise FormatError("min_exponent must be an integer", tag)
    limits = extras.get("dtype_exponent_limits", float_formats.exponent_limits())
    if not isinstance(limits, dict) or not all(
        isinstance(name, str) and isinstance(bounds, dict)
        and all(isinstance(k, str) and checks.is_int(v) for k, v in bounds.items())
        for name, bounds in limits.items()
    ):
        raise FormatError("dtype_exponent_limits must map dtype names to {name: integer}", tag)
    return HistogramInfo(first, {name: dict(bounds) for name, bounds in limits.items()})


def update_extras(variable_dtypes):
    """Extras of an ``update_stats`` record: the weights' dtype per row
    (a lost update is real for bfloat16 weights, hypothetical for float32)."""
    return {"variable_dtypes": [str(d) for d in variable_dtypes]}


def read_update(record, tag=None):
    """Per row, the weights' dtype of an ``update_stats`` record (None: unknown)."""
    dtypes = checks.str_list(record.extras.get("variable_dtypes", []), record, "variable_dtypes", tag)
    return tuple(dtypes) + (None,) * (len(record.rows) - len(dtypes))


def gradient_index_extras(table_rows):
    """Extras of a ``gradient_indices`` record: per row, the rows of the
    variable's table (None when not known)."""
    return {"table_rows": [None if n is None else int(n) for n in table_rows]}


def read_gradient_indices(record, tag=None):
    """Per row, the table rows of a ``gradient_indices`` record (None: unknown)."""
    rows = record.extras.get("table_rows", [])
    if not isinstance(rows, list) or len(rows) > len(record.rows) or not all(
            n is None or checks.is_int(n) for n in rows):
        raise FormatError("table_rows must be a list of at most %d integers or nulls" % len(record.rows), tag)
    return tuple(rows) + (None,) * (len(record.rows) - len(rows))


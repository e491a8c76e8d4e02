"""One factory per record kind: its rows, its columns and its extras, framed.

Every writer (``writing``, ``keras``, ``compare``, ``advisor``) makes the
``metadata.RecordMetadata`` of a record only through these, so the pairing
of a kind with its columns, its fixed rows and the builder of its extras
lives in one place.  A factory returns the metadata; the writer puts the
tensor beside it (float32 ``[len(rows), len(columns)]``, or for the JSON
kinds the scalar string ``json_text(payload)``).
"""

import json

from tb_gradlens import metadata
from tb_gradlens.records import statistics
from tb_gradlens.records.replays import optimizer_step_extras

# The rows of the kinds that describe one thing.
LOSS_ROW = "loss"
OPTIMIZER_ROW = "optimizer"
DIVERGENCE_KINDS = (metadata.DIVERGENCE, metadata.ACTIVATION_DIVERGENCE)


def grad_stats_record(rows, extras):
    """A ``grad_stats`` record of ``rows`` (variable paths); ``extras`` from
    ``records.gradient_extras``."""
    return metadata.RecordMetadata(metadata.GRAD_STATS, rows, metadata.GRAD_STATS_COLUMNS, extras)


def grad_histogram_record(rows):
    """A ``grad_histogram`` record of ``rows`` (its extras are fixed:
    ``records.histogram_extras``)."""
    return metadata.RecordMetadata(metadata.GRAD_HISTOGRAM, rows, metadata.HISTOGRAM_COLUMNS,
                                   statistics.histogram_extras())


def update_stats_record(rows, extras):
    """An ``update_stats`` record of ``rows``; ``extras`` from ``records.update_extras``."""
    return metadata.RecordMetadata(metadata.UPDATE_STATS, rows, metadata.UPDATE_STATS_COLUMNS, extras)


def gradient_indices_record(rows, table_rows):
    """A ``gradient_indices`` record of ``rows`` (sparse gradients' variable
    paths) and, per row, the rows of its table (None: unknown)."""
    return metadata.RecordMetadata(metadata.GRADIENT_INDICES, rows, metadata.GRADIENT_INDICES_COLUMNS,
                                   statistics.gradient_index_extras(table_rows))


def optimizer_step_record(loss_scaling):
    """The ``optimizer_step`` record (one row, ``OPTIMIZER_ROW``) of an
    optimizer that scales the loss or not."""
    return metadata.RecordMetadata(metadata.OPTIMIZER_STEP, [OPTIMIZER_ROW], metadata.OPTIMIZER_STEP_COLUMNS,
                                   optimizer_step_extras(loss_scaling))


def nonfinite_replay_record(rows, extras):
    """A ``nonfinite_replay`` record of ``rows``; ``extras`` from ``records.replay_extras``."""
    return metadata.RecordMetadata(metadata.NONFINITE_REPLAY, rows, metadata.NONFINITE_REPLAY_COLUMNS, extras)


def divergence_record(rows, extras, kind=metadata.DIVERGENCE):
    """A ``divergence`` record (rows: variable paths) or, with ``kind``
    ``activation_divergence``, one of layer outputs in forward order;
    ``extras`` from ``records.comparison_extras``."""
    if kind not in DIVERGENCE_KINDS:
        raise ValueError("tb_gradlens: kind %r is not a divergence kind" % (kind,))
    return metadata.RecordMetadata(kind, rows, metadata.DIVERGENCE_COLUMNS, extras)


def activation_divergence_record(rows, extras):
    """An ``activation_divergence`` record (see ``divergence_record``)."""
    return divergence_record(rows, extras, metadata.ACTIVATION_DIVERGENCE)


def loss_comparison_record(extras):
    """The ``loss_comparison`` record (one row, ``LOSS_ROW``); ``extras``
    from ``records.comparison_extras``."""
    return metadata.RecordMetadata(metadata.LOSS_COMPARISON, [LOSS_ROW], metadata.LOSS_COMPARISON_COLUMNS, extras)


def comparison_record(kind, rows, extras):
    """The record of one of the comparison kinds (``divergence``,
    ``activation_divergence``, ``loss_comparison``) by its kind."""
    if kind == metadata.LOSS_COMPARISON:
        return loss_comparison_record(extras)
    return divergence_record(rows, extras, kind)


def dtypes_record(dtype_map):
    """The ``dtypes`` record of a ``records.dtype_map`` (rows: its layer paths)."""
    return metadata.RecordMetadata(metadata.DTYPES, [layer.get("path", "") for layer in dtype_map.get("layers", [])],
                                   ())


def lens_status_record(status):
    """The ``lens_status`` record of a ``records.lens_status`` (rows:
    ``kind:name`` of each expectation)."""
    return metadata.RecordMetadata(metadata.LENS_STATUS,
                                   [e["kind"] + ":" + e["name"] for e in status.get("expected", [])], ())


def advice_record(advice):
    """The ``advice`` record of a ``records.advice`` (rows: its units' names)."""
    return metadata.RecordMetadata(metadata.ADVICE, [u["name"] for u in advice.get("units", [])], ())


def json_text(payload):
    """The tensor of a JSON kind's record: ``payload`` as JSON text (keys sorted)."""
    return json.dumps(payload, sort_keys=True, ensure_ascii=False)

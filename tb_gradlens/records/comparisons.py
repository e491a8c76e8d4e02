"""The extras of comparison records (divergence, activation_divergence, loss_comparison)."""

import collections

from tb_gradlens import metadata
from tb_gradlens.records import checks
from tb_gradlens.records.variants import MIXED
from tb_gradlens.records.variants import read_variant

FormatError = metadata.FormatError


PRECISION = "precision"
REPLICA_VS_MEAN = "replica_vs_mean"
# The name (tag prefix) of the replica-vs-mean divergence records.
REPLICAS_NAME = "replicas"
COMPARISONS = (PRECISION, REPLICA_VS_MEAN)

# The significance floor of the divergence metrics (numerics), as a
# fraction of rms(reference), when a record does not state it.
DEFAULT_FLOOR_FRACTION = 0.1

ComparisonInfo = collections.namedtuple(
    "ComparisonInfo", ("reference", "candidate", "comparison", "floor_fraction", "row_dtypes")
)


def comparison_extras(reference, candidate, floor_fraction=DEFAULT_FLOOR_FRACTION,
                      comparison=PRECISION, row_dtypes=None, reference_16_bit=None):
    """Extras of a divergence-like record.

    Args:
      reference, candidate: ``variant`` dicts.
      floor_fraction: the significance floor of the metrics (x rms(r)).
      comparison: PRECISION (two numeric settings of one step) or
        REPLICA_VS_MEAN (a replica's gradient vs the mean over replicas:
        different examples, not a precision question).
      row_dtypes: optional list, per row, of the dtype the candidate
        computed that row in (the ULP spacing of ``ulp_rms``).
      reference_16_bit: optional ``{layer path: dtype}``: layers the
        reference computes in 16 bits whatever their policy (raw ops), whose
        error no comparison measures.
    """
    if comparison not in COMPARISONS:
        raise ValueError("tb_gradlens: comparison must be one of %s" % (COMPARISONS,))
    out = {
        "reference": dict(reference),
        "candidate": dict(candidate),
        "comparison": comparison,
        "floor_fraction": float(floor_fraction),
    }
    if row_dtypes is not None:
        out["row_dtypes"] = [None if d is None else str(d) for d in row_dtypes]
    if reference_16_bit:
        out["reference_16_bit"] = {str(k): str(v) for k, v in reference_16_bit.items()}
    return out


def read_reference_16_bit(record, tag=None):
    """``{layer path: dtype}`` of a comparison record's ``reference_16_bit`` ({} when absent)."""
    found = record.extras.get("reference_16_bit", {})
    if not isinstance(found, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in found.items()):
        raise FormatError("reference_16_bit must map layer paths to dtype names", tag)
    return dict(found)


def read_comparison(record, tag=None):
    """The ComparisonInfo of a divergence-like RecordMetadata (any version)."""
    extras = record.extras
    reference = read_variant(extras.get("reference"), tag, "reference")
    candidate = read_variant(extras.get("candidate"), tag, "candidate")
    comparison = extras.get("comparison", PRECISION)
    if comparison not in COMPARISONS:
        raise FormatError("unknown comparison %r" % (comparison,), tag)
    floor = extras.get("floor_fraction", DEFAULT_FLOOR_FRACTION)
    if not checks.is_number(floor):
        raise FormatError("floor_fraction must be a number", tag)
    row_dtypes = extras.get("row_dtypes")
    if row_dtypes is not None:
        row_dtypes = tuple(checks.str_list(row_dtypes, record, "row_dtypes", tag, allow_none=True))
        if len(row_dtypes) != len(record.rows):
            raise FormatError(
                "row_dtypes has %d entries for %d rows" % (len(row_dtypes), len(record.rows)), tag
            )
    read_reference_16_bit(record, tag)
    return ComparisonInfo(reference, candidate, comparison, float(floor), row_dtypes)


def row_compute_dtypes(info, n_rows):
    """Per row, the candidate's compute dtype (None where unknown)."""
    if info.row_dtypes is not None:
        return list(info.row_dtypes)
    compute = info.candidate.compute_dtype
    return [None if compute == MIXED else compute] * n_rows

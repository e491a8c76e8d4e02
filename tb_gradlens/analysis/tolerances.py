"""The tolerance each compared row is judged against: what rounding explains.

TensorFlow-free.  A bfloat16 gradient or activation always differs from its
float32 reference: every operation rounds, and the errors accumulate through
depth and reductions.  A divergence alert is for what that does not explain.
Per row of a divergence-like record (``judge``):

* effective dtype: the least precise compute dtype the row's value went
  through in the candidate (an activation: its own layer and every layer
  before it in forward order; a gradient or the loss: every layer);
* rounding budget, with u the unit roundoff of the effective dtype
  (``float_formats``): ``value_rounding * u * depth`` for an activation at
  forward position ``depth`` (each layer adds its rounding to what it
  inherits and amplifies that by its conditioning), and
  ``gradient_rounding * u * sqrt(depth)`` for gradients and the loss at the
  model's depth (sums over the batch whose error is dominated by the
  reduction, growing slowly with depth); x sqrt(2) when both sides round
  alike (another device, XLA).  The shapes and the constants were measured
  on the alert zoo (BENCHMARKS.md): the constants are about 3x the largest
  ratio seen on healthy models;
* early baseline (activations): a row whose divergence rises
  ``rise_factor``-fold above its median over its first ``baseline_steps``
  logged comparisons (at least u/4, so a row that starts at exactly 0 is
  judged against rounding), for ``rise_steps`` logged comparisons in a row,
  is judged by that rise even while under its budget;
* reference noise (gradients): a row whose reference is within
  ``noise_factor`` x the rounding noise of its own computation (rel L2 at
  least ``(u_candidate / u_reference) / noise_factor``) has a true value of
  zero: attention key biases, biases before BatchNorm.  Its rel L2 is the
  ratio of two noises, not a signal, and it is not judged;
* the fixed floors of ``Thresholds`` bound every limit from below.

A record that does not state a compute dtype is judged against the fixed
16-bit floor, and says so.
"""

import collections
import math

import numpy as np
from tensorboard import errors

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import detectors

# One judged divergence-like series; arrays are [S, R] or [R].
Judgement = collections.namedtuple(
    "Judgement",
    ("column", "values", "hit", "noise", "limits", "basis", "codes", "dtypes", "depths", "rule"),
)

# What a comparison's records state, for every record of it (metadata only).
ComparisonContext = collections.namedtuple(
    "ComparisonContext", ("activation_dtypes", "gradient_dtypes", "depth")
)

_RULES = {
    metadata.DIVERGENCE: (
        "rel_l2 above the larger of the fixed floor and the rounding budget C*u*sqrt(depth) of the "
        "candidate's effective dtype; gradients whose reference is within noise_factor x its own "
        "rounding noise (true gradient 0) are not judged."
    ),
    metadata.ACTIVATION_DIVERGENCE: (
        "rel_l2 above the larger of the fixed floor and the smaller of the rounding budget "
        "C*u*depth of the layer's effective dtype and rise_factor x the layer's median over "
        "its first logged comparisons (the rise held for rise_steps logged comparisons)."
    ),
    metadata.LOSS_COMPARISON: (
        "rel_error above the larger of the fixed floor and the rounding budget C*u*sqrt(depth) of "
        "the candidate's effective dtype at the model's depth."
    ),
}
REPLICA_RULE = "Replicas see different examples: their disagreement is not judged (NaN/Inf only)."


def is_replica_disagreement(record):
    """True for a tf.distribute replica-vs-mean record (distribute.py):
    replicas see different examples, so their disagreement (rel_l2 near 1
    is ordinary) is gradient noise, not precision loss."""
    return records.read_comparison(record).comparison == records.REPLICA_VS_MEAN


def precision_bits(dtype):
    """Mantissa bits of a dtype name (None when unknown)."""
    f = float_formats.FORMATS.get(dtype)
    return None if f is None else f.mantissa_bits


def least_precise(dtypes):
    """The least precise known dtype of ``dtypes`` (None if none is known)."""
    known = [d for d in dtypes if precision_bits(d) is not None]
    return min(known, key=precision_bits) if known else None


def comparison_key(entry):
    """Records of one comparison share it: tag name, reference and candidate."""
    extras = entry.record.extras
    name = entry.tag.rsplit("/", 2)[0]
    return (name, repr(extras.get("reference")), repr(extras.get("candidate")))


def comparison_contexts(entries):
    """{comparison_key: ComparisonContext} of a run's readable entries."""
    found = collections.defaultdict(dict)
    for entry in entries:
        if entry.kind not in codes.DIVERGENCE_KINDS:
            continue
        try:
            info = records.read_comparison(entry.record, entry.tag)
        except metadata.FormatError:
            continue
        found[comparison_key(entry)][entry.kind] = records.row_compute_dtypes(info, len(entry.record.rows))
    out = {}
    for key, kinds in found.items():
        acts = kinds.get(metadata.ACTIVATION_DIVERGENCE, [])
        grads = kinds.get(metadata.DIVERGENCE, [])
        out[key] = ComparisonContext(tuple(acts), tuple(grads), max(1, len(acts) or len(grads)))
    return out


def _row_dtypes(kind, info, n_rows, context):
    """(candidate, reference) effective dtype per row."""
    own = records.row_compute_dtypes(info, n_rows)
    whole = least_precise(
        list(context.activation_dtypes) + list(context.gradient_dtypes) + own
        + [info.candidate.compute_dtype]
    )
    if kind == metadata.ACTIVATION_DIVERGENCE:
        cand = [least_precise(own[: i + 1]) or (whole if own[i] is None else None) for i in range(n_rows)]
    else:
        cand = [whole] * n_rows
    ref = info.reference.compute_dtype
    if precision_bits(ref) is None:
        same_side = info.reference.policy == info.candidate.policy
        return cand, list(cand) if same_side else [None] * n_rows
    return cand, [ref] * n_rows


def _row_depths(kind, n_rows, context):
    if kind == metadata.ACTIVATION_DIVERGENCE:
        return list(range(1, n_rows + 1))
    return [context.depth] * n_rows


def _floor(kind, dtype, thresholds):
    if dtype is None or dtype in float_formats.LOW_PRECISION:
        if kind == metadata.DIVERGENCE:
            return thresholds.low_precision_gradient_rel_l2, "low_precision_gradient_rel_l2"
        return thresholds.low_precision_value_rel_l2, "low_precision_value_rel_l2"
    return thresholds.float32_rel_l2, "float32_rel_l2"


RowRule = collections.namedtuple("RowRule", ("code", "limit", "basis", "u", "same", "floor"))


def row_rule(kind, cand, ref, depth, thresholds):
    """The RowRule of one row: its code, limit before any rise rule, basis,
    unit roundoff u, whether both sides round alike, and its floor."""
    floor, floor_name = _floor(kind, cand, thresholds)
    if cand is None:
        return RowRule(codes.DIVERGENCE, floor,
                       "compute dtype not recorded: the fixed 16-bit floor %s = %.3g" % (floor_name, floor),
                       None, False, floor)
    bits_c, bits_r = precision_bits(cand), precision_bits(ref)
    same = bits_r is not None and bits_c >= bits_r
    code = codes.DIVERGENCE if same else codes.PRECISION_CODES.get(cand, codes.DIVERGENCE)
    u = float_formats.unit_roundoff(cand if bits_r is None or bits_c <= bits_r else ref)
    if kind == metadata.ACTIVATION_DIVERGENCE:
        factor, growth, shape = thresholds.value_rounding, float(depth), "%d" % depth
    else:
        factor, growth, shape = thresholds.gradient_rounding, math.sqrt(depth), "sqrt(%d)" % depth
    budget = factor * u * growth * (math.sqrt(2.0) if same else 1.0)
    if budget >= floor:
        basis = "%s rounding at depth %d: %g x u x %s%s = %.3g" % (
            cand, depth, factor, shape, " x sqrt(2), both sides round" if same else "", budget)
        return RowRule(code, budget, basis, u, same, floor)
    return RowRule(code, floor, "fixed floor %s = %.3g" % (floor_name, floor), u, same, floor)


def _noise(kind, values, series, r, cand, ref, same, thresholds):
    """[S] flags of gradient row ``r`` where its reference is rounding noise,
    and the rel_l2 from which it is (None, None for rows this rule does not
    cover).

    Both sides rounding alike, two noises of one size are uncorrelated and
    as large: rel_l2 >= 0.5, |cosine| < 0.5 and norm_ratio in [0.5, 2]."""
    if kind != metadata.DIVERGENCE or cand is None or precision_bits(ref) is None:
        return None, None
    if same:
        cosine = np.abs(series.column("cosine")[:, r].astype(np.float64))
        ratio = series.column("norm_ratio")[:, r].astype(np.float64)
        with np.errstate(invalid="ignore"):
            return (values >= 0.5) & (cosine < 0.5) & (ratio >= 0.5) & (ratio <= 2.0), 0.5
    level = float_formats.unit_roundoff(cand) / float_formats.unit_roundoff(ref) / thresholds.noise_factor
    with np.errstate(invalid="ignore"):
        return values >= level, level


def judge(series, context, thresholds=codes.DEFAULT_THRESHOLDS):
    """The Judgement of a divergence-like Series (see the module doc)."""
    record = series.record
    kind, rows = record.kind, record.rows
    info = records.read_comparison(record, series.tag)
    column = codes.DEFAULT_COLUMN[kind]
    values = series.column(column).astype(np.float64)
    n_steps, n_rows = values.shape
    hit = np.zeros((n_steps, n_rows), bool)
    noise = np.zeros((n_steps, n_rows), bool)
    limits, basis, row_codes = [None] * n_rows, [REPLICA_RULE] * n_rows, [codes.DIVERGENCE] * n_rows
    cand, ref = _row_dtypes(kind, info, n_rows, context)
    depths = _row_depths(kind, n_rows, context)
    if info.comparison == records.REPLICA_VS_MEAN:
        return Judgement(column, values, hit, noise, limits, basis, row_codes, cand, depths, REPLICA_RULE)
    for r in range(n_rows):
        rule = row_rule(kind, cand[r], ref[r], depths[r], thresholds)
        row_codes[r], limit, why = rule.code, rule.limit, rule.basis
        with np.errstate(invalid="ignore"):
            above = values[:, r] > limit
        if kind == metadata.ACTIVATION_DIVERGENCE and rule.u is not None:
            limit, why, above = _with_rise(values[:, r], series.steps, rule, thresholds, above)
        flags, level = _noise(kind, values[:, r], series, r, cand[r], ref[r], rule.same, thresholds)
        if flags is not None:
            noise[:, r] = flags
            if flags.sum() * 2 > n_steps > 0:
                why = "reference at the rounding noise of its own computation (rel_l2 >= %.3g) at %d " \
                      "of %d steps: true gradient 0, not judged there" % (level, flags.sum(), n_steps)
                limit = None
        hit[:, r] = above & ~noise[:, r]
        limits[r], basis[r] = limit, why
    return Judgement(column, values, hit, noise, limits, basis, row_codes, cand, depths, _RULES[kind])


def _with_rise(values, steps, rule, thresholds, above):
    """(limit, basis, flags) of one activation row with the early-baseline rule folded in."""
    median, end = detectors.baseline(values[:, None], thresholds.baseline_steps)
    if not np.isfinite(median[0]):
        return rule.limit, rule.basis, above
    base = max(float(median[0]), rule.u / 4)
    rise = max(thresholds.rise_factor * base, rule.floor)
    if rise >= rule.limit:
        return rule.limit, rule.basis, above
    with np.errstate(invalid="ignore"):
        rising = values > rise
    rising[: end[0]] = False
    held = detectors.sustained(rising[:, None], thresholds.rise_steps)[:, 0]
    first, last = int(steps[0]), int(steps[end[0] - 1])
    why = "%g x its baseline %.3g (median of steps %d-%d), held %d logged steps = %.3g" % (
        thresholds.rise_factor, base, first, last, thresholds.rise_steps, rise)
    return rise, why, above | held


def row_limits(judgement):
    """JSON-ready per-row limits (None where not judged) of a Judgement."""
    return [None if v is None else float(v) for v in judgement.limits]


def limits(source, run, tag, thresholds=codes.DEFAULT_THRESHOLDS):
    """The tolerances route: the limit each row of a divergence-like tag is judged against.

    Returns ``{"run", "tag", "kind", "column", "rows", "limits", "basis",
    "rule"}``; NotFoundError for an unknown run or tag, InvalidArgumentError
    for a kind without tolerances (or an unreadable tag).
    """
    entry = source.entry(run, tag)
    if entry.record is None:
        raise errors.InvalidArgumentError(entry.error or "unreadable gradlens record")
    if entry.kind not in codes.DIVERGENCE_KINDS:
        raise errors.InvalidArgumentError(
            "tag %r is a %s record: tolerances exist for %s" % (tag, entry.kind, ", ".join(codes.DIVERGENCE_KINDS))
        )
    judgement = judge_entry(source, entry, thresholds)
    return {
        "run": run,
        "tag": tag,
        "kind": entry.kind,
        "column": judgement.column,
        "rows": list(entry.record.rows),
        "limits": row_limits(judgement),
        "basis": list(judgement.basis),
        "rule": judgement.rule,
    }


def context_of(source, entry):
    """The ComparisonContext of a divergence-like entry, from its run's listing."""
    contexts = comparison_contexts(source.entries(entry.run))
    return contexts.get(comparison_key(entry), ComparisonContext((), (), max(1, len(entry.record.rows))))


def judge_entry(source, entry, thresholds=codes.DEFAULT_THRESHOLDS):
    """``judge`` of a tag, read through ``source``."""
    return judge(source.series(entry.run, entry.tag), context_of(source, entry), thresholds)

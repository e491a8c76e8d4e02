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


def _noise(kind, values, series, rules, cand, ref, thresholds):
    """[S, R] flags where a gradient row's reference is rounding noise, and
    per row the rel_l2 from which it is (NaN for rows this rule does not cover).

    Both sides rounding alike, two noises of one size are uncorrelated and
    as large: rel_l2 >= 0.5, |cosine| < 0.5 and norm_ratio in [0.5, 2]."""
    n_rows = values.shape[1]
    levels = np.full(n_rows, np.nan)
    alike = np.zeros(n_rows, bool)
    if kind == metadata.DIVERGENCE:
        for r, rule in enumerate(rules):
            if cand[r] is None or precision_bits(ref[r]) is None:
                continue
            if rule.same:
                levels[r], alike[r] = 0.5, True
            else:
                levels[r] = (float_formats.unit_roundoff(cand[r]) / float_formats.unit_roundoff(ref[r])
                             / thresholds.noise_factor)
    with np.errstate(invalid="ignore"):
        noise = values >= levels[None, :]
        if alike.any():
            cosine = np.abs(series.column("cosine").astype(np.float64))
            ratio = series.column("norm_ratio").astype(np.float64)
            uncorrelated = (cosine < 0.5) & (ratio >= 0.5) & (ratio <= 2.0)
            noise &= np.where(alike[None, :], uncorrelated, True)
    return noise, levels


def judge(series, context, thresholds=codes.DEFAULT_THRESHOLDS):
    """The Judgement of a divergence-like Series (see the module doc)."""
    record = series.record
    kind = record.kind
    info = records.read_comparison(record, series.tag)
    column = codes.DEFAULT_COLUMN[kind]
    values = series.column(column).astype(np.float64)
    n_steps, n_rows = values.shape
    cand, ref = _row_dtypes(kind, info, n_rows, context)
    depths = _row_depths(kind, n_rows, context)
    if info.comparison == records.REPLICA_VS_MEAN:
        nothing = np.zeros((n_steps, n_rows), bool)
        return Judgement(column, values, nothing, nothing, [None] * n_rows, [REPLICA_RULE] * n_rows,
                         [codes.DIVERGENCE] * n_rows, cand, depths, REPLICA_RULE)
    rules = [row_rule(kind, cand[r], ref[r], depths[r], thresholds) for r in range(n_rows)]
    limits = np.array([rule.limit for rule in rules], np.float64)
    basis = [rule.basis for rule in rules]
    with np.errstate(invalid="ignore"):
        hit = values > limits[None, :]
    if kind == metadata.ACTIVATION_DIVERGENCE:
        hit = _with_rise(values, series.steps, rules, thresholds, hit, limits, basis)
    noise, levels = _noise(kind, values, series, rules, cand, ref, thresholds)
    hit &= ~noise
    out_limits = [float(v) for v in limits]
    counts = noise.sum(axis=0)
    for r in np.nonzero(counts * 2 > n_steps)[0]:
        basis[r] = ("reference at the rounding noise of its own computation (rel_l2 >= %.3g) at %d of %d "
                    "steps: true gradient 0, not judged there" % (levels[r], counts[r], n_steps))
        out_limits[r] = None
    return Judgement(column, values, hit, noise, out_limits, basis, [rule.code for rule in rules], cand,
                     depths, _RULES[kind])


def _with_rise(values, steps, rules, thresholds, hit, limits, basis):
    """Fold the early-baseline rule into the activation rows: lowers
    ``limits`` and rewrites ``basis`` in place where it applies; returns the
    flags with the held rises added."""
    median, end = detectors.baseline(values, thresholds.baseline_steps)
    u = np.array([np.nan if rule.u is None else rule.u for rule in rules])
    floor = np.array([rule.floor for rule in rules])
    with np.errstate(invalid="ignore"):
        base = np.maximum(median, u / 4)
        rise = np.maximum(thresholds.rise_factor * base, floor)
        applies = np.isfinite(rise) & (rise < limits)
        if not applies.any():
            return hit
        rising = (values > rise[None, :]) & applies[None, :]
    rising &= np.arange(len(values))[:, None] >= end[None, :]
    held = detectors.sustained(rising, thresholds.rise_steps)
    for r in np.nonzero(applies)[0]:
        basis[r] = "%g x its baseline %.3g (median of steps %d-%d), held %d logged steps = %.3g" % (
            thresholds.rise_factor, base[r], int(steps[0]), int(steps[end[r] - 1]), thresholds.rise_steps,
            rise[r])
        limits[r] = rise[r]
    return hit | held


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

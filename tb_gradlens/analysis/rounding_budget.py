"""The depth formula: the limit of a row no stable-rounding pass measured.

TensorFlow-free.  Comparisons written before the stable-rounding pass
existed (format version 1), comparisons of two sides that round alike
(another device, XLA) and ``compare_fn`` comparisons (no layers to round
between) carry no ``stable_rel_l2``.  Their rows are judged as before:

* rounding budget, with u the unit roundoff of the row's effective dtype:
  ``value_rounding * u * depth`` for an activation at forward position
  ``depth``, ``gradient_rounding * u * sqrt(depth)`` for gradients and the
  loss at the model's depth; x sqrt(2) when both sides round alike;
* early baseline (activations): a rise of ``rise_factor`` x the row's
  median over its first ``baseline_steps`` logged comparisons, held for
  ``rise_steps``;
* reference noise (gradients): a row whose rel L2 is at least
  ``(u_candidate / u_reference) / noise_factor`` has a true value of zero
  and is not judged;
* the fixed floors of ``Thresholds`` bound every limit from below.
"""

import collections
import math

import numpy as np

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import detectors


def precision_bits(dtype):
    """Mantissa bits of a dtype name (None when unknown)."""
    f = float_formats.FORMATS.get(dtype)
    return None if f is None else f.mantissa_bits


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


def noise(kind, values, series, rules, cand, ref, thresholds):
    """[S, R] flags where a gradient row's reference is rounding noise, and
    per row the rel_l2 from which it is (NaN for rows this rule does not cover).

    Both sides rounding alike, two noises of one size are uncorrelated and
    as large: rel_l2 >= 0.5, |cosine| < 0.5 and norm_ratio in [0.5, 2]."""
    n_rows = values.shape[1]
    levels = np.full(n_rows, np.nan)
    alike = np.zeros(n_rows, bool)
    if kind == metadata.DIVERGENCE:
        for r, rule in enumerate(rules):
            if rule is None or cand[r] is None or precision_bits(ref[r]) is None:
                continue
            if rule.same:
                levels[r], alike[r] = 0.5, True
            else:
                levels[r] = (float_formats.unit_roundoff(cand[r]) / float_formats.unit_roundoff(ref[r])
                             / thresholds.noise_factor)
    with np.errstate(invalid="ignore"):
        flags = values >= levels[None, :]
        if alike.any():
            cosine = np.abs(series.column("cosine").astype(np.float64))
            ratio = series.column("norm_ratio").astype(np.float64)
            uncorrelated = (cosine < 0.5) & (ratio >= 0.5) & (ratio <= 2.0)
            flags &= np.where(alike[None, :], uncorrelated, True)
    return flags, levels


def with_rise(values, steps, rules, thresholds, hit, limits, basis, rows):
    """Fold the early-baseline rule into the activation ``rows``: lowers
    ``limits`` ([S, R]) and rewrites ``basis`` in place where it applies;
    returns the flags with the held rises added."""
    median, end = detectors.baseline(values, thresholds.baseline_steps)
    u = np.array([np.nan if rule is None or rule.u is None else rule.u for rule in rules])
    floor = np.array([np.nan if rule is None else rule.floor for rule in rules])
    row_limits = np.array([np.nan if rule is None else rule.limit for rule in rules])
    with np.errstate(invalid="ignore"):
        base = np.maximum(median, u / 4)
        rise = np.maximum(thresholds.rise_factor * base, floor)
        applies = np.isfinite(rise) & (rise < row_limits) & rows
        if not applies.any():
            return hit
        rising = (values > rise[None, :]) & applies[None, :]
    rising &= np.arange(len(values))[:, None] >= end[None, :]
    held = detectors.sustained(rising, thresholds.rise_steps)
    for r in np.nonzero(applies)[0]:
        basis[r] = "%g x its baseline %.3g (median of steps %d-%d), held %d logged steps = %.3g" % (
            thresholds.rise_factor, base[r], int(steps[0]), int(steps[end[r] - 1]), thresholds.rise_steps,
            rise[r])
        limits[:, r] = rise[r]
    return hit | held


# The rule of the rows judged here, per kind, as the tolerances route states it.
FORMULA_RULES = {
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

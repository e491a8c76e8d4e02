"""The recommendation: the fewest units to keep in float32, chosen greedily.

Pure NumPy (no TensorFlow), one formula per function.  The inputs are, for
every judged row (each variable's gradient, each layer output, the loss),
its divergence from the float32 reference with every unit as configured
(``total[R]``), with one unit alone in 16 bits (``alone[U, R]``, the
one-at-a-time pass; NaN where not measured) and its limit (``limits[R]``,
the alerts' rule on this batch).  The harm index of a prediction is the
largest ``value / limit`` over the rows; at most 1 is within the limits.
"""

import math

import numpy as np


def rel_l2(candidate, reference):
    """||c - r||_2 / ||r||_2 over the concatenation of the arrays (float64);
    inf when c holds a NaN or an infinity; 0 when both are 0 and equal.

    ``None`` entries (no gradient) must be None on both sides and are skipped."""
    diff = ref = 0.0
    for c, r in zip(candidate, reference):
        if c is None or r is None:
            continue
        c = np.asarray(c, np.float64)
        r = np.asarray(r, np.float64)
        if not np.all(np.isfinite(c)):
            return math.inf
        diff += float(np.sum((c - r) ** 2))
        ref += float(np.sum(r * r))
    if ref == 0.0:
        return 0.0 if diff == 0.0 else math.inf
    return math.sqrt(diff) / math.sqrt(ref)


def predicted_rows(measured, alone, kept, measured_kept=()):
    """[R] the divergence of each row predicted with the units ``kept`` in
    float32, from rows ``measured`` with the units ``measured_kept`` (a
    subset of ``kept``) in float32, the units' errors taken as independent:
    ``measured_r * sqrt(sum_{u not in kept} a_ur^2 / sum_{u not in
    measured_kept} a_ur^2)`` (``measured_r`` where no unit left alone
    diverges there; units not measured, NaN, count as 0).  Scaling measured
    rows keeps what the independence misses (errors that grow together, far
    beyond the sum of the units' alone) in the prediction.  Where a unit
    alone is non-finite (an overflow, a NaN) the row stays infinite until
    that unit is kept; where the measured row is non-finite but no unit
    left alone is, the rest's ``sqrt(sum_{u not in kept} a_ur^2)``."""
    measured = np.asarray(measured, np.float64)
    alone = np.asarray(alone, np.float64).reshape(-1, len(measured))
    keep, before = np.zeros(len(alone), bool), np.zeros(len(alone), bool)
    keep[list(kept)] = True
    before[list(measured_kept)] = True
    bad = np.isinf(alone) | (np.isnan(alone) & np.isnan(measured)[None, :])
    a2 = np.where(np.isfinite(alone), alone, 0.0) ** 2
    whole, left = a2[~before].sum(axis=0), a2[~keep].sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(whole > 0, left / whole, 1.0)
        out = np.where(np.isfinite(measured), measured * np.sqrt(share), np.sqrt(left))
    return np.where(bad[~keep].any(axis=0), np.inf, out)


def judged_ratios(values, limits):
    """``value_r / limit_r`` over the judged rows (a NaN or non-positive
    limit: not judged; a non-finite value: inf)."""
    values, limits = np.asarray(values, np.float64), np.asarray(limits, np.float64)
    judged = np.isfinite(limits) & (limits > 0)
    with np.errstate(invalid="ignore"):
        ratio = np.where(np.isfinite(values), values / np.where(judged, limits, 1.0), np.inf)
    return ratio[judged]


def harm_index(values, limits):
    """The largest ``value / limit`` over the judged rows; 0 with no judged row."""
    ratio = judged_ratios(values, limits)
    return float(np.max(ratio)) if ratio.size else 0.0


def excess(values, limits):
    """``sum_r max(value_r / limit_r - 1, 0)`` over the judged rows: how far
    beyond their limits the rows are together, which tells two predictions
    with one harm index apart (two faults, each the worst in its own rows)."""
    return float(np.sum(np.maximum(judged_ratios(values, limits) - 1.0, 0.0)))


def ranking(alone_harm, without_harm, attributable):
    """Attributable unit indices, the most harmful first: by the harm index
    of the unit alone in 16 bits, ties by the harm index left with it alone
    in float32 (smaller first)."""
    def key(u):
        a = alone_harm[u]
        a = math.inf if a is None or a != a else a
        b = without_harm[u]
        b = math.inf if b is None or b != b else b
        return (-a, b, u)

    return sorted((u for u in range(len(alone_harm)) if attributable[u]), key=key)


def greedy(total, alone, limits, attributable, tolerance=1.0, without=None):
    """``(kept, predicted harm index)``: at each step the attributable unit
    whose float32 lowers the harm index most, until it is at most
    ``tolerance`` or no unit lowers it (what is left is not the policy's:
    a unit that cannot be switched keeps its error in the prediction).

    The first unit is chosen on its measured leave-one-out rows
    (``without[u]``, None where not measured); later units on
    ``predicted_rows`` scaled from the rows measured with the first."""
    kept, measured, measured_kept = [], total, []
    estimate = (harm_index(total, limits), excess(total, limits))
    while estimate[0] > tolerance:
        unit, best, rows = next_unit(kept, measured, alone, limits, attributable, measured_kept,
                                     None if kept else without)
        if unit is None or not (best, excess(rows, limits)) < estimate:
            break
        kept.append(unit)
        estimate = (best, excess(rows, limits))
        if without is not None and len(kept) == 1 and without[unit] is not None:
            measured, measured_kept = rows, [unit]
    return kept, estimate[0]


def next_unit(kept, measured, alone, limits, attributable, measured_kept=(), without=None):
    """``(unit, predicted harm index, predicted rows)`` of the unit whose
    float32 lowers the harm index most after ``kept``, ties by the
    ``excess`` (``(None, inf, None)``: none left); rows measured with
    ``measured_kept`` in float32 are scaled (``predicted_rows``), a unit's
    measured leave-one-out rows (``without[u]``) used as they are."""
    best, best_score = (None, np.inf, None), None
    for u in range(len(attributable)):
        if not attributable[u] or u in kept:
            continue
        measured_alone = without is not None and without[u] is not None
        rows = np.asarray(without[u], np.float64) if measured_alone else predicted_rows(
            measured, alone, list(kept) + [u], measured_kept)
        score = (harm_index(rows, limits), excess(rows, limits))
        if best[0] is None or score < best_score:
            best, best_score = (u, score[0], rows), score
    return best

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


def predicted_rows(total, alone, kept):
    """[R] the divergence of each row predicted with the units ``kept`` in
    float32, the units' errors taken as independent:
    ``total_r * sqrt(sum_{u not kept} a_ur^2 / sum_u a_ur^2)`` (``total_r``
    where no unit alone diverges there; units not measured, NaN, count as
    0).  Where a unit alone is non-finite (an overflow, a NaN) the row stays
    infinite until that unit is kept; where the total is non-finite but no
    unit alone is, the rest's ``sqrt(sum_{u not kept} a_ur^2)``."""
    total = np.asarray(total, np.float64)
    alone = np.asarray(alone, np.float64).reshape(-1, len(total))
    keep = np.zeros(len(alone), bool)
    keep[list(kept)] = True
    bad = np.isinf(alone) | (np.isnan(alone) & np.isnan(total)[None, :])
    a2 = np.where(np.isfinite(alone), alone, 0.0) ** 2
    whole, left = a2.sum(axis=0), a2[~keep].sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(whole > 0, left / whole, 1.0)
        out = np.where(np.isfinite(total), total * np.sqrt(share), np.sqrt(left))
    return np.where(bad[~keep].any(axis=0), np.inf, out)


def harm_index(values, limits):
    """The largest ``value / limit`` over the judged rows (a NaN limit: not
    judged; a non-finite value: inf); 0 with no judged row."""
    values, limits = np.asarray(values, np.float64), np.asarray(limits, np.float64)
    judged = np.isfinite(limits) & (limits > 0)
    if not judged.any():
        return 0.0
    with np.errstate(invalid="ignore"):
        ratio = np.where(np.isfinite(values), values / np.where(judged, limits, 1.0), np.inf)
    return float(np.max(ratio[judged]))


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


def greedy(total, alone, limits, attributable, tolerance=1.0):
    """``(kept, predicted harm index)``: at each step the attributable unit
    whose float32 lowers the predicted harm index most, until it is at most
    ``tolerance`` or no unit lowers it (what is left is not the policy's:
    a unit that cannot be switched keeps its error in the prediction)."""
    kept = []
    estimate = harm_index(total, limits)
    while estimate > tolerance:
        options = [u for u in range(len(attributable)) if attributable[u] and u not in kept]
        scored = [(harm_index(predicted_rows(total, alone, kept + [u]), limits), u) for u in options]
        if not scored:
            break
        best, unit = min(scored)
        if not best < estimate:
            break
        kept.append(unit)
        estimate = best
    return kept, estimate


def next_unit(kept, total, alone, limits, attributable):
    """The unit to add after a verification failed: the one whose float32
    lowers the predicted harm index most (None: none left)."""
    options = [u for u in range(len(attributable)) if attributable[u] and u not in kept]
    if not options:
        return None
    return min(options, key=lambda u: (harm_index(predicted_rows(total, alone, kept + [u]), limits), u))

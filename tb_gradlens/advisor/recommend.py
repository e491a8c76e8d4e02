"""The recommendation: the fewest units to keep in float32, chosen greedily.

Pure NumPy (no TensorFlow), one formula per function.  The inputs are
the measured gradient divergences (rel L2 over every trainable weight,
against the float32 reference) of the step with every unit as configured
(``total``) and with one unit alone in 16 bits (``alone[u]``, the
one-at-a-time pass).
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


def predicted(total, alone, kept):
    """The divergence predicted with the units ``kept`` in float32: the
    units' errors taken as independent, ``total * sqrt(sum_{u not kept}
    alone_u^2 / sum_u alone_u^2)`` (``total`` when no unit alone diverges)."""
    alone = np.asarray(alone, np.float64)
    if not np.all(np.isfinite(alone)):
        big = ~np.isfinite(alone)
        rest = [u for u in np.nonzero(big)[0] if u not in kept]
        if rest:
            return math.inf
        alone = np.where(big, 0.0, alone)
    whole = float(np.sum(alone ** 2))
    if whole == 0.0:
        return float(total)
    left = float(np.sum([alone[u] ** 2 for u in range(len(alone)) if u not in kept]))
    return float(total) * math.sqrt(left / whole)


def ranking(alone, leave_one_out, attributable):
    """Attributable unit indices, the most harmful first: by the divergence
    a unit causes alone (one-at-a-time), ties by the divergence left when
    it alone is in float32 (leave-one-out, smaller first)."""
    def key(u):
        a = alone[u]
        a = math.inf if a is None or a != a else a
        b = leave_one_out[u]
        b = math.inf if b is None or b != b else b
        return (-a, b, u)

    return sorted((u for u in range(len(alone)) if attributable[u]), key=key)


def greedy(total, alone, leave_one_out, attributable, tolerance):
    """``(kept, predicted divergence)``: units from ``ranking`` added until
    the predicted divergence is at most ``tolerance``; empty when ``total``
    already is; every attributable unit when the tolerance is out of reach."""
    if total <= tolerance:
        return [], float(total)
    kept = []
    estimate = float(total)
    for u in ranking(alone, leave_one_out, attributable):
        kept.append(u)
        estimate = predicted(total, alone, set(kept))
        if estimate <= tolerance:
            break
    return kept, estimate


def next_units(kept, alone, leave_one_out, attributable):
    """The next unit to add after a verification failed (None: none left)."""
    for u in ranking(alone, leave_one_out, attributable):
        if u not in kept:
            return u
    return None

"""Gradient health per variable and step, reduced to a few hundred buckets.

TensorFlow-free; the pure function behind the ``health`` route, which the
tab's Gradients view draws as its variables x steps heatmap and NaN/Inf
count chart.  A grad_stats record of 200 variables x 10,000 steps is 28M
numbers; the view needs, per variable and pixel column, only what went wrong
there - so each bucket of consecutive logged steps keeps its worst status and
its largest NaN/Inf count (a single NaN step is never thinned away, as it
would be by picking every k-th step), and each variable its first steps.

Status codes, larger = worse (a bucket keeps the largest):
  OK 1: finite, not all zero;  DEAD 2: every element exactly zero;
  NONE 3: the gradient was None (disconnected);  NONFINITE 4: NaN or +-Inf.
"""

import numpy as np

OK, DEAD, NONE, NONFINITE = 1, 2, 3, 4
# The codes by name, as the health answer tells the tab ("status_codes").
STATUS_CODES = {"ok": OK, "dead": DEAD, "none": NONE, "nonfinite": NONFINITE}
COLUMNS = ("zero_fraction", "nan_count", "posinf_count", "neginf_count", "is_none", "max_abs")


def status_codes(zero_fraction, nonfinite, is_none):
    """Status [S, R] from grad_stats columns [S, R]: NONFINITE where any element
    is NaN/Inf, else NONE for a None gradient, else DEAD where zero_fraction >= 1,
    else OK.  A NaN count is counted as non-finite."""
    codes = np.full(np.shape(zero_fraction), OK, np.int8)
    codes[np.asarray(zero_fraction) >= 1] = DEAD
    none = np.asarray(is_none) > 0.5
    codes[none] = NONE
    with np.errstate(invalid="ignore"):
        bad = ~(np.asarray(nonfinite) <= 0)
    codes[bad & ~none] = NONFINITE
    return codes


def bucket_starts(n, buckets):
    """Start indices of at most ``buckets`` contiguous groups of range(n), sizes within 1."""
    if n == 0:
        return np.zeros(0, np.int64)
    k = max(1, min(int(buckets), n))
    return np.unique((np.arange(k) * n) // k).astype(np.int64)


def first_steps(flags, steps):
    """Per column of ``flags`` [S, R]: the step of its first True, or None."""
    flags = np.asarray(flags, bool)
    if flags.shape[0] == 0:
        return [None] * flags.shape[1]
    first = np.argmax(flags, axis=0)
    return [int(steps[i]) if flags[i, r] else None for r, i in enumerate(first)]


def gradient_health(steps, columns, buckets):
    """The health answer of a grad_stats selection.

    Args:
      steps: int64 [S], ascending.
      columns: {name: float [S, R]} with the names of COLUMNS.
      buckets: the most buckets of steps to return.

    Returns a JSON-ready dict: ``status_codes`` (STATUS_CODES: what the
    codes mean), ``steps`` and ``last_steps`` (first and last step of each
    bucket), ``status`` [R][B] (worst code), ``nonfinite`` [R][B] (largest
    NaN+Inf count), and per row ``first_nonfinite``, ``first_none``,
    ``first_dead`` (exact steps or None) and ``max_abs`` (largest finite
    max |g|, None if never finite).
    """
    steps = np.asarray(steps, np.int64)
    nonfinite = columns["nan_count"] + columns["posinf_count"] + columns["neginf_count"]
    codes = status_codes(columns["zero_fraction"], nonfinite, columns["is_none"])
    starts = bucket_starts(len(steps), buckets)
    n_rows = codes.shape[1] if codes.ndim == 2 else 0
    if len(starts):
        status = np.maximum.reduceat(codes, starts, axis=0)
        counts = np.fmax.reduceat(np.where(codes == NONE, 0, nonfinite), starts, axis=0)
        last = np.append(starts[1:], len(steps)) - 1
    else:
        status = counts = np.zeros((0, n_rows))
        last = starts
    max_abs = np.where(np.isfinite(columns["max_abs"]), columns["max_abs"], -np.inf).max(axis=0, initial=-np.inf)
    return {
        "status_codes": dict(STATUS_CODES),
        "steps": steps[starts],
        "last_steps": steps[last],
        "status": np.ascontiguousarray(status.T.astype(np.int64)),
        "nonfinite": np.ascontiguousarray(counts.T),
        "first_nonfinite": first_steps(codes == NONFINITE, steps),
        "first_none": first_steps(codes == NONE, steps),
        "first_dead": first_steps(codes == DEAD, steps),
        "max_abs": [float(v) if np.isfinite(v) else None for v in max_abs],
    }

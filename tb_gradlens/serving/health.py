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

import threading

import numpy as np

from tb_gradlens.analysis import detectors

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


def step_status(columns):
    """(codes [S, R] int8, NaN/Inf counts [S, R], 0 where the gradient was None)
    of grad_stats ``columns`` {name: [S, R]} (``status_codes``)."""
    nonfinite = columns["nan_count"] + columns["posinf_count"] + columns["neginf_count"]
    codes = status_codes(columns["zero_fraction"], nonfinite, columns["is_none"])
    return codes, np.where(codes == NONE, 0, nonfinite)


def row_max_abs(max_abs):
    """Per row of ``max_abs`` [S, R]: its largest finite value (-inf if none)."""
    return np.where(np.isfinite(max_abs), max_abs, -np.inf).max(axis=0, initial=-np.inf)


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
    codes, counts = step_status(columns)
    return health_answer(steps, codes, counts, row_max_abs(columns["max_abs"]), buckets)


def health_answer(steps, codes, counts, max_abs, buckets, firsts=None):
    """``gradient_health``'s answer from the ``step_status`` of every step and
    ``row_max_abs``; ``firsts``: {code: first step index per row, -1 if none}
    of NONFINITE, NONE and DEAD when known (``StatusTable``)."""
    steps = np.asarray(steps, np.int64)
    starts = bucket_starts(len(steps), buckets)
    n_rows = codes.shape[1] if codes.ndim == 2 else 0
    if len(starts):
        status = np.maximum.reduceat(codes, starts, axis=0)
        worst_counts = np.fmax.reduceat(counts, starts, axis=0)
        last = np.append(starts[1:], len(steps)) - 1
    else:
        status = worst_counts = np.zeros((0, n_rows))
        last = starts
    if firsts is None:
        firsts = {code: detectors.first_true(codes == code) for code in (NONFINITE, NONE, DEAD)}
    at_step = {code: [int(steps[i]) if i >= 0 else None for i in index] for code, index in firsts.items()}
    return {
        "status_codes": dict(STATUS_CODES),
        "steps": steps[starts],
        "last_steps": steps[last],
        "status": np.ascontiguousarray(status.T.astype(np.int64)),
        "nonfinite": np.ascontiguousarray(worst_counts.T),
        "first_nonfinite": at_step[NONFINITE],
        "first_none": at_step[NONE],
        "first_dead": at_step[DEAD],
        "max_abs": [float(v) if np.isfinite(v) else None for v in max_abs],
    }


class StatusTable:
    """The ``step_status`` of a grad_stats tag's steps so far, extended with
    the steps it gains: the health of a live run costs its new steps, not all
    of them again.  ``answer`` gives ``gradient_health``'s answer over every
    row and step; ``computed`` counts the steps ever computed (tests)."""

    def __init__(self, n_rows):
        self.lock = threading.Lock()  # held while extending and answering
        self.n = 0
        self.steps = np.empty(0, np.int64)
        self.wall_times = np.empty(0, np.float64)
        self.codes = np.empty((0, n_rows), np.int8)
        self.counts = np.empty((0, n_rows), np.float32)
        self.max_abs = np.full(n_rows, -np.inf)
        self.firsts = {code: np.full(n_rows, -1, np.int64) for code in (NONFINITE, NONE, DEAD)}
        self.computed = 0

    def follows(self, steps, wall_times):
        """Whether the steps so far are the first of ``steps`` and ``wall_times``."""
        n = self.n
        return (len(steps) >= n and np.array_equal(steps[:n], self.steps[:n])
                and np.array_equal(wall_times[:n], self.wall_times[:n]))

    def extend(self, steps, wall_times, columns):
        """Add the steps of ``steps`` past the table's (``columns`` {name: [S, R]}, all steps)."""
        n, total = self.n, len(steps)
        if total <= n:
            return
        codes, counts = step_status({c: columns[c][n:] for c in COLUMNS})
        for code, index in self.firsts.items():
            new = detectors.first_true(codes == code)
            index[(index < 0) & (new >= 0)] = new[(index < 0) & (new >= 0)] + n
        self.max_abs = np.maximum(self.max_abs, row_max_abs(columns["max_abs"][n:]))
        if total > len(self.steps):
            size = max(total, 2 * len(self.steps))
            self.steps, self.wall_times = np.resize(self.steps, size), np.resize(self.wall_times, size)
            self.codes = _grown(self.codes, n, size)
            self.counts = _grown(self.counts, n, size)
        self.steps[n:total], self.wall_times[n:total] = steps[n:], wall_times[n:]
        self.codes[n:total], self.counts[n:total] = codes, counts
        self.n, self.computed = total, self.computed + total - n

    @property
    def nbytes(self):
        return self.codes.nbytes + self.counts.nbytes + self.steps.nbytes + self.wall_times.nbytes

    def answer(self, buckets):
        """``gradient_health``'s answer over every row and step so far."""
        n = self.n
        return health_answer(self.steps[:n], self.codes[:n], self.counts[:n], self.max_abs, buckets,
                             {code: index.copy() for code, index in self.firsts.items()})


def _grown(array, n, size):
    grown = np.empty((size,) + array.shape[1:], array.dtype)
    grown[:n] = array[:n]
    return grown

"""Detectors: pure NumPy functions of ``[steps, rows]`` arrays.

Each answers one question about a logged series (where a flag holds for K
steps in a row, where values first exceed a limit, a row's early
baseline) and knows nothing of records or alerts.
"""

import numpy as np


def zero_runs(flags, min_length):
    """Maximal runs of True along axis 0 of ``flags`` [S, R] at least ``min_length`` long.

    Returns (row, start, end) int arrays, sorted by row then start, with
    ``flags[start:end+1, row]`` all True and maximal.
    """
    flags = np.asarray(flags, bool)
    if not flags.any():
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    padded = np.zeros((flags.shape[0] + 2, flags.shape[1]), np.int8)
    padded[1:-1] = flags
    edges = np.diff(padded, axis=0).T  # [R, S + 1]
    start_row, start = np.nonzero(edges == 1)
    _, stop = np.nonzero(edges == -1)
    keep = (stop - start) >= min_length
    return start_row[keep], start[keep], stop[keep] - 1


def sustained(flags, min_length):
    """``flags`` [S, R] where True only inside runs of at least ``min_length``
    consecutive Trues along axis 0."""
    flags = np.asarray(flags, bool)
    out = np.zeros_like(flags)
    rows, starts, ends = zero_runs(flags, max(1, int(min_length)))
    for r, a, b in zip(rows, starts, ends):
        out[a:b + 1, r] = True
    return out


def first_true(flags):
    """Index along axis 0 of the first True of each column (-1 if none)."""
    flags = np.asarray(flags, bool)
    if flags.shape[0] == 0:
        return np.full(flags.shape[1:], -1, np.int64)
    first = np.argmax(flags, axis=0)
    return np.where(flags.any(axis=0), first, -1)


def last_true(flags):
    """Index along axis 0 of the last True of each column (-1 if none)."""
    flags = np.asarray(flags, bool)
    n = flags.shape[0]
    if n == 0:
        return np.full(flags.shape[1:], -1, np.int64)
    last = n - 1 - np.argmax(flags[::-1], axis=0)
    return np.where(flags.any(axis=0), last, -1)


def first_nonfinite(counts):
    """(first step index, rows nonfinite there) of ``counts`` [S, R] > 0, or (-1, [])."""
    bad = np.asarray(counts) > 0
    any_bad = bad.any(axis=1)
    if not any_bad.any():
        return -1, np.zeros(0, np.int64)
    first = int(np.argmax(any_bad))
    return first, np.nonzero(bad[first])[0]


def hits(values, flags):
    """Per row of ``values`` [S, R]: where ``flags`` [S, R] holds.

    Returns a dict of [R] arrays: ``count`` of flagged steps, ``first`` and
    ``last`` flagged step index (-1 if none), ``worst`` (the largest flagged
    value; NaN and +Inf are the worst of all; NaN if none flagged) and
    ``worst_index``.
    """
    flags = np.asarray(flags, bool)
    n_rows = flags.shape[1:]
    if not flags.any():
        none = np.full(n_rows, -1, np.int64)
        return {"count": np.zeros(n_rows, np.int64), "first": none, "last": none,
                "worst": np.full(n_rows, np.nan), "worst_index": np.zeros(n_rows, np.int64)}
    values = np.asarray(values, np.float64)
    ranked = np.where(np.isnan(values), np.inf, values)
    ranked = np.where(flags, ranked, -np.inf)
    if len(values):
        worst_index = np.argmax(ranked, axis=0)
        worst = np.take_along_axis(values, worst_index[None, :], axis=0)[0]
        worst = np.where(flags.any(axis=0), worst, np.nan)
    else:
        worst_index = np.zeros(values.shape[1:], np.int64)
        worst = np.full(values.shape[1:], np.nan)
    return {
        "count": flags.sum(axis=0),
        "first": first_true(flags),
        "last": last_true(flags),
        "worst": worst,
        "worst_index": worst_index,
    }


def exceedances(values, threshold):
    """Per row of ``values`` [S, R]: where it exceeds ``threshold`` (a number,
    or one per row).

    NaN never exceeds; +Inf does.  ``hits`` of ``values > threshold``, with
    ``worst`` the row's largest value ignoring NaN (NaN if all NaN).
    """
    values = np.asarray(values, np.float64)
    with np.errstate(invalid="ignore"):
        above = values > np.asarray(threshold, np.float64)
    found = hits(values, above)
    filled = np.where(np.isnan(values), -np.inf, values)
    if len(values):
        found["worst_index"] = np.argmax(filled, axis=0)
        worst = np.take_along_axis(filled, found["worst_index"][None, :], axis=0)[0]
        found["worst"] = np.where(np.isneginf(worst), np.nan, worst)
    return found


def baseline(values, steps):
    """Per row of ``values`` [S, R]: the median of its first ``steps`` finite
    values (NaN where a row has fewer), and the index after the last of them."""
    values = np.asarray(values, np.float64)
    n_rows = values.shape[1] if values.ndim == 2 else 0
    medians = np.full(n_rows, np.nan)
    ends = np.full(n_rows, values.shape[0], np.int64)
    if steps <= 0 or values.shape[0] < steps:
        return medians, ends
    head = values[:steps]
    clean = np.isfinite(head).all(axis=0)
    medians[clean] = np.median(head[:, clean], axis=0)
    ends[clean] = steps
    for r in np.nonzero(~clean)[0]:
        finite = np.nonzero(np.isfinite(values[:, r]))[0][:steps]
        if len(finite) == steps:
            medians[r] = np.median(values[finite, r])
            ends[r] = finite[-1] + 1
    return medians, ends


def row_details(rows, step_values, found, index, **more):
    """An alert's per-row details: the variable, the first and last step of ``found`` (``hits``), and ``more``."""
    return [
        dict({"variable": rows[r], "step_first": int(step_values[found["first"][r]]),
              "step_last": int(step_values[found["last"][r]])},
             **{k: (v[r] if isinstance(v, (list, np.ndarray)) else v) for k, v in more.items()})
        for r in index
    ]


def by_first(found):
    """The rows with a hit in ``found`` (``hits``), by their first step."""
    index = np.nonzero(found["count"] > 0)[0]
    return index[np.argsort(found["first"][index], kind="stable")]

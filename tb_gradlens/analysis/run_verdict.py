"""The verdict of a run comparison against its noise runs (``runs.compare_runs``).

TensorFlow-free.  With noise runs (float32 with other seeds) the verdict
rests on sustained evidence: over windows of logged steps, B's mean
|(B-A)/|A|| against the largest of the noise runs' in the same window
(``harm``); without one, the largest relative difference is said, not
judged.  NaN and Inf win: B non-finite where A is not exceeds any noise
floor from that step.
"""

from typing import Any
from typing import Dict
from typing import NamedTuple
from typing import Optional

import numpy as np

from tb_gradlens.analysis import harm


class ComparisonSummary(NamedTuple):
    """The verdict of a run comparison over the whole runs (see ``runs.compare_runs``).

    ``noise``: {"rule", "window", "level", "ratio"} of the noise floor (None
    without a noise run); ``nonfinite``: {"a", "b", "noise"}, the first step
    each is NaN or infinite; ``shared_steps``/``needed_steps``: set only when
    too few steps are logged by all runs to judge."""

    max_abs_rel_difference: Optional[float]
    noise: Optional[Dict[str, Any]]
    exceeds_noise: Optional[bool]
    first_exceeding_step: Optional[int]
    nonfinite: Dict[str, Optional[int]]
    verdict: str
    shared_steps: Optional[int] = None
    needed_steps: Optional[int] = None


def max_abs_rel(rel, a, b):
    """max |rel| where a and b are finite (0/0 ignored), None when nothing is
    left; NaN (or Inf) when a or b is NaN (or infinite) at some step: the
    non-finite value wins."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    values = np.concatenate([a, b])
    if np.isnan(values).any():
        return float("nan")
    if np.isinf(values).any():
        return float("inf")
    x = np.abs(np.asarray(rel, np.float64))
    x = x[~np.isnan(x)]
    return float(x.max()) if len(x) else None


def first_nonfinite_step(steps, values):
    """(first step where ``values`` is NaN or infinite, "NaN"/"infinite"), or (None, None)."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return None, None
    i = int(np.argmax(bad))
    return int(steps[i]), "NaN" if np.isnan(values[i]) else "infinite"


def comparison_summary(common, a, b, rel, noises, thresholds):
    """The ComparisonSummary of a run comparison (``runs.compare_runs``) at its
    ``common`` steps (``a``, ``b``, ``rel``: their values and relative
    difference there); ``noises``: one ``{"steps", "rel_difference", "values"}``
    per noise run."""
    largest = max_abs_rel(rel, a, b)
    a_step, a_what = first_nonfinite_step(common, a)
    b_step, b_what = first_nonfinite_step(common, b)
    if not noises:
        return ComparisonSummary(largest, None, None, None, {"a": a_step, "b": b_step, "noise": None},
                                 _plain_verdict(common, rel, largest, a_step, a_what, b_step, b_what))
    firsts = [first_nonfinite_step(n["steps"], n["values"])[0] for n in noises]
    nonfinite = {"a": a_step, "b": b_step, "noise": min((s for s in firsts if s is not None), default=None)}
    shared = common
    for n in noises:
        shared = np.intersect1d(shared, n["steps"], assume_unique=True)
    ib = np.searchsorted(common, shared)
    n_rel = np.stack([n["rel_difference"][np.searchsorted(n["steps"], shared)] for n in noises])
    b_bad = ~np.isfinite(b[ib]) & np.isfinite(a[ib])
    if b_bad.any():
        i = int(np.argmax(b_bad))
        return ComparisonSummary(largest, None, True, int(shared[i]), nonfinite,
                                 "beyond the noise floor from step %d: run B is %s there" % (
                                     shared[i], "NaN" if np.isnan(b[ib][i]) else "infinite"))
    return ComparisonSummary(largest, None, None, None, nonfinite, "")._replace(
        **_windowed(shared, rel[ib], n_rel, thresholds))


def _windowed(steps, rel_b, rel_n, thresholds):
    """The sustained-evidence verdict: windows of logged steps, B's mean
    |(B-A)/|A|| against the noise runs' in the same window, the largest of
    them (``rel_n`` [noise runs, steps]; ``harm``)."""
    width = harm.window_width(len(steps), thresholds.run_noise_window)
    need = width * thresholds.run_noise_windows
    rule = ("beyond when B's mean |(B-A)/|A|| is above %g x the noise run's in %d windows of %d logged steps "
            "in a row" % (thresholds.run_noise_factor, thresholds.run_noise_windows, width))
    if len(steps) < need:
        return {"noise": {"rule": rule, "window": width, "level": None, "ratio": None},
                "shared_steps": int(len(steps)), "needed_steps": int(need),
                "verdict": "cannot be judged against the noise floor: %d step(s) logged by all three runs, "
                           "the rule needs %d (%s)" % (len(steps), need, rule)}
    mb = harm.window_means(rel_b, width)
    mn = np.fmax.reduce([harm.window_means(r, width) for r in np.atleast_2d(rel_n)], axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(mn > 0, mb / mn, np.where(mb > 0, np.inf, 0.0))
    ratios = np.nan_to_num(ratios, nan=0.0)
    first = harm.sustained_window(ratios, thresholds.run_noise_factor, thresholds.run_noise_windows)
    w = first if first is not None else int(np.argmax(ratios))
    span = "steps %d-%d" % (steps[w * width], steps[(w + 1) * width - 1])
    noise = {"rule": rule, "window": width, "level": float(mn[w]), "ratio": float(ratios[w])}
    if first is None:
        return {"noise": noise, "exceeds_noise": False,
                "verdict": "within the noise floor: B's mean |(B-A)/|A|| is at most %.3gx the noise run's "
                           "(%.3g against %.3g over %s; %s)" % (ratios[w], mb[w], mn[w], span, rule)}
    return {"noise": noise, "exceeds_noise": True, "first_exceeding_step": int(steps[w * width]),
            "verdict": "beyond the noise floor from step %d: B's mean |(B-A)/|A|| is %.3g over %s, %.3gx the "
                       "noise run's %.3g (%s)" % (steps[w * width], mb[w], span, ratios[w], mn[w], rule)}


def _plain_verdict(common, rel, largest, a_step, a_what, b_step, b_what):
    if not len(common):
        return "no step logged by both runs"
    if b_step is not None or a_step is not None:
        parts = []
        if b_step is not None:
            parts.append("run B is %s from step %d" % (b_what, b_step))
        if a_step is not None:
            parts.append("run A is %s from step %d" % (a_what, a_step))
        return "; ".join(parts)
    if largest is None:
        return "no comparable step"
    finite = np.where(np.isnan(rel), -np.inf, np.abs(rel))
    return "max |(B-A)/|A|| %.3g at step %d (no noise-floor run to judge it against)" % (
        largest, int(common[int(np.argmax(finite))]))

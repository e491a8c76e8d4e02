"""The rows of a comparison judged for the answers, and the trend over training.

TensorFlow-free.  ``judge_record`` reads one divergence-like record through
``tolerances.judge_entry`` (the alerts' own judgement) and keeps, per row,
its harm index (``harm.ratio``: value / limit) at each step, its first step
above its limit and harmed; ``over_training`` is the fifth answer.
"""

import math
from typing import Any
from typing import Dict
from typing import List
from typing import Optional
from typing import Sequence

import numpy as np
from tensorboard import errors

from tb_gradlens import metadata
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import comparisons
from tb_gradlens.analysis import findings
from tb_gradlens.analysis import harm
from tb_gradlens.analysis.sentences import answer
from tb_gradlens.analysis.sentences import capital
from tb_gradlens.analysis.sentences import fmt_ratio
from tb_gradlens.analysis.sentences import segment
from tb_gradlens.analysis import tolerances
from tb_gradlens.analysis.overview import nonfinite_counts
from tb_gradlens.analysis.record_source import RecordSource

# The fifth answer: the harm index of the last third of the comparisons
# against the first third; a factor beyond this either way is a trend,
# within it steady.
TREND_FACTOR = 1.5
TREND_MIN_COMPARISONS = 4
# A part whose harm index stays below this at both ends is far within its
# limits: how it moves there is noise, not a trend.
TREND_FLOOR = 0.5


# ---------------------------------------------------------------------------
# The rows of a comparison, judged (Q2, Q5).
# ---------------------------------------------------------------------------

WHAT = {
    metadata.DIVERGENCE: "the gradient of %s",
    metadata.ACTIVATION_DIVERGENCE: "the output of layer %s",
    metadata.LOSS_COMPARISON: "the loss",
}
NOUN = {metadata.DIVERGENCE: ("variable", "variables"), metadata.ACTIVATION_DIVERGENCE: ("layer", "layers"),
        metadata.LOSS_COMPARISON: ("loss", "losses")}


def what(kind: str, row: str) -> str:
    """"the gradient of mlp/dense_1/kernel", "the output of layer mlp/dense_1", "the loss"."""
    text = WHAT.get(kind, "%s")
    return text % row if "%s" in text else text


def what_parts(kind: str, row: str, role: str) -> List[Any]:
    """``what`` as sentence parts, capitalised, the row a segment of ``role``."""
    text = WHAT.get(kind, "%s")
    if "%s" not in text:
        return [capital(text)]
    before, after = text.split("%s", 1)
    return [capital(before), segment(row, role), after] if before else [segment(row, role), after]


class Judged:
    """One judged record of a comparison: per row its harm index peak, its
    first step above its limit and harmed, and per step the harm index."""

    nbytes = 4096

    def __init__(self, kind, rows, steps, ratio, above, hit, values, limits, nonfinite):
        self.kind = kind
        self.rows = rows
        self.steps = steps
        self.ratio = ratio  # [S, R]: value / limit (NaN: not judged there)
        self.above = above
        self.hit = hit
        self.values = values
        self.limits = limits
        self.nonfinite = nonfinite  # [S, R] bool

    def row_facts(self):
        """[{"kind", "row", "what", "peak", "peak_step", "first_above", "first_harmed", "ratio_first",
        "limit_first", "limit_peak", "first_nonfinite"}] per row."""
        out = []
        for r, row in enumerate(self.rows):
            column = self.ratio[:, r]
            judged = np.isfinite(column)
            peak = peak_step = limit_peak = None
            if judged.any():
                i = int(np.nanargmax(np.where(judged, column, np.nan)))
                peak, peak_step, limit_peak = float(column[i]), int(self.steps[i]), float(self.limits[i, r])
            first_above = _first(self.above[:, r])
            first_harmed = _first(self.hit[:, r])
            first = first_harmed if first_harmed is not None else first_above
            out.append({
                "kind": self.kind, "row": row, "what": what(self.kind, row), "peak": peak, "peak_step": peak_step,
                "limit_peak": limit_peak,
                "first_above": None if first_above is None else int(self.steps[first_above]),
                "first_harmed": None if first_harmed is None else int(self.steps[first_harmed]),
                "ratio_first": None if first is None else _finite(self.ratio[first, r]),
                "limit_first": None if first is None else _finite(self.limits[first, r]),
                "first_nonfinite": _first_step(self.nonfinite[:, r], self.steps),
            })
        return out

    def harm_index(self):
        """[S]: the largest harm index of the rows at each step (NaN: none judged)."""
        if not self.ratio.size:
            return np.full(len(self.steps), np.nan)
        with np.errstate(invalid="ignore"):
            judged = np.isfinite(self.ratio)
            return np.where(judged.any(axis=1), np.max(np.where(judged, self.ratio, -np.inf), axis=1), np.nan)


def _first(flags):
    flags = np.asarray(flags, bool)
    return int(np.argmax(flags)) if flags.any() else None


def _first_step(flags, steps):
    i = _first(flags)
    return None if i is None else int(steps[i])


def _finite(value):
    value = float(value)
    return value if math.isfinite(value) else None


def judge_record(source: RecordSource, entry: Any, thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS,
                 benign: Sequence[int] = ()) -> Optional[Judged]:
    """The judged record of a divergence-like tag entry (None: not judged,
    e.g. replicas against their mean, or unreadable)."""
    try:
        series = source.series(entry.run, entry.tag)
        if tolerances.is_replica_disagreement(series.record):
            return None
        judgement = tolerances.judge_entry(source, entry, thresholds)
    except (errors.InvalidArgumentError, metadata.FormatError):
        return None
    steps = np.asarray(series.steps, np.int64)
    skip = np.isin(steps, np.asarray(list(benign), np.int64))[:, None]
    values = np.asarray(judgement.values, np.float64)
    limits = np.asarray(judgement.limits, np.float64)
    ratio = harm.ratio(np.where(judgement.noise | skip, np.nan, values), limits)
    ratio = np.where(np.isfinite(values), ratio, np.nan)
    nonfinite = (nonfinite_counts(series) > 0) & ~skip
    return Judged(entry.kind, list(series.record.rows), steps, ratio, np.asarray(judgement.above) & ~skip,
                   np.asarray(judgement.hit) & ~skip, values, limits, nonfinite)


def judged_comparison(source, run, group, thresholds):
    benign, _ = findings.nonfinite_context(source, run, thresholds)
    out = {}
    for kind in comparisons.COMPARISON_KINDS:
        entry = group["entries"].get(kind)
        if entry is None:
            continue
        judged = judge_record(source, entry, thresholds, benign)
        if judged is not None:
            out[kind] = judged
    return out


# ---------------------------------------------------------------------------
# Q5: better or worse over training.
# ---------------------------------------------------------------------------


PART = {metadata.DIVERGENCE: "the gradients", metadata.ACTIVATION_DIVERGENCE: "the layer outputs",
        metadata.LOSS_COMPARISON: "the loss"}


def trend(index: np.ndarray) -> Optional[Dict[str, float]]:
    """``{"early", "late", "n"}``: the median harm index of the first and of the
    last third of the comparisons that judged something (None: fewer than
    ``TREND_MIN_COMPARISONS``)."""
    values = np.asarray(index, np.float64)
    values = values[np.isfinite(values)]
    n = len(values)
    if n < TREND_MIN_COMPARISONS:
        return None
    third = max(1, n // 3)
    return {"early": float(np.median(values[:third])), "late": float(np.median(values[-third:])), "n": n}


def _direction(early: float, late: float) -> str:
    if max(early, late) < TREND_FLOOR:
        return "steady"
    if late > 0 and (early == 0 or late >= TREND_FACTOR * early):
        return "worse"
    if early > 0 and (late == 0 or early >= TREND_FACTOR * late):
        return "better"
    return "steady"


def over_training(judged: Optional[Dict[str, Judged]]) -> Dict[str, Any]:
    """Q5: per part (the gradients, the layer outputs, the loss) the harm
    index at each comparison (the largest of its rows), the median of the
    last third of the comparisons against the first third's.  Worse when a
    part rose ``TREND_FACTOR`` x or more (the one that rose most is named),
    better when one fell as much and none rose, else steady.  A part that
    does not move says nothing about the others: in a healthy run a layer
    output sits at the same fraction of its limit by construction."""
    qid = "over_training"
    if not judged:
        return answer(qid, "no_comparison", "–", [
            "No comparison logged, so there is nothing to follow over training."])
    parts = {}
    for kind in comparisons.COMPARISON_KINDS:
        if kind in judged:
            found = trend(judged[kind].harm_index())
            if found is not None:
                parts[kind] = found
    if not parts:
        n = max(len(j.steps) for j in judged.values())
        return answer(qid, "too_few", "too few comparisons (%d)" % n, [
            "Too few comparisons to tell (%d; it takes %d). Train longer, or compare more often." % (
                n, TREND_MIN_COMPARISONS)])
    moves = {k: _direction(p["early"], p["late"]) for k, p in parts.items()}
    each = ", ".join("%s %s → %s" % (PART[k], fmt_ratio(p["early"]), fmt_ratio(p["late"])) for k, p in parts.items())
    still = _still_harmed(judged)
    details = ["The harm index of a part at a comparison is its largest value over its limit (above 1: beyond what "
               "rounding explains); here the median of the first third of the comparisons against the last third "
               "(%d comparisons)." % max(p["n"] for p in parts.values()), "Per part: %s." % each]

    def change(k):
        p = parts[k]
        return abs(math.log(max(p["late"], 1e-30) / max(p["early"], 1e-30)))

    for word, verb in (("worse", "rose"), ("better", "fell")):
        moved = [k for k in parts if moves[k] == word]
        if moved and (word == "worse" or "worse" not in moves.values()):
            k = max(moved, key=change)
            p = parts[k]
            return answer(qid, word, "%s (%s %s → %s)" % (word, PART[k], fmt_ratio(p["early"]), fmt_ratio(p["late"])), [
                segment(capital(word), "verdict"), " over training. The harm index of %s %s from %s in the first "
                "third of the comparisons to %s in the last." % (PART[k], verb, fmt_ratio(p["early"]),
                                                                 fmt_ratio(p["late"])), still], details)
    top = max(max(p["early"], p["late"]) for p in parts.values())
    if top < TREND_FLOOR:
        return answer(qid, "steady", "steady, far within its limits", [
            segment("Steady", "verdict"), " over training. Every part stayed far within its limits, at most %s× "
            "them, from the first comparisons to the last." % fmt_ratio(top), still], details)
    return answer(qid, "steady", "steady (at most %s× a limit)" % fmt_ratio(top), [
        segment("Steady", "verdict"), " over training. No part's harm index moved by %s× or more from the first third "
        "of the comparisons to the last, and the highest is %s." % (fmt_ratio(TREND_FACTOR), fmt_ratio(top)), still],
        details)


def _still_harmed(judged):
    steps = sorted(set(int(s) for j in judged.values() for s in j.steps))
    if not steps:
        return ""
    hit = {s: False for s in steps}
    for j in judged.values():
        for k, s in enumerate(j.steps):
            hit[int(s)] |= bool(np.asarray(j.hit[k]).any())
    if hit[steps[-1]]:
        return " It is still harmed at the last comparison, step %d." % steps[-1]
    harmed = [s for s in steps if hit[s]]
    return " It was harmed up to step %d, and not since." % harmed[-1] if harmed else ""


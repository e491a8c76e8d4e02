"""The headline of every run: worst divergence, first NaN, dead variables, alert counts.

TensorFlow-free.  NaN and Inf win: a comparison that became non-finite is
the worst divergence of its run, from the first step it was.  Rows that are
not judged (a reference at its own rounding noise, replicas) stay out of
the headline.  ``overview`` returns typed headlines (``RunHeadline``,
``WorstDivergence``); the overview route and ``report --json`` shape them
(``serving.judgment_json.overview_json``).
"""

from typing import Any
from typing import Dict
from typing import List
from typing import NamedTuple
from typing import Optional

import numpy as np
from tensorboard import errors

from tb_gradlens import metadata
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import environments
from tb_gradlens.analysis import findings
from tb_gradlens.analysis import harm
from tb_gradlens.analysis import replays
from tb_gradlens.analysis import tolerances
from tb_gradlens.analysis.coverage import comparison_note
from tb_gradlens.analysis.coverage import step_offsets
from tb_gradlens.analysis.loss_scale import optimizer_steps
from tb_gradlens.analysis.record_source import RecordSource


class WorstDivergence(NamedTuple):
    """The worst judged divergence of a run: its verdict (``verdict_of``, in
    words: ``verdict_text``) and where it is (``metric`` of ``row`` of ``tag``
    at ``step``: ``value`` against ``limit``, ``ratio`` the one over the other;
    ``nonfinite``: the value became NaN or Inf there)."""

    verdict: str
    above_steps: List[int]
    harmed_steps: List[int]
    verdict_text: str
    metric: str
    value: float
    row: str
    step: int
    tag: str
    kind: str
    reference: Any
    candidate: Any
    limit: Optional[float]
    ratio: Optional[float]
    nonfinite: bool


class RunHeadline(NamedTuple):
    """The headline of one run (see ``overview``)."""

    run: str
    worst_divergence: Optional[WorstDivergence]
    no_comparison: Optional[str]
    first_nonfinite_step: Optional[int]
    first_nonfinite_variables: List[str]
    disconnected_variables: List[str]
    zero_gradient_variables: List[str]
    alert_counts: Dict[str, int]
    step_offsets: Any
    nonfinite_replay: Optional[Dict[str, Any]]
    optimizer_steps: Any
    environment: Dict[str, Any]


class _Found:
    nbytes = 1024

    def __init__(self, value):
        self.value = value


def _rank(found):
    """Sort key of a worst-divergence candidate: non-finite first, then the
    earliest such step; else the largest value."""
    if found is None:
        return (-1, 0.0)
    if not np.isfinite(found.value) or found.nonfinite:
        return (1, -found.step)
    return (0, found.ratio if found.ratio is not None else -np.inf)


def worst_divergence(source, run, thresholds=codes.DEFAULT_THRESHOLDS):
    """The worst judged divergence of any divergence-like record of ``run``:
    the largest value against its limit (``ratio``).

    A WorstDivergence, or None when the run has no judged comparison.
    ``value`` is NaN or Inf (and ``nonfinite`` true) when a compared value
    became non-finite: the first such step wins.
    """
    best = None
    benign, _ = findings.nonfinite_context(source, run, thresholds)
    for entry in source.entries(run):
        if entry.kind not in codes.DIVERGENCE_KINDS:
            continue
        try:
            found = source.cached(
                ("worst", thresholds, benign), entry,
                lambda e=entry: _Found(_worst_of(source, e, thresholds, benign)),
                reads=tolerances.judged_reads(source, entry),
            ).value
        except errors.InvalidArgumentError:
            continue
        if _rank(found) > _rank(best):
            best = found
    return best


def _worst_of(source, entry, thresholds, benign=()):
    series = source.series(entry.run, entry.tag)
    if len(series.steps) == 0:
        return None
    if tolerances.is_replica_disagreement(series.record):
        return None  # replicas see different examples: not a divergence
    judgement = tolerances.judge_entry(source, entry, thresholds)
    judged = np.isfinite(judgement.limits)
    skip = np.isin(series.steps, np.asarray(benign, np.int64))[:, None]  # loss-scale skips: never applied
    values = np.where(judgement.noise | ~judged | skip, -np.inf, judgement.values)
    bad = (nonfinite_counts(series) > 0) & ~skip
    if bad.any():
        s = int(np.argmax(bad.any(axis=1)))
        r = int(np.argmax(bad[s]))
        value = judgement.values[s, r]
        return _headline(series, judgement, s, r, value if not np.isfinite(value) else np.nan, True)
    if not np.isfinite(values).any() and not np.isposinf(values).any():
        return None
    ratios = harm.ratio(values, judgement.limits)
    ranked = np.where(np.isnan(ratios), -np.inf, ratios)
    s, r = np.unravel_index(int(np.argmax(ranked)), values.shape)
    return _headline(series, judgement, int(s), int(r), float(values[s, r]), bool(np.isinf(values[s, r])))


def nonfinite_counts(series):
    if series.record.kind == metadata.LOSS_COMPARISON:
        return ((~np.isfinite(series.column("reference"))).astype(np.float32)
                + (~np.isfinite(series.column("candidate"))))
    return series.column("nonfinite")


def verdict_of(judgement, steps, r):
    """The verdict on row ``r`` of a judgement, the one the alerts go by:
    ``{"verdict": "harmed" | "transient" | "within" | "not judged",
    "above_steps", "harmed_steps"}`` (the steps it was above its limit at,
    and harmed at)."""
    above = [int(steps[i]) for i in np.nonzero(judgement.above[:, r])[0]]
    hit = [int(steps[i]) for i in np.nonzero(judgement.hit[:, r])[0]]
    if hit:
        verdict = "harmed"
    elif above:
        verdict = "transient"
    else:
        verdict = "within" if np.isfinite(judgement.limits[:, r]).any() else "not judged"
    return {"verdict": verdict, "above_steps": above, "harmed_steps": hit}


def verdict_sentence(verdict):
    """The verdict in words: "harmed from step 4", "above its limit once, at step 0; within it since"."""
    above, hit = verdict["above_steps"], verdict["harmed_steps"]
    if verdict["verdict"] == "harmed":
        return "harmed from step %d (above its limit at %d logged comparison%s)" % (
            hit[0], len(above), "" if len(above) == 1 else "s")
    if verdict["verdict"] == "transient":
        times = "once, at step %d" % above[0] if len(above) == 1 else "%d times, steps %d-%d" % (
            len(above), above[0], above[-1])
        return "above its limit %s, never 2 comparisons in a row nor 10x: a transient, no alert" % times
    if verdict["verdict"] == "within":
        return "within its limit at every comparison"
    return "not judged"


def _headline(series, judgement, s, r, value, nonfinite):
    limit = judgement.limits[s, r]
    limit = limit if np.isfinite(limit) else None
    verdict = verdict_of(judgement, series.steps, r)
    return WorstDivergence(
        verdict=verdict["verdict"],
        above_steps=verdict["above_steps"],
        harmed_steps=verdict["harmed_steps"],
        verdict_text=verdict_sentence(verdict),
        metric=judgement.column,
        value=float(value),
        row=series.record.rows[r],
        step=int(series.steps[s]),
        tag=series.tag,
        kind=series.record.kind,
        reference=series.record.extras.get("reference"),
        candidate=series.record.extras.get("candidate"),
        limit=None if limit is None else float(limit),
        ratio=None if limit is None or not np.isfinite(value) else float(value) / float(limit),
        nonfinite=bool(nonfinite),
    )


def overview(source: RecordSource,
             thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS) -> List[RunHeadline]:
    """The headline of every run: worst divergence (and, for a run without
    comparisons, why, when its writers said: ``no_comparison``), first NaN,
    dead variables, alert counts, the step offsets its writers applied
    (``coverage.step_offsets``) and the environment it trained in
    (``environments.run_environment``)."""
    return [run_headline(source, run, thresholds) for run in source.runs()]


def run_headline(source: RecordSource, run: str,
                 thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS) -> RunHeadline:
    """The headline of one run (see ``overview``)."""
    alerts, _ = findings.run_alerts(source, [run], thresholds)
    counts = {s: 0 for s in codes.SEVERITIES}
    for a in alerts:
        counts[a.severity] += 1
    # The replayed first non-finite step (checked on every step), then the
    # gradients (what the optimizer applies), then any compared record.
    nonfinite = [a for a in alerts if a.code == codes.NONFINITE and a.view["name"] == metadata.NONFINITE_REPLAY]
    nonfinite = nonfinite or [a for a in alerts
                              if a.code == codes.NONFINITE and a.view["name"] == metadata.GRAD_STATS]
    nonfinite = nonfinite or [a for a in alerts if a.code == codes.NONFINITE]
    first_nf = min(nonfinite, key=lambda a: a.step_first) if nonfinite else None
    offsets = step_offsets(source, run)
    return RunHeadline(
        run=run,
        worst_divergence=worst_divergence(source, run, thresholds),
        no_comparison=comparison_note(source, run),
        first_nonfinite_step=first_nf.step_first if first_nf else None,
        first_nonfinite_variables=list(first_nf.variables) if first_nf else [],
        disconnected_variables=_union(a.variables for a in alerts if a.code == codes.NONE_GRADIENT),
        zero_gradient_variables=_union(a.variables for a in alerts if a.code == codes.ZERO_GRADIENT),
        alert_counts=counts,
        step_offsets=offsets,
        nonfinite_replay=_first_replay(source, run),
        optimizer_steps=optimizer_steps(source, run, thresholds, offsets),
        environment=environments.run_environment(source, run),
    )


def _first_replay(source, run):
    try:
        found = replays.run_replays(source, run)
    except errors.InvalidArgumentError:
        return None
    return dict(replays.detail(found[0]), candidate_label=found[0]["candidate_label"],
                reference_label=found[0]["reference_label"]) if found else None


def _union(lists):
    seen = []
    for names in lists:
        for n in names:
            if n not in seen:
                seen.append(n)
    return seen

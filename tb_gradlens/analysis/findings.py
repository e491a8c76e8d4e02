"""The alerts of tags and runs: memoized per tag, collected per run, grouped across runs.

TensorFlow-free.  The detectors of each record kind: ``alerts``.
"""

from typing import Any
from typing import Dict
from typing import Iterable
from typing import List
from typing import Optional
from typing import Sequence
from typing import Tuple

import dataclasses

from tensorboard import errors

from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis import alerts
from tb_gradlens.analysis import divergence_alerts
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import loss_scale
from tb_gradlens.analysis import replays
from tb_gradlens.analysis import step_alerts
from tb_gradlens.analysis import texts
from tb_gradlens.analysis import tolerances
from tb_gradlens.analysis.record_source import RecordSource


class _AlertList(list):
    @property
    def nbytes(self):
        return 2048 * (1 + len(self))


def _gradient_dtypes(source, entry):
    """The gradient dtypes of the grad_stats record beside a histogram record."""
    name = metadata.parse_tag(entry.tag).name
    for other in source.entries_of_kind(entry.run, metadata.GRAD_STATS):
        if metadata.parse_tag(other.tag).name == name and list(other.record.rows) == list(entry.record.rows):
            return records.read_gradient(other.record, other.tag).gradient_dtypes
    return ()


def _statistics_tag(source, entry):
    """The grad_stats tag of the same writer holding ``entry``'s rows (None: none)."""
    name = metadata.parse_tag(entry.tag).name
    for other in source.entries_of_kind(entry.run, metadata.GRAD_STATS):
        if metadata.parse_tag(other.tag).name == name and set(entry.record.rows) <= set(other.record.rows):
            return other.tag
    return None


def nonfinite_context(source, run, thresholds=codes.DEFAULT_THRESHOLDS):
    """(benign skip steps, first replay or None) of ``run``: what its
    non-finite alerts leave out (loss-scale skips) and carry (the verdict
    of its replayed non-finite step)."""
    try:
        found = replays.run_replays(source, run)
        return loss_scale.benign_skips(source, run, thresholds), (found[0] if found else None)
    except errors.InvalidArgumentError:
        return (), None


def tag_alerts(source, entry, thresholds=codes.DEFAULT_THRESHOLDS):
    """Alerts of one readable tag (memoized by the source until the tag grows)."""
    key = ("alerts", thresholds)
    if entry.kind in (metadata.GRAD_STATS,) + codes.DIVERGENCE_KINDS:
        benign, replay = nonfinite_context(source, entry.run, thresholds)
        key += (benign, None if replay is None else (replay["step"], replay["tag"], replay["verdict"]))
    if entry.kind == metadata.DTYPES:
        def compute():
            return alerts.alerts_for_dtype_maps(entry, source.dtype_maps(entry.run, entry.tag))
    elif entry.kind in codes.DIVERGENCE_KINDS:
        def compute():
            judgement = tolerances.judge_entry(source, entry, thresholds)
            return divergence_alerts.alerts_for_divergence(source.series(entry.run, entry.tag), thresholds,
                                                judgement=judgement, benign_steps=benign, replay=replay)
    elif entry.kind == metadata.GRAD_HISTOGRAM:
        dtypes = _gradient_dtypes(source, entry)
        key += (dtypes,)

        def compute():
            return alerts.alerts_for_histogram(source.series(entry.run, entry.tag), thresholds, dtypes)
    elif entry.kind == metadata.GRAD_STATS:
        def compute():
            return alerts.alerts_for_grad_stats(source.series(entry.run, entry.tag), thresholds, benign, replay)
    elif entry.kind == metadata.OPTIMIZER_STEP:
        def compute():
            return loss_scale.alerts_for_optimizer_steps(source.series(entry.run, entry.tag), thresholds)
    elif entry.kind == metadata.NONFINITE_REPLAY:
        def compute():
            return step_alerts.alerts_for_nonfinite_replay(source.series(entry.run, entry.tag))
    elif entry.kind == metadata.GRADIENT_INDICES:
        view_tag = _statistics_tag(source, entry)
        key += (view_tag,)

        def compute():
            return step_alerts.alerts_for_gradient_indices(source.series(entry.run, entry.tag), view_tag)
    elif entry.kind == metadata.UPDATE_STATS:
        def compute():
            return alerts.alerts_for_update_stats(source.series(entry.run, entry.tag), thresholds)
    else:
        return []
    reads = tolerances.judged_reads(source, entry) if entry.kind in codes.DIVERGENCE_KINDS else ()
    return list(source.cached(key, entry, lambda: _AlertList(compute()), reads=reads))


def run_alerts(source: RecordSource, runs: Optional[Sequence[str]] = None,
               thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS,
               ) -> Tuple[List[codes.Alert], List[Dict[str, Any]]]:
    """(alerts, errors) of ``runs`` (default: every run).

    ``errors`` lists ``{"run","tag","error"}`` for tags that could not be
    read (newer format, bad tensor); the other tags are analysed anyway.
    Alerts are sorted by severity, then first step, run and tag.
    """
    found, problems = [], []
    for run in source.runs() if runs is None else runs:
        for entry in source.entries(run):
            if entry.record is None:
                problems.append({"run": run, "tag": entry.tag, "error": entry.error})
                continue
            try:
                found.extend(tag_alerts(source, entry, thresholds))
            except errors.InvalidArgumentError as e:
                problems.append({"run": run, "tag": entry.tag, "error": str(e)})
    found = [a for run in dict.fromkeys(a.run for a in found)
             for a in one_alert_per_event([a for a in found if a.run == run])]
    found.sort(key=codes.sort_key)
    return found, problems


def _event_primary(nonfinite):
    """The alert that speaks for a non-finite event: the replay's (its
    verdict and layer), else the gradients' (what the optimizer applies),
    else the earliest."""
    order = {metadata.NONFINITE_REPLAY: 0, metadata.GRAD_STATS: 1}
    return min(nonfinite, key=lambda a: (order.get(a.view.get("name"), 2), a.step_first, a.tag))


def one_alert_per_event(alerts: List[codes.Alert]) -> List[codes.Alert]:
    """One run's alerts with its non-finite event said once: the ``nonfinite``
    alerts of its records (the gradients, the replay, the comparison's
    gradients, layer outputs and loss) and a ``loss_scale_failure`` caused
    by a non-finite loss from the event's first step on are merged into the
    primary one (``_event_primary``), which names the others in its
    explanation and ``also``."""
    nonfinite = [a for a in alerts if a.code == codes.NONFINITE]
    if not nonfinite:
        return alerts
    first = min(a.step_first for a in nonfinite)
    caused = [a for a in alerts if a.code == codes.LOSS_SCALE_FAILURE and a.step_first >= first
              and a.details and a.details[0].get("loss_nonfinite")]
    if len(nonfinite) + len(caused) < 2:
        return alerts
    primary = _event_primary(nonfinite)
    others = [a for a in nonfinite + caused if a is not primary]
    where = [texts.EVENT_WHERE.get(str(a.view.get("name")), a.tag).format(
        vars=texts.names(a.variables, range(len(a.variables)), 3), a=a.step_first) for a in others]
    merged = dataclasses.replace(
        primary, step_first=min(a.step_first for a in nonfinite + caused),
        step_last=max(a.step_last for a in nonfinite + caused),
        explanation=primary.explanation + " " + texts.SAME_EVENT.format(where="; ".join(where)),
        also=[{"code": a.code, "tag": a.tag, "view": a.view, "variables": list(a.variables),
               "step_first": a.step_first, "step_last": a.step_last} for a in others])
    gone = {id(a) for a in others}
    return [merged if a is primary else a for a in alerts if id(a) not in gone]


def group_alerts(found: Iterable[codes.Alert]) -> List[Tuple[str, List[codes.Alert]]]:
    """[(group key, [alerts])] of the alerts ``found``, in the order of each
    group's first alert: alerts of several runs that say the same thing
    (``Alert.group``)."""
    groups: Dict[str, List[codes.Alert]] = {}
    for a in found:
        groups.setdefault(a.group, []).append(a)
    return list(groups.items())

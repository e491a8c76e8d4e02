"""What a run's writers asked to log, what they could not, and what is missing.

TensorFlow-free.  Writers (the Keras callback, ``GradLens``) record a
``lens_status`` (``records.lens_status``) at their start and when it
changes: the kinds they were asked for under which tag name on which
schedule, and the features they cannot support for the model, with the
reason.  ``coverage`` checks the run's records against it: a status holds
from its step until the next status of the same writer; the records it
asks for are expected at ``records.expected_steps`` up to the run's last
logged step.
"""

from typing import Any
from typing import Dict

from tensorboard import errors

from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis.record_source import RecordSource


def last_step(source, run):
    """The last step anything of ``run`` was logged at (None if nothing)."""
    steps = [e.max_step for e in source.entries(run) if e.max_step is not None]
    steps += [ts.max_step for ts in source.scalar_listing().get(run, {}).values()]
    return max(steps) if steps else None


def _logged_steps(source, run, kind, name):
    """The steps at which ``run`` has a ``kind`` record under tag name ``name``."""
    found = set()
    for entry in source.entries_of_kind(run, kind):
        if metadata.parse_tag(entry.tag).name != name:
            continue
        if kind == metadata.DTYPES:
            found.update(p["step"] for p in source.dtype_maps(run, entry.tag))
        elif kind == metadata.LENS_STATUS:
            found.update(p["step"] for p in source.lens_statuses(run, entry.tag))
        elif kind == metadata.ADVICE:
            found.update(p["step"] for p in source.advice(run, entry.tag))
        else:
            found.update(int(s) for s in source.series(run, entry.tag).steps)
    return found


def coverage(source: RecordSource, run: str) -> Dict[str, Any]:
    """``{"statuses", "unsupported", "missing", "errors"}`` of ``run``.

    ``statuses``: number of lens_status records read; ``unsupported``:
    ``[{"writer", "what", "kinds", "reason", "step"}]``; ``missing``:
    ``[{"writer", "kind", "name", "every", "expected", "found",
    "first_missing_step"}]`` for each expectation with steps lacking its
    record; ``errors``: unreadable status points.
    """
    out: Dict[str, Any] = {"statuses": 0, "unsupported": [], "missing": [], "errors": []}
    end = last_step(source, run)
    for entry in source.entries_of_kind(run, metadata.LENS_STATUS):
        points = source.lens_statuses(run, entry.tag)
        out["errors"] += [p["error"] for p in points if p.get("error")]
        points = [p for p in points if p.get("status") is not None]
        out["statuses"] += len(points)
        for i, point in enumerate(points):
            status = point["status"]
            until = points[i + 1]["step"] - 1 if i + 1 < len(points) else end
            for u in status.unsupported:
                item = {"writer": status.writer, "what": u.what, "kinds": list(u.kinds), "reason": u.reason,
                        "step": point["step"] if u.step is None else u.step}
                if item not in out["unsupported"]:
                    out["unsupported"].append(item)
            if until is None:
                continue
            for e in status.expected:
                out["missing"] += _missing(source, run, status.writer, e, point["step"], until)
    return out


def _missing(source, run, writer, expectation, first, last):
    wanted = records.expected_steps(expectation, first, last)
    if not len(wanted):
        return []
    try:
        found = _logged_steps(source, run, expectation.kind, expectation.name)
    except errors.InvalidArgumentError:
        found = set()
    lacking = [s for s in wanted if s not in found]
    if not lacking:
        return []
    return [{"writer": writer, "kind": expectation.kind, "name": expectation.name, "every": expectation.every,
             "expected": len(wanted), "found": len(wanted) - len(lacking), "first_missing_step": lacking[0]}]


def step_offsets(source, run):
    """``[{"writer", "offset", "step"}]``: where a writer of ``run`` wrote
    its records at optimizer step + ``offset`` (a training whose optimizer
    restarted below the run's last step continues the run's steps), from
    the record ``step`` of the lens status that says so; one entry per
    change of the offset."""
    out = []
    for entry in source.entries_of_kind(run, metadata.LENS_STATUS):
        previous = 0
        for point in source.lens_statuses(run, entry.tag):
            status = point.get("status")
            if status is None or status.step_offset == previous:
                continue
            previous = status.step_offset
            if status.step_offset:
                out.append({"writer": status.writer, "offset": int(status.step_offset), "step": int(point["step"])})
    return sorted(out, key=lambda o: o["step"])



def comparison_note(source, run):
    """Why ``run`` holds no comparison, when one of its writers said so (a
    lens status's unsupported comparison kinds, e.g. "every layer computes
    in float32: nothing to compare against"), or when its schedule says
    the first comparison is due after the run's last step (the Keras
    callback's defaults compare from step 100); None when it holds one, or
    nothing says why."""
    if any(e.kind in (metadata.DIVERGENCE, metadata.ACTIVATION_DIVERGENCE, metadata.LOSS_COMPARISON)
           for e in source.entries(run)):
        return None
    reason = None
    for entry in source.entries_of_kind(run, metadata.LENS_STATUS):
        for point in source.lens_statuses(run, entry.tag):
            status = point.get("status")
            for u in (status.unsupported if status is not None else ()):
                if metadata.DIVERGENCE in u.kinds or metadata.LOSS_COMPARISON in u.kinds:
                    reason = u.reason
            if reason is None and status is not None:
                reason = _not_due_yet(status, last_step(source, run)) or reason
    return reason


def _not_due_yet(status, end):
    """"the first comparison is due at step N ..." when ``status`` expects
    comparisons from a step after ``end`` (the run's last step), else None."""
    starts = [e for e in status.expected if e.kind == metadata.DIVERGENCE and e.every > 0]
    if end is None or not starts or min(e.start for e in starts) <= end:
        return None
    first = min(starts, key=lambda e: e.start)
    return ("the first comparison is due at step %d (then every %d); the run's last record is at step %d "
            "(compare_every given compares from start_step)" % (first.start, first.every, end))

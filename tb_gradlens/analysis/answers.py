"""One answer per question a user asks of a run, in plain sentences.

TensorFlow-free.  The five questions, each answered once here and said the
same way by the tab (the ``answers`` route: the Overview, the Divergence,
Gradients, Compare and Advisor views show these sentences) and by
``tb-gradlens report``:

1. ``beyond_noise``: is the 16-bit run different from float32 beyond the
   noise of float32 itself (a float32 run with another seed)?  The run
   comparison's verdict (``runs.compare_runs``) on the loss;
2. ``diverges_most``: which gradient or layer output diverges most, and
   from which step?  Every judged row of the run's first comparison ranked
   by its harm index, value / limit (``harm.ratio`` over
   ``tolerances.judge_entry``): above 1 is beyond what rounding explains.
   Nothing stands out while every row is within its limit: in a healthy
   run a layer output is at 1 / ``stable_factor`` of its limit by
   construction, which ranks nothing, so no row is named then;
3. ``broken``: NaN or Inf, None and all-zero gradients, where first (the
   run's headline, ``overview.run_headline``);
4. ``keep_float32``: what to keep in float32, and the line to paste (the
   precision advisor's latest advice, ``advice.run_advice``);
5. ``over_training``: did the divergence get better or worse over training
   (the harm index per comparison, its first third against its last).

An answer is ``{"id", "question", "verdict", "short", "sentence", "text",
"details"}``: ``verdict`` a word for tests and scripts, ``short`` what a
table cell shows, ``sentence`` the segments ``[{"text", "role"?}]`` of
plain sentences (a finding, its number, what to do; a role marks a name or
number the tab sets apart), ``text`` their concatenation, ``details``
lines behind a hover or a disclosure.  Some carry more (``code``: the line
to paste; ``runs``: the runs compared; ``step``, ``row``).

Modules: ``sentences`` (segments, numbers as the tab writes them),
``answer_rows`` (a comparison's rows judged; the fifth answer),
``answer_divergence`` (the second answer and the Divergence view's
sentence per record), ``answer_noise`` (the first answer, and the Compare
view's sentence), this one (the third and fourth answers, and every answer
of a run and of a logdir).
"""

from typing import Any
from typing import Dict
from typing import List
from typing import Optional
from typing import Sequence

from tensorboard import errors

from tb_gradlens import metadata
from tb_gradlens.analysis import advice as advice_analysis
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import comparisons
from tb_gradlens.analysis import sentences
from tb_gradlens.analysis.sentences import answer
from tb_gradlens.analysis.sentences import fmt
from tb_gradlens.analysis.sentences import fmt_ratio  # noqa: F401 - the numbers as the tab writes them
from tb_gradlens.analysis.sentences import names
from tb_gradlens.analysis.sentences import segment
from tb_gradlens.analysis.answer_divergence import diverges_most
from tb_gradlens.analysis.answer_noise import beyond_noise
from tb_gradlens.analysis.answer_noise import noise_sentence  # noqa: F401 - the compare route says it
from tb_gradlens.analysis.answer_rows import judged_comparison
from tb_gradlens.analysis.answer_rows import over_training
from tb_gradlens.analysis.coverage import last_step
from tb_gradlens.analysis.overview import RunHeadline
from tb_gradlens.analysis.overview import run_headline
from tb_gradlens.analysis.record_source import RecordSource
from tb_gradlens.analysis.sentences import QUESTIONS
from tb_gradlens.records.advice_records import HARM_INDEX


# ---------------------------------------------------------------------------
# Q3: NaN, None, zero.
# ---------------------------------------------------------------------------


def broken(source: RecordSource, run: str, headline: RunHeadline) -> Dict[str, Any]:
    """Q3 of ``run`` from its headline (``overview.run_headline``)."""
    qid = "broken"
    has_gradients = bool(source.entries_of_kind(run, metadata.GRAD_STATS))
    parts: List[Any] = []
    shorts = []
    details = []
    step = headline.first_nonfinite_step
    if step is not None:
        first = headline.first_nonfinite_variables or []
        parts += [segment("NaN or Inf", "verdict"), " first at step ", segment(step, "nan-step"), ", in ",
                  segment(names(first), "nan-var"), ". Everything after follows from that step. "]
        shorts.append("NaN/Inf at step %d (%s)" % (step, names(first, 2)))
        replay = headline.nonfinite_replay
        if replay:
            parts += ["Its replay says %s. " % replay["text"].rstrip(".")]
            details.append("Replayed step %d: first non-finite in %s at %s; in %s at %s." % (
                replay["step"], replay["candidate_label"],
                replay["candidate"]["where"] if replay.get("candidate") else "nothing",
                replay["reference_label"], replay["reference"]["where"] if replay.get("reference") else "nothing"))
    none = sorted(headline.disconnected_variables or [])
    if none:
        parts += ["The gradient%s of " % ("" if len(none) == 1 else "s"), segment(names(none), "none-vars"),
                  " %s None, not connected to the loss. " % ("is" if len(none) == 1 else "are")]
        shorts.append("None: %s" % names(none, 2))
    dead = sorted(headline.zero_gradient_variables or [])
    if dead:
        parts += ["The gradient%s of " % ("" if len(dead) == 1 else "s"), segment(names(dead), "dead-vars"),
                  " %s all zero, so %s not learn. " % (
            "is" if len(dead) == 1 else "are", "it does" if len(dead) == 1 else "they do")]
        shorts.append("all zero: %s" % names(dead, 2))
    if parts:
        parts.append("The alerts below say what to look at.")
        return answer(qid, "found", "; ".join(shorts), parts, details, step=step)
    if not has_gradients:
        return answer(qid, "not_logged", "no gradients logged", [
            "No gradient statistics logged, so this cannot be told. Log them with "
            "tb_gradlens.summary.gradients(...) or GradLensCallback."])
    last = last_step(source, run)
    return answer(qid, "none", "none", [segment("None", "verdict"), ". No NaN, Inf, None or all-zero gradient%s." % (
        " up to step %d" % last if last is not None else "")])


# ---------------------------------------------------------------------------
# Q4: what to keep in float32.
# ---------------------------------------------------------------------------


def keep_float32(latest: Optional[advice_analysis.LatestAdvice], precision: Optional[str]) -> Dict[str, Any]:
    """Q4 from the run's latest advice (``advice.run_advice``'s ``latest``)."""
    qid = "keep_float32"
    if latest is None:
        if precision == "float32":
            return answer(qid, "not_applicable", "–", ["Nothing. This run computes in float32."])
        return answer(qid, "no_advice", "not measured", [
            segment("Not measured", "verdict"), ". To find out, %s." % sentences.HOW_TO_ADVISE])
    advice, step = latest.advice, latest.step
    rec = advice.recommendation
    harm_index = advice.metric == HARM_INDEX
    metric = "harm index" if harm_index else "gradient rel L2"
    before = advice.before
    tolerance = advice.tolerance
    details = ["Measured by the precision advisor at step %d on one batch, %s of %s against %s; its goal is %s %s "
               "(%s)." % (step, metric, advice.candidate, advice.reference, metric,
                          fmt(tolerance), advice.tolerance_basis or "")]
    details += advice_analysis.code_lines(latest.code)
    if not rec:
        reasons = "; ".join("%s, %s" % (n["what"], n["reason"]) for n in advice.not_attributable or [])
        return answer(qid, "unattributable", "not attributable", [
            "The advisor could not attribute the error to layers%s." % (" (%s)" % reasons if reasons else "")],
            details, step=step)
    if not rec["float32"]:
        return answer(qid, "nothing", "nothing to keep", [
            segment("Nothing", "verdict"), ". At step %d the advisor's batch stays within every limit, %s %s "
            "(the goal is %s or less)." % (step, metric, fmt(before), fmt(tolerance))],
            details, step=step, code=None)
    layers = rec.get("layers") or rec["float32"]
    line = advice_analysis.apply_line(latest.code)
    parts = [segment("Keep ", "verdict"), segment(", ".join(layers), "advice-layers"), " in float32. "]
    if rec.get("met"):
        parts.append("That brings the %s from %s to %s, within the goal of %s (checked by %d pass%s). Paste the line "
                     "below after building the model." % (metric, fmt(before), fmt(rec["after"]), fmt(tolerance),
                                                          rec.get("verifications") or 0,
                                                          "" if rec.get("verifications") == 1 else "es"))
    else:
        parts.append("Even then the %s is %s, above the goal of %s; it is the best the advisor found." % (
            metric, fmt(rec["after"]), fmt(tolerance)))
    return answer(qid, "keep", "keep %s in float32" % names(layers, 3), parts, details, step=step,
                  code=line, layers=list(layers))


# ---------------------------------------------------------------------------
# Every answer of a run, of a logdir.
# ---------------------------------------------------------------------------


def run_answers(source: RecordSource, run: str, thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS,
                whole: Optional[RecordSource] = None, precisions: Optional[Dict[str, Optional[str]]] = None,
                headline: Optional[RunHeadline] = None, loss_steps: Optional[Dict[str, Any]] = None
                ) -> Dict[str, Any]:
    """The five answers of ``run``: ``{"run", "precision", "comparisons": [{"name", "label", "reference",
    "answer"}],
    "answers": [...]}``.  ``source`` may be the tab's filtered view (its
    variable regex and step range cut Q2, Q3 and Q5); ``whole`` is the
    unfiltered source (Q1 and Q4 are the whole runs'); ``precisions``: every
    run's precision (computed when not given)."""
    whole = whole or getattr(source, "unfiltered", None) or source
    if precisions is None:
        precisions = {r: comparisons.source_run_precision(whole, r) for r in whole.runs()}
    headline = headline or run_headline(source, run, thresholds)
    groups = comparisons.run_comparisons(source, run)
    try:
        latest = advice_analysis.run_advice(whole, run).latest
    except errors.NotFoundError:
        latest = None
    per_comparison = []
    primary = None
    for group in groups:
        judged = judged_comparison(source, run, group, thresholds)
        said = diverges_most(source, run, group, thresholds, judged=judged)
        per_comparison.append({"name": group["name"], "label": group["label"], "rank": group["rank"],
                               "reference": group["reference"],
                               "tags": {k: e.tag for k, e in group["entries"].items()}, "answer": said})
        if primary is None:
            primary = (group, judged, said)
    if primary is None and precisions.get(run) == "float32" and latest is None and not headline.no_comparison:
        q2 = answer("diverges_most", "not_applicable", "–", ["Nothing to compare. A float32 run is the reference."])
        q5 = answer("over_training", "not_applicable", "–", ["Nothing to follow. A float32 run is the reference."])
    elif primary is None:
        q2 = diverges_most(source, run, None, thresholds, why_none=headline.no_comparison,
                           advice_latest=latest)
        q5 = over_training(None)
    else:
        q2 = primary[2]
        q5 = over_training(primary[1])
    return {
        "run": run,
        "precision": precisions.get(run),
        "last_step": last_step(whole, run),
        "comparisons": per_comparison,
        "answers": [beyond_noise(whole, run, precisions, thresholds, loss_steps), q2, broken(source, run, headline),
                    keep_float32(latest, precisions.get(run)), q5],
    }


def logdir_answers(source: RecordSource, runs: Optional[Sequence[str]] = None,
                   thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS) -> Dict[str, Any]:
    """The ``answers`` route: ``{"questions": [{"id", "question"}], "runs": [run_answers ...]}``
    for ``runs`` (default: every run)."""
    whole = getattr(source, "unfiltered", None) or source
    precisions = {r: comparisons.source_run_precision(whole, r) for r in whole.runs()}
    wanted = list(source.runs()) if runs is None else [r for r in runs if r in source.runs()]
    loss_steps: Dict[str, Any] = {}
    said = [run_answers(source, r, thresholds, whole, precisions, loss_steps=loss_steps) for r in wanted]
    return {"questions": [{"id": q, "question": text} for q, text in QUESTIONS], "focus": focus_run(said),
            "runs": said}


# The second answer's verdicts, the most telling first (the run the Overview answers for).
_TELLING = {"nonfinite": 0, "harmed": 1, "above": 2, "within": 3, "advisor_only": 4}


def focus_run(said: Sequence[Dict[str, Any]]) -> Optional[str]:
    """The run the Overview answers for when none is chosen: a 16-bit run
    first, the one with the first-ranked comparison (bfloat16 against
    float32), the most telling second answer (a NaN, then harm), the
    longest record, then by name."""
    def key(r):
        q2 = by_id(r)["diverges_most"]["verdict"]
        rank = min([c["rank"] for c in r["comparisons"]] or [9])
        return (r["precision"] != "low", rank, _TELLING.get(q2, 5), -(r["last_step"] or -1), r["run"])

    return min(said, key=key)["run"] if said else None


def by_id(run_answer: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """{question id: answer} of one run's answers."""
    return {a["id"]: a for a in run_answer["answers"]}

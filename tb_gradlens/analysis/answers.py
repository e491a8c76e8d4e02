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
sentence per record), this one (the first, third and fourth answers, and
every answer of a run and of a logdir).
"""

import math
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
from tb_gradlens.analysis import runs as run_comparison
from tb_gradlens.analysis import sentences
from tb_gradlens.analysis.answer_divergence import diverges_most
from tb_gradlens.analysis.answer_rows import judged_comparison
from tb_gradlens.analysis.answer_rows import over_training
from tb_gradlens.analysis.coverage import last_step
from tb_gradlens.analysis.overview import run_headline
from tb_gradlens.analysis.record_source import RecordSource
from tb_gradlens.analysis.sentences import QUESTIONS
from tb_gradlens.records.advice_records import HARM_INDEX


# ---------------------------------------------------------------------------
# Q1: beyond float32 noise.
# ---------------------------------------------------------------------------


def _loss_steps(source, run):
    try:
        steps, _, _ = source.scalars(run, run_comparison.LOSS_TAG)
    except (errors.NotFoundError, errors.InvalidArgumentError, KeyError):
        return set()
    return set(int(s) for s in steps)


def noise_runs(source: RecordSource, run: str, precisions: Dict[str, Optional[str]]) -> Dict[str, Optional[str]]:
    """{"a", "noise"}: the float32 run ``run`` is compared with (the one
    sharing the most logged loss steps with it; ties by name) and the noise
    floor (another float32 run, sharing the most with A); None where none."""
    f32 = [r for r in sorted(precisions) if precisions[r] == "float32" and r != run]
    if not f32:
        return {"a": None, "noise": None}
    steps = {r: _loss_steps(source, r) for r in f32 + [run]}
    a = max(f32, key=lambda r: (len(steps[r] & steps[run]), -f32.index(r)))
    rest = [r for r in f32 if r != a]
    noise = max(rest, key=lambda r: (len(steps[r] & steps[a]), -rest.index(r))) if rest else None
    return {"a": a, "noise": noise}


def quantity_label(result: Dict[str, Any]) -> str:
    """"the loss" or "grad_stats l2_norm of X" of a run comparison."""
    q = result["quantity"]
    if q["kind"] == run_comparison.SCALAR:
        return "the loss" if (q["tag"] or run_comparison.LOSS_TAG) == run_comparison.LOSS_TAG else q["tag"]
    if q["kind"] == metadata.LOSS_COMPARISON and q.get("column") == "candidate":
        return "the loss"
    return "%s %s of %s" % (q["kind"], q["column"], q["row"])


def noise_sentence(result: Dict[str, Any]) -> Dict[str, Any]:
    """The verdict of a run comparison (``runs.compare_runs``) in plain
    sentences: ``{"verdict": "beyond" | "within" | "undecided" | "no_noise",
    "short", "sentence", "text", "details"}``.  The Compare view and the
    first answer say it."""
    a, b, c = result["run_a"], result["run_b"], result["noise_run"]
    s = result["summary"]
    quantity = quantity_label(result)
    details = [s.get("verdict") or ""]
    if result.get("note"):
        details.append(result["note"])
    noise = s.get("noise") or {}
    largest = s.get("max_abs_rel_difference")
    if c is None:
        parts = [sentences.segment("No noise-floor run", "verdict-text"), ". In %s, %s differs from %s by up to " % (quantity, b, a),
                 sentences.segment(sentences.percent(largest) if largest is not None else "–", "max-rel"),
                 ", and nothing tells whether float32 itself differs as much. Train %s again with another seed "
                 "into this logdir." % a]
        short = "no noise-floor run (up to %s apart)" % (sentences.percent(largest) if largest is not None else "–")
        return _noise(b, "no_noise", short, parts, details)
    bad = (s.get("nonfinite") or {}).get("b")
    if s.get("exceeds_noise") is True and bad is not None and s.get("first_exceeding_step") == bad:
        parts = [sentences.segment("Beyond noise", "verdict-text"), " from step ", sentences.segment(bad, "verdict-step"),
                 ". %s is NaN or infinite there in %s while %s is not. The NaN answer says where it starts." % (
                     b, quantity, a)]
        return _noise(b, "beyond", "beyond noise from step %d (not finite)" % bad, parts, details)
    ratio = noise.get("ratio")
    level = noise.get("level")
    how = "%s× as much as" % sentences.fmt_ratio(ratio) if ratio is not None and math.isfinite(ratio) else "more than"
    if s.get("exceeds_noise") is True:
        first = s["first_exceeding_step"]
        parts = [sentences.segment("Beyond noise", "verdict-text"), " from step ", sentences.segment(first, "verdict-step"),
                 ". In %s, %s differs from %s %s %s, %s with another seed, does (its mean relative difference "
                 "there is " % (quantity, b, a, how, c, a), sentences.segment(sentences.fmt(level), "noise-level"),
                 "). See which part diverges and what to keep in float32."]
        return _noise(b, "beyond", "beyond noise from step %d (%s the noise)" % (
            first, sentences.fmt_ratio(ratio) + "×" if ratio is not None else "above"), parts, details)
    if s.get("exceeds_noise") is False:
        parts = [sentences.segment("Within noise", "verdict-text"), ". In %s, %s differs from %s at most %s× as much as %s, "
                 "%s with another seed, does (its mean relative difference is " % (
                     quantity, b, a, sentences.fmt_ratio(ratio or 0), c, a), sentences.segment(sentences.fmt(level), "noise-level"),
                 "). Nothing to do."]
        return _noise(b, "within", "within noise (%s× the noise)" % sentences.fmt_ratio(ratio or 0), parts, details)
    shared, needed = s.get("shared_steps"), s.get("needed_steps")
    if shared is not None and needed is not None:
        parts = [sentences.segment("No verdict yet", "verdict-text"), ". %d step%s of %s %s logged by all three runs and the "
                 "rule needs %d. Train longer, or log the loss more often." % (
                     shared, "" if shared == 1 else "s", quantity, "is" if shared == 1 else "are", needed)]
    else:
        parts = [sentences.segment("No verdict yet", "verdict-text"), ". %s." % sentences.capital(s.get("verdict") or "not enough steps")]
    return _noise(b, "undecided", "no verdict yet (too few steps)", parts, details)


def _noise(b, verdict, short, parts, details):
    segments = sentences.segments(parts)
    return {"verdict": verdict, "short": short, "sentence": segments,
            "text": "".join(x["text"] for x in segments).strip(), "details": [d for d in details if d]}


def beyond_noise(source: RecordSource, run: str, precisions: Dict[str, Optional[str]],
                 thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS) -> Dict[str, Any]:
    """Q1 of ``run`` (``precisions``: every run's ``comparisons.run_precision``)."""
    qid = "beyond_noise"
    precision = precisions.get(run)
    if precision == "float32":
        return sentences.answer(qid, "reference", "float32 (a reference)", [
            "A float32 run. It is the reference (or the noise floor) the 16-bit runs are measured against."])
    if precision != "low":
        return sentences.answer(qid, "unknown", "–", [
            "Not known to compute in 16 bits. A comparison logged in this run, or a name that says its precision "
            "(bf16, float16), makes it one of the runs this answers."])
    picked = noise_runs(source, run, precisions)
    if picked["a"] is None:
        return sentences.answer(qid, "no_reference", "no float32 run", [
            sentences.segment("No float32 run", "verdict-text"), " to compare with. Train the same model in float32 into this "
            "logdir, and once more with another seed for the noise floor."], runs={"a": None, "b": run, "noise": None})
    try:
        result = run_comparison.compare_runs(source, picked["a"], run, run_comparison.DEFAULT_QUANTITY,
                                             picked["noise"], thresholds)
    except (errors.NotFoundError, errors.InvalidArgumentError) as e:
        return sentences.answer(qid, "no_loss", "no loss to compare", [
            "No loss to compare with %s. Log the training loss as a scalar named loss." % picked["a"]], [str(e)],
            runs={"a": picked["a"], "b": run, "noise": picked["noise"]})
    said = noise_sentence(result)
    return sentences.answer(qid, said["verdict"], said["short"], said["sentence"], said["details"],
                  runs={"a": picked["a"], "b": run, "noise": picked["noise"]},
                  step=result["summary"].get("first_exceeding_step"))


# ---------------------------------------------------------------------------
# Q3: NaN, None, zero.
# ---------------------------------------------------------------------------


def broken(source: RecordSource, run: str, headline: Dict[str, Any]) -> Dict[str, Any]:
    """Q3 of ``run`` from its headline (``overview.run_headline``)."""
    qid = "broken"
    has_gradients = bool(source.entries_of_kind(run, metadata.GRAD_STATS))
    parts: List[Any] = []
    shorts = []
    details = []
    step = headline.get("first_nonfinite_step")
    if step is not None:
        names = headline.get("first_nonfinite_variables") or []
        parts += [sentences.segment("NaN or Inf", "verdict"), " first at step ", sentences.segment(step, "nan-step"), ", in ",
                  sentences.segment(sentences.names(names), "nan-var"), ". Everything after follows from that step. "]
        shorts.append("NaN/Inf at step %d (%s)" % (step, sentences.names(names, 2)))
        replay = headline.get("nonfinite_replay")
        if replay:
            parts += ["Its replay says %s. " % replay["text"].rstrip(".")]
            details.append("Replayed step %d: first non-finite in %s at %s; in %s at %s." % (
                replay["step"], replay["candidate_label"],
                replay["candidate"]["where"] if replay.get("candidate") else "nothing",
                replay["reference_label"], replay["reference"]["where"] if replay.get("reference") else "nothing"))
    none = sorted(headline.get("disconnected_variables") or [])
    if none:
        parts += ["The gradient%s of " % ("" if len(none) == 1 else "s"), sentences.segment(sentences.names(none), "none-vars"),
                  " %s None, not connected to the loss. " % ("is" if len(none) == 1 else "are")]
        shorts.append("None: %s" % sentences.names(none, 2))
    dead = sorted(headline.get("zero_gradient_variables") or [])
    if dead:
        parts += ["The gradient%s of " % ("" if len(dead) == 1 else "s"), sentences.segment(sentences.names(dead), "dead-vars"),
                  " %s all zero, so %s not learn. " % (
            "is" if len(dead) == 1 else "are", "it does" if len(dead) == 1 else "they do")]
        shorts.append("all zero: %s" % sentences.names(dead, 2))
    if parts:
        parts.append("The alerts below say what to look at.")
        return sentences.answer(qid, "found", "; ".join(shorts), parts, details, step=step)
    if not has_gradients:
        return sentences.answer(qid, "not_logged", "no gradients logged", [
            "No gradient statistics logged, so this cannot be told. Log them with "
            "tb_gradlens.summary.gradients(...) or GradLensCallback."])
    last = last_step(source, run)
    return sentences.answer(qid, "none", "none", [sentences.segment("None", "verdict"), ". No NaN, Inf, None or all-zero gradient%s." % (
        " up to step %d" % last if last is not None else "")])


# ---------------------------------------------------------------------------
# Q4: what to keep in float32.
# ---------------------------------------------------------------------------


def keep_float32(latest: Optional[Dict[str, Any]], precision: Optional[str], run: str) -> Dict[str, Any]:
    """Q4 from the run's latest advice (``advice.run_advice``'s ``latest``)."""
    qid = "keep_float32"
    if latest is None:
        if precision == "float32":
            return sentences.answer(qid, "not_applicable", "–", ["Nothing. This run computes in float32."])
        return sentences.answer(qid, "no_advice", "not measured", [
            sentences.segment("Not measured", "verdict"), ". To find out, %s." % sentences.HOW_TO_ADVISE])
    rec = latest.get("recommendation")
    harm_index = latest.get("metric") == HARM_INDEX
    metric = "harm index" if harm_index else "gradient rel L2"
    before = latest.get("before")
    tolerance = latest.get("tolerance")
    details = ["Measured by the precision advisor at step %d on one batch, %s of %s against %s; its goal is %s %s "
               "(%s)." % (latest["step"], metric, latest.get("candidate"), latest.get("reference"), metric,
                          sentences.fmt(tolerance), latest.get("tolerance_basis") or "")]
    details += advice_analysis.code_lines(latest["code"])
    if not rec:
        reasons = "; ".join("%s, %s" % (n["what"], n["reason"]) for n in latest.get("not_attributable") or [])
        return sentences.answer(qid, "unattributable", "not attributable", [
            "The advisor could not attribute the error to layers%s." % (" (%s)" % reasons if reasons else "")],
            details, step=latest["step"])
    if not rec["float32"]:
        return sentences.answer(qid, "nothing", "nothing", [
            sentences.segment("Nothing", "verdict"), ". At step %d the advisor's batch stays within every limit, %s %s "
            "(the goal is %s or less)." % (latest["step"], metric, sentences.fmt(before), sentences.fmt(tolerance))],
            details, step=latest["step"], code=None)
    layers = rec.get("layers") or rec["float32"]
    line = advice_analysis.apply_line(latest["code"])
    parts = [sentences.segment("Keep ", "verdict"), sentences.segment(", ".join(layers), "advice-layers"), " in float32. "]
    if rec.get("met"):
        parts.append("That brings the %s from %s to %s, within the goal of %s (checked by %d pass%s). Paste the line "
                     "below after building the model." % (metric, sentences.fmt(before), sentences.fmt(rec["after"]), sentences.fmt(tolerance),
                                                          rec.get("verifications") or 0,
                                                          "" if rec.get("verifications") == 1 else "es"))
    else:
        parts.append("Even then the %s is %s, above the goal of %s; it is the best the advisor found." % (
            metric, sentences.fmt(rec["after"]), sentences.fmt(tolerance)))
    return sentences.answer(qid, "keep", "keep %s in float32" % sentences.names(layers, 3), parts, details, step=latest["step"],
                  code=line, layers=list(layers))


# ---------------------------------------------------------------------------
# Every answer of a run, of a logdir.
# ---------------------------------------------------------------------------


def run_answers(source: RecordSource, run: str, thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS,
                whole: Optional[RecordSource] = None, precisions: Optional[Dict[str, Optional[str]]] = None,
                headline: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The five answers of ``run``: ``{"run", "precision", "comparisons": [{"name", "label", "answer"}],
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
        latest = advice_analysis.run_advice(whole, run)["latest"]
    except errors.NotFoundError:
        latest = None
    per_comparison = []
    primary = None
    for group in groups:
        judged = judged_comparison(source, run, group, thresholds)
        said = diverges_most(source, run, group, thresholds, judged=judged)
        per_comparison.append({"name": group["name"], "label": group["label"], "rank": group["rank"],
                               "tags": {k: e.tag for k, e in group["entries"].items()}, "answer": said})
        if primary is None:
            primary = (group, judged, said)
    if primary is None and precisions.get(run) == "float32" and latest is None:
        q2 = sentences.answer("diverges_most", "not_applicable", "–", ["Nothing to compare. A float32 run is the reference."])
        q5 = sentences.answer("over_training", "not_applicable", "–", ["Nothing to follow. A float32 run is the reference."])
    elif primary is None:
        q2 = diverges_most(source, run, None, thresholds, why_none=headline.get("no_comparison"),
                           advice_latest=latest)
        q5 = over_training(None, None)
    else:
        q2 = primary[2]
        q5 = over_training(primary[1], primary[0])
    return {
        "run": run,
        "precision": precisions.get(run),
        "last_step": last_step(whole, run),
        "comparisons": per_comparison,
        "answers": [beyond_noise(whole, run, precisions, thresholds), q2, broken(source, run, headline),
                    keep_float32(latest, precisions.get(run), run), q5],
    }


def logdir_answers(source: RecordSource, runs: Optional[Sequence[str]] = None,
                   thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS) -> Dict[str, Any]:
    """The ``answers`` route: ``{"questions": [{"id", "question"}], "runs": [run_answers ...]}``
    for ``runs`` (default: every run)."""
    whole = getattr(source, "unfiltered", None) or source
    precisions = {r: comparisons.source_run_precision(whole, r) for r in whole.runs()}
    wanted = list(source.runs()) if runs is None else [r for r in runs if r in source.runs()]
    said = [run_answers(source, r, thresholds, whole, precisions) for r in wanted]
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

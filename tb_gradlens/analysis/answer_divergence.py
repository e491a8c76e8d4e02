"""The second answer: which gradient or layer output diverges most, and from which step.

TensorFlow-free.  Every judged row of a run's comparison is ranked by its
harm index (value / limit, ``answer_rows``): harmed rows first (an alert),
then rows above their limit once (not an alert), then the rest, which name
nothing: within its limits no row stands out (in a healthy run a layer
output sits at 1 / stable_factor of its limit by construction).
``section`` is the sentence of one record of a comparison (the Divergence
view's gradients, layer outputs and loss).
"""

from typing import Any
from typing import Dict
from typing import Optional

from tb_gradlens import metadata
from tb_gradlens.analysis import codes
from tb_gradlens.analysis.advice import LatestAdvice
from tb_gradlens.analysis import sentences
from tb_gradlens.analysis.sentences import answer
from tb_gradlens.analysis.sentences import capital
from tb_gradlens.analysis.sentences import first_clause
from tb_gradlens.analysis.sentences import flatten
from tb_gradlens.analysis.sentences import fmt
from tb_gradlens.analysis.sentences import fmt_ratio
from tb_gradlens.analysis.sentences import segment
from tb_gradlens.analysis.sentences import segments
from tb_gradlens.analysis.answer_rows import Judged
from tb_gradlens.analysis.answer_rows import judged_comparison
from tb_gradlens.analysis.answer_rows import what
from tb_gradlens.analysis.answer_rows import what_parts
from tb_gradlens.analysis.record_source import RecordSource
from tb_gradlens.records.advice_records import HARM_INDEX

NOUN = {metadata.DIVERGENCE: ("variable", "variables"), metadata.ACTIVATION_DIVERGENCE: ("layer", "layers"),
        metadata.LOSS_COMPARISON: ("loss", "losses")}


# ---------------------------------------------------------------------------
# Q2: which part diverges most.
# ---------------------------------------------------------------------------


def _not_an_alert(thresholds):
    return ("not an alert, which needs %d comparisons in a row above the limit or %s× the limit at one"
            % (thresholds.held_comparisons, fmt_ratio(thresholds.immediate_factor)))


def _ranked(facts):
    """(harmed, above, judged) row facts: harmed by their first harmed step,
    above by their first step above, judged by their peak (largest first)."""
    harmed = sorted([f for f in facts if f["first_harmed"] is not None],
                    key=lambda f: (f["first_harmed"], -(f["peak"] or 0)))
    above = sorted([f for f in facts if f["first_harmed"] is None and f["first_above"] is not None],
                   key=lambda f: (f["first_above"], -(f["peak"] or 0)))
    judged = sorted([f for f in facts if f["peak"] is not None], key=lambda f: -f["peak"])
    return harmed, above, judged


def section(judged: Judged, thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS) -> Dict[str, Any]:
    """The Divergence view's sentence of one record of a comparison (its
    gradients, its layer outputs or its loss): harmed, above its limit (not
    an alert), within, or not judged.  Names a row only where one went above
    its limit (or became non-finite)."""
    kind = judged.kind
    facts = judged.row_facts()
    one, many = NOUN[kind]
    n = len(facts)
    harmed, above, ranked = _ranked(facts)
    nonfinite = sorted([f for f in facts if f["first_nonfinite"] is not None], key=lambda f: f["first_nonfinite"])
    loss = kind == metadata.LOSS_COMPARISON
    if nonfinite:
        f = nonfinite[0]
        parts = [segment("Not finite", "verdict-word"), ". ", what_parts(kind, f["row"], "first-var"),
                 " is NaN or infinite in the comparison from step ", segment(f["first_nonfinite"], "first-step"),
                 ". The NaN answer says where it starts."]
        return _section(kind, "nonfinite", flatten(parts), facts)
    if harmed:
        first = harmed[0]
        worst = max(harmed, key=lambda f: f["peak"] or 0)
        if loss:
            parts = ["The loss is harmed (an alert) from step ", segment(first["first_harmed"], "loss-first"),
                     ". Its relative error reaches ", segment(fmt_ratio(first["peak"]) + "×", "first-ratio"),
                     " its limit at step %d." % first["peak_step"]]
            return _section(kind, "harmed", parts, facts)
        parts = [segment("Harmed (an alert)", "verdict-word"), ". ", what_parts(kind, first["row"], "first-var"),
                 " is beyond its limit from step ",
                 segment(first["first_harmed"], "first-step"), _at(first), ", and %d of %d %s %s harmed. " % (
                     len(harmed), n, many if n != 1 else one, "are" if len(harmed) != 1 else "is"),
                 "The worst is ", segment(worst["row"], "worst-var"), " at ",
                 segment(fmt_ratio(worst["peak"]) + "×", "first-ratio"),
                 " its limit %s, at step %d." % (fmt(worst["limit_peak"]), worst["peak_step"])]
        return _section(kind, "harmed", parts, facts)
    if above:
        first = above[0]
        if loss:
            parts = ["The loss went above its limit at step ", segment(first["first_above"], "loss-above"),
                     " (%s× it), %s." % (fmt_ratio(first["ratio_first"] or 0), _not_an_alert(thresholds))]
            return _section(kind, "above", parts, facts)
        parts = [segment("No %s harmed" % one, "verdict-word"), ". ", segment(first["row"], "first-var"),
                 " went above its limit at step ", segment(first["first_above"], "first-step"), _at(first),
                 "; %d of %d %s did at some step, which is %s." % (
                     len(above), n, many if n != 1 else one, _not_an_alert(thresholds))]
        return _section(kind, "above", parts, facts)
    if ranked:
        top = ranked[0]["peak"]
        if loss:
            parts = ["The loss stays within its limit, at most %s× it." % fmt_ratio(top)]
        else:
            parts = [segment("Every %s within its limit" % one, "within"), ", at most %s× it." % fmt_ratio(top)]
        return _section(kind, "within", parts, facts)
    return _section(kind, "unjudged", ["No limit judges these %s." % many], facts)


def _at(fact):
    if fact["ratio_first"] is None or fact["limit_first"] is None:
        return ""
    return " (%s× its limit %s there)" % (fmt_ratio(fact["ratio_first"]), fmt(fact["limit_first"]))


def _section(kind, verdict, parts, facts):
    said = segments(parts)
    details = ["%s: at most %s× its limit%s" % (f["row"], fmt_ratio(f["peak"]),
                                               "" if f["peak_step"] is None else " (step %d)" % f["peak_step"])
               if f["peak"] is not None else "%s: no limit" % f["row"] for f in facts]
    return {"kind": kind, "verdict": verdict, "sentence": said,
            "text": "".join(s["text"] for s in said).strip(), "details": details}


def diverges_most(source: RecordSource, run: str, group: Optional[Dict[str, Any]],
                  thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS,
                  judged: Optional[Dict[str, Judged]] = None, why_none: Optional[str] = None,
                  advice_latest: Optional[LatestAdvice] = None) -> Dict[str, Any]:
    """Q2 of one comparison of ``run`` (``group``, from ``comparisons.run_comparisons``),
    with the sentence of each of its records (``sections``)."""
    qid = "diverges_most"
    if group is None:
        return _no_comparison(why_none, advice_latest)
    judged = judged_comparison(source, run, group, thresholds) if judged is None else judged
    sections = {kind: section(j, thresholds) for kind, j in judged.items()}
    facts = [f for j in judged.values() for f in j.row_facts()]
    harmed, above, ranked = _ranked(facts)
    nonfinite = sorted([f for f in facts if f["first_nonfinite"] is not None], key=lambda f: f["first_nonfinite"])
    n = len(facts)
    extra = dict(comparison=group["label"], sections=sections)
    details = ["Compared: %s (%d gradients, layer outputs and losses judged)." % (group["label"], n),
               "Harm index: a value over its limit, the most rounding explains at that step; above 1 is beyond it."]
    details += ["%s: at most %s× its limit%s" % (capital(f["what"]), fmt_ratio(f["peak"]),
                                                 "" if f["peak_step"] is None else " (step %d)" % f["peak_step"])
                for f in ranked[:8]]
    if nonfinite:
        f = nonfinite[0]
        return answer(qid, "nonfinite", "not finite from step %d (%s)" % (f["first_nonfinite"], f["row"]), [
            segment("Not finite", "verdict"), ". ", capital(f["what"]), " is NaN or infinite in the comparison "
            "from step ", segment(f["first_nonfinite"], "step"), ". The NaN answer says where it starts."],
            details, row=f["row"], kind=f["kind"], step=f["first_nonfinite"], **extra)
    if harmed:
        first = harmed[0]
        worst = max(harmed, key=lambda f: f["peak"] or 0)
        parts = [segment("Harmed", "verdict"), ". "] + what_parts(worst["kind"], worst["row"], "row") + [
                 " diverges most, ", segment(fmt_ratio(worst["peak"]) + "×", "ratio"),
                 " its limit at step %d. " % worst["peak_step"]]
        if first is not worst:
            parts += ["It started with %s at step " % first["what"], segment(first["first_harmed"], "step"), ". "]
        else:
            parts += ["It is beyond its limit from step ", segment(first["first_harmed"], "step"), ". "]
        parts += ["%d of the %d compared parts %s harmed. " % (len(harmed), n, "is" if len(harmed) == 1 else "are"),
                  "Keep the layers behind them in float32; the advisor finds which."]
        short = "%s, %s× its limit, from step %d" % (worst["what"], fmt_ratio(worst["peak"]), first["first_harmed"])
        return answer(qid, "harmed", short, parts, details, row=worst["row"], kind=worst["kind"],
                      step=first["first_harmed"], ratio=worst["peak"], **extra)
    if above:
        first = above[0]
        parts = [segment("Nothing harmed", "verdict"), ". ", capital(first["what"]), " went above its limit at step ",
                 segment(first["first_above"], "step"), " (%s× it), which is %s. Nothing to do unless it stays "
                 "above." % (fmt_ratio(first["ratio_first"] or 0), _not_an_alert(thresholds))]
        return answer(qid, "above", "nothing harmed; %s above its limit once, at step %d" % (
            first["what"], first["first_above"]), parts, details, row=first["row"], kind=first["kind"],
            step=first["first_above"], **extra)
    if ranked:
        top = ranked[0]["peak"]
        kinds = [k for k in (metadata.DIVERGENCE, metadata.ACTIVATION_DIVERGENCE, metadata.LOSS_COMPARISON)
                 if k in judged]
        called = {metadata.DIVERGENCE: "gradient", metadata.ACTIVATION_DIVERGENCE: "layer output",
                  metadata.LOSS_COMPARISON: "the loss"}
        listed = [called[k] for k in kinds]
        whole = ("every " + " and every ".join(listed)) if metadata.LOSS_COMPARISON not in kinds else (
            ", ".join("every " + x for x in listed[:-1]) + (" and " if len(listed) > 1 else "") + "the loss")
        parts = [segment("Nothing stands out", "verdict"), ". ", capital(whole),
                 " stays within its limit, at most ", segment(fmt_ratio(top) + "×", "ratio"),
                 " it. Nothing to do."]
        return answer(qid, "within", "nothing stands out (at most %s× a limit)" % fmt_ratio(top), parts, details,
                      ratio=top, **extra)
    return answer(qid, "unjudged", "compared, no limit", ["No limit judges this comparison (%s)." % group["label"]],
                  details, **extra)


def _no_comparison(why, advice_latest):
    qid = "diverges_most"
    if advice_latest is not None:
        # The advisor measured a batch: bfloat16 against float32, judged by the same limits.
        advice = advice_latest.advice
        before, worst = advice.before, advice.worst_before
        harm_index = advice.metric == HARM_INDEX
        parts = ["No comparison during training. The advisor's batch at step %d " % advice_latest.step]
        if harm_index and worst and before is not None and before > (advice.tolerance or 1):
            parts += ["is beyond its limits, worst in %s at " % what(worst["kind"], worst["row"]),
                      segment(fmt_ratio(before) + "×", "ratio"), " its limit. The advisor's answer says what to keep "
                      "in float32."]
            short = "advisor: %s, %s× its limit" % (what(worst["kind"], worst["row"]), fmt_ratio(before))
        elif harm_index and before is not None:
            parts += ["stays within every limit, at most ", segment(fmt_ratio(before) + "×", "ratio"), " one."]
            short = "advisor: nothing stands out (%s× a limit)" % fmt_ratio(before)
        else:
            parts += ["has a gradient divergence of %s." % fmt(before)]
            short = "advisor: gradient rel L2 %s" % fmt(before)
        return answer(qid, "advisor_only", short, parts, ["To follow it over training, %s." % sentences.HOW_TO_COMPARE])
    if why:
        return answer(qid, "no_comparison", "no comparison logged (%s)" % first_clause(why), [
            segment("No comparison logged", "verdict"), ". %s." % capital(first_clause(why))],
            ["Its writer says: %s" % why])
    return answer(qid, "no_comparison", "no comparison logged", [
        segment("No comparison logged", "verdict"), ". To see which part diverges, %s." % sentences.HOW_TO_COMPARE])


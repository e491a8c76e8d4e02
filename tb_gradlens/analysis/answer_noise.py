"""The first answer: is the 16-bit run different from float32 beyond float32's own noise?

TensorFlow-free.  The run comparison (``runs.compare_runs``) of the loss of
the 16-bit run B against the float32 run A that shares the most logged steps
with it, with another float32 run (another seed) as the noise floor; its
verdict said in plain sentences (``noise_sentence``: the Compare view says
the same of any two runs).
"""

import math
from typing import Any
from typing import Dict
from typing import Optional

from tensorboard import errors

from tb_gradlens import metadata
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import runs as run_comparison
from tb_gradlens.analysis.sentences import answer
from tb_gradlens.analysis.sentences import capital
from tb_gradlens.analysis.sentences import fmt
from tb_gradlens.analysis.sentences import fmt_ratio
from tb_gradlens.analysis.sentences import percent
from tb_gradlens.analysis.sentences import segment
from tb_gradlens.analysis.sentences import segments
from tb_gradlens.analysis.record_source import RecordSource


def _loss_steps(source, run):
    try:
        steps, _, _ = source.scalars(run, run_comparison.LOSS_TAG)
    except (errors.NotFoundError, errors.InvalidArgumentError, KeyError):
        return set()
    return set(int(s) for s in steps)


def noise_runs(source: RecordSource, run: str, precisions: Dict[str, Optional[str]],
               steps: Optional[Dict[str, Any]] = None) -> Dict[str, Optional[str]]:
    """{"a", "noise"}: the float32 run ``run`` is compared with (the one
    sharing the most logged loss steps with it; ties by name) and the noise
    floor (another float32 run, sharing the most with A); None where none.
    ``steps``: {run: its loss steps}, filled as runs are read (a logdir's
    answers share it)."""
    f32 = [r for r in sorted(precisions) if precisions[r] == "float32" and r != run]
    if not f32:
        return {"a": None, "noise": None}
    steps = {} if steps is None else steps
    for r in f32 + [run]:
        if r not in steps:
            steps[r] = _loss_steps(source, r)
    a = max(f32, key=lambda r: (len(steps[r] & steps[run]), -f32.index(r)))
    rest = [r for r in f32 if r != a]
    noise = max(rest, key=lambda r: (len(steps[r] & steps[a]), -rest.index(r))) if rest else None
    return {"a": a, "noise": noise}


def quantity_label(result: run_comparison.RunComparison) -> str:
    """"the loss" or "grad_stats l2_norm of X" of a run comparison."""
    q = result.quantity
    if q.kind == run_comparison.SCALAR:
        return "the loss" if (q.tag or run_comparison.LOSS_TAG) == run_comparison.LOSS_TAG else q.tag
    if q.kind == metadata.LOSS_COMPARISON and q.column == "candidate":
        return "the loss"
    return "%s %s of %s" % (q.kind, q.column, q.row)


def noise_sentence(result: run_comparison.RunComparison) -> Dict[str, Any]:
    """The verdict of a run comparison (``runs.compare_runs``) in plain
    sentences: ``{"verdict": "beyond" | "within" | "undecided" | "no_noise",
    "short", "sentence", "text", "details"}``.  The Compare view and the
    first answer say it."""
    a, b, c = result.run_a, result.run_b, result.noise_run
    s = result.summary
    quantity = quantity_label(result)
    details = [s.verdict or ""]
    if result.note:
        details.append(result.note)
    noise = s.noise or {}
    largest = s.max_abs_rel_difference
    if c is None:
        parts = [segment("No noise-floor run", "verdict-text"), ". In %s, %s differs from %s by up to " % (quantity, b, a),
                 segment(percent(largest) if largest is not None else "–", "max-rel"),
                 ", and nothing tells whether float32 itself differs as much. Train %s again with another seed "
                 "into this logdir." % a]
        short = "no noise-floor run (up to %s apart)" % (percent(largest) if largest is not None else "–")
        return _noise("no_noise", short, parts, details)
    bad = (s.nonfinite or {}).get("b")
    if s.exceeds_noise is True and bad is not None and s.first_exceeding_step == bad:
        parts = [segment("Beyond noise", "verdict-text"), " from step ", segment(bad, "verdict-step"),
                 ". %s is NaN or infinite there in %s while %s is not. The NaN answer says where it starts." % (
                     b, quantity, a)]
        return _noise("beyond", "beyond noise from step %d (not finite)" % bad, parts, details)
    ratio = noise.get("ratio")
    level = noise.get("level")
    how = "%s× as much as" % fmt_ratio(ratio) if ratio is not None and math.isfinite(ratio) else "more than"
    if s.exceeds_noise is True:
        first = s.first_exceeding_step
        parts = [segment("Beyond noise", "verdict-text"), " from step ", segment(first, "verdict-step"),
                 ". In %s, %s differs from %s %s %s, %s with another seed, does (its mean relative difference "
                 "there is " % (quantity, b, a, how, c, a), segment(fmt(level), "noise-level"),
                 "). See which part diverges and what to keep in float32."]
        return _noise("beyond", "beyond noise from step %d (%s the noise)" % (
            first, fmt_ratio(ratio) + "×" if ratio is not None else "above"), parts, details)
    if s.exceeds_noise is False:
        parts = [segment("Within noise", "verdict-text"), ". In %s, %s differs from %s at most %s× as much as %s, "
                 "%s with another seed, does (its mean relative difference is " % (
                     quantity, b, a, fmt_ratio(ratio or 0), c, a), segment(fmt(level), "noise-level"),
                 "). Nothing to do."]
        return _noise("within", "within noise (at most %s× the noise)" % fmt_ratio(ratio or 0), parts, details)
    shared, needed = s.shared_steps, s.needed_steps
    if shared is not None and needed is not None:
        parts = [segment("No verdict yet", "verdict-text"), ". %d step%s of %s %s logged by all three runs and the "
                 "rule needs %d. Train longer, or log the loss more often." % (
                     shared, "" if shared == 1 else "s", quantity, "is" if shared == 1 else "are", needed)]
    else:
        parts = [segment("No verdict yet", "verdict-text"), ". %s." % capital(s.verdict or "not enough steps")]
    return _noise("undecided", "no verdict yet (too few steps)", parts, details)


def _noise(verdict, short, parts, details):
    said = segments(parts)
    return {"verdict": verdict, "short": short, "sentence": said,
            "text": "".join(x["text"] for x in said).strip(), "details": [d for d in details if d]}


def beyond_noise(source: RecordSource, run: str, precisions: Dict[str, Optional[str]],
                 thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS,
                 steps: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Q1 of ``run`` (``precisions``: every run's ``comparisons.run_precision``)."""
    qid = "beyond_noise"
    precision = precisions.get(run)
    if precision == "float32":
        return answer(qid, "reference", "float32 (a reference)", [
            "A float32 run. It is the reference (or the noise floor) the 16-bit runs are measured against."])
    if precision != "low":
        return answer(qid, "unknown", "–", [
            "Not known to compute in 16 bits. A comparison logged in this run, or a name that says its precision "
            "(bf16, float16), makes it one of the runs this answers."])
    picked = noise_runs(source, run, precisions, steps)
    if picked["a"] is None:
        return answer(qid, "no_reference", "no float32 run", [
            segment("No float32 run", "verdict-text"), " to compare with. Train the same model in float32 into this "
            "logdir, and once more with another seed for the noise floor."], runs={"a": None, "b": run, "noise": None})
    try:
        result = run_comparison.compare_runs(source, picked["a"], run, run_comparison.DEFAULT_QUANTITY,
                                             picked["noise"], thresholds)
    except (errors.NotFoundError, errors.InvalidArgumentError) as e:
        return answer(qid, "no_loss", "no loss to compare", [
            "No loss to compare with %s. Log the training loss as a scalar named loss." % picked["a"]], [str(e)],
            runs={"a": picked["a"], "b": run, "noise": picked["noise"]})
    said = noise_sentence(result)
    return answer(qid, said["verdict"], said["short"], said["sentence"], said["details"],
                  runs={"a": picked["a"], "b": run, "noise": picked["noise"]},
                  step=result.summary.first_exceeding_step)



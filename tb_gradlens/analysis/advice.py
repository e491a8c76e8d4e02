"""The precision advisor's records, read for the tab, the route and the CLI.

TensorFlow-free.  ``run_advice`` is what the ``advice`` route answers
(docs/ROUTES.md; shaped by ``serving.judgment_json.advice_json``) and what
``tb-gradlens advise`` and ``report`` print: the latest advice of a run
(its units ranked by the error each causes alone, the recommendation with
the divergence before and after, the code that applies it) and every
earlier round's per-unit attribution (the bar chart over steps).
"""

import json
from typing import List
from typing import NamedTuple
from typing import Optional
from typing import Tuple

from tensorboard import errors

from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis.record_source import RecordSource
from tb_gradlens.records.advice_records import HARM_INDEX
from tb_gradlens.records.advice_records import Advice

FLOAT32 = '"float32"'


def _points(source, run):
    """Readable advice points of ``run``, oldest first: (tag, point)."""
    out = []
    for entry in source.entries_of_kind(run, metadata.ADVICE):
        out.extend((entry.tag, p) for p in source.advice(run, entry.tag))
    out.sort(key=lambda tp: (tp[1]["step"], tp[1]["wall_time"]))
    return out


def alone_in_16_bits(unit, advice):
    """What a unit does alone in 16 bits: its harm index (older advice: its
    gradient divergence)."""
    value = unit.get("harm_alone") if advice.metric == HARM_INDEX else unit["one_at_a_time"]
    return value if value is not None and value == value else None


def ranked_units(advice):
    """Indices of the advice's units, the most harmful first (what each
    does alone in 16 bits), units not attributable last."""
    def key(k):
        u = advice.units[k]
        alone = alone_in_16_bits(u, advice)
        return (not u["attributable"], -(alone if alone is not None else float("inf")), k)

    return sorted(range(len(advice.units)), key=key)


def _layer_expression(path):
    parts = path.split("/")
    return "model" + "".join(".get_layer(%s)" % json.dumps(p) for p in parts)


MAX_LINES = 8  # layers set one line each; more: the one-line helper only


def apply_code(advice: Advice) -> str:
    """Python that keeps the recommended layers in float32 on a built model:
    one line (``tb_gradlens.keep_in_float32``), and for a few layers the
    same layer by layer; and the policy map (layer path -> policy)."""
    rec = advice.recommendation
    if rec is None or not rec["layers"]:
        return "# tb_gradlens advisor: nothing to keep in float32 (%s)" % (
            "every judged row is within its limit" if advice.metric == HARM_INDEX
            else "the divergence is within the tolerance")
    lines = ["# tb_gradlens advisor: keep these layers in float32 (%s %s -> %s, tolerance %s)"
             % (_metric_name(advice), _num(advice.before), _num(rec["after"]), _num(advice.tolerance)),
             "tb_gradlens.keep_in_float32(model, %s)" % json.dumps(rec["layers"])]
    if len(rec["layers"]) <= MAX_LINES:
        lines.append("# or layer by layer:")
        lines += ["%s.dtype_policy = %s" % (_layer_expression(p), FLOAT32) for p in rec["layers"]]
    lines.append("# or, where the layers are created: dtype=%s; as a policy map:" % FLOAT32)
    lines.append("# " + json.dumps({p: "float32" for p in rec["layers"]}))
    return "\n".join(lines)


# Keras merging layers that carry a residual stream: two or more of them kept are the stream.
STREAM_CLASSES = ("Add", "Subtract", "Average", "Concatenate")


def named(advice: Advice) -> Optional[str]:
    """What the recommendation keeps, named where that is the fix: the
    residual stream (two or more merging layers, e.g. the Add layers a
    stream of large values swamps what is added to), the model input (the
    first unit, which reads it)."""
    rec = advice.recommendation
    if rec is None or not rec["float32"]:
        return None
    units = {u["name"]: (k, u) for k, u in enumerate(advice.units)}
    kept = [units[name] for name in rec["float32"] if name in units]
    merges = [u["name"] for _, u in kept if any(c in STREAM_CLASSES for c in u["classes"])]
    parts = []
    if len(merges) >= 2:
        parts.append("the residual stream through %s" % ", ".join(merges))
    first = [u["name"] for k, u in kept if k == 0 and u["name"] not in merges]
    if first:
        parts.append("%s, which reads the model input" % first[0])
    return "; ".join(parts) or None


def apply_line(code: str) -> str:
    """The one line of ``apply_code`` that applies the recommendation
    (``tb_gradlens.keep_in_float32(...)``); the whole code when it has none."""
    for line in str(code or "").splitlines():
        if line.startswith("tb_gradlens.keep_in_float32("):
            return line
    return str(code or "")


def code_lines(code: str) -> List[str]:
    """The other ways ``apply_code`` gives to apply it (its lines but the one
    ``apply_line`` takes), for the details of an answer."""
    line = apply_line(code)
    return [x for x in str(code or "").splitlines() if x != line and not x.startswith("# tb_gradlens advisor")]


def _metric_name(advice):
    return "harm index" if advice.metric == HARM_INDEX else "gradient rel L2"


def _num(value):
    if value is None:
        return "n/a"
    return "%.3g" % value


def _worst(worst):
    if not worst:
        return ""
    return " (worst: %s %s %s > limit %s)" % (
        {"divergence": "gradient of", "activation_divergence": "output of",
         "loss_comparison": "the"}.get(worst["kind"], worst["kind"]), worst["row"], _num(worst["value"]),
        _num(worst["limit"]))


def text_lines(advice: Advice, step: Optional[int] = None) -> List[str]:
    """The advice in a few lines of text (CLI ``advise`` and ``report``)."""
    at = "" if step is None else " (step %d)" % step
    harm = advice.metric == HARM_INDEX
    lines = ["precision advisor%s: %s of %s vs float32 = %s%s, tolerance %s"
             % (at, _metric_name(advice), advice.candidate, _num(advice.before),
                _worst(advice.worst_before) if harm and (advice.before or 0) > (advice.tolerance or 1) else "",
                _num(advice.tolerance))]
    said = float32_text(advice)
    if said:
        lines.append("  " + said)
    for n in advice.not_attributable:
        lines.append("  not attributable: %s: %s" % (n["what"], n["reason"]))
    rec = advice.recommendation
    if rec is not None:
        if not rec["float32"]:
            lines.append("  recommendation: nothing to keep in float32")
        else:
            share = (rec["params_16bit_after"] / rec["params_total"]) if rec["params_total"] else None
            lines.append("  recommendation: keep %s in float32 -> verified %s (%s the tolerance)%s"
                         % (", ".join(rec["layers"]), _num(rec["after"]),
                            "within" if rec["met"] else "still above",
                            "" if share is None else "; %.0f%% of parameters stay in 16 bits" % (100 * share)))
            if named(advice):
                lines.append("  that is: %s" % named(advice))
    for k in ranked_units(advice)[:5]:
        u = advice.units[k]
        if not u["attributable"]:
            lines.append("  %-24s not attributable: %s" % (u["name"], u["reason"]))
            continue
        lines.append("  %-24s alone in 16 bits %s, alone in float32 %s; output: born %s, inherited %s"
                     % (u["name"], _num(alone_in_16_bits(u, advice)),
                        _num(u.get("harm_without") if harm else u["leave_one_out"]),
                        _num(u["output_born"]), _num(u["output_inherited"])))
    return lines


def float32_text(advice: Advice) -> Optional[str]:
    """What "keep in float32" computes on the hardware the advisor measured
    on, and what its reference was (None: the advice does not say)."""
    precision = advice.float32
    if precision is None:
        return None
    computed = precision.get("computed_in") or "float32"
    reference = ("the float32 reference computed in %s (IEEE)" % computed if computed != "float32"
                 else "the float32 reference computed as float32 is here")
    return "'keep in float32' computes here in %s (measured); %s" % (records.measured_text(precision), reference)


class LatestAdvice(NamedTuple):
    """A run's latest readable advice: the record, the step and tag it was
    logged at, and the code that applies it (``apply_code``)."""

    advice: Advice
    step: int
    tag: str
    code: str


class RunAdvice(NamedTuple):
    """The advice of a run: its latest (None: none readable), every readable
    round as (step, Advice), oldest first, and the points that cannot be read."""

    run: str
    latest: Optional[LatestAdvice]
    history: List[Tuple[int, Advice]]
    errors: List[str]


def run_advice(source: RecordSource, run: str) -> RunAdvice:
    """The advice of ``run`` (see ``RunAdvice``).  NotFoundError for an unknown run."""
    if run not in source.runs():
        raise errors.NotFoundError("no run %r" % (run,))
    points = _points(source, run)
    good = [(tag, p) for tag, p in points if p.get("advice") is not None]
    latest = None
    if good:
        tag, point = good[-1]
        latest = LatestAdvice(point["advice"], point["step"], tag, apply_code(point["advice"]))
    return RunAdvice(run, latest, [(p["step"], p["advice"]) for _, p in good],
                     [p["error"] for _, p in points if "error" in p])


def report_lines(source: RecordSource, run: str) -> List[str]:
    """Lines of ``tb-gradlens report`` about the run's latest advice (none: [])."""
    good = [p for _, p in _points(source, run) if p.get("advice") is not None]
    if not good:
        return []
    return text_lines(good[-1]["advice"], good[-1]["step"])

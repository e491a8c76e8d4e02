"""The precision advisor's advice: the payload of an ``advice`` record."""

import collections

from tb_gradlens import metadata
from tb_gradlens.records import checks
from tb_gradlens.records.environments import read_float32_precision

FormatError = metadata.FormatError


# Per unit: gradient divergences (rel L2 over all trainable weights vs the
# float32 reference) of the leave-one-out and one-at-a-time passes, their
# harm indices (the largest value / limit over the judged rows: gradients,
# layer outputs, the loss; ``harm_without``: the unit alone in float32,
# ``harm_alone``: it alone in 16 bits), and at the unit's output row the
# candidate's divergence split in born/inherited.
ADVICE_UNIT_NUMBERS = ("leave_one_out", "one_at_a_time", "harm_without", "harm_alone", "output_total",
                       "output_born", "output_inherited")
# The predicted and verified harm index, the verified gradient divergence,
# the trainable parameters in 16-bit layers before and after, the model's.
ADVICE_RECOMMENDATION_NUMBERS = ("predicted", "after", "gradient_after", "params_16bit_before",
                                 "params_16bit_after", "params_total")
# The metric of ``before``, ``after``, ``tolerance``: the harm index since
# the stable-rounding limits (older advice: the gradient's rel L2).
HARM_INDEX = "harm_index"
GRADIENT_REL_L2 = "gradient_rel_l2"

Advice = collections.namedtuple("Advice", (
    "writer", "metric", "reference", "candidate", "tolerance", "tolerance_basis", "before",
    "loss_rel_error", "units", "recommendation", "not_attributable", "cost", "gradient_before", "worst_before",
    "float32"), defaults=(None,))


def advice_unit(name, layers, classes, params, numbers=None, step=None, output_row=None, reason=None):
    """One unit of an advice: its name, its layer paths and classes, its
    trainable parameters, ``numbers`` (``ADVICE_UNIT_NUMBERS``, None where
    not measured), the step it was measured at, the activation row of its
    output, and ``reason`` (a string: why it is not attributable)."""
    numbers = numbers or {}
    out = {"name": str(name), "layers": [str(p) for p in layers], "classes": [str(c) for c in classes],
           "params": int(params), "step": None if step is None else int(step),
           "output_row": None if output_row is None else str(output_row),
           "attributable": reason is None, "reason": None if reason is None else str(reason)}
    out.update({k: checks.optional_float(numbers.get(k)) for k in ADVICE_UNIT_NUMBERS})
    return out


def worst_row(worst):
    """``{"kind", "row", "value", "limit"}`` of a (kind, row, value, limit), or None."""
    if worst is None:
        return None
    kind, row, value, limit = worst
    return {"kind": str(kind), "row": str(row), "value": checks.optional_float(value),
            "limit": checks.optional_float(limit)}


def advice_recommendation(float32_units, layers, numbers, met, verifications, worst_after=None):
    """The recommendation: the units measured that it keeps in float32, the
    layer paths to keep in float32 (narrowed inside groups), ``numbers``
    (``ADVICE_RECOMMENDATION_NUMBERS``), whether the verified harm index is
    within the tolerance, how many verification passes ran, and the row
    worst off after it (``worst_row``)."""
    out = {"float32": [str(u) for u in float32_units], "layers": [str(p) for p in layers],
           "met": bool(met), "verifications": int(verifications), "worst_after": worst_row(worst_after)}
    out.update({k: checks.optional_float(numbers.get(k)) for k in ADVICE_RECOMMENDATION_NUMBERS})
    return out


def advice(writer, candidate, tolerance, tolerance_basis, before, loss_rel_error, units, recommendation,
           not_attributable=(), cost=None, gradient_before=None, worst_before=None, float32=None):
    """The JSON-ready advice of one attribution round.

    Args:
      writer: who measured ("tb_gradlens.advise", the Keras callback).
      candidate: the label of the model as configured (e.g. "mixed_bfloat16").
      tolerance, tolerance_basis: the harm index to reach and why.
      before: the harm index of the model as configured.
      loss_rel_error: its loss's relative error.
      units: ``advice_unit`` dicts (forward order).
      recommendation: an ``advice_recommendation`` (None: none was made,
        e.g. the model is not attributable).
      not_attributable: ``[{"what", "reason"}]`` for the whole model.
      cost: ``{"passes", "seconds", "steps": [first, last], "units_per_step"}``.
      gradient_before: its gradient divergence (rel L2 over every weight).
      worst_before: (kind, row, value, limit) of its row worst off.
      float32: what float32 measured to be where the advisor's passes ran
        (``environments.float32_precision``, with the dtype its reference
        computed in): "keep in float32" computes in it.
    """
    out = {"writer": str(writer), "metric": HARM_INDEX, "reference": "float32",
            "gradient_before": checks.optional_float(gradient_before), "worst_before": worst_row(worst_before),
            "candidate": str(candidate), "tolerance": checks.optional_float(tolerance),
            "tolerance_basis": str(tolerance_basis), "before": checks.optional_float(before),
            "loss_rel_error": checks.optional_float(loss_rel_error), "units": [dict(u) for u in units],
            "recommendation": None if recommendation is None else dict(recommendation),
            "not_attributable": [{"what": str(n["what"]), "reason": str(n["reason"])} for n in not_attributable],
            "cost": dict(cost or {})}
    if float32 is not None:
        out["float32"] = float32
    return out


def _number_or_none(obj, key, where):
    value = obj.get(key)
    if value is not None and not checks.is_number(value):
        raise ValueError("advice %s %r must be a number or null" % (where, key))
    return None if value is None else float(value)


def _read_advice_unit(u):
    if not (isinstance(u, dict) and isinstance(u.get("name"), str)
            and isinstance(u.get("layers"), list) and all(isinstance(p, str) for p in u["layers"])
            and isinstance(u.get("classes", []), list) and all(isinstance(c, str) for c in u.get("classes", []))
            and checks.is_int(u.get("params", 0)) and (u.get("step") is None or checks.is_int(u.get("step")))
            and (u.get("reason") is None or isinstance(u.get("reason"), str))
            and (u.get("output_row") is None or isinstance(u.get("output_row"), str))):
        raise ValueError("advice units need name, layers, classes, params, step, reason")
    out = {"name": u["name"], "layers": list(u["layers"]), "classes": list(u.get("classes", [])),
           "params": u.get("params", 0), "step": u.get("step"), "output_row": u.get("output_row"),
           "reason": u.get("reason"), "attributable": u.get("reason") is None}
    out.update({k: _number_or_none(u, k, "unit") for k in ADVICE_UNIT_NUMBERS})
    return out


def _read_advice_recommendation(r, unit_names):
    if r is None:
        return None
    if not (isinstance(r, dict) and isinstance(r.get("float32"), list) and isinstance(r.get("layers"), list)
            and all(isinstance(x, str) for x in r["float32"] + r["layers"])
            and isinstance(r.get("met"), bool) and checks.is_int(r.get("verifications", 0))):
        raise ValueError("an advice recommendation needs float32, layers, met, verifications")
    unknown = [u for u in r["float32"] if u not in unit_names]
    if unknown:
        raise ValueError("the advice recommends units it did not measure: %s" % ", ".join(unknown[:3]))
    out = {"float32": list(r["float32"]), "layers": list(r["layers"]), "met": r["met"],
           "verifications": r.get("verifications", 0), "worst_after": _read_worst(r.get("worst_after"))}
    out.update({k: _number_or_none(r, k, "recommendation") for k in ADVICE_RECOMMENDATION_NUMBERS})
    return out


def _read_worst(w):
    if w is None:
        return None
    if not (isinstance(w, dict) and isinstance(w.get("kind"), str) and isinstance(w.get("row"), str)):
        raise ValueError("an advice's worst row needs kind and row strings")
    return {"kind": w["kind"], "row": w["row"], "value": _number_or_none(w, "value", "worst row"),
            "limit": _number_or_none(w, "limit", "worst row")}


def read_advice(obj):
    """An Advice from a decoded ``advice`` payload; ValueError if malformed."""
    if not isinstance(obj, dict) or not isinstance(obj.get("writer"), str):
        raise ValueError("an advice must be an object with a string 'writer'")
    for key in ("metric", "reference", "candidate", "tolerance_basis"):
        if not isinstance(obj.get(key, ""), str):
            raise ValueError("advice %r must be a string" % key)
    units = obj.get("units", [])
    missing = obj.get("not_attributable", [])
    if not isinstance(units, list) or not isinstance(missing, list):
        raise ValueError("advice 'units' and 'not_attributable' must be lists")
    units = [_read_advice_unit(u) for u in units]
    if not all(isinstance(n, dict) and isinstance(n.get("what"), str) and isinstance(n.get("reason"), str)
               for n in missing):
        raise ValueError("advice 'not_attributable' entries need what and reason strings")
    cost = obj.get("cost", {})
    if not isinstance(cost, dict):
        raise ValueError("advice 'cost' must be an object")
    recommendation = _read_advice_recommendation(obj.get("recommendation"), {u["name"] for u in units})
    return Advice(obj["writer"], obj.get("metric", GRADIENT_REL_L2), obj.get("reference", "float32"),
                  obj.get("candidate", "?"), _number_or_none(obj, "tolerance", "field"),
                  obj.get("tolerance_basis", ""), _number_or_none(obj, "before", "field"),
                  _number_or_none(obj, "loss_rel_error", "field"), tuple(units), recommendation,
                  tuple({"what": n["what"], "reason": n["reason"]} for n in missing), dict(cost),
                  _number_or_none(obj, "gradient_before", "field"), _read_worst(obj.get("worst_before")),
                  read_float32_precision(obj.get("float32"), where="advice float32"))

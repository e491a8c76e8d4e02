"""The record contract: what each kind's extras hold, written and read here only.

TensorFlow-free.  ``metadata.py`` defines the frame of a record (version,
kind, rows, columns); this module defines the kind-specific keys beside
them (``RecordMetadata.extras``) and the dtype-map payload:

* writers (``summary_v2``, ``compare``, ``keras``, ``distribute``) build
  extras only with the ``*_extras`` / ``variant`` / ``dtype_map``
  functions here;
* readers (``analysis``, ``cli``, the plugin) take them out only with the
  ``read_*`` functions here, which validate types (a malformed value is a
  ``metadata.FormatError`` naming the tag, so one bad record becomes an
  error entry for its tag and never breaks the rest of a logdir) and fill
  in what records of older tb_gradlens versions did not state (the compute
  dtype of a comparison side is then inferred from its exact policy name,
  never from a substring).

Kinds and their extras:

==========================  ==============================================
grad_stats                  variable_dtypes, gradient_dtypes [rows];
                            skipped [{row, dtype, reason}]
grad_histogram              min_exponent (int), dtype_exponent_limits
                            {dtype: {min_subnormal, min_normal, max}}
update_stats                variable_dtypes [rows]
divergence,                 reference, candidate (``variant``);
activation_divergence,      comparison ("precision" | "replica_vs_mean");
loss_comparison             floor_fraction; row_dtypes [rows] (optional:
                            the candidate's compute dtype per row)
dtypes                      (none; the tensor is a ``dtype_map`` JSON)
lens_status                 (none; the tensor is a ``lens_status`` JSON:
                            what the lens was asked to log, on which
                            schedule, and what it cannot log and why)
advice                      (none; the tensor is an ``advice`` JSON: the
                            precision advisor's per-unit attribution,
                            recommendation and its verification; rows
                            name the units)
==========================  ==============================================
"""

import collections
import numbers

from tb_gradlens import float_formats
from tb_gradlens import metadata

FormatError = metadata.FormatError

# ---------------------------------------------------------------------------
# Comparison sides (variants).
# ---------------------------------------------------------------------------

# Keras policy names and the compute dtype they stand for.  Records of
# tb_gradlens before the record contract stated only the policy; an exact
# name here gives the compute dtype, anything else is unknown (None).
POLICY_COMPUTE_DTYPES = {
    "float64": "float64",
    "float32": "float32",
    "mixed_bfloat16": "bfloat16",
    "bfloat16": "bfloat16",
    "mixed_float16": "float16",
    "float16": "float16",
}

# Compute dtype of a "model as configured" side whose layers compute in
# several dtypes; its per-row dtypes are in ``row_dtypes``.
MIXED = "mixed"

VariantInfo = collections.namedtuple(
    "VariantInfo", ("label", "policy", "compute_dtype", "variable_dtype", "device", "jit_compile")
)


def variant(label, policy, compute_dtype, variable_dtype=None, device=None, jit_compile=False,
            **more):
    """The description of one side of a comparison (a JSON-ready dict).

    Args:
      label: display name, e.g. "mixed_bfloat16" or "float32".
      policy: the Keras policy name (or "model" / a free name).
      compute_dtype: the dtype the side computes in (a float_formats name),
        ``MIXED`` when its layers differ (then give ``row_dtypes`` in
        ``comparison_extras``), or None when unknown.
      variable_dtype: the dtype of the weights it computes with (None:
        unknown).
      device: device string, None for TensorFlow's placement ("default").
      jit_compile: whether it ran under XLA.
      **more: further keys (e.g. ``replica``).
    """
    if compute_dtype is not None and compute_dtype != MIXED:
        float_formats.get(compute_dtype)  # ValueError for an unknown dtype
    out = {
        "label": str(label),
        "policy": str(policy),
        "compute_dtype": compute_dtype,
        "variable_dtype": variable_dtype,
        "device": device or "default",
        "jit_compile": bool(jit_compile),
    }
    out.update(more)
    return out


def read_variant(obj, tag=None, side="variant"):
    """A VariantInfo from a record's variant dict (any version)."""
    if obj is None:
        return VariantInfo("?", "?", None, None, "default", False)
    if not isinstance(obj, dict):
        raise FormatError("%s must be an object, not %s" % (side, type(obj).__name__), tag)
    policy = _optional_str(obj, "policy", tag, side)
    compute = _optional_str(obj, "compute_dtype", tag, side)
    if compute is None and "compute_dtype" not in obj:
        compute = POLICY_COMPUTE_DTYPES.get(policy)
    label = _optional_str(obj, "label", tag, side) or policy or "?"
    jit = obj.get("jit_compile", False)
    if not isinstance(jit, bool):
        raise FormatError("%s.jit_compile must be true or false" % side, tag)
    return VariantInfo(
        label, policy or "?", compute, _optional_str(obj, "variable_dtype", tag, side),
        _optional_str(obj, "device", tag, side) or "default", jit,
    )


# ---------------------------------------------------------------------------
# Comparison records (divergence, activation_divergence, loss_comparison).
# ---------------------------------------------------------------------------

PRECISION = "precision"
REPLICA_VS_MEAN = "replica_vs_mean"
COMPARISONS = (PRECISION, REPLICA_VS_MEAN)

# The significance floor of the divergence metrics (numerics), as a
# fraction of rms(reference), when a record does not state it.
DEFAULT_FLOOR_FRACTION = 0.1

ComparisonInfo = collections.namedtuple(
    "ComparisonInfo", ("reference", "candidate", "comparison", "floor_fraction", "row_dtypes")
)


def comparison_extras(reference, candidate, floor_fraction=DEFAULT_FLOOR_FRACTION,
                      comparison=PRECISION, row_dtypes=None):
    """Extras of a divergence-like record.

    Args:
      reference, candidate: ``variant`` dicts.
      floor_fraction: the significance floor of the metrics (x rms(r)).
      comparison: PRECISION (two numeric settings of one step) or
        REPLICA_VS_MEAN (a replica's gradient vs the mean over replicas:
        different examples, not a precision question).
      row_dtypes: optional list, per row, of the dtype the candidate
        computed that row in (the ULP spacing of ``ulp_rms``).
    """
    if comparison not in COMPARISONS:
        raise ValueError("tb_gradlens: comparison must be one of %s" % (COMPARISONS,))
    out = {
        "reference": dict(reference),
        "candidate": dict(candidate),
        "comparison": comparison,
        "floor_fraction": float(floor_fraction),
    }
    if row_dtypes is not None:
        out["row_dtypes"] = [None if d is None else str(d) for d in row_dtypes]
    return out


def read_comparison(record, tag=None):
    """The ComparisonInfo of a divergence-like RecordMetadata (any version)."""
    extras = record.extras
    reference = read_variant(extras.get("reference"), tag, "reference")
    candidate = read_variant(extras.get("candidate"), tag, "candidate")
    comparison = extras.get("comparison", PRECISION)
    if comparison not in COMPARISONS:
        raise FormatError("unknown comparison %r" % (comparison,), tag)
    floor = extras.get("floor_fraction", DEFAULT_FLOOR_FRACTION)
    if not _is_number(floor):
        raise FormatError("floor_fraction must be a number", tag)
    row_dtypes = extras.get("row_dtypes")
    if row_dtypes is not None:
        row_dtypes = tuple(_str_list(row_dtypes, record, "row_dtypes", tag, allow_none=True))
        if len(row_dtypes) != len(record.rows):
            raise FormatError(
                "row_dtypes has %d entries for %d rows" % (len(row_dtypes), len(record.rows)), tag
            )
    return ComparisonInfo(reference, candidate, comparison, float(floor), row_dtypes)


def row_compute_dtypes(info, n_rows):
    """Per row, the candidate's compute dtype (None where unknown)."""
    if info.row_dtypes is not None:
        return list(info.row_dtypes)
    compute = info.candidate.compute_dtype
    return [None if compute == MIXED else compute] * n_rows


# ---------------------------------------------------------------------------
# Gradient, histogram and update records.
# ---------------------------------------------------------------------------

GradientInfo = collections.namedtuple(
    "GradientInfo", ("variable_dtypes", "gradient_dtypes", "skipped")
)


def gradient_extras(variable_dtypes, gradient_dtypes, skipped=()):
    """Extras of a ``grad_stats`` record.

    Args:
      variable_dtypes, gradient_dtypes: dtype names per row ("none" for a
        None gradient).
      skipped: ``[{"row", "dtype", "reason"}]`` of variables given no row.
    """
    out = {
        "variable_dtypes": [str(d) for d in variable_dtypes],
        "gradient_dtypes": [str(d) for d in gradient_dtypes],
    }
    if skipped:
        out["skipped"] = [
            {"row": str(s["row"]), "dtype": str(s["dtype"]), "reason": str(s["reason"])}
            for s in skipped
        ]
    return out


def read_gradient(record, tag=None):
    """The GradientInfo of a ``grad_stats`` record (missing lists: empty)."""
    extras = record.extras
    skipped = extras.get("skipped", [])
    if not isinstance(skipped, list) or not all(
        isinstance(s, dict) and all(isinstance(s.get(k), str) for k in ("row", "dtype", "reason"))
        for s in skipped
    ):
        raise FormatError("skipped must be a list of {row, dtype, reason} strings", tag)
    return GradientInfo(
        tuple(_str_list(extras.get("variable_dtypes", []), record, "variable_dtypes", tag)),
        tuple(_str_list(extras.get("gradient_dtypes", []), record, "gradient_dtypes", tag)),
        tuple(dict(s) for s in skipped),
    )


def histogram_extras():
    """Extras of a ``grad_histogram`` record: its first exponent and the
    dtype limits the tab draws."""
    return {
        "min_exponent": metadata.MIN_EXPONENT,
        "dtype_exponent_limits": float_formats.exponent_limits(),
    }


HistogramInfo = collections.namedtuple("HistogramInfo", ("min_exponent", "dtype_exponent_limits"))


def read_histogram(record, tag=None):
    """The HistogramInfo of a ``grad_histogram`` record (missing keys: this
    version's defaults); FormatError for values of the wrong type."""
    extras = record.extras
    first = extras.get("min_exponent", metadata.MIN_EXPONENT)
    if not _is_int(first):
        raise FormatError("min_exponent must be an integer", tag)
    limits = extras.get("dtype_exponent_limits", float_formats.exponent_limits())
    if not isinstance(limits, dict) or not all(
        isinstance(name, str) and isinstance(bounds, dict)
        and all(isinstance(k, str) and _is_int(v) for k, v in bounds.items())
        for name, bounds in limits.items()
    ):
        raise FormatError("dtype_exponent_limits must map dtype names to {name: integer}", tag)
    return HistogramInfo(first, {name: dict(bounds) for name, bounds in limits.items()})


def update_extras(variable_dtypes):
    """Extras of an ``update_stats`` record: the weights' dtype per row
    (a lost update is real for bfloat16 weights, hypothetical for float32)."""
    return {"variable_dtypes": [str(d) for d in variable_dtypes]}


def read_update(record, tag=None):
    """Per row, the weights' dtype of an ``update_stats`` record (None: unknown)."""
    dtypes = _str_list(record.extras.get("variable_dtypes", []), record, "variable_dtypes", tag)
    return tuple(dtypes) + (None,) * (len(record.rows) - len(dtypes))


# ---------------------------------------------------------------------------
# The dtype map (payload of a ``dtypes`` record).
# ---------------------------------------------------------------------------

LAYER_KEYS = ("path", "class", "policy", "compute_dtype", "variable_dtype", "output_dtype")
UNKNOWN = "unknown"


def dtype_map(layers, variables, model_output_dtype):
    """The JSON-ready dtype map: ``{"layers": [{LAYER_KEYS}], "variables":
    [{"path", "dtype"}], "model_output_dtype"}``."""
    return {
        "layers": [{k: _str_or_unknown(layer.get(k)) for k in LAYER_KEYS} for layer in layers],
        "variables": [{"path": str(v["path"]), "dtype": str(v["dtype"])} for v in variables],
        "model_output_dtype": _str_or_unknown(model_output_dtype),
    }


def read_dtype_map(obj):
    """A validated dtype map; ValueError (with what is wrong) otherwise.

    Missing layer keys read as "unknown"; wrong types are an error.
    """
    if not isinstance(obj, dict):
        raise ValueError("a dtype map must be a JSON object")
    layers = obj.get("layers", [])
    variables = obj.get("variables", [])
    if not isinstance(layers, list) or not all(isinstance(x, dict) for x in layers):
        raise ValueError("dtype map 'layers' must be a list of objects")
    if not isinstance(variables, list) or not all(isinstance(x, dict) for x in variables):
        raise ValueError("dtype map 'variables' must be a list of objects")
    out_layers = []
    for layer in layers:
        for k in LAYER_KEYS:
            if k in layer and not isinstance(layer[k], str):
                raise ValueError("dtype map layer %r must be a string" % k)
        out_layers.append({k: layer.get(k, UNKNOWN) for k in LAYER_KEYS})
    for v in variables:
        if not isinstance(v.get("path"), str) or not isinstance(v.get("dtype"), str):
            raise ValueError("dtype map variables need string 'path' and 'dtype'")
    output = obj.get("model_output_dtype", UNKNOWN)
    if not isinstance(output, str):
        raise ValueError("dtype map 'model_output_dtype' must be a string")
    return {"layers": out_layers, "variables": [dict(v) for v in variables],
            "model_output_dtype": output}


# ---------------------------------------------------------------------------
# The lens status (payload of a ``lens_status`` record).
# ---------------------------------------------------------------------------

Expectation = collections.namedtuple("Expectation", ("kind", "name", "every", "start", "stop"))
Unsupported = collections.namedtuple("Unsupported", ("what", "kinds", "reason", "step"))
LensStatus = collections.namedtuple("LensStatus", ("writer", "expected", "unsupported", "step_offset"),
                                    defaults=(0,))


def expectation(kind, name, every, start=0, stop=None):
    """One kind of record a writer was asked for: kind ``kind`` under tag
    prefix ``name`` at every step ``s`` with ``start <= s < stop`` and
    ``(s - start) % every == 0`` (``every`` 0: never)."""
    if kind not in metadata.KINDS:
        raise ValueError("tb_gradlens: unknown kind %r" % (kind,))
    return {"kind": kind, "name": str(name), "every": int(every or 0), "start": int(start or 0),
            "stop": None if stop is None else int(stop)}


def unsupported(what, kinds, reason, step=None):
    """Something asked for that the lens cannot log for this model, and why
    (e.g. a comparison of a model whose layers cannot switch policy)."""
    return {"what": str(what), "kinds": [str(k) for k in kinds], "reason": str(reason),
            "step": None if step is None else int(step)}


def lens_status(writer, expected, unsupported_features=(), step_offset=0):
    """The JSON-ready lens status a writer records at its start and when it
    changes: ``{"writer", "expected": [expectation], "unsupported":
    [unsupported]}``, and ``"step_offset"`` when not 0: the writer's records
    are at optimizer step + step_offset (a training whose optimizer
    restarted at 0, e.g. after ``compile``, continues the run's steps; the
    expectations' start and stop are record steps)."""
    out = {"writer": str(writer), "expected": [dict(e) for e in expected],
           "unsupported": [dict(u) for u in unsupported_features]}
    if step_offset:
        out["step_offset"] = int(step_offset)
    return out


def read_lens_status(obj):
    """A LensStatus from a decoded ``lens_status`` payload; ValueError if malformed."""
    if not isinstance(obj, dict) or not isinstance(obj.get("writer"), str):
        raise ValueError("a lens status must be an object with a string 'writer'")
    expected, missing = obj.get("expected", []), obj.get("unsupported", [])
    if not isinstance(expected, list) or not isinstance(missing, list):
        raise ValueError("lens status 'expected' and 'unsupported' must be lists")
    out_expected = []
    for e in expected:
        if not (isinstance(e, dict) and isinstance(e.get("kind"), str) and isinstance(e.get("name"), str)
                and _is_int(e.get("every")) and _is_int(e.get("start", 0))
                and (e.get("stop") is None or _is_int(e.get("stop")))):
            raise ValueError("lens status expectations need kind, name, every, start, stop")
        out_expected.append(Expectation(e["kind"], e["name"], e["every"], e.get("start", 0), e.get("stop")))
    out_missing = []
    for u in missing:
        if not (isinstance(u, dict) and all(isinstance(u.get(k), str) for k in ("what", "reason"))
                and isinstance(u.get("kinds", []), list)
                and all(isinstance(k, str) for k in u.get("kinds", []))
                and (u.get("step") is None or _is_int(u.get("step")))):
            raise ValueError("lens status 'unsupported' entries need what, kinds, reason, step")
        out_missing.append(Unsupported(u["what"], tuple(u.get("kinds", [])), u["reason"], u.get("step")))
    offset = obj.get("step_offset", 0)
    if not _is_int(offset):
        raise ValueError("lens status 'step_offset' must be an integer")
    return LensStatus(obj["writer"], tuple(out_expected), tuple(out_missing), offset)


def expected_steps(expectation_, first_step, last_step):
    """The steps in [first_step, last_step] at which ``expectation_`` asks for a record."""
    e = expectation_
    if e.every <= 0:
        return range(0)
    begin = max(first_step, e.start)
    begin += (e.start - begin) % e.every
    end = last_step + 1 if e.stop is None else min(last_step + 1, e.stop)
    return range(begin, max(begin, end), e.every)


# ---------------------------------------------------------------------------
# The precision advisor's advice (payload of an ``advice`` record).
# ---------------------------------------------------------------------------

# Per unit: gradient divergences (rel L2 over all trainable weights vs the
# float32 reference) of the leave-one-out and one-at-a-time passes, and at
# the unit's output row the candidate's divergence split in born/inherited.
ADVICE_UNIT_NUMBERS = ("leave_one_out", "one_at_a_time", "output_total", "output_born", "output_inherited")
ADVICE_RECOMMENDATION_NUMBERS = ("predicted", "after", "params_16bit_before", "params_16bit_after",
                                 "params_total")

Advice = collections.namedtuple("Advice", (
    "writer", "metric", "reference", "candidate", "tolerance", "tolerance_basis", "before",
    "loss_rel_error", "units", "recommendation", "not_attributable", "cost"))


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
    out.update({k: _optional_float(numbers.get(k)) for k in ADVICE_UNIT_NUMBERS})
    return out


def advice_recommendation(float32_units, layers, numbers, met, verifications):
    """The recommendation: the units (and their layer paths) to keep in
    float32, ``numbers`` (``ADVICE_RECOMMENDATION_NUMBERS``: the predicted
    and the verified gradient divergence, the trainable parameters in
    16-bit layers before and after, the model's), whether the verified
    divergence is within the tolerance, and how many verification passes ran."""
    out = {"float32": [str(u) for u in float32_units], "layers": [str(p) for p in layers],
           "met": bool(met), "verifications": int(verifications)}
    out.update({k: _optional_float(numbers.get(k)) for k in ADVICE_RECOMMENDATION_NUMBERS})
    return out


def advice(writer, candidate, tolerance, tolerance_basis, before, loss_rel_error, units, recommendation,
           not_attributable=(), cost=None):
    """The JSON-ready advice of one attribution round.

    Args:
      writer: who measured ("tb_gradlens.advise", the Keras callback).
      candidate: the label of the model as configured (e.g. "mixed_bfloat16").
      tolerance, tolerance_basis: the gradient divergence to reach and why.
      before: the gradient divergence of the model as configured.
      loss_rel_error: its loss's relative error.
      units: ``advice_unit`` dicts (forward order).
      recommendation: an ``advice_recommendation`` (None: none was made,
        e.g. the model is not attributable).
      not_attributable: ``[{"what", "reason"}]`` for the whole model.
      cost: ``{"passes", "seconds", "steps": [first, last], "units_per_step"}``.
    """
    return {"writer": str(writer), "metric": "gradient_rel_l2", "reference": "float32",
            "candidate": str(candidate), "tolerance": _optional_float(tolerance),
            "tolerance_basis": str(tolerance_basis), "before": _optional_float(before),
            "loss_rel_error": _optional_float(loss_rel_error), "units": [dict(u) for u in units],
            "recommendation": None if recommendation is None else dict(recommendation),
            "not_attributable": [{"what": str(n["what"]), "reason": str(n["reason"])} for n in not_attributable],
            "cost": dict(cost or {})}


def _number_or_none(obj, key, where):
    value = obj.get(key)
    if value is not None and not _is_number(value):
        raise ValueError("advice %s %r must be a number or null" % (where, key))
    return None if value is None else float(value)


def _read_advice_unit(u):
    if not (isinstance(u, dict) and isinstance(u.get("name"), str)
            and isinstance(u.get("layers"), list) and all(isinstance(p, str) for p in u["layers"])
            and isinstance(u.get("classes", []), list) and all(isinstance(c, str) for c in u.get("classes", []))
            and _is_int(u.get("params", 0)) and (u.get("step") is None or _is_int(u.get("step")))
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
            and isinstance(r.get("met"), bool) and _is_int(r.get("verifications", 0))):
        raise ValueError("an advice recommendation needs float32, layers, met, verifications")
    unknown = [u for u in r["float32"] if u not in unit_names]
    if unknown:
        raise ValueError("the advice recommends units it did not measure: %s" % ", ".join(unknown[:3]))
    out = {"float32": list(r["float32"]), "layers": list(r["layers"]), "met": r["met"],
           "verifications": r.get("verifications", 0)}
    out.update({k: _number_or_none(r, k, "recommendation") for k in ADVICE_RECOMMENDATION_NUMBERS})
    return out


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
    return Advice(obj["writer"], obj.get("metric", "gradient_rel_l2"), obj.get("reference", "float32"),
                  obj.get("candidate", "?"), _number_or_none(obj, "tolerance", "field"),
                  obj.get("tolerance_basis", ""), _number_or_none(obj, "before", "field"),
                  _number_or_none(obj, "loss_rel_error", "field"), tuple(units), recommendation,
                  tuple({"what": n["what"], "reason": n["reason"]} for n in missing), dict(cost))


# ---------------------------------------------------------------------------
# Validation of a whole record (readers call it once, at listing).
# ---------------------------------------------------------------------------

_READERS = {
    metadata.GRAD_STATS: read_gradient,
    metadata.GRAD_HISTOGRAM: read_histogram,
    metadata.UPDATE_STATS: read_update,
    metadata.DIVERGENCE: read_comparison,
    metadata.ACTIVATION_DIVERGENCE: read_comparison,
    metadata.LOSS_COMPARISON: read_comparison,
}


def validate(record, tag=None):
    """Raise FormatError unless the extras of ``record`` are readable."""
    reader = _READERS.get(record.kind)
    if reader is not None:
        reader(record, tag)


# ---------------------------------------------------------------------------


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_float(value):
    return None if value is None else float(value)


def _optional_str(obj, key, tag, side):
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise FormatError("%s.%s must be a string" % (side, key), tag)
    return value


def _str_list(value, record, key, tag, allow_none=False):
    ok = isinstance(value, list) and all(
        isinstance(x, str) or (allow_none and x is None) for x in value
    )
    if not ok or len(value) > len(record.rows):
        raise FormatError("%s must be a list of at most %d strings" % (key, len(record.rows)), tag)
    return value


def _str_or_unknown(value):
    return UNKNOWN if value is None else str(value)

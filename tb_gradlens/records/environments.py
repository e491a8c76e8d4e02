"""The hardware a run trained on: its environment and what float32 is there.

TensorFlow-free.  Two JSON payloads, both stated in the ``lens_status``
record (``statuses``) and the second also beside a comparison side
(``variants``):

* ``environment``: the device the step runs on (kind, name, compute
  capability), the TF32 switch, op determinism, the resolved
  ``jit_compile`` of ``fit``, oneDNN and the environment variables that
  change numerics (oneDNN's fpmath mode, XLA flags, determinism), the
  replicas in sync, TensorFlow's and Keras' versions.  Two runs whose
  environments differ (``environment_differences``) do not differ by
  precision alone.
* ``float32_precision``: what float32 measured to be on the device and
  under the compilation a reference runs with (``compare.float32_probe``):
  the significand bits (24 for IEEE float32, the implicit bit included;
  11 under TF32; 8 where float32 is computed in bfloat16) per probed op,
  the likely cause, and, beside a comparison side, the dtype the side was
  computed in (an IEEE reference computed in float64 where float32 is
  degraded).  ``precision_text`` says it in words.
"""

from tb_gradlens import metadata
from tb_gradlens.records import checks

FormatError = metadata.FormatError

# The ops a float32 probe measures, in this order, and their short names.
PROBED_OPS = ("matmul", "batch_matmul", "conv2d", "conv2d_backprop_input", "conv2d_backprop_filter")
OP_NAMES = {
    "matmul": "matmul",
    "batch_matmul": "batch matmul",
    "conv2d": "conv",
    "conv2d_backprop_input": "conv backprop (input)",
    "conv2d_backprop_filter": "conv backprop (filter)",
}
IEEE_FLOAT32_BITS = 24
# The environment variables that change what float32 computes, recorded when set.
NUMERIC_VARIABLES = (
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_SET_ONEDNN_FPMATH_MODE",
    "ONEDNN_DEFAULT_FPMATH_MODE",
    "TF_DETERMINISTIC_OPS",
    "TF_CUDNN_DETERMINISTIC",
    "XLA_FLAGS",
    "TF_XLA_FLAGS",
    "NVIDIA_TF32_OVERRIDE",
)
# The fields of an environment two runs are compared on, and their names in words.
ENVIRONMENT_FIELDS = (
    ("device", "device"),
    ("tf32", "TF32 switch"),
    ("op_determinism", "op determinism"),
    ("jit_compile", "jit_compile"),
    ("run_eagerly", "run_eagerly"),
    ("onednn", "oneDNN"),
    ("variables", "environment variables"),
    ("replicas", "replicas"),
    ("tensorflow", "TensorFlow"),
    ("keras", "Keras"),
)


def float32_precision(ops, tf32=None, cause=None, device=None, jit_compile=False, fpmath=None,
                      computed_in=None):
    """What float32 measured to be (a JSON-ready dict).

    Args:
      ops: ``{op: significand bits}`` for ops of ``PROBED_OPS``.
      tf32: the TF32 switch when measured (None: unknown).
      cause: why float32 is degraded, in words (e.g. "TF32", "oneDNN
        fpmath BF16"), None when it is not or the cause is unknown.
      device, jit_compile: where and how the probe ran (as the reference).
      fpmath: ``{variable: value}`` of oneDNN's fpmath variables that were set.
      computed_in: beside a comparison side, the dtype it was computed in
        ("float64": an IEEE reference where float32 is degraded).
    """
    bits = {str(k): int(v) for k, v in ops.items()}
    out = {"bits": min(bits.values()) if bits else IEEE_FLOAT32_BITS, "ops": bits, "tf32": tf32,
           "cause": cause, "device": device or "default", "jit_compile": bool(jit_compile),
           "fpmath": dict(fpmath or {})}
    if computed_in is not None:
        out["computed_in"] = str(computed_in)
    return out


def read_float32_precision(obj, tag=None, where="float32_precision"):
    """A validated ``float32_precision`` dict (None stays None)."""
    if obj is None:
        return None
    if not isinstance(obj, dict) or not checks.is_int(obj.get("bits")):
        raise FormatError("%s must be an object with integer 'bits'" % where, tag)
    ops = obj.get("ops", {})
    if not isinstance(ops, dict) or not all(isinstance(k, str) and checks.is_int(v) for k, v in ops.items()):
        raise FormatError("%s.ops must map op names to integer bits" % where, tag)
    for key in ("cause", "device", "computed_in"):
        checks.optional_str(obj, key, tag, where)
    if obj.get("tf32") is not None and not isinstance(obj.get("tf32"), bool):
        raise FormatError("%s.tf32 must be true, false or null" % where, tag)
    fpmath = obj.get("fpmath", {})
    if not isinstance(fpmath, dict) or not all(isinstance(v, str) for v in fpmath.values()):
        raise FormatError("%s.fpmath must map variables to strings" % where, tag)
    return dict(obj)


def is_degraded(precision):
    """Whether float32 measured fewer bits than IEEE float32 somewhere."""
    return precision is not None and precision["bits"] < IEEE_FLOAT32_BITS


def degraded_ops_text(precision):
    """The ops float32 is degraded in, in words ("matmul/conv" when all are)."""
    ops = precision.get("ops", {})
    low = [op for op in PROBED_OPS if ops.get(op, IEEE_FLOAT32_BITS) < IEEE_FLOAT32_BITS]
    low += sorted(op for op, bits in ops.items() if op not in PROBED_OPS and bits < IEEE_FLOAT32_BITS)
    matmuls = {"matmul", "batch_matmul"}
    convs = {"conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"}
    if set(low) == matmuls | convs:
        return "matmul/conv"
    if set(low) == matmuls:
        return "matmul"
    if set(low) == convs:
        return "conv"
    return ", ".join(OP_NAMES.get(op, op) for op in low)


def measured_text(precision):
    """What float32 is, measured: "IEEE float32, 24 bits" or e.g. "TF32 in
    matmul/conv, 11 bits"."""
    if not is_degraded(precision):
        return "IEEE float32, %d bits" % IEEE_FLOAT32_BITS
    cause = precision.get("cause")
    return "%sin %s, %d bits" % (cause + " " if cause else "", degraded_ops_text(precision), precision["bits"])


def precision_text(precision, role="reference", dtype="float32"):
    """One comparison side in words, e.g. "float32 reference: TF32 in
    matmul/conv, 11 bits" or "float32 reference: IEEE (computed in float64;
    float32 here is TF32 in matmul/conv, 11 bits)"; None when ``precision``
    is None (a record that does not state it)."""
    if precision is None:
        return None
    head = "%s %s" % (dtype, role) if role else dtype
    computed = precision.get("computed_in")
    if is_degraded(precision) and computed and computed != "float32":
        return "%s: IEEE (computed in %s; float32 here is %s)" % (head, computed, measured_text(precision))
    return "%s: %s" % (head, measured_text(precision))


def environment(device, tf32=None, op_determinism=None, jit_compile=None, run_eagerly=None, onednn=None,
                variables=None, replicas=1, strategy=None, tensorflow=None, keras=None, devices=None):
    """The environment of a run (a JSON-ready dict).

    Args:
      device: ``{"type", "name", "compute_capability"}`` of the device the
        step runs on (the first accelerator, else the CPU).
      tf32: ``tf.config.experimental.tensor_float_32_execution_enabled()``.
      op_determinism: whether op determinism is enabled.
      jit_compile, run_eagerly: the model's, as resolved by Keras (None:
        no model, e.g. a custom loop).
      onednn: whether TensorFlow runs oneDNN kernels (None: unknown).
      variables: ``{name: value}`` of the ``NUMERIC_VARIABLES`` set.
      replicas, strategy: replicas in sync and the strategy's class name.
      tensorflow, keras: their versions.
      devices: ``{type: count}`` of the physical devices.
    """
    return {
        "device": {k: (None if device.get(k) is None else str(device.get(k)))
                   for k in ("type", "name", "compute_capability")},
        "devices": {str(k): int(v) for k, v in (devices or {}).items()},
        "tf32": tf32, "op_determinism": op_determinism, "jit_compile": jit_compile, "run_eagerly": run_eagerly,
        "onednn": onednn, "variables": {str(k): str(v) for k, v in (variables or {}).items()},
        "replicas": int(replicas), "strategy": strategy, "tensorflow": tensorflow, "keras": keras,
    }


def read_environment(obj, tag=None):
    """A validated ``environment`` dict (None stays None)."""
    if obj is None:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("device"), dict):
        raise FormatError("environment must be an object with a 'device' object", tag)
    if not all(v is None or isinstance(v, str) for v in obj["device"].values()):
        raise FormatError("environment.device values must be strings", tag)
    for key in ("tf32", "op_determinism", "jit_compile", "run_eagerly", "onednn"):
        if obj.get(key) is not None and not isinstance(obj.get(key), bool):
            raise FormatError("environment.%s must be true, false or null" % key, tag)
    variables = obj.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise FormatError("environment.variables must map names to strings", tag)
    if not checks.is_int(obj.get("replicas", 1)):
        raise FormatError("environment.replicas must be an integer", tag)
    for key in ("strategy", "tensorflow", "keras"):
        checks.optional_str(obj, key, tag, "environment")
    return dict(obj)


def device_text(device):
    """"GPU NVIDIA A100-SXM4-40GB (compute capability 8.0)", "CPU AMD EPYC ..."."""
    if not device:
        return "unknown"
    text = " ".join(str(device[k]) for k in ("type", "name") if device.get(k))
    if device.get("compute_capability"):
        text += " (compute capability %s)" % device["compute_capability"]
    return text or "unknown"


def _field_text(key, value):
    if key == "device":
        return device_text(value)
    if key == "variables":
        return ", ".join("%s=%s" % kv for kv in sorted(value.items())) if value else "none set"
    if isinstance(value, bool) and key in ("jit_compile", "run_eagerly"):
        return str(value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return "unknown" if value is None else str(value)


def environment_text(env):
    """The environment in one line, e.g. "device GPU NVIDIA A100 (compute
    capability 8.0); TF32 switch on; op determinism off; jit_compile True; ...";
    "not recorded" for None."""
    if env is None:
        return "not recorded"
    return "; ".join("%s %s" % (name, _field_text(key, env.get(key))) for key, name in ENVIRONMENT_FIELDS
                     if key in env and not (key in ("jit_compile", "run_eagerly") and env.get(key) is None))


def environment_differences(envs):
    """``[{"field", "name", "values": {label: text}}]``: the fields in which
    the environments ``{label: environment or None}`` differ.  A field one
    environment does not state (None: no model, an older record) is not a
    difference; an environment not recorded at all is left out."""
    known = {label: env for label, env in envs.items() if env is not None}
    out = []
    for key, name in ENVIRONMENT_FIELDS:
        stated = {label: env.get(key) for label, env in known.items()
                  if env.get(key) is not None or key == "variables"}
        if key == "variables":
            stated = {label: dict(value or {}) for label, value in stated.items()}
        if len(stated) < 2:
            continue
        values = list(stated.values())
        if any(v != values[0] for v in values[1:]):
            out.append({"field": key, "name": name,
                        "values": {label: _field_text(key, value) for label, value in stated.items()}})
    return out

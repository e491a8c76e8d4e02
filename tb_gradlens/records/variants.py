"""Comparison sides (variants): which policy, compute and variable dtype, device and compiler each side of a comparison used."""

import collections

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens.records import checks
from tb_gradlens.records.environments import read_float32_precision

FormatError = metadata.FormatError


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
    "VariantInfo", ("label", "policy", "compute_dtype", "variable_dtype", "device", "jit_compile", "precision"),
    defaults=(None,),
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
      **more: further keys: ``replica``; ``execution`` ("eager", "graph"
        or "xla": how the side computed); for a candidate ``gradients``
        ("applied": the training step's own, or "recomputed");
        ``precision`` (``environments.float32_precision``: what float32
        measured to be where the side ran, and the dtype it was computed in).
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
    policy = checks.optional_str(obj, "policy", tag, side)
    compute = checks.optional_str(obj, "compute_dtype", tag, side)
    if compute is None and "compute_dtype" not in obj:
        compute = POLICY_COMPUTE_DTYPES.get(policy)
    label = checks.optional_str(obj, "label", tag, side) or policy or "?"
    jit = obj.get("jit_compile", False)
    if not isinstance(jit, bool):
        raise FormatError("%s.jit_compile must be true or false" % side, tag)
    return VariantInfo(
        label, policy or "?", compute, checks.optional_str(obj, "variable_dtype", tag, side),
        checks.optional_str(obj, "device", tag, side) or "default", jit,
        read_float32_precision(obj.get("precision"), tag, side + ".precision"),
    )



def policy_label(policies, compute_dtypes):
    """The policy name a model is labelled by, from its weighted layers'
    ``policies`` and their ``compute_dtypes``: a model with layers that
    compute in 16 bits is what they make it (the most common policy among
    them, e.g. "mixed_bfloat16" for one bfloat16 Dense beside a float32
    head), else the most common policy.  Ties go to the first name in
    sorted order, so every process gives the same label."""
    policies = [str(p) for p in policies]
    sixteen = [p for p, d in zip(policies, compute_dtypes) if d in float_formats.LOW_PRECISION]
    names = sixteen or policies
    if not names:
        return None
    counts = collections.Counter(names)
    return min(counts, key=lambda name: (-counts[name], name))

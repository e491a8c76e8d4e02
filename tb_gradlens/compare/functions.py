"""Comparisons of custom loss functions (``compare_fn``): any model of raw TF ops."""

import contextlib

import tensorflow as tf

from tb_gradlens import numerics
from tb_gradlens.compare import float32_probe
from tb_gradlens.compare.variants import Comparison
from tb_gradlens.compare.variants import Variant
from tb_gradlens.compare.variants import as_variant
from tb_gradlens.writing import summary_ops


def compare_fn(loss_fn, variables, reference="float32", candidate="mixed_bfloat16", names=None,
               ieee_reference=True):
    """Compare the gradients of ``loss_fn`` between two variants.

    Args:
      loss_fn: ``loss_fn(weights, compute_dtype) -> loss`` or
        ``-> (loss, {name: activation tensor})``.  ``weights`` holds one
        tensor per variable, in the variant's storage dtype; compute with
        them (cast to ``compute_dtype``), not with the variables.
      variables: the variables (or tensors) to differentiate.
      reference, candidate: Variants or policy names (not None).
      names: row names (default: the variables' paths).
      ieee_reference: a float32 reference computes in float64 where float32
        measured degraded (``float32_probe``); the records say what float32
        was either way.

    Returns:
      A Comparison.
    """
    reference, candidate = as_variant(reference), as_variant(candidate)
    for v in (reference, candidate):
        if v.policy is None:
            raise ValueError("tb_gradlens.compare_fn: a variant needs a policy, got %r" % v)
    variables = list(variables)
    rows = list(names) if names is not None else summary_ops.variable_paths(variables)
    precisions = [float32_probe.side_precision(v) for v in (reference, candidate)]
    computed_in = float32_probe.ieee_dtype(precisions[0], ieee_reference)
    if precisions[0] is not None:
        precisions[0]["computed_in"] = computed_in or "float32"
    computing = Variant(computed_in, reference.device, reference.jit_compile) if computed_in else reference
    ref = _fn_pass(loss_fn, variables, computing)
    cand = _fn_pass(loss_fn, variables, candidate)
    for what, result in (("reference", ref), ("candidate", cand)):
        if variables and all(g is None for g in result[1]):
            raise ValueError(
                "tb_gradlens.compare_fn: the %s loss does not depend on the weights "
                "loss_fn received; compute with `weights`, not the variables" % what
            )
    act_names = [k for k in cand[2] if k in ref[2]]
    act_div = None
    if act_names:
        act_div = numerics.comparison_values(numerics.divergence_metrics(
            [cand[2][k] for k in act_names],
            [ref[2][k] for k in act_names],
            [candidate.compute_dtype] * len(act_names),
        ))
    return Comparison(
        gradient_dtypes=[candidate.compute_dtype] * len(variables),
        activation_dtypes=[candidate.compute_dtype] * len(act_names),
        reference=reference,
        candidate=candidate,
        reference_extras=dict(reference.describe(), **({} if precisions[0] is None else {"precision": precisions[0]})),
        candidate_extras=dict(candidate.describe(), **({} if precisions[1] is None else {"precision": precisions[1]})),
        variable_rows=rows,
        gradient_divergence=numerics.comparison_values(numerics.divergence_metrics(
            cand[1], ref[1], [candidate.compute_dtype] * len(variables)
        )),
        loss=numerics.comparison_values(numerics.loss_comparison(ref[0], cand[0])),
        activation_rows=act_names,
        activation_divergence=act_div,
        reference_gradients=ref[1],
        candidate_gradients=cand[1],
    )


def device_scope(device):
    """``tf.device(device)``, or nothing for TensorFlow's placement."""
    return tf.device(device) if device else contextlib.nullcontext()


def _fn_pass(loss_fn, variables, variant):
    """(loss, gradients, activations) of ``loss_fn`` under ``variant``."""

    def body():
        with device_scope(variant.device):
            weights = [tf.identity(tf.cast(v, variant.storage_dtype)) for v in variables]
            with tf.GradientTape() as tape:
                tape.watch(weights)
                loss, activations = _split_output(loss_fn(weights, tf.as_dtype(variant.compute_dtype)))
            grads = tape.gradient(loss, weights)
        return loss, grads, activations

    if variant.jit_compile:
        body = tf.function(body, jit_compile=True)
    return body()


def _split_output(output):
    if isinstance(output, (tuple, list)) and len(output) == 2 and isinstance(output[1], dict):
        return output[0], dict(output[1])
    return output, {}

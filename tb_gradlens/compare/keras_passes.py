"""Shadow passes of a Keras model and ``compare_keras``.

A pass computes one training step's loss, gradients and layer outputs of
the model as a ``Variant`` says, without copying the model and without
changing it: every layer's ``dtype_policy`` is switched for the pass and
restored in ``finally``; the pass runs in a ``keras.StatelessScope`` (no
weight, BatchNormalization statistic or seed generator changes); the seed
generators' states may be given (those of a training step, read before it
advanced them), and every random draw is shared with the other side of
the comparison (``randomness``).
"""

import contextlib
import warnings

import keras
import tensorflow as tf

from tb_gradlens import keras_private
from tb_gradlens import numerics
from tb_gradlens import safety
from tb_gradlens import summary_v2
from tb_gradlens.compare import dtype_maps
from tb_gradlens.compare.functions import device_scope
from tb_gradlens.compare.instruments import ActivationRecorder
from tb_gradlens.compare.randomness import SharedDraws
from tb_gradlens.compare.variants import Comparison
from tb_gradlens.compare.variants import as_variant

model_layers = keras_private.flatten_layers


def _shadow_policy(layer, variant):
    """The policy ``layer`` computes with in a pass of ``variant``."""
    compute = variant.compute_dtype
    stored = dtype_maps.own_variable_dtype(layer) or compute
    return keras_private.ShadowPolicy(variant.policy, compute, stored)


@contextlib.contextmanager
def switched_policies(model, variant):
    """Within the block every layer computes as ``variant`` says (and a
    nested model built under a mixed policy no longer rounds its input to
    16 bits: ``keras_private.sixteen_bit_inputs_as``).

    The original policy objects are put back in ``finally``, also when the
    block raises.  A no-op for ``policy=None``.
    """
    if variant.policy is None:
        yield
        return
    saved = [(layer, layer.dtype_policy) for layer in model_layers(model)]
    for layer, policy in saved:
        if getattr(policy, "quantization_mode", None) is not None:
            raise ValueError(
                "tb_gradlens: layer %r is quantized (%s); dtype comparisons do not "
                "support quantized layers" % (layer.name, policy.quantization_mode)
            )
    try:
        for layer, _ in saved:
            layer.dtype_policy = _shadow_policy(layer, variant)
        with keras_private.sixteen_bit_inputs_as(model, variant.compute_dtype):
            yield
    finally:
        for layer, policy in saved:
            layer.dtype_policy = policy


def seed_states(model):
    """The model's seed-generator state variables (what a pass takes as
    ``state_values``)."""
    return [v for v in model.non_trainable_variables if keras_private.is_seed_state(v)]


def _stored_value(variable, variant):
    value = tf.convert_to_tensor(variable.value if hasattr(variable, "value") else variable)
    if variant.storage_dtype == "bfloat16" and value.dtype != tf.bfloat16:
        return tf.cast(value, tf.bfloat16)
    return tf.identity(value)


def owner_compute_dtypes(model, variables):
    """Per variable: the compute dtype of the layer that owns it."""
    owner = {}
    for layer in model_layers(model):
        for v in keras_private.own_trainable_variables(layer):
            owner.setdefault(id(v), layer.compute_dtype)
    return [owner.get(id(v), tf.as_dtype(v.dtype).name) for v in variables]


class KerasPass:
    """One training step of ``model`` computed as ``variant`` says.

    ``pass_(x, y, sample_weight, state_values=None, draws=None)`` returns
    ``(loss, gradients, layer outputs, draws)``: ``state_values`` are values
    for ``seed_states(model)`` to run with (the training step's, read before
    it advanced them); ``draws`` None draws the randomness as the training
    step does (and returns it), a list replays another pass's draws.  With
    ``optimizer`` the loss is scaled and the gradients unscaled as that
    optimizer does (``LossScaleOptimizer``), so the gradients are the ones
    it applies.  The pass is a ``tf.function`` (traced once, reused by every
    later trace of the step around it); with ``variant.jit_compile`` an XLA
    one.  ``activation_rows`` and ``compute_dtypes`` (per trainable
    variable) are set when it is traced.
    """

    def __init__(self, model, variant, activations=True, optimizer=None):
        self.model = model
        self.variant = as_variant(variant)
        self.activations = activations
        self.optimizer = optimizer
        self.activation_rows = []
        self.compute_dtypes = None
        self.observed_dtypes = {}
        options = {"jit_compile": True} if self.variant.jit_compile else {"reduce_retracing": True}
        # Many passes of one model (the precision advisor's), each traced once,
        # are not the retracing TensorFlow warns about.
        self._function = keras_private.without_retracing_warning(
            tf.function(self._run, autograph=False, **options))

    def __call__(self, x, y=None, sample_weight=None, state_values=None, draws=None):
        with device_scope(self.variant.device):
            return self._function(x, y, sample_weight, state_values, draws)

    def run_eagerly(self, x, y=None, sample_weight=None, state_values=None, draws=None):
        """The pass without its ``tf.function`` (a one-off run: no trace to pay)."""
        with device_scope(self.variant.device):
            return self._run(x, y, sample_weight, state_values, draws)

    def concrete_function(self, x, y=None, sample_weight=None, state_values=None, draws=None):
        """The traced pass for these arguments (traced now if it was not)."""
        with device_scope(self.variant.device):
            return self._function.get_concrete_function(x, y, sample_weight, state_values, draws)

    def _run(self, x, y, sample_weight, state_values, draws):
        model, variant = self.model, self.variant
        variables = model.trainable_variables
        configured = {id(layer): layer.compute_dtype for layer in model_layers(model)}
        with device_scope(variant.device), switched_policies(model, variant):
            values = [_stored_value(v, variant) for v in variables]
            mapping = list(zip(variables, values))
            if state_values is not None:
                mapping += list(zip(seed_states(model), state_values))
            recorder = ActivationRecorder(model, keep_tensors=self.activations)
            with tf.GradientTape() as tape:
                tape.watch(values)
                with keras.StatelessScope(state_mapping=mapping), SharedDraws(configured, draws) as shared:
                    with recorder:
                        y_pred = model(x, training=True)
                    loss = self._loss(x, y, y_pred, sample_weight)
                    scaled = self.optimizer.scale_loss(loss) if self.optimizer is not None else loss
            grads = tape.gradient(scaled, values)
            if self.optimizer is not None:
                grads = keras_private.applied_gradients(self.optimizer, grads, variables)
            self.compute_dtypes = owner_compute_dtypes(model, variables)
        self.activation_rows = [name for name, _ in recorder.outputs]
        self.observed_dtypes = dict(recorder.dtypes)
        return loss, grads, [t for _, t in recorder.outputs], list(shared.draws)

    def _loss(self, x, y, y_pred, sample_weight):
        model = self.model
        float64 = self.variant.compute_dtype == "float64"
        scope = keras_private.loss_dtype(model, "float64", y, y_pred) if float64 else contextlib.nullcontext()
        with scope:
            return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)


def keras_pass(model, variant, activations=True, optimizer=None):
    """A ``KerasPass`` (kept for callers of the former function)."""
    return KerasPass(model, variant, activations, optimizer)


def compare_keras(model, x, y=None, sample_weight=None, reference="float32", candidate=None,
                  activations=True, passes=None, surrounding_jit=False, candidate_outcome=None,
                  state_values=None, candidate_gradients=None, candidate_loss=None, eager=None):
    """Compare one training step of a Keras model between two variants.

    Same batch, same weights, same random draws (dropout masks, noise);
    nothing in the model changes (policies are restored, the passes are
    stateless).

    Args:
      model: a compiled Keras 3 model (``compute_loss`` gives its loss).
      x, y, sample_weight: one batch.
      reference, candidate: Variants or policy names; None = the model as
        configured (the default candidate).
      activations: also compare every layer's output.
      passes: optional (reference_pass, candidate_pass) ``KerasPass``es to
        reuse (their tf.functions keep their traces).
      surrounding_jit: whether the caller runs under XLA (recorded for
        variants with ``jit_compile=None``).
      candidate_outcome: ``(loss, gradients, [(layer name, output)])`` of
        the training step itself, when the candidate is the model as
        configured and the caller has them (the Keras callback): then no
        candidate pass runs.  The weights must be those the step
        differentiated, and the reference must run as the step runs (its
        ``jit_compile`` None or ``surrounding_jit``): it draws the step's
        random numbers again.  A fourth element, the candidate's random
        draws (a ``KerasPass``'s fourth output), is replayed instead.
      state_values: values of the model's seed-generator states before the
        step (``seed_states``), so the passes draw that step's masks.
      candidate_gradients: the gradients the training step applies (one
        per trainable variable), with a candidate that is the model as
        configured: they replace the candidate pass's, whose loss (unless
        ``candidate_loss``), layer outputs and random draws are kept.  A
        step that draws random numbers needs ``state_values`` for them to
        pair with the reference (else they are not used: the record says
        "recomputed").
      candidate_loss: the training step's loss, with ``candidate_gradients``.
      eager: run the passes eagerly (default: when the caller runs
        eagerly), as an eager training step computes; else as traced
        functions.  A variant with ``jit_compile=True`` always runs under XLA.

    Returns:
      A Comparison.  Its sides' extras state ``execution`` ("eager",
      "graph" or "xla") and, for the candidate, ``gradients``: "applied"
      (the step's own) or "recomputed".
    """
    reference, candidate = as_variant(reference), as_variant(candidate)
    variables = model.trainable_variables
    eager = tf.executing_eagerly() if eager is None else bool(eager)
    if candidate_gradients is not None and not candidate.is_model_as_configured(surrounding_jit):
        raise ValueError("tb_gradlens.compare_keras: candidate_gradients are the training step's own: give "
                         "them only with a candidate that is the model as configured (candidate=None)")
    if passes is None:
        passes = (KerasPass(model, reference, activations),
                  None if candidate_outcome is not None else KerasPass(model, candidate, activations))
    ref_pass, cand_pass = passes
    run_ref, run_cand = (_runner(p, eager) for p in passes)
    applied = candidate_outcome is not None
    if candidate_outcome is not None:
        cand_loss, cand_grads, named = candidate_outcome[:3]
        draws = candidate_outcome[3] if len(candidate_outcome) > 3 else None
        if draws is None and not reference.runs_as_surrounding(surrounding_jit):
            raise ValueError("tb_gradlens.compare_keras: with a candidate_outcome without its random draws "
                             "the reference must run as the step runs (jit_compile None or %s)"
                             % bool(surrounding_jit))
        cand_rows, cand_acts = [n for n, _ in named], [t for _, t in named]
        ref_loss, ref_grads, ref_acts, _ = run_ref(x, y, sample_weight, state_values, draws)
    elif candidate.runs_as_surrounding(surrounding_jit) or not reference.runs_as_surrounding(surrounding_jit):
        cand_loss, cand_grads, cand_acts, draws = run_cand(x, y, sample_weight, state_values)
        if candidate_gradients is not None and (state_values is not None or not draws):
            applied = True
            cand_grads = list(candidate_gradients)
            cand_loss = cand_loss if candidate_loss is None else candidate_loss
        elif candidate_gradients is not None:
            warnings.warn("tb_gradlens: the step of model %s draws random numbers (Dropout, noise): its gradients "
                          "cannot be compared without the seed states read before it (GradLens.seed_states(model), "
                          "then compare_keras(..., seeds=...)); the candidate is recomputed from the current states"
                          % model.name, safety.GradLensWarning, stacklevel=2)
        ref_loss, ref_grads, ref_acts, _ = run_ref(x, y, sample_weight, state_values, draws)
    else:  # the reference runs as the step does: it draws, the candidate replays
        ref_loss, ref_grads, ref_acts, draws = run_ref(x, y, sample_weight, state_values)
        cand_loss, cand_grads, cand_acts, _ = run_cand(x, y, sample_weight, state_values, draws)
    if cand_pass is not None:
        cand_rows = cand_pass.activation_rows
    if candidate.policy is not None:
        grad_dtypes = [candidate.compute_dtype] * len(cand_grads)
    elif cand_pass is not None:
        grad_dtypes = cand_pass.compute_dtypes
    else:
        grad_dtypes = owner_compute_dtypes(model, variables)
    act_rows, act_div, act_dtypes = [], None, []
    if activations:
        ref_index = {n: i for i, n in enumerate(ref_pass.activation_rows)}
        pairs = [(n, i) for i, n in enumerate(cand_rows) if n in ref_index]
        act_rows = [n for n, _ in pairs]
        act_dtypes = [tf.as_dtype(cand_acts[i].dtype).name for _, i in pairs]
        if pairs:
            act_div = numerics.divergence_metrics(
                [cand_acts[i] for _, i in pairs], [ref_acts[ref_index[n]] for n, _ in pairs], act_dtypes
            )
    model_policy = dtype_maps.dominant_policy(model)
    dtypes = dtype_maps.model_dtypes(model)
    return Comparison(
        gradient_dtypes=[tf.as_dtype(d).name for d in grad_dtypes],
        activation_dtypes=act_dtypes,
        reference=reference,
        candidate=candidate,
        reference_extras=dict(reference.describe(model_policy, surrounding_jit, dtypes),
                              execution=_execution(reference, surrounding_jit, eager)),
        candidate_extras=dict(candidate.describe(model_policy, surrounding_jit, dtypes),
                              execution=_execution(candidate, surrounding_jit, eager),
                              gradients="applied" if applied else "recomputed"),
        variable_rows=summary_v2.variable_paths(variables),
        gradient_divergence=numerics.divergence_metrics(cand_grads, ref_grads, grad_dtypes),
        loss=numerics.loss_comparison(ref_loss, cand_loss),
        activation_rows=act_rows,
        activation_divergence=act_div,
        reference_gradients=ref_grads,
        candidate_gradients=cand_grads,
    )


def _runner(pass_, eager):
    """How a pass runs: its ``tf.function``, or eagerly (``eager``, unless
    it compiles with XLA)."""
    if pass_ is None:
        return None
    return pass_.run_eagerly if eager and not pass_.variant.jit_compile else pass_


def _execution(variant, surrounding_jit, eager):
    """"xla", "eager" or "graph": how a side of the comparison computed."""
    if variant.jit_compile or (variant.jit_compile is None and surrounding_jit):
        return "xla"
    return "eager" if eager else "graph"

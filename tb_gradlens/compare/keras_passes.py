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

import keras
import tensorflow as tf

from tb_gradlens.compare import dtype_maps
from tb_gradlens.compare.functions import device_scope
from tb_gradlens.compare.instruments import ActivationRecorder
from tb_gradlens.compare.randomness import SharedDraws
from tb_gradlens.compare.variants import Variant
from tb_gradlens.compare.variants import as_variant
from tb_gradlens.writing import keras_private

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
    it applies.  With ``sampling_noise`` it also returns the loss and the
    gradients of the first half of the batch (``_half_batch_loss``; None
    when it has none).  The pass is a ``tf.function`` (traced once, reused by every
    later trace of the step around it); with ``variant.jit_compile`` an XLA
    one.  ``activation_rows`` and ``compute_dtypes`` (per trainable
    variable) are set when it is traced.  ``computed_in`` ("float64"): the
    pass of a float32 ``variant`` computes in that dtype instead (an IEEE
    reference where float32 is degraded, ``float32_probe.ieee_dtype``; the
    pass still stands for ``variant``); ``precision``: what float32 measured
    to be where the pass runs (``float32_probe.side_precision``), or None.
    """

    def __init__(self, model, variant, activations=True, optimizer=None, sampling_noise=False, computed_in=None,
                 precision=None):
        self.model = model
        self.variant = as_variant(variant)
        self.activations = activations
        self.optimizer = optimizer
        self.sampling_noise = sampling_noise
        self.computed_in = computed_in
        self.precision = precision
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

    def computing_variant(self):
        """The Variant the pass computes as: ``variant``, or in ``computed_in``."""
        variant = self.variant
        if self.computed_in is None or self.computed_in == variant.compute_dtype:
            return variant
        return Variant(self.computed_in, variant.device, variant.jit_compile, label=variant.label)

    def _run(self, x, y, sample_weight, state_values, draws):
        model, variant = self.model, self.computing_variant()
        variables = model.trainable_variables
        configured = {id(layer): layer.compute_dtype for layer in model_layers(model)}
        with device_scope(variant.device), switched_policies(model, variant):
            values = [_stored_value(v, variant) for v in variables]
            recorder = ActivationRecorder(model, keep_tensors=self.activations)
            with tf.GradientTape(persistent=self.sampling_noise) as tape:
                tape.watch(values)
                used = self._used_values(variables, values, configured)
                mapping = list(zip(variables, used))
                if state_values is not None:
                    mapping += list(zip(seed_states(model), state_values))
                with keras.StatelessScope(state_mapping=mapping), SharedDraws(configured, draws) as shared:
                    with self._instrument(configured), recorder:
                        y_pred = model(self._inputs(x), training=True)
                    loss = self._loss(x, y, y_pred, sample_weight)
                    half = self._half_batch_loss(x, y, y_pred, sample_weight) if self.sampling_noise else None
                    scaled = [self._scaled(v) for v in (loss, half)]
            grads = self._gradients(tape, scaled[0], values, variables)
            self.compute_dtypes = owner_compute_dtypes(model, variables)
            out = (loss, grads, [t for _, t in recorder.outputs], list(shared.draws))
            if self.sampling_noise:
                out += (half, None if half is None else self._gradients(tape, scaled[1], values, variables))
            del tape
        self.activation_rows = [name for name, _ in recorder.outputs]
        self.observed_dtypes = dict(recorder.dtypes)
        return out

    def _scaled(self, loss):
        """``loss`` scaled as the optimizer scales it (``LossScaleOptimizer``)."""
        if loss is None or self.optimizer is None:
            return loss
        return self.optimizer.scale_loss(loss)

    def _gradients(self, tape, scaled, values, variables):
        """The gradients of a ``_scaled`` loss as the optimizer applies them
        (unscaled as a ``LossScaleOptimizer`` does)."""
        grads = tape.gradient(scaled, values)
        if self.optimizer is not None:
            grads = keras_private.applied_gradients(self.optimizer, grads, variables)
        return grads

    def _half_batch_loss(self, x, y, y_pred, sample_weight):
        """The loss of the first half of the batch alone, as the loss of the
        batch is reduced (its examples weighted 2, the others 0): its
        gradient differs from the batch's by about the gradient's sampling
        noise, what another batch of this size would change.  None when the
        batch has fewer than 2 examples or the loss takes no sample weight."""
        first = tf.nest.flatten(y_pred)[0]
        n = tf.shape(first)[0]
        half = tf.maximum(n // 2, 1)
        weights = tf.where(tf.range(n) < half, tf.cast(n, tf.float32) / tf.cast(half, tf.float32), 0.0)
        # Shaped [n, 1, ...] to the rank of the weights given, else of the
        # output: they broadcast over a per-pixel or per-token loss.
        rank = len(sample_weight.shape) if sample_weight is not None else max(1, len(first.shape))
        weights = tf.reshape(weights, [-1] + [1] * (rank - 1))
        try:
            if sample_weight is not None:
                weights = tf.cast(sample_weight, tf.float32) * weights
            return self._loss(x, y, y_pred, weights)
        except (TypeError, ValueError, AttributeError, tf.errors.InvalidArgumentError):
            return None

    def _inputs(self, x):
        """The model inputs the pass runs on (``x`` by default)."""
        return x

    def _used_values(self, variables, values, configured):
        """The values the pass's layers read for ``variables`` (the stable-
        rounding pass rounds some); ``values`` themselves by default."""
        return values

    def _instrument(self, configured):
        """A context manager active while the model's layers run (the
        stable-rounding pass rounds at their boundaries); none by default.
        ``configured``: {id(layer): compute dtype as configured}."""
        return contextlib.nullcontext()

    def _loss(self, x, y, y_pred, sample_weight):
        model = self.model
        float64 = self.computing_variant().compute_dtype == "float64"
        scope = keras_private.loss_dtype(model, "float64", y, y_pred) if float64 else contextlib.nullcontext()
        with scope:
            return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)


def keras_pass(model, variant, activations=True, optimizer=None):
    """A ``KerasPass`` (kept for callers of the former function)."""
    return KerasPass(model, variant, activations, optimizer)

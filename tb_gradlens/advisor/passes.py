"""One training step of the model under a policy map: some layers in float32,
the others as configured.

A ``MappedPass`` is a ``compare.KerasPass`` of the model as configured,
always run (and traced) while the layers of its map compute in float32:
their ``dtype_policy`` is switched for the pass and restored in
``finally``.  The reference (every layer in float32) is the comparison
package's float32 pass.  Every pass is stateless (no weight, statistic or
seed changes) and takes the random draws of the pass of the model as
configured, which draws them as the training step draws (``compare.randomness``).
"""

import contextlib

import numpy as np
import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens.compare import dtype_maps
from tb_gradlens.writing import keras_private

ALL = "all"
STABLE = "stable"  # the float32 reference rounded between layers as the model as configured rounds


@contextlib.contextmanager
def computing_in_float32(layers):
    """Within the block ``layers`` compute in float32 (on their own weights'
    dtype); their policies are put back in ``finally``."""
    saved = [(layer, layer.dtype_policy) for layer in layers]
    try:
        for layer, _ in saved:
            stored = dtype_maps.own_variable_dtype(layer) or "float32"
            layer.dtype_policy = keras_private.ShadowPolicy("float32", "float32", stored)
        yield
    finally:
        for layer, policy in saved:
            layer.dtype_policy = policy


def _host(gradients):
    # (An Embedding's gradient is IndexedSlices: made dense.)
    return [None if g is None else np.asarray(tf.cast(tf.convert_to_tensor(g), tf.float64)) for g in gradients]


class Outcome:
    """What a pass computed, on the host: the loss, the gradients (float64
    NumPy), the layer outputs by row name and the row order; for a pass
    with the half batch (``KerasPass(sampling_noise=True)``) its loss and
    gradients too (else None)."""

    def __init__(self, loss, gradients, rows, outputs, half_loss=None, half_gradients=None):
        self.loss = float(np.asarray(loss, np.float64))
        self.gradients = _host(gradients)
        self.half_loss = None if half_loss is None else float(np.asarray(half_loss, np.float64))
        self.half_gradients = None if half_gradients is None else _host(half_gradients)
        self.rows = list(rows)
        self.outputs = {name: t for name, t in zip(rows, outputs)}
        self.dtypes = {name: tf.as_dtype(t.dtype).name for name, t in zip(rows, outputs)}
        self.shapes = [tuple(t.shape) for t in outputs]

    def output(self, row):
        t = self.outputs.get(row)
        return None if t is None else np.asarray(tf.cast(t, tf.float64))


class MappedPass:
    """One step with the layers of ``float32_layers`` in float32 (``ALL``:
    the float32 reference; ``STABLE``: the stable-rounding pass of the model
    as configured, ``compare.stable``; empty: the model as configured);
    ``realization`` k > 0: another draw of its 16-bit rounding
    (``compare.DitheredPass``).

    ``traced`` runs it as a ``tf.function`` (traced once, reused at later
    calls: the Keras callback's rounds); otherwise eagerly (a one-off run,
    where tracing every map would cost more than running it).
    """

    def __init__(self, model, float32_layers=(), traced=True, realization=0, sampling_noise=False):
        self.model = model
        self.float32_layers = float32_layers
        # The reference and the stable pass are IEEE float32 or better where float32 is degraded
        # (TF32, oneDNN fpmath: compare.precision_options); a layer kept in float32 computes as float32 is here.
        ieee = compare.precision_options("float32") if float32_layers in (ALL, STABLE) else {}
        if float32_layers == STABLE:
            self.keras_pass = compare.StableRoundingPass(model, "float32", None, activations=True,
                                                         realization=realization, **ieee)
        elif float32_layers == ALL:
            self.keras_pass = compare.KerasPass(model, compare.Variant("float32"), activations=True,
                                                sampling_noise=sampling_noise, **ieee)
        else:
            self.keras_pass = compare.DitheredPass(model, compare.Variant(None), None, activations=True,
                                                   realization=realization)
            self.keras_pass.sampling_noise = sampling_noise
        self.traced = traced

    def _switched(self):
        if self.float32_layers in (ALL, STABLE) or not self.float32_layers:
            return contextlib.nullcontext()
        return computing_in_float32(self.float32_layers)

    def __call__(self, x, y=None, sample_weight=None, draws=None):
        """``(Outcome, draws)``: draws None draws the randomness, a list replays it."""
        with self._switched():
            if self.traced:
                out = self.keras_pass(x, y, sample_weight, None, draws)
            else:
                out = self.keras_pass.run_eagerly(x, y, sample_weight, None, draws)
        loss, grads, outputs, drawn = out[:4]
        return Outcome(loss, grads, self.keras_pass.activation_rows, outputs, *out[4:6]), drawn

    def graph(self, x, y=None, sample_weight=None, draws=None):
        """The traced graph of this pass (to look for 16-bit ops in it)."""
        with self._switched():
            return self.keras_pass.concrete_function(x, y, sample_weight, None, draws).graph

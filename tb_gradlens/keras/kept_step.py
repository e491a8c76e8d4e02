"""A step kept inside the train function to be replayed after its call.

Tracing the replay's two passes (the model as configured and in float32)
into the step made every trace of the step pay for two more traces of the
model, for a replay most trainings never run.  Instead, the first step in
trouble keeps what its replay needs, inside the conditional a healthy step
does not take: the values the replay reads (the trainable weights and the
loss scale, before the step's update), the batch and the seed states read
before the step.  After the call, ``replay_kept`` runs the replay on them,
traced then (as the step ran: traced, or eagerly under ``run_eagerly``),
with those values in the variables for its duration and the variables put
back bit for bit afterwards.

The kept values live in variables of any shape, empty until a step is
kept: a replay that never happens costs no memory.
"""

import types

import keras
import tensorflow as tf

from tb_gradlens.writing import keras_private


def _any_shape(dtype):
    with tf.init_scope():
        return tf.Variable(tf.zeros([0], dtype), shape=tf.TensorShape(None), trainable=False)


class KeptStep:
    """What the replay of one step reads (see the module).

    Args:
      model: the model (its trainable variables are kept).
      optimizer: its optimizer (a ``LossScaleOptimizer``'s scale is kept).
    """

    def __init__(self, model, optimizer):
        self.model = model
        scale = keras_private.loss_scale(optimizer)
        self.variables = list(model.trainable_variables) + ([scale] if scale is not None else [])
        self.step = tf.Variable(tf.constant(-1, tf.int64), trainable=False)  # -1: nothing kept
        self.values = [_any_shape(v.dtype) for v in self.variables]
        self._inputs = {}  # (position, dtype) -> variable, made when the step is traced
        self._structure = None  # (x, y, sample_weight, seeds): each tensor's dtype, or None

    # -- inside the step -------------------------------------------------------

    def keep(self, step, capture):
        """Keep the step's values, batch and seed states (before its update)."""
        for kept, v in zip(self.values, self.variables):
            kept.assign(tf.convert_to_tensor(v.value))
        inputs = tf.nest.map_structure(lambda t: None if t is None else tf.convert_to_tensor(t),
                                       (capture.x, capture.y, capture.sample_weight, list(capture.seeds)))
        self._structure = tf.nest.map_structure(lambda t: None if t is None else t.dtype, inputs)
        for position, tensor in enumerate(tf.nest.flatten(inputs)):
            if tensor is not None:
                self._input(position, tensor.dtype).assign(tensor)
        self.step.assign(tf.cast(step, tf.int64))
        return tf.constant(True)

    def prepare(self, element_spec, seeds):
        """Outside the step, before its first trace: make the variables
        ``keep`` puts the batch and seed states in, from the batch's spec
        (``iterator.element_spec``) and the seed-state variables (a first
        trace that makes variables is traced again)."""
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(element_spec)
        specs = (x, y, sample_weight, [tf.TensorSpec(v.shape, v.dtype) for v in seeds])
        for position, spec in enumerate(tf.nest.flatten(specs)):
            if isinstance(spec, tf.TensorSpec):
                self._input(position, spec.dtype)

    def _input(self, position, dtype):
        key = (position, dtype)
        if key not in self._inputs:
            self._inputs[key] = _any_shape(dtype)
        return self._inputs[key]

    # -- after the call ----------------------------------------------------------

    def take(self):
        """Outside the step: the kept step, or None; forgets it."""
        step = int(self.step.numpy())
        if step < 0 or self._structure is None:
            return None
        self.step.assign(-1)
        flat = tf.nest.flatten(self._structure)
        values = [None if dtype is None else tf.identity(self._inputs[(i, dtype)]) for i, dtype in enumerate(flat)]
        x, y, sample_weight, seeds = tf.nest.pack_sequence_as(self._structure, values)
        return types.SimpleNamespace(step=step, x=x, y=y, sample_weight=sample_weight, seeds=seeds)

    def run_with_kept_values(self, fn):
        """``fn()`` with the kept values in the variables; the variables'
        own values are put back afterwards (also when ``fn`` raises)."""
        own = [tf.identity(tf.convert_to_tensor(v.value)) for v in self.variables]
        try:
            for v, kept in zip(self.variables, self.values):
                v.assign(tf.identity(kept))
            return fn()
        finally:
            for v, value in zip(self.variables, own):
                v.assign(value)

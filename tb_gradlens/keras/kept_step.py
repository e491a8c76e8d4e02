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
kept: a replay that never happens costs no memory.  Under a strategy with
several replicas each replica keeps its own share of the batch (the
variables are per replica, as ``distribute.buffer``'s); the replay runs on
the global batch, the replicas' shares in order.
"""

import types

import keras
import tensorflow as tf

from tb_gradlens.writing import distribute
from tb_gradlens.writing import keras_private


def _any_shape(dtype, strategy):
    with tf.init_scope(), strategy.scope():  # (one copy per replica under a strategy with several)
        return tf.Variable(tf.zeros([0], dtype), shape=tf.TensorShape(None), trainable=False,
                           synchronization=tf.VariableSynchronization.ON_READ,
                           aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)


def _shares(variable, strategy):
    """Every replica's value of a kept variable (one value outside a strategy)."""
    return [tf.identity(t) for t in strategy.experimental_local_results(variable)]


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
        self.strategy = model.distribute_strategy
        with self.strategy.scope():
            self.step = distribute.buffer(tf.constant(-1, tf.int64))  # -1: nothing kept (per replica, as kept)
        self.values = [_any_shape(v.dtype, self.strategy) for v in self.variables]
        self._inputs = {}  # (position, dtype) -> variable, made when the step is traced
        self._structure = None  # (x, y, sample_weight, seeds): each tensor's dtype, or None

    # -- inside the step -------------------------------------------------------

    def keep(self, step, capture, values=None):
        """Keep the step's values (``values``, else the variables' own now:
        before its update), batch and seed states."""
        values = [tf.convert_to_tensor(v.value) for v in self.variables] if values is None else values
        for kept, value in zip(self.values, values):
            kept.assign(value)
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
            if isinstance(spec, tf.TypeSpec) and not isinstance(spec, tf.TensorSpec):
                # (a distributed iterator's spec per replica: its replicas' tensor specs)
                spec = (tf.nest.flatten(spec, expand_composites=True) or [None])[0]
            if isinstance(spec, tf.TensorSpec):
                self._input(position, spec.dtype)

    def _input(self, position, dtype):
        key = (position, dtype)
        if key not in self._inputs:
            self._inputs[key] = _any_shape(dtype, self.strategy)
        return self._inputs[key]

    # -- after the call ----------------------------------------------------------

    def take(self):
        """Outside the step: the kept step, or None; forgets it."""
        step = int(self.step.numpy())
        if step < 0 or self._structure is None:
            return None
        self.step.assign(-1)
        flat = tf.nest.flatten(self._structure)
        batch = len(tf.nest.flatten(self._structure[:3]))  # (x, y, sample_weight: shares; seeds: replica 0's)
        values = [None if dtype is None else (
            tf.concat(_shares(self._inputs[(i, dtype)], self.strategy), 0) if i < batch
            else _shares(self._inputs[(i, dtype)], self.strategy)[0])
            for i, dtype in enumerate(flat)]
        x, y, sample_weight, seeds = tf.nest.pack_sequence_as(self._structure, values)
        return types.SimpleNamespace(step=step, x=x, y=y, sample_weight=sample_weight, seeds=seeds)

    def run_with_kept_values(self, fn):
        """``fn()`` with the kept values in the variables; the variables'
        own values are put back afterwards (also when ``fn`` raises)."""
        own = [tf.identity(tf.convert_to_tensor(v.value)) for v in self.variables]
        try:
            for v, kept in zip(self.variables, self.values):
                v.assign(_shares(kept, self.strategy)[0])
            return fn()
        finally:
            for v, value in zip(self.variables, own):
                v.assign(value)

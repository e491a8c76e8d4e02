"""Buffers that hold a record per step of one train-function call.

With ``steps_per_execution=N`` Keras runs N optimizer steps per call of
its train function, and the lens can only write between calls (summary
writes have no XLA kernel and run outside the step).  A ``StepRing`` keeps
one slot per step of a call (slot = step mod N): every logged step of a
call is still there when the call returns, and is written in step order
(``writing.RecordSink.write_pending``).  A plain buffer: where the step
writes its records itself, ``RecordSink.put`` does not put them here.
"""

import tensorflow as tf

from tb_gradlens.writing import distribute


class StepRing:
    """Named float32 buffers with one slot per step of a train-function call.

    Args:
      steps_per_call: steps per train-function call (``steps_per_execution``):
        the ring's ``size``, its number of slots.
      shapes: ``{name: shape of one step's value}``.
    """

    def __init__(self, steps_per_call, shapes):
        self.size = max(1, int(steps_per_call))
        self.steps = distribute.buffer(tf.fill([self.size], tf.constant(-1, tf.int64)))
        self.values = {
            name: distribute.buffer(tf.zeros([self.size] + list(shape), tf.float32))
            for name, shape in shapes.items()
        }
        self.read_slot = tf.Variable(0, trainable=False, dtype=tf.int32)
        self.written = -1

    def put(self, step, values):
        """Inside the step: store ``{name: value}`` of optimizer step ``step``."""
        slot = tf.cast(tf.math.floormod(step, self.size), tf.int32)[tf.newaxis, tf.newaxis]
        for name, value in values.items():
            buffer = self.values[name]
            value = tf.cast(value, tf.float32)[tf.newaxis]
            buffer.assign(tf.tensor_scatter_nd_update(buffer.read_value(), slot, value))
        self.steps.assign(tf.tensor_scatter_nd_update(
            self.steps.read_value(), slot, tf.cast(step, tf.int64)[tf.newaxis]))

    def pending(self):
        """Outside the step: [(step, slot)] not written yet, oldest first."""
        steps = self.steps.numpy()
        return sorted((int(s), k) for k, s in enumerate(steps) if s > self.written)

    def select(self, slot):
        """Make ``read`` read ``slot``."""
        self.read_slot.assign(slot)

    def read(self, name):
        """Buffer ``name``'s float32 value at the selected slot (in the
        record writer's graph: ``record_writing.RecordWriter``)."""
        return tf.cast(tf.gather(self.values[name].read_value(), self.read_slot.read_value()), tf.float32)

    def reset(self):
        """Forget what is buffered (a new trace of the step)."""
        self.steps.assign(tf.fill([self.size], tf.constant(-1, tf.int64)))
        self.written = -1

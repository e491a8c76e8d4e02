"""Every step XLA compiles checked, around the compiled step and never in it.

Anything added to an XLA-compiled step can change how XLA fuses (and
rounds) training, so the check of a step under ``jit_compile=True`` (one
replica) reads what the compiled step leaves, in the train function that
calls it: the compiled step is Keras' ``train_step`` compiled alone, as
without the lens (``probe.ProbeStep``), so training is bit-identical by
construction.

* **Before the step** it reads the optimizer's step, the loss scale, the
  running total of Keras' loss tracker and the seed states, and, while a
  replay or a stop is armed, holds the values of the variables the replay
  (and a stop) needs: tensors that keep the buffers the step replaces alive
  for its duration (about the trainable weights' memory, no copy on this
  CPU; the compiled step may copy a held weight it would otherwise update
  in place).
* **After it**: a loss scale that fell is a skipped update; a loss tracker
  whose total became non-finite had a non-finite loss at this step; without
  loss scaling, weights that became non-finite were updated with a
  non-finite gradient (one fused reduction over the weights, its own XLA
  function).  Such a step goes through ``StepWatch.in_trouble``, as a step
  without XLA does: recorded, judged by the trouble rule, and the first in
  trouble kept, with the values held before its update, for its replay
  after the call (its passes compiled with XLA, as the step is).
* ``stop_on_nonfinite``: the update of the first step in trouble (and of
  every later one) is taken back: the held weights and optimizer variables
  are put back after the compiled step, as if it had not been applied.
"""

import keras
import tensorflow as tf

from tb_gradlens import metadata
from tb_gradlens.keras.branches import when
from tb_gradlens.writing import keras_private


def loss_tracker_total(model):
    """The running total of the loss Keras' ``train_step`` tracks (the
    ``loss`` metric of ``model.metrics``, a ``Mean``), or None."""
    for metric in getattr(model, "metrics", None) or []:
        if metric.name == "loss" and isinstance(getattr(metric, "total", None), keras.Variable):
            return metric.total
    return None


def _all_finite(tensors):
    return tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(t)) for t in tensors]))


def _value(variable):
    return tf.identity(tf.convert_to_tensor(variable.value))


class CompiledStepCheck:
    """The per-step check of one model's XLA-compiled step (see the module).

    Args:
      watch: the model's ``forensics.StepWatch`` (its trouble rule,
        records, replay and stop).
    """

    def __init__(self, watch):
        self.watch = watch
        model = watch.tap.model
        self.weights = list(model.trainable_variables)
        kept = watch.replay.kept.variables if watch.replay is not None else []
        restored = self.weights + (list(model.optimizer.variables) if watch.stops else [])
        self.held = list({id(v): v for v in kept + restored}.values())  # (each once, in order)
        position = {id(v): i for i, v in enumerate(self.held)}
        self.kept_index = [position[id(v)] for v in kept]
        self.restored_index = [position[id(v)] for v in restored] if watch.stops else []
        self._finite = keras_private.function_per_instance(_all_finite, jit_compile=True, autograph=False)

    def run(self, step, run, logs_gradients, capture):
        """``run()`` (the compiled step) checked; ``capture``: the step's
        batch and seed states (read before it)."""
        watch = self.watch
        tracker = loss_tracker_total(watch.tap.model)
        iteration, scale = watch._iteration(), watch._scale()
        total = _value(tracker) if tracker is not None else None
        held = [_value(v) for v in self.held] if (watch.replays or watch.stops) else None
        if held is not None:  # (the step runs after its inputs are held)
            with tf.control_dependencies(held):
                out = run()
        else:
            out = run()
        with tf.control_dependencies(tf.nest.flatten(out)):
            after = watch._scale()
            skipped = after < scale if watch.loss_scaling else tf.constant(False)
            loss_seen = tf.math.is_finite(total) if total is not None else tf.constant(False)
            loss_bad = tf.logical_and(loss_seen, tf.logical_not(tf.math.is_finite(_value(tracker)))) \
                if total is not None else tf.constant(False)
            weights_bad = (tf.logical_not(self._finite([_value(v) for v in self.weights]))
                           if held is not None and not watch.loss_scaling and self.weights else tf.constant(False))
        loss_flag = tf.where(loss_seen, tf.cast(loss_bad, tf.float32), float("nan"))
        bad = tf.logical_or(skipped, tf.logical_or(loss_bad, weights_bad))
        kept = None if held is None else [held[i] for i in self.kept_index]

        def nonfinite():
            watch.in_trouble(step, iteration, scale, after, skipped, tf.logical_not(loss_bad), loss_flag, capture,
                             kept)
            return tf.constant(True)

        when(watch.tap.status, "the check of a non-finite step", (metadata.OPTIMIZER_STEP,), bad, nonfinite,
             name=watch.tap.status.name)
        if logs_gradients:
            def record():
                watch._record(step, iteration, scale, after, skipped, loss_flag)
                return tf.constant(True)

            when(watch.tap.status, "optimizer step record", (metadata.OPTIMIZER_STEP,),
                 tf.logical_and(watch.tap.gradient_due(step), tf.logical_not(bad)), record, name=watch.tap.status.name)
        if watch.stops:
            when(watch.tap.status, "stop_on_nonfinite", (), watch.stopped.read_value(),
                 lambda: self._restore([held[i] for i in self.restored_index]), name=watch.tap.status.name)
        return out

    def _restore(self, values):
        """Take back the update of a step in trouble: the held values of the
        weights and the optimizer's variables put back."""
        for i, value in zip(self.restored_index, values):
            self.held[i].assign(value)
        return tf.constant(True)

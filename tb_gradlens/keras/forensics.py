"""Every train step checked: loss-scale skips recorded, the first real NaN replayed.

``StepWatch`` runs on every step while it is armed (a ``LossScaleOptimizer``,
or the replay of a non-finite step, on by default): one reduction over the
gradients the optimizer is given (as ``LossScaleOptimizer`` checks them)
and a look at the loss, no host synchronization; what it finds is written
inside the step, in conditionals a healthy step does not take.

* **What the optimizer did** (``optimizer_step`` records): its own step
  (``optimizer.iterations``), the loss scale before and after, whether it
  skipped the update, whether the loss was non-finite.  Written at every
  logged gradient step and at every step with a non-finite gradient or
  loss, so every loss-scale skip is recorded.  Record steps count train
  steps (batches): a skipped update does not advance
  ``optimizer.iterations``, so the two differ after a skip.
* **Real trouble** (``TROUBLE``): a non-finite loss; a non-finite gradient
  without loss scaling (it is applied); under loss scaling, a skip that
  takes the scale below ``LOSS_SCALE_FLOOR`` or, once an update was
  applied, more than ``SKIPS_IN_ROW`` skips in a row (the analysis states
  the same rule: ``analysis.loss_scale``).  On the first such step, before
  its update, the step is replayed as configured and in float32 (float64
  on request) from the same weights, batch and random draws
  (``compare.replay_step``), written as a ``nonfinite_replay`` record.
  With ``stop_on_nonfinite`` that update is not applied (nor any later
  one) and ``fit`` stops after the call.

Under ``jit_compile=True`` the lens stays out of the compiled step: the loss
scale is read around it (skips are recorded), but nothing can be checked
or replayed before its update; with several replicas neither is done.  The
lens status says so.
"""

import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import distribute
from tb_gradlens import keras_private
from tb_gradlens import metadata
from tb_gradlens.keras.rings import StepRing

# The analysis' rule (analysis.loss_scale): Keras 3 halves the scale without
# end; below 1 it shrinks the gradients it should protect (TensorFlow's own
# LossScaleOptimizer never went below 1).  After an update was applied the
# scale only grows one binade at a time, so a healthy overflow costs one
# skip: more than 3 in a row (the scale 16x below a level that worked) is a
# gradient loss scaling cannot bring into range.
LOSS_SCALE_FLOOR = 1.0
SKIPS_IN_ROW = 3
XLA_REASON = ("under jit_compile=True the lens stays out of the XLA-compiled step, so nothing can be checked or "
              "replayed before its update (train with jit_compile=False to replay a non-finite step)")
REPLICAS_REASON = "a replay of a non-finite step runs with one replica only"
REPLAY_WHAT = "the replay of the first non-finite step"


def all_finite(tensors):
    """Boolean scalar: every element of ``tensors`` (None skipped) is finite."""
    checks = [tf.reduce_all(tf.math.is_finite(t.values if isinstance(t, tf.IndexedSlices) else t))
              for t in tensors if t is not None]
    return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


class Check:
    """What ``StepWatch.check`` found before the update."""

    def __init__(self, iteration, scale, grads_ok, loss_ok, skipped, trouble):
        self.iteration, self.scale = iteration, scale
        self.grads_ok, self.loss_ok, self.skipped, self.trouble = grads_ok, loss_ok, skipped, trouble


class ReplaySlot:
    """The replay's passes, its buffer and its record (one per model)."""

    def __init__(self, model, reference, optimizer, slots):
        self.passes = compare.ReplayPasses(model, reference, optimizer)
        self.max_rows = 4 * max(1, len(compare.model_layers(model))) + 1 + len(model.trainable_variables)
        self.ring = StepRing(slots, {"replay": [self.max_rows, len(metadata.NONFINITE_REPLAY_COLUMNS)]})
        self.rows, self.extras = [], None

    def run(self, model, capture, step):
        replay = compare.replay_step(model, capture.x, capture.y, capture.sample_weight, capture.seeds,
                                     passes=self.passes, eager=tf.executing_eagerly())
        keep = min(len(replay.rows), self.max_rows)
        self.rows = replay.rows[:keep]
        self.extras = dict(replay.extras, row_kinds=replay.extras["row_kinds"][:keep])
        values = replay.values[:keep]
        pad = tf.fill([self.max_rows - keep, values.shape[1]], float("nan"))
        self.ring.put(step, {"replay": tf.concat([values, pad], 0)})
        return tf.constant(True)

    def records(self, name):
        return [(name, metadata.RecordMetadata(metadata.NONFINITE_REPLAY, list(self.rows),
                                               metadata.NONFINITE_REPLAY_COLUMNS, self.extras),
                 self.ring.reader("replay", rows=len(self.rows)))]


class StepWatch:
    """The per-step check of one model's train function (see the module).

    Args:
      tap: the ``Tap`` (its status, schedules, counter).
      options: the callback (``nonfinite_replay``, ``stop_on_nonfinite``).
      xla: the step is XLA-compiled; ``replicas``: replicas in sync.
    """

    def __init__(self, tap, options, xla, replicas):
        self.tap = tap
        model = tap.model
        self.optimizer = model.optimizer
        self.loss_scaling = keras_private.is_loss_scaling(self.optimizer)
        asked = options.nonfinite_replay
        self.reference = "float64" if asked == "float64" else "float32"
        reason = XLA_REASON if xla else (REPLICAS_REASON if replicas > 1 else None)
        wanted = bool(asked) or bool(options.stop_on_nonfinite)
        self.replays = bool(asked) and reason is None
        self.stops = bool(options.stop_on_nonfinite) and reason is None
        if wanted and reason is not None:
            tap.status.cannot(REPLAY_WHAT, (metadata.NONFINITE_REPLAY,), reason,
                              warn=asked is True or asked == "float64" or bool(options.stop_on_nonfinite))
        self.armed = self.loss_scaling or self.replays or self.stops
        spe = int(getattr(model, "steps_per_execution", 1) or 1)
        self.ring = StepRing(spe, {"optimizer": [1, len(metadata.OPTIMIZER_STEP_COLUMNS)]})
        self.replay = ReplaySlot(model, self.reference, self.optimizer, spe) if self.replays else None
        self.skips_in_row = distribute.buffer(tf.constant(0, tf.int64))
        self.updated = distribute.buffer(tf.constant(False))  # an update was applied (the scale found its level)
        self.replayed = distribute.buffer(tf.constant(False))
        self.stopped = distribute.buffer(tf.constant(False))

    # -- without XLA: around the optimizer's update --------------------------------

    def check(self, step, grads, loss, capture):
        """Before the update: what the gradients and loss are, and the
        replay of the first step in trouble.  None when not armed."""
        if not self.armed:
            return None
        iteration = tf.identity(tf.convert_to_tensor(self.optimizer.iterations.value))
        scale = self._scale()
        grads_ok = all_finite(grads)
        loss_ok = tf.constant(True) if loss is None else tf.reduce_all(tf.math.is_finite(loss))
        if self.loss_scaling:
            skipped = tf.logical_not(grads_ok)
            collapse = tf.logical_or(scale * 0.5 < LOSS_SCALE_FLOOR,
                                     tf.logical_and(self.updated.read_value(),
                                                    self.skips_in_row.read_value() + 1 > SKIPS_IN_ROW))
            trouble = tf.logical_or(tf.logical_not(loss_ok), tf.logical_and(skipped, collapse))
        else:
            skipped = tf.constant(False)
            trouble = tf.logical_not(tf.logical_and(grads_ok, loss_ok))
        if self.replays and capture is not None:
            from tb_gradlens.keras.tap import when

            when(self.tap.status, REPLAY_WHAT, (metadata.NONFINITE_REPLAY,),
                 tf.logical_and(trouble, tf.logical_not(self.replayed.read_value())),
                 lambda: self._replay(step, capture), name=self.tap.status.name)
        return Check(iteration, scale, grads_ok, loss_ok, skipped, trouble)

    def _replay(self, step, capture):
        self.replay.run(self.tap.model, capture, step)
        self.replayed.assign(True)
        return tf.constant(True)

    def applying(self, check, apply):
        """Run ``apply`` (the optimizer's update), unless stopping: with
        ``stop_on_nonfinite`` no update from the first step in trouble on."""
        if check is None or not self.stops:
            return apply()

        def stop():
            self.stopped.assign(True)
            return tf.constant(True)

        def go():
            apply()
            return tf.constant(True)

        tf.cond(tf.logical_or(self.stopped.read_value(), check.trouble), stop, go)
        return None

    def after(self, step, check, logs_gradients):
        """After the update: the loss scale it left, the skip count, and the
        ``optimizer_step`` record when the step logs gradients or was not
        finite."""
        if check is None:
            return
        self.skips_in_row.assign(tf.where(check.skipped, self.skips_in_row.read_value() + 1, 0))
        self.updated.assign(tf.logical_or(self.updated.read_value(), tf.logical_not(check.skipped)))
        notable = tf.logical_not(tf.logical_and(check.grads_ok, check.loss_ok))
        if logs_gradients:
            notable = tf.logical_or(notable, self.tap.gradient_due(step))
        self._record_when(notable, step, check.iteration, check.scale, check.skipped,
                          tf.logical_not(check.loss_ok))

    # -- under XLA: around the compiled step ----------------------------------------

    def around_compiled(self, step, run, logs_gradients):
        """``run()`` (the XLA-compiled step) with the loss scale read before
        and after it: a scale that fell is a skip.  The loss is not seen
        (NaN in the record)."""
        if not self.loss_scaling:
            return run()
        iteration = tf.identity(tf.convert_to_tensor(self.optimizer.iterations.value))
        scale = self._scale()
        out = run()
        skipped = self._scale() < scale
        notable = tf.logical_or(skipped, self.tap.gradient_due(step)) if logs_gradients else skipped
        self._record_when(notable, step, iteration, scale, skipped, tf.constant(float("nan")))
        return out

    # -- both ------------------------------------------------------------------------

    def _scale(self):
        variable = keras_private.loss_scale(self.optimizer)
        if variable is None:
            return tf.constant(float("nan"))
        return tf.identity(tf.cast(tf.convert_to_tensor(variable.value), tf.float32))

    def _record_when(self, notable, step, iteration, scale, skipped, loss_nonfinite):
        from tb_gradlens.keras.tap import when

        def record():
            row = tf.stack([tf.cast(iteration, tf.float32), scale, self._scale(), tf.cast(skipped, tf.float32),
                            tf.cast(loss_nonfinite, tf.float32)])
            self.ring.put(step, {"optimizer": row[tf.newaxis]})
            return tf.constant(True)

        when(self.tap.status, "optimizer step record", (metadata.OPTIMIZER_STEP,), notable, record,
             name=self.tap.status.name)

    def stop_requested(self):
        """Outside the step: whether an update was held back (host read)."""
        return self.stops and bool(self.stopped.numpy())

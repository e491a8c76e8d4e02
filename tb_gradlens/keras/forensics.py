"""Every train step checked: loss-scale skips recorded, the first real NaN replayed.

``StepWatch`` runs on every step while it is armed (a ``LossScaleOptimizer``,
or the replay of a non-finite step, on by default): one reduction over the
gradients the optimizer is given (as ``LossScaleOptimizer`` checks them)
and a look at the loss, no host synchronization inside the step; what it
finds is written inside the step, in conditionals a healthy step does not
take.

* **What the optimizer did** (``optimizer_step`` records): its own step
  (``optimizer.iterations``), the loss scale before and after, whether it
  skipped the update, whether the loss was non-finite.  Written at every
  logged gradient step and at every step with a non-finite gradient or
  loss, so every loss-scale skip is recorded.  Record steps count train
  steps (batches): a skipped update does not advance
  ``optimizer.iterations``, so the two differ after a skip.
* **Real trouble**: a non-finite loss; a non-finite gradient
  without loss scaling (it is applied); under loss scaling, a skip that
  takes the scale below ``LOSS_SCALE_FLOOR`` or, once an update was
  applied, more than ``SKIPS_IN_ROW`` skips in a row (the analysis states
  the same rule: ``analysis.loss_scale``).  The first such step keeps its
  weights (before its update), batch and random draws (``kept_step``);
  right after the call it is replayed from them as configured and in
  float32 (float64 on request) (``compare.replay_step``), written as a
  ``nonfinite_replay`` record, and the event file is flushed: a call with
  a non-finite step returns with its records on disk (the step tells the
  host from the branch a healthy step does not take: no read per call).
  With ``stop_on_nonfinite`` that update is not applied (nor any later
  one) and ``fit`` stops after the call.

Under ``jit_compile=True`` (one replica) the lens stays out of the compiled
step and checks every step around it (``compiled_check``: the loss scale,
Keras' loss tracker and the weights after it, the values its replay needs
held from before it); the replay's passes are compiled by XLA, as the step
is.  With several replicas (MirroredStrategy, without XLA) the replicas
agree on every step (the check's sums are all-reduced, one small
collective per step) and each keeps its share of the batch: the replay
runs on the global batch.  jit_compile=True with several replicas is not
supported (the lens status says so, with a warning when asked for).
"""

import types

import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import metadata
from tb_gradlens.analysis.codes import DEFAULT_THRESHOLDS
from tb_gradlens.keras.compiled_check import CompiledStepCheck
from tb_gradlens.keras.kept_step import KeptStep
from tb_gradlens.keras.rings import StepRing
from tb_gradlens.writing import distribute
from tb_gradlens.writing import keras_private
from tb_gradlens.writing import step_records

# The analysis' rule (analysis.loss_scale): Keras 3 halves the scale without
# end; below 1 it shrinks the gradients it should protect (TensorFlow's own
# LossScaleOptimizer never went below 1).  After an update was applied the
# scale only grows one binade at a time, so a healthy overflow costs one
# skip: more than 3 in a row (the scale 16x below a level that worked) is a
# gradient loss scaling cannot bring into range.
LOSS_SCALE_FLOOR = DEFAULT_THRESHOLDS.loss_scale_floor  # 1
SKIPS_IN_ROW = DEFAULT_THRESHOLDS.loss_scale_skips_in_row  # 3
XLA_REPLICAS_REASON = ("jit_compile=True under a strategy with several replicas: the lens cannot stay out of the "
                       "XLA-compiled step there (train with jit_compile=False to replay a non-finite step)")
REPLAY_WHAT = "the replay of the first non-finite step"


def all_finite(tensors):
    """Boolean scalar: every element of ``tensors`` (None skipped) is finite."""
    checks = [tf.reduce_all(tf.math.is_finite(t.values if isinstance(t, tf.IndexedSlices) else t))
              for t in tensors if t is not None]
    return tf.reduce_all(tf.stack(checks)) if checks else tf.constant(True)


def sums(tensors):
    """float32 ``[n]``, one per tensor that is not None (an IndexedSlices:
    its values): not finite exactly when an element of the tensor is not.
    The sum of each tensor in float32 (a finite sum past 3.4e38 would need
    elements near float32's largest); a float64 tensor's sum is taken in
    float64 and given as 0 or NaN (its finite values past 3.4e38 would
    overflow float32).  One reduction per gradient, each as soon as its
    gradient is computed (one op over every gradient would wait for the
    last and read them all again from memory: docs/benchmarks-history.md
    §13), the per-step check."""
    out = []
    for t in tensors:
        if t is None:
            continue
        t = t.values if isinstance(t, tf.IndexedSlices) else t
        if t.dtype == tf.float64:
            out.append(tf.where(tf.math.is_finite(tf.reduce_sum(t)), 0.0, float("nan")))
        else:
            out.append(tf.reduce_sum(tf.cast(t, tf.float32)))
    return tf.stack(out) if out else tf.zeros([0], tf.float32)


class Check:
    """What ``StepWatch.check`` found before the update: ``bad`` (a
    gradient or the loss not finite: the rare branch ran) and the
    optimizer's step and loss scale then."""

    def __init__(self, bad, iteration, scale):
        self.bad, self.iteration, self.scale = bad, iteration, scale


class ReplaySlot:
    """The replay's passes, its buffer and its record (one per model).
    ``reference_pass``: a comparison's float32 pass to share.  The passes
    are traced when a kept step is first replayed (``run_kept``), not into
    the step."""

    def __init__(self, model, reference, optimizer, steps_per_call, sink, name, reference_pass=None,
                 ieee_reference=True, xla=False):
        self.model = model
        self.sink, self.name = sink, name  # the ``writing.RecordSink`` its record goes to, and the record's name
        self.passes = compare.ReplayPasses(model, reference, optimizer, reference_pass, ieee_reference,
                                           jit_compile=True if xla else None)
        self.max_rows = 4 * max(1, len(compare.model_layers(model))) + 1 + len(model.trainable_variables)
        self.ring = StepRing(steps_per_call, {"replay": [self.max_rows, len(metadata.NONFINITE_REPLAY_COLUMNS)]})
        self.rows, self.extras = [], None
        self.kept = KeptStep(model, optimizer)
        self._run_kept = None  # the replay of a kept step, traced when first run

    def run_kept(self):
        """After the call: replay the step kept in it, if one was (as the
        step ran: traced, or eagerly); its record goes to ``ring``."""
        kept = self.kept.take()
        if kept is None:
            return False
        if self._run_kept is None:
            run = lambda x, y, sample_weight, seeds, step: self.run(  # noqa: E731
                self.model, types.SimpleNamespace(x=x, y=y, sample_weight=sample_weight, seeds=seeds), step)
            self._run_kept = run if self.model.run_eagerly else keras_private.without_retracing_warning(
                tf.function(run, autograph=False))
        step = tf.constant(kept.step, tf.int64)
        self.kept.run_with_kept_values(lambda: self._run_kept(kept.x, kept.y, kept.sample_weight, kept.seeds, step))
        return True

    def run(self, model, capture, step):
        replay = compare.replay_step(model, capture.x, capture.y, capture.sample_weight, capture.seeds,
                                     passes=self.passes, eager=tf.executing_eagerly())
        keep = min(len(replay.rows), self.max_rows)
        self.rows = replay.rows[:keep]
        self.extras = dict(replay.extras, row_kinds=replay.extras["row_kinds"][:keep])
        values = replay.values[:keep]
        pad = tf.fill([self.max_rows - keep, values.shape[1]], float("nan"))
        self.sink.put(self.ring, step, {"replay": tf.concat([values, pad], 0)},
                      step_records.replay_records(self.name, self.rows, self.extras))
        return tf.constant(True)


class StepWatch:
    """The per-step check of one model's train function (see the module).

    Args:
      tap: the ``Tap`` (its status, schedules, counter).
      options: the callback's ``LensOptions`` (``nonfinite_replay``,
        ``stop_on_nonfinite``).
      xla: the step is XLA-compiled; ``replicas``: replicas in sync.
    """

    def __init__(self, tap, options, xla, replicas):
        self.tap = tap
        model = tap.model
        self.optimizer = model.optimizer
        self.loss_scaling = keras_private.is_loss_scaling(self.optimizer)
        asked = options.nonfinite_replay
        self.reference = "float64" if asked == "float64" else "float32"
        reason = XLA_REPLICAS_REASON if xla and replicas > 1 else None
        self.replays = bool(asked) and reason is None
        self.stops = bool(options.stop_on_nonfinite) and reason is None
        if reason is not None and (asked is True or asked == "float64" or options.stop_on_nonfinite):
            # Asked for where it cannot run: said (lens status, a warning).  "auto" means
            # where it can: under XLA or several replicas it is off, as documented.
            tap.status.cannot(REPLAY_WHAT, (metadata.NONFINITE_REPLAY,), reason)
        self.armed = self.loss_scaling or self.replays or self.stops
        spe = int(getattr(model, "steps_per_execution", 1) or 1)
        with model.distribute_strategy.scope():  # (every replica records the steps they agree on: each its own)
            self.ring = StepRing(spe, {"optimizer": [1, len(metadata.OPTIMIZER_STEP_COLUMNS)]})
        shared = [slot.passes[0] for slot in tap.slots if slot.activations
                  and slot.passes[0].variant == compare.Variant(self.reference)]
        self.replay = (ReplaySlot(model, self.reference, self.optimizer, spe, tap.sink, tap.status.name,
                                  shared[0] if shared else None, options.ieee_reference, xla)
                       if self.replays else None)
        # Skips in a row, counted on the steps that are not finite only: the
        # last skipped step and the length of its run; the first step of the
        # session (an update before a run of skips: the scale found its level).
        # (Under a strategy with several replicas each replica keeps its own: they agree, and none races another.)
        with model.distribute_strategy.scope():
            self.last_skip = distribute.buffer(tf.constant(-2, tf.int64))
            self.in_row = distribute.buffer(tf.constant(0, tf.int64))
            self.session_start = distribute.buffer(tf.constant(0, tf.int64))
            self.replayed = distribute.buffer(tf.constant(False))
            self.stopped = distribute.buffer(tf.constant(False))
        self._alarmed = False  # a step since the last call was not finite (set from inside the step)
        self.compiled = CompiledStepCheck(self) if xla and self.armed else None  # (around the XLA-compiled step)

    # -- without XLA: around the optimizer's update --------------------------------

    def check(self, step, grads, loss, capture):
        """Before the update: one reduction over the gradients and the loss;
        only when one is not finite, one conditional records the step,
        counts the skip and replays the first step in trouble (see the
        module).  None when not armed."""
        if not self.armed:
            return None
        totals = sums(list(grads) + ([] if loss is None else [loss]))
        context = distribute.replica_context()
        if context is not None and context.num_replicas_in_sync > 1:
            # Every replica's share, summed (a NaN anywhere is a NaN everywhere): the replicas
            # agree on the step, as the optimizer applies their sum (a collective: every step).
            totals = context.all_reduce(tf.distribute.ReduceOp.SUM, totals)
        bad = tf.logical_not(tf.reduce_all(tf.math.is_finite(totals)))
        n_grads = len([g for g in grads if g is not None])
        from tb_gradlens.keras.branches import GRADIENTS
        from tb_gradlens.keras.branches import when

        when(self.tap.status, "the check of a non-finite step", (metadata.OPTIMIZER_STEP,), bad,
             lambda: self._nonfinite(step, totals, n_grads, loss is not None, capture), name=self.tap.status.name)
        if not (self.tap.logs_gradients and self.tap.includes(GRADIENTS)):
            return Check(bad, None, None)  # (nothing read on a step that logs nothing)
        return Check(bad, self._iteration(), self._scale())

    def _iteration(self):
        return tf.identity(tf.convert_to_tensor(self.optimizer.iterations.value))

    def _nonfinite(self, step, totals, n_grads, has_loss, capture):
        """A step whose gradients or loss are not finite (before its update:
        the optimizer's variables it reads are read before the update
        writes them)."""
        iteration, scale = self._iteration(), self._scale()
        grads_ok = tf.reduce_all(tf.math.is_finite(totals[:n_grads]))
        loss_ok = tf.reduce_all(tf.math.is_finite(totals[n_grads:])) if has_loss else tf.constant(True)
        skipped = tf.logical_not(grads_ok) if self.loss_scaling else tf.constant(False)
        next_scale = tf.where(skipped, scale * 0.5, scale)  # (what LossScaleOptimizer does)
        self.in_trouble(step, iteration, scale, next_scale, skipped, loss_ok, tf.logical_not(loss_ok), capture)
        return tf.constant(True)

    def in_trouble(self, step, iteration, scale, next_scale, skipped, loss_ok, loss_nonfinite, capture,
                   kept_values=None):
        """Inside the rare branch of a step not finite: the trouble rule (a
        non-finite loss, a non-finite gradient without loss scaling, a skip
        the scale cannot explain), the replay of the first step in trouble
        (its ``capture``: batch and seed states; ``kept_values``: the
        values ``KeptStep`` keeps, when not the variables' own now), the
        stop, the ``optimizer_step`` record and the host's alarm."""
        if self.loss_scaling:
            step = tf.cast(step, tf.int64)
            in_row = tf.where(tf.equal(self.last_skip.read_value(), step - 1), self.in_row.read_value() + 1,
                              tf.constant(1, tf.int64))
            # An update was applied before this run of skips: every skip comes through here.
            updated = step - in_row + 1 > self.session_start.read_value()
            collapse = tf.logical_or(scale * 0.5 < LOSS_SCALE_FLOOR,
                                     tf.logical_and(updated, in_row > SKIPS_IN_ROW))
            trouble = tf.logical_or(tf.logical_not(loss_ok), tf.logical_and(skipped, collapse))
            self.in_row.assign(tf.where(skipped, in_row, self.in_row.read_value()))
            self.last_skip.assign(tf.where(skipped, step, self.last_skip.read_value()))
        else:
            trouble = tf.constant(True)
        if self.replays and capture is not None:
            from tb_gradlens.keras.branches import when

            when(self.tap.status, REPLAY_WHAT, (metadata.NONFINITE_REPLAY,),
                 tf.logical_and(trouble, tf.logical_not(self.replayed.read_value())),
                 lambda: self._replay(step, capture, kept_values), name=self.tap.status.name)
        if self.stops:
            self.stopped.assign(tf.logical_or(self.stopped.read_value(), trouble))
        self._record(step, iteration, scale, next_scale, skipped, loss_nonfinite)
        self._alarm()

    def _alarm(self):
        """Inside the step, in a branch a healthy step does not take: tell
        the host (``after_call``) without a host read on every call."""
        def note():
            self._alarmed = True
            return True

        tf.py_function(note, [], tf.bool)

    def _replay(self, step, capture, kept_values=None):
        """Keep the step for its replay after the call (``kept_step``)."""
        self.replay.kept.keep(step, capture, kept_values)
        self.replayed.assign(True)
        return tf.constant(True)

    def applying(self, check, apply):
        """Run ``apply`` (the optimizer's update), unless stopping: with
        ``stop_on_nonfinite`` no update from the first step in trouble on."""
        if check is None or not self.stops:
            return apply()

        def go():
            apply()
            return tf.constant(True)

        tf.cond(self.stopped.read_value(), lambda: tf.constant(False), go)
        return None

    def after(self, step, check, logs_gradients):
        """After the update of a logged gradient step that was finite: its
        ``optimizer_step`` record (the scale the update left)."""
        if check is None or not logs_gradients:
            return
        from tb_gradlens.keras.branches import when

        def record():
            self._record(step, check.iteration, check.scale, self._scale(), tf.constant(False), tf.constant(False))
            return tf.constant(True)

        when(self.tap.status, "optimizer step record", (metadata.OPTIMIZER_STEP,),
             tf.logical_and(self.tap.gradient_due(step), tf.logical_not(check.bad)), record,
             name=self.tap.status.name)

    # -- under XLA: around the compiled step ----------------------------------------

    def around_compiled(self, step, run, logs_gradients, capture=None):
        """``run()`` (the XLA-compiled step) checked around it
        (``compiled_check``); ``capture``: its batch and seed states."""
        if self.compiled is None:
            return run()
        return self.compiled.run(step, run, logs_gradients, capture)

    # -- both ------------------------------------------------------------------------

    def _scale(self):
        variable = keras_private.loss_scale(self.optimizer)
        if variable is None:
            return tf.constant(float("nan"))
        return tf.identity(tf.cast(tf.convert_to_tensor(variable.value), tf.float32))

    def _record(self, step, iteration, scale, next_scale, skipped, loss_nonfinite):
        """Put the ``optimizer_step`` record of ``step`` (inside a conditional)."""
        row = tf.stack([tf.cast(iteration, tf.float32), scale, tf.cast(next_scale, tf.float32),
                        tf.cast(skipped, tf.float32), tf.cast(loss_nonfinite, tf.float32)])
        self.tap.sink.put(self.ring, step, {"optimizer": row[tf.newaxis]},
                          step_records.optimizer_records(self.tap.status.name, self.loss_scaling))

    def begin(self, first_step):
        """Outside the step, when training starts at train step ``first_step``."""
        self.session_start.assign(first_step)

    def after_call(self):
        """Outside the step, after each call: whether a step of the call
        was not finite (``_alarm``); if so, the replay of a step it kept
        runs now (``ReplaySlot.run_kept``)."""
        if not self._alarmed:
            return False
        self._alarmed = False
        if self.replay is not None:
            try:
                self.replay.run_kept()
            except Exception as error:  # noqa: BLE001 - the lens never stops training
                self.tap.status.failed(REPLAY_WHAT, (metadata.NONFINITE_REPLAY,), error, name=self.tap.status.name)
        return True

    def stop_requested(self):
        """Outside the step: whether an update was held back (host read)."""
        return self.stops and bool(self.stopped.numpy())

"""The lens inside the train function: gradient and update statistics and the
step's loss, buffered per step, and the comparisons' slots.

``Tap`` declares every piece of state the train function writes (one
place): the selected variables, the ``StepRing`` buffers, the copy of the
weights before an update, and the comparison slots.  ``live.LiveStep``
(steps without XLA) and ``probe.ProbeStep`` (``jit_compile=True``) fill
them and put each logged step's values into ``writing.RecordSink`` (``sink``).
"""

import sys
import threading

import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import records
from tb_gradlens.keras import schedule as schedules
from tb_gradlens.keras.branches import COMPARISON_KINDS, COMPARISONS, GRADIENT_KINDS, GRADIENTS, UPDATES
from tb_gradlens.keras.branches import built, when
from tb_gradlens.keras.forensics import StepWatch
from tb_gradlens.keras.rings import StepRing
from tb_gradlens.keras.slots import ComparisonSlot
from tb_gradlens.keras.update_watch import UpdateWatch
from tb_gradlens.writing import distribute
from tb_gradlens.writing import step_records
from tb_gradlens.writing import summary_ops


def _size(variable):
    n = 1
    for d in variable.shape:
        n *= int(d)
    return n


class Tap:
    """Everything the lens computes inside one model's train function.

    Args:
      model: the (built) model.
      options: the callback's ``LensOptions`` (schedules, variables,
        histogram, activations, comparisons, ...; read, never changed).
      status: the ``LensStatus`` failures and unsupported features go to.
      xla: the step is compiled by XLA (comparisons then run as XLA passes).
      live_possible: the step's own loss, gradients and layer outputs can be
        a comparison's candidate.
      sink: the ``writing.RecordSink`` every logged step's values go to.
    """

    def __init__(self, model, options, status, xla, live_possible, sink):
        self.model = model
        self.sink = sink
        self.options = options
        self.status = status
        self.xla = xla
        self.model_policy = compare.dominant_policy(model)
        self.gradient_schedule = options.gradient_schedule
        self.compare_schedule = options.compare_schedule
        self.histogram = options.histogram
        self.update_schedule = options.update_schedule  # steps of the gradient schedule
        self.log_updates = self.update_schedule.every > 0
        variables = model.trainable_variables
        self.selected = schedules.select(variables, options.variables)
        self.selected_vars = [variables[i] for i in self.selected]
        self.rows = summary_ops.variable_paths(self.selected_vars)
        self.sizes = [_size(v) for v in self.selected_vars]
        self.index = {id(v): k for k, v in enumerate(self.selected_vars)}
        n = len(self.selected_vars)
        spe = int(getattr(model, "steps_per_execution", 1) or 1)
        self.steps_per_call = max(1, spe)  # train steps per train-function call (the rings' size)
        self.logs_gradients = bool(n) and self.gradient_schedule.every > 0
        shapes = {"stats": [n, len(metadata.GRAD_STATS_COLUMNS)], "histogram": [n, len(metadata.HISTOGRAM_COLUMNS)],
                  "indices": [n, len(metadata.GRADIENT_INDICES_COLUMNS)]}
        self.replicas = model.distribute_strategy.num_replicas_in_sync
        self.replica_divergence = bool(options.replica_divergence) and self.replicas > 1 and self.logs_gradients
        if self.replica_divergence:
            shapes["replicas"] = [self.replicas, n, len(metadata.DIVERGENCE_COLUMNS)]
        self.gradients = StepRing(spe, shapes)
        self.updates = StepRing(spe, {"update": [n, len(metadata.UPDATE_STATS_COLUMNS)]})
        self.losses = StepRing(spe, {"loss": []})
        self.update_watch = UpdateWatch(self.status, self.selected_vars, self.rows, self.updates, sink,
                                        self.log_updates, by_op=self.replicas == 1 and not xla and not model.run_eagerly)
        self.gradient_extras = None  # set when the step is traced
        self.sparse_rows = []  # the selected variables whose gradient is an IndexedSlices (when traced)
        self.observed_dtypes = None  # layer id -> output dtype, when traced
        self.observed_output_layer = None  # the layer the traced forward pass ended with
        self.traces = 0  # times the step was traced (the status and dtype map can change then)
        self.parts = None  # the optional parts the step traced now includes (None: all)
        max_rows = 4 * max(1, len(compare.model_layers(model)))
        self.slots = [
            ComparisonSlot(model, reference, candidate, options.activations, max_rows, xla, spe, sink,
                           live=live_possible and candidate.is_model_as_configured(xla)
                           and reference.runs_as_surrounding(xla), ieee_reference=options.ieee_reference)
            for reference, candidate in (schedules.comparison_pairs(model, options.comparisons)
                                         if self.compare_schedule.every > 0 else [])
        ]  # (compare_every=0: no slot, so no reference pass is traced into the step)
        if not self.slots and options.comparisons == "auto" and self.compare_schedule.every > 0:
            status.cannot("comparisons", COMPARISON_KINDS, schedules.NO_16_BIT_LAYER, warn=False)
        self.local = threading.local()  # per replica thread: the step being observed
        # The lens's train-step counter: the step records are written at (plus
        # the sink's offset), one per batch whether or not the optimizer
        # advances; it starts at the optimizer's step (``Session``).
        with model.distribute_strategy.scope():  # (one per replica under several: each counts its own steps)
            self.counter = distribute.buffer(tf.constant(int(model.optimizer.iterations.numpy()), tf.int64))
        self.watch = StepWatch(self, options, xla, self.replicas)

    def step_now(self):
        """Inside the step: the train step it is (``counter``)."""
        return tf.identity(self.counter.read_value())

    def next_step(self):
        """Inside the step, at its end: count it."""
        self.counter.assign_add(1)

    # -- schedules ------------------------------------------------------------

    def gradient_due(self, step):
        return tf.logical_and(self.gradient_schedule(step), distribute.is_first_replica())

    def update_due(self, step):
        return tf.logical_and(self.update_schedule(step), distribute.is_first_replica())

    def compare_due(self, step):
        return tf.logical_and(self.compare_schedule(step), distribute.is_first_replica())

    def any_due(self, step):
        """Whether ``step`` logs anything the trace includes (None: nothing can be)."""
        due = [self.gradient_due(step)] if self.includes(GRADIENTS) else []
        if self.includes(COMPARISONS) and self.slots:
            due.append(self.compare_due(step))
        if not due:
            return None
        return due[0] if len(due) == 1 else tf.logical_or(*due)

    def any_due_in(self, first, last):
        """Whether train steps ``[first, last)`` log anything (Python)."""
        return self.gradient_schedule.any_in(first, last) or (
            bool(self.slots) and self.compare_schedule.any_in(first, last))

    def parts_due_in(self, first, last):
        """The optional parts (``GRADIENTS``, ``UPDATES``, ``COMPARISONS``)
        the trace for train steps ``[first, last)`` includes (Python).  The
        gradient and update statistics are in every trace where they are
        logged at all, under conditionals a step not logged does not take:
        one trace of the model's step serves every call without a
        comparison (a second trace costs about what Keras' own first trace
        of the step does).  The comparisons, whose passes trace the model
        again, are in a second trace, made when a comparison is first due."""
        parts = set()
        # (a schedule that has ended leaves its part out of the traces after it)
        if self.logs_gradients and self.gradient_schedule.any_in(first, sys.maxsize):
            parts.add(GRADIENTS)
            if self.log_updates and self.update_schedule.any_in(first, sys.maxsize):
                parts.add(UPDATES)
        if self.slots and self.compare_schedule.any_in(first, last):
            parts.add(COMPARISONS)
        return frozenset(parts)

    def includes(self, part):
        """Whether the step being traced includes ``part`` (``parts``)."""
        return self.parts is None or part in self.parts

    # -- gradients --------------------------------------------------------------

    def choose(self, grads, variables):
        """The selected variables' gradients from (grads, variables), by identity."""
        chosen = [None] * len(self.selected_vars)
        for g, v in zip(grads, variables):
            k = self.index.get(id(v))
            if k is not None:
                chosen[k] = summary_ops.as_gradient(g)
        return chosen

    def note_gradient_dtypes(self, chosen):
        """The ``grad_stats`` extras of the gradients the step applies (trace time)."""
        self.gradient_extras = records.gradient_extras(
            [summary_ops.dtype_name(v) for v in self.selected_vars],
            [summary_ops.dtype_name(g) for g in chosen],
        )
        self.sparse_rows = numerics.sparse_positions(chosen)

    def describe_gradients(self, step, chosen, replicas=None, replica_extras=()):
        """Statistics and histograms of the applied gradients of ``step``
        (and ``replicas``: each replica's divergence, its ``replica_extras``)."""
        stats, hist = numerics.gradient_statistics(chosen, self.sizes)
        return self._put_gradients(step, chosen, stats, hist, replicas, replica_extras)

    def describe_gradients_when_due(self, step, chosen):
        """Statistics and histograms of the applied gradients of ``step`` if
        due: computed by one op that takes the condition as an input where
        the kernel's ops run (``gradient_statistics(when=...)``: no
        conditional capturing every gradient), put under a conditional."""
        due = self.gradient_due(step)
        computed = built(self.status, "gradient statistics", GRADIENT_KINDS,
                         lambda: numerics.gradient_statistics(chosen, self.sizes, when=due), name=self.status.name)
        if computed is None:
            return
        stats, hist = computed
        n = len(self.sizes)
        when(self.status, "gradient statistics", GRADIENT_KINDS, due,
             lambda: self._put_gradients(step, chosen, tf.reshape(stats, [n, len(metadata.GRAD_STATS_COLUMNS)]),
                                         tf.reshape(hist, [n, len(metadata.HISTOGRAM_COLUMNS)])),
             name=self.status.name)

    def _put_gradients(self, step, chosen, stats, hist, replicas=None, replica_extras=()):
        values = {"stats": stats, "histogram": hist}
        if self.sparse_rows:  # their index counts, first rows of the buffer (``gradient_indices``)
            counts = numerics.gradient_index_counts(chosen, self.sizes)
            values["indices"] = tf.pad(counts, [[0, len(self.sizes) - len(self.sparse_rows)], [0, 0]])
        if replicas is not None:
            values["replicas"] = replicas
        self.sink.put(self.gradients, step, values, step_records.gradient_records(
            self.status.name, self.rows, self.gradient_extras, self.histogram,
            [self.rows[k] for k in self.sparse_rows], [self.selected_vars[k] for k in self.sparse_rows],
            replica_extras))
        return tf.constant(True)

    def keep_weights_when_due(self, step):
        """Before the optimizer's update (``UpdateWatch.keep_when_due``)."""
        if self.logs_gradients and self.log_updates and self.includes(UPDATES):
            return self.update_watch.keep_when_due(self.update_due(step))
        return []

    def copy_weights_when_due(self, step):
        """Before the update, by copies under a conditional (``UpdateWatch.copy_when_due``)."""
        if self.logs_gradients and self.log_updates and self.includes(UPDATES):
            self.update_watch.copy_when_due(self.update_due(step))

    def describe_update_when_due(self, step, chosen):
        """After the update: the update statistics of ``step`` if due."""
        self.update_watch.describe_when_due(step, self.update_due(step), chosen)

    def describe_update(self, step, chosen):
        """Update statistics of ``step``, after the optimizer applied it (from copies)."""
        return self.update_watch.describe(step, chosen)

    def record_loss(self, step, loss):
        self.sink.put(self.losses, step, {"loss": tf.reshape(tf.cast(loss, tf.float32), [])},
                      step_records.loss_records())
        return tf.constant(True)

    def rings(self):
        replay = [self.watch.replay.ring] if self.watch.replay is not None else []
        return [self.gradients, self.updates, self.losses, self.watch.ring] + replay + [slot.ring for slot in self.slots]

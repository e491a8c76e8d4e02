"""Keras and custom-loop integration: ``GradLensCallback`` and ``GradLens``.

``GradLensCallback(log_dir)`` works with ``model.fit`` under any
``jit_compile`` (summary writes have no XLA kernel): in ``on_train_begin``
it wraps the model's ``train_step`` and the optimizer's
``apply_gradients`` and rebuilds the train function.  Inside the traced
step, under ``tf.cond`` on the true optimizer step
(``optimizer.iterations`` before the update), it computes gradient
statistics, update statistics and shadow-step comparisons into
non-trainable ``tf.Variable`` buffers; ``on_train_batch_end`` writes the
buffers eagerly, on logged steps only.  Steps that are not logged run one
predicate per schedule and nothing else.  Everything is restored in
``on_train_end``, and when the train function raises.

With the Keras TensorFlow backend, ``mixed_bfloat16`` has no loss scaling:
the gradients logged are the ones the optimizer applies.

``GradLens`` offers the same to custom GradientTape loops.

Neither stops training when logging fails (``tb_gradlens.safety``): the
failing part (setup, statistics, a comparison, a write) is skipped with one
warning per cause, and training goes on; strict mode raises.
"""

import threading

import keras
import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import distribute
from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import patterns
from tb_gradlens import records
from tb_gradlens import safety
from tb_gradlens import summary_v2

# Defaults from measurement on the 784-64-64-10 MLP (batch 64, 2 shared CPU
# cores, mixed_bfloat16, model.fit, ~1.5 ms per step; BENCHMARKS.md): a
# logged gradient step costs ~4 ms more (statistics, histogram, update
# statistics, one write call), a comparison step ~6 ms more (one float32
# reference pass and the divergence passes), an unlogged step nothing
# measurable.  Every 100 / 500 steps keeps the average overhead at a few
# percent even for this tiny model; see README "Precision lens".
GRADIENT_EVERY = 100
COMPARE_EVERY = 500


class Schedule:
    """Steps ``start <= step < stop`` with ``(step - start) % every == 0``.

    ``every`` 0 or None: never.  ``stop`` None: no end.
    """

    def __init__(self, every, start=0, stop=None):
        self.every = int(every or 0)
        self.start = int(start or 0)
        self.stop = None if stop is None else int(stop)

    def __call__(self, step):
        """bool for a Python step; a boolean tensor for a tensor step."""
        if isinstance(step, (int,)) and not isinstance(step, bool):
            return self._python(step)
        if self.every <= 0:
            return tf.constant(False)
        step = tf.cast(step, tf.int64)
        due = tf.logical_and(step >= self.start, (step - self.start) % self.every == 0)
        if self.stop is not None:
            due = tf.logical_and(due, step < self.stop)
        return due

    def _python(self, step):
        if self.every <= 0 or step < self.start:
            return False
        if self.stop is not None and step >= self.stop:
            return False
        return (step - self.start) % self.every == 0


def _select(variables, pattern):
    """Indices of the variables whose path matches ``pattern`` (``re.search``
    semantics, bounded time: ``tb_gradlens.patterns``; a refused pattern
    raises ``patterns.PatternError``, a ValueError)."""
    paths = summary_v2.variable_paths(variables)
    if pattern is None:
        return list(range(len(variables)))
    return patterns.filter_names(pattern, paths)


def _comparison_pairs(model, comparisons):
    """[(reference, candidate)] from the ``comparisons`` argument."""
    if comparisons == "auto":
        computes = {layer.compute_dtype for layer in compare.model_layers(model)}
        if computes & {"bfloat16", "float16"}:
            return [(compare.Variant("float32"), compare.Variant(None))]
        return []
    pairs = []
    for item in comparisons or []:
        if isinstance(item, (tuple, list)):
            pairs.append((compare.as_variant(item[0]), compare.as_variant(item[1])))
        else:
            pairs.append((compare.as_variant(item), compare.Variant(None)))
    return pairs


class _ComparisonSlot:
    """Buffers and passes of one (reference, candidate) comparison."""

    def __init__(self, model, reference, candidate, activations, max_rows, xla, live):
        self.reference, self.candidate = reference, candidate
        self.xla = xla
        self.name = compare.default_name(reference, candidate)
        # live: the candidate is the training step itself (its loss,
        # gradients and layer outputs), so only the reference pass runs.
        self.live = live
        self.passes = (
            compare.keras_pass(model, reference, activations),
            None if live else compare.keras_pass(model, candidate, activations),
        )
        self.activations = activations
        self.max_rows = max_rows
        n_vars = len(model.trainable_variables)
        n_cols = len(metadata.DIVERGENCE_COLUMNS)
        self.divergence = distribute.buffer(tf.zeros([n_vars, n_cols]))
        self.loss = distribute.buffer(tf.zeros([1, len(metadata.LOSS_COMPARISON_COLUMNS)]))
        self.activation = distribute.buffer(tf.zeros([max_rows, n_cols]))
        self.step = distribute.buffer(tf.constant(-1, tf.int64))
        self.activation_rows = []
        self.extras = None
        self.written = -1
        self.record_writer = None
        self.record_writer_extras = None

    def run(self, model, x, y, sample_weight, step, candidate_outcome=None, state_values=None):
        result = compare.compare_keras(
            model, x, y, sample_weight, self.reference, self.candidate,
            activations=self.activations, passes=self.passes, surrounding_jit=self.xla,
            candidate_outcome=candidate_outcome, state_values=state_values,
        )
        rows = result.activation_rows[: self.max_rows]
        result.activation_rows = rows
        result.activation_dtypes = result.activation_dtypes[: len(rows)]
        self.extras = {kind: result.extras(kind) for kind in (
            metadata.DIVERGENCE, metadata.LOSS_COMPARISON, metadata.ACTIVATION_DIVERGENCE)}
        self.variable_rows = result.variable_rows
        self.divergence.assign(result.gradient_divergence)
        self.loss.assign(result.loss)
        self.activation_rows = rows
        if rows:
            act = result.activation_divergence[: len(rows)]
            pad = tf.fill([self.max_rows - len(rows), act.shape[1]], float("nan"))
            self.activation.assign(tf.concat([act, pad], axis=0))
        self.step.assign(step)
        return tf.constant(True)

    def write(self, writer, step):
        """Write the buffered records at ``step`` (one graph call)."""
        if self.record_writer is None or self.record_writer_extras is not self.extras:
            n_act = len(self.activation_rows)
            pending = [
                (self.name, metadata.RecordMetadata(metadata.DIVERGENCE, list(self.variable_rows),
                                                    metadata.DIVERGENCE_COLUMNS,
                                                    self.extras[metadata.DIVERGENCE]),
                 self.divergence.read_value),
                (self.name, metadata.RecordMetadata(metadata.LOSS_COMPARISON, ["loss"],
                                                    metadata.LOSS_COMPARISON_COLUMNS,
                                                    self.extras[metadata.LOSS_COMPARISON]),
                 self.loss.read_value),
            ]
            if n_act:
                pending.append((
                    self.name,
                    metadata.RecordMetadata(metadata.ACTIVATION_DIVERGENCE, list(self.activation_rows),
                                            metadata.DIVERGENCE_COLUMNS,
                                            self.extras[metadata.ACTIVATION_DIVERGENCE]),
                    lambda: self.activation[:n_act],
                ))
            self.record_writer = summary_v2.RecordWriter(writer, pending)
            self.record_writer_extras = self.extras
        self.record_writer(step)


class GradLensCallback(keras.callbacks.Callback):
    """Log gradient statistics, update statistics, the dtype map and
    shadow-step comparisons of a ``model.fit`` run to ``log_dir``.

    Args:
      log_dir: the TensorBoard run directory to write to.
      gradient_every: log gradient and update statistics every N optimizer
        steps (0: never).
      compare_every: run the comparisons every M optimizer steps (0: never).
      variables: pattern (Python regex syntax, re.search on variable paths,
        matched in bounded time by tb_gradlens.patterns) selecting the
        variables whose gradient and update statistics are logged.
      start_step, stop_step: only log optimizer steps in [start, stop).
      comparisons: "auto" (float32 reference vs the model as configured,
        when any layer computes in 16 bits), or a list of reference
        Variants/policy names (candidate: the model as configured) or of
        (reference, candidate) pairs, e.g. ``[("float32", None),
        (Variant(None), Variant(None, jit_compile=True))]``.
      histogram: also log the log2-magnitude gradient histogram.
      update_stats: also log update statistics (keeps a copy of the
        selected weights to diff against).
      activations: also compare every layer's output.
      name: tag prefix of the gradient, update and dtype records.
      replica_divergence: under a strategy with several replicas, also log
        each replica's gradient vs the replica mean (``divergence``
        records named ``replicas``; one small all-gather every step).

    Under ``tf.distribute`` (MirroredStrategy, MultiWorkerMirroredStrategy)
    the statistics describe the all-reduced gradient the optimizer applies,
    computed by replica 0 and written by the chief only; comparisons run on
    replica 0's share of the batch.  See ``tb_gradlens.distribute``.
    """

    def __init__(self, log_dir, gradient_every=GRADIENT_EVERY, compare_every=COMPARE_EVERY,
                 variables=None, start_step=0, stop_step=None, comparisons="auto",
                 histogram=True, update_stats=True, activations=True, name="model",
                 replica_divergence=False):
        super().__init__()
        self.log_dir = log_dir
        self.gradient_schedule = Schedule(gradient_every, start_step, stop_step)
        self.compare_schedule = Schedule(compare_every, start_step, stop_step)
        self.variables_pattern = variables
        self.comparisons = comparisons
        self.histogram = histogram
        self.log_updates = update_stats
        self.activations = activations
        self.name = name
        self.replica_divergence = replica_divergence
        self._patched = False
        self._active = False

    # -- patching ---------------------------------------------------------

    def on_train_begin(self, logs=None):
        self._active = False
        try:
            self._setup()
            self._active = True
        except Exception as e:  # noqa: BLE001 - train without the lens
            self._restore()
            self.model.make_train_function(force=True)
            safety.report("tb_gradlens.keras.GradLensCallback (setup)", e)

    def _trace_key(self, model):
        """What the traced train function depends on, besides this callback."""
        return (
            id(model), id(model.optimizer), tuple(id(v) for v in model.trainable_variables),
            model.jit_compile, model.run_eagerly, getattr(model, "steps_per_execution", 1),
            id(model.distribute_strategy),
        )

    def _setup(self):
        model = self.model
        _restore_stale(model)
        self._plain_train_function = model.train_function
        key = self._trace_key(model)
        trace = getattr(self, "_trace", None)
        if trace is not None and trace["key"] == key:
            # fit() called again with this callback and model: keep the
            # buffers and the traced train function (no retracing, as
            # Keras keeps its own train function across fit calls).
            self._next_step = int(model.optimizer.iterations.numpy())
            self._patch(model)
            model.train_function = trace["function"]
            return
        self._trace = None
        optimizer = model.optimizer
        self._writer = distribute.chief_writer(self.log_dir, model.distribute_strategy)
        variables = model.trainable_variables
        self._selected = _select(variables, self.variables_pattern)
        self._selected_ids = {id(variables[i]): k for k, i in enumerate(self._selected)}
        selected_vars = [variables[i] for i in self._selected]
        self._rows = summary_v2.variable_paths(selected_vars)
        self._sizes = [int(tf.size(v)) for v in selected_vars]
        n_sel = len(selected_vars)
        self._grad_buffer = distribute.buffer(tf.zeros([n_sel, len(metadata.GRAD_STATS_COLUMNS)]))
        self._hist_buffer = distribute.buffer(tf.zeros([n_sel, len(metadata.HISTOGRAM_COLUMNS)]))
        self._update_buffer = distribute.buffer(tf.zeros([n_sel, len(metadata.UPDATE_STATS_COLUMNS)]))
        self._before = (
            [distribute.buffer(tf.zeros(v.shape, v.dtype)) for v in selected_vars]
            if self.log_updates else []
        )
        # XLA cannot compile the histogram's bincount: under jit_compile the
        # step copies the selected gradients and statistics are computed
        # eagerly when written.
        self._xla = bool(getattr(model, "jit_compile", False)) and not model.run_eagerly
        self._grad_copies = (
            [distribute.buffer(tf.zeros(v.shape, v.dtype)) for v in selected_vars]
            if self._xla else []
        )
        self._none_gradients = set()
        self._grad_step = distribute.buffer(tf.constant(-1, tf.int64))
        self._grad_written = -1
        self._grad_extras = None
        self._grad_writer = None
        self._grad_writer_extras = None
        max_rows = 4 * max(1, len(compare.model_layers(model)))
        live_possible = _live_candidate_possible(model)
        self._slots = [
            _ComparisonSlot(model, ref, cand, self.activations, max_rows, self._xla,
                            live_possible and _is_model_as_configured(cand, self._xla))
            for ref, cand in _comparison_pairs(model, self.comparisons)
        ]
        self._observed_dtypes = None
        self._written_map = None
        self._next_step = int(optimizer.iterations.numpy())
        self._spe = int(getattr(model, "steps_per_execution", 1) or 1)

        self._original_train_step = model.train_step
        self._original_apply = optimizer.apply_gradients
        self._setup_replicas(model, selected_vars)
        self._patch(model)
        model.make_train_function(force=True)
        train_function = model.train_function

        def guarded_train_function(*args, **kwargs):
            try:
                return train_function(*args, **kwargs)
            except BaseException:
                self._restore()
                raise

        model.train_function = guarded_train_function
        self._trace = {"key": key, "function": guarded_train_function}

    def _patch(self, model):
        """Shadow the step and the optimizer's hooks (instance attributes)."""
        object.__setattr__(model, "train_step", self._train_step)
        object.__setattr__(model.optimizer, "apply_gradients", self._apply_gradients)
        if self._original_all_reduce is not None:
            object.__setattr__(model.optimizer, "_all_reduce_sum_gradients", self._all_reduce_sum_gradients)
        model._gradlens_restore = self._restore
        self._patched = True

    def _restore(self):
        """Undo every patch (idempotent)."""
        if not self._patched:
            return
        self._patched = False
        model = self.model
        for obj, attr in ((model, "train_step"), (model.optimizer, "apply_gradients"),
                          (model.optimizer, "_all_reduce_sum_gradients")):
            if attr in obj.__dict__:
                object.__delattr__(obj, attr)
        if "_gradlens_restore" in model.__dict__:
            object.__delattr__(model, "_gradlens_restore")
        model.train_function = getattr(self, "_plain_train_function", None)

    def on_train_end(self, logs=None):
        if not self._active:
            return
        try:
            with safety.guard(_WRITE_CAUSE):
                self._flush_buffers(force=True)
        finally:
            self._restore()
            with safety.guard(_WRITE_CAUSE):
                self._writer.flush()

    # -- inside the step ---------------------------------------------------

    def _train_step(self, data):
        model = self.model
        step = tf.identity(tf.convert_to_tensor(model.optimizer.iterations.value))
        live = [slot for slot in self._slots if slot.live]
        self._per_thread.live = None
        if self._slots:
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            for slot in self._slots:
                if slot.live:
                    continue
                with safety.guard("tb_gradlens.keras.GradLensCallback (comparison %s)" % slot.name):
                    tf.cond(
                        tf.logical_and(self.compare_schedule(step), distribute.is_first_replica()),
                        lambda slot=slot: slot.run(model, x, y, sample_weight, step),
                        lambda: tf.constant(False),
                    )
        observe = not tf.executing_eagerly() or self._observed_dtypes is None
        if not observe and not live:
            return self._original_train_step(data)
        recorder = compare.ActivationRecorder(model, keep_tensors=bool(live))
        if live:
            # The comparisons run in _apply_gradients, before the update,
            # on this step's own loss, gradients and layer outputs.
            self._per_thread.live = {
                "x": x, "y": y, "sample_weight": sample_weight, "step": step,
                "state": [tf.identity(v.value) for v in model.non_trainable_variables],
                "recorder": recorder, "loss": None,
            }
            object.__setattr__(model, "_compute_loss", self._capturing_compute_loss)
        try:
            with recorder:
                out = self._original_train_step(data)
        finally:
            if "_compute_loss" in model.__dict__:
                object.__delattr__(model, "_compute_loss")
            self._per_thread.live = None
        if observe:
            self._observed_dtypes = dict(recorder.dtypes)
        return out

    def _capturing_compute_loss(self, *args, **kwargs):
        """The model's loss, captured for live comparisons.  The forward
        pass is over when the loss is computed: stop recording outputs."""
        live = self._per_thread.live
        loss = type(self.model)._compute_loss(self.model, *args, **kwargs)
        if live is not None and live["loss"] is None:
            live["recorder"].__exit__(None, None, None)
            live["loss"] = loss
        return loss

    def _run_live_comparisons(self, pairs):
        """Compare this step (the candidate) with each live slot's reference
        pass; runs inside the step, before the optimizer applies ``pairs``."""
        live = self._per_thread.live
        if live is None or live["loss"] is None:
            return
        by_id = {id(v): g for g, v in pairs}
        grads = [by_id.get(id(v)) for v in self.model.trainable_variables]
        outcome = (live["loss"], grads, list(live["recorder"].outputs))
        for slot in self._slots:
            if not slot.live:
                continue
            with safety.guard("tb_gradlens.keras.GradLensCallback (comparison %s)" % slot.name):
                tf.cond(
                    self.compare_schedule(live["step"]),
                    lambda slot=slot: slot.run(self.model, live["x"], live["y"], live["sample_weight"],
                                               live["step"], outcome, live["state"]),
                    lambda: tf.constant(False),
                )

    def _apply_gradients(self, grads_and_vars):
        pairs = list(grads_and_vars)
        self._run_live_comparisons(pairs)
        if not self._selected or self.gradient_schedule.every <= 0:
            return self._original_apply(pairs)
        step = tf.identity(tf.convert_to_tensor(self.model.optimizer.iterations.value))
        chosen = [None] * len(self._selected)
        for g, v in pairs:
            k = self._selected_ids.get(id(v))
            if k is not None:
                chosen[k] = g
        chosen = [summary_v2.as_gradient(g) for g in chosen]
        selected_vars = [v for _, v in pairs if id(v) in self._selected_ids]
        selected_vars.sort(key=lambda v: self._selected_ids[id(v)])
        self._grad_extras = records.gradient_extras(
            [summary_v2.dtype_name(v) for v in selected_vars],
            [summary_v2.dtype_name(g) for g in chosen],
        )
        due = self.gradient_schedule(step)

        self._none_gradients = {k for k, g in enumerate(chosen) if g is None}
        replicated = distribute.replica_context() is not None
        self._per_thread.reduced = chosen
        if replicated:
            # Replica 0 fills the buffers; the gradient statistics are taken
            # in _describe_reduced, on the all-reduced gradients.
            due = tf.logical_and(due, distribute.is_first_replica())
            if self._original_all_reduce is None:
                self._describe_reduced(chosen, distribute.sum_across_replicas(chosen), step)

        def before():
            if not replicated:
                self._compute_gradient_stats(chosen)
                self._grad_step.assign(step)
            for buf, v in zip(self._before, selected_vars):
                buf.assign(tf.convert_to_tensor(v.value))
            return tf.constant(True)

        def after():
            current = [tf.convert_to_tensor(v.value) for v in selected_vars]
            self._update_buffer.assign(
                numerics.update_statistics(
                    [b.read_value() for b in self._before], current, self._per_thread.reduced
                )
            )
            return tf.constant(True)

        computed = False
        with safety.guard("tb_gradlens.keras.GradLensCallback (gradient statistics)"):
            tf.cond(due, before, lambda: tf.constant(False))
            computed = True
        result = self._original_apply(pairs)
        if self.log_updates and computed:
            with safety.guard("tb_gradlens.keras.GradLensCallback (update statistics)"):
                tf.cond(due, after, lambda: tf.constant(False))
        return result

    def _compute_gradient_stats(self, grads):
        """Fill the statistics buffers (under XLA: copy the gradients)."""
        if self._xla:
            for buf, g in zip(self._grad_copies, grads):
                if g is not None:
                    buf.assign(tf.cast(g, buf.dtype))
        else:
            stats, hist = numerics.gradient_statistics(grads, self._sizes)
            self._grad_buffer.assign(stats)
            self._hist_buffer.assign(hist)

    # -- under tf.distribute -------------------------------------------------

    def _setup_replicas(self, model, selected_vars):
        """With several replicas: hook the Keras optimizer's all-reduce (the
        statistics then describe the summed gradient it applies, at no extra
        communication) and prepare the replica-divergence buffer."""
        self._per_thread = threading.local()
        self._original_all_reduce = None
        self._replica_extras = None
        strategy = model.distribute_strategy
        replicas = strategy.num_replicas_in_sync
        if replicas <= 1 or not self._selected or self.gradient_schedule.every <= 0:
            return
        optimizer = model.optimizer
        var_key = getattr(optimizer, "_var_key", id)
        self._selected_keys = {var_key(v): k for k, v in enumerate(selected_vars)}
        self._var_key = var_key
        self._original_all_reduce = getattr(optimizer, "_all_reduce_sum_gradients", None)
        if self.replica_divergence:
            n_cols = len(metadata.DIVERGENCE_COLUMNS)
            self._replica_buffer = distribute.buffer(tf.zeros([replicas, len(selected_vars), n_cols]))
            self._replica_extras = distribute.replica_extras(
                strategy, compare.dominant_policy(model), self._xla
            )

    def _all_reduce_sum_gradients(self, grads_and_vars):
        """The optimizer's all-reduce, describing what it returns."""
        local_pairs = list(grads_and_vars)
        reduced_pairs = self._original_all_reduce(local_pairs)
        if distribute.replica_context() is not None:
            step = tf.identity(tf.convert_to_tensor(self.model.optimizer.iterations.value))
            self._describe_reduced(self._choose(local_pairs), self._choose(reduced_pairs), step)
        return reduced_pairs

    def _choose(self, pairs):
        """The selected variables' gradients from optimizer (grad, var) pairs."""
        chosen = [None] * len(self._selected)
        for g, v in pairs:
            k = self._selected_keys.get(self._var_key(v))
            if k is not None:
                chosen[k] = summary_v2.as_gradient(g)
        return chosen

    def _describe_reduced(self, local, reduced, step):
        """Replica 0 computes the statistics of the all-reduced gradients;
        with replica_divergence every replica measures its own gradient
        against the mean and the results are all-gathered (outside the
        condition: a collective is joined by every replica)."""
        due = self.gradient_schedule(step)
        self._per_thread.reduced = reduced
        gathered = None
        if self._replica_extras is not None:
            gathered = distribute.replica_divergence(local, reduced, due)

        def describe():
            self._compute_gradient_stats(reduced)
            if gathered is not None:
                self._replica_buffer.assign(gathered)
            self._grad_step.assign(step)
            return tf.constant(True)

        with safety.guard("tb_gradlens.keras.GradLensCallback (gradient statistics)"):
            record = tf.logical_and(due, distribute.is_first_replica())
            tf.cond(record, describe, lambda: tf.constant(False))

    # -- writing, outside the step ------------------------------------------

    def on_train_batch_end(self, batch, logs=None):
        if not self._active:
            return
        start, end = self._next_step, self._next_step + self._spe
        due = any(
            self.gradient_schedule(s) or self.compare_schedule(s) for s in range(start, end)
        )
        map_pending = self._observed_dtypes is not None and self._written_map is None
        if not due and not map_pending:
            self._next_step = end
            return
        self._next_step = int(self.model.optimizer.iterations.numpy())
        with safety.guard(_WRITE_CAUSE):
            self._flush_buffers(first_step=start)

    def _flush_buffers(self, force=False, first_step=None):
        with self._writer.as_default():
            if self._observed_dtypes is not None:
                current = compare.dtype_map(self.model, self._observed_dtypes)
                if current != self._written_map:
                    summary_v2.dtypes(current, step=first_step if first_step is not None else self._next_step,
                                      name=self.name)
                    self._written_map = current
            if not getattr(self, "_selected", None) and not self._slots:
                return
            grad_step = int(self._grad_step.numpy())
            if grad_step > self._grad_written and self._grad_extras is not None:
                self._write_gradients(grad_step)
                self._grad_written = grad_step
            for slot in self._slots:
                slot_step = int(slot.step.numpy())
                if slot_step > slot.written and slot.extras is not None:
                    slot.write(self._writer, slot_step)
                    slot.written = slot_step

    def _write_gradients(self, step):
        if self._xla:
            grads = [
                None if k in self._none_gradients else buf.read_value()
                for k, buf in enumerate(self._grad_copies)
            ]
            stats, hist = numerics.gradient_statistics(grads, self._sizes)
            self._grad_buffer.assign(stats)
            self._hist_buffer.assign(hist)
        if self._grad_writer is None or self._grad_writer_extras is not self._grad_extras:
            self._grad_writer = summary_v2.RecordWriter(self._writer, self._gradient_records())
            self._grad_writer_extras = self._grad_extras
        self._grad_writer(step)

    def _gradient_records(self):
        """(name, RecordMetadata, value_fn) of every record of a gradient step."""
        pending = [(self.name, metadata.RecordMetadata(
            metadata.GRAD_STATS, self._rows, metadata.GRAD_STATS_COLUMNS, self._grad_extras
        ), self._grad_buffer.read_value)]
        if self.histogram:
            pending.append((self.name, metadata.RecordMetadata(
                metadata.GRAD_HISTOGRAM, self._rows, metadata.HISTOGRAM_COLUMNS,
                records.histogram_extras(),
            ), self._hist_buffer.read_value))
        if self.log_updates:
            pending.append((self.name, metadata.RecordMetadata(
                metadata.UPDATE_STATS, self._rows, metadata.UPDATE_STATS_COLUMNS,
                records.update_extras(self._grad_extras["variable_dtypes"]),
            ), self._update_buffer.read_value))
        if getattr(self, "_replica_extras", None) is not None:
            for i, extras in enumerate(self._replica_extras):
                pending.append(("replicas", metadata.RecordMetadata(
                    metadata.DIVERGENCE, self._rows, metadata.DIVERGENCE_COLUMNS, extras
                ), lambda i=i: self._replica_buffer[i]))
        return pending


_WRITE_CAUSE = "tb_gradlens.keras.GradLensCallback (writing)"


def _live_candidate_possible(model):
    """Whether the training step itself can be a comparison's candidate:
    Keras' own train_step (its loss goes through ``_compute_loss``, its
    gradients through ``optimizer.apply_gradients``), the gradients applied
    are the loss's (no loss scaling, no accumulation) and one replica
    (replica threads would share the capture)."""
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    optimizer = model.optimizer
    return (
        type(model).train_step is TensorFlowTrainer.train_step
        and type(model)._compute_loss is TensorFlowTrainer._compute_loss
        and not isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        and not getattr(optimizer, "gradient_accumulation_steps", None)
        and model.distribute_strategy.num_replicas_in_sync == 1
    )


def _is_model_as_configured(variant, surrounding_jit):
    """The candidate is the training step as it runs: the model's own
    policies, placement and compilation."""
    return (
        variant.policy is None
        and variant.device is None
        and (variant.jit_compile is None or variant.jit_compile == bool(surrounding_jit))
    )


def _restore_stale(model):
    """Undo patches a previous callback left (e.g. fit interrupted outside a step)."""
    restore = model.__dict__.get("_gradlens_restore")
    if restore is not None:
        restore()


class GradLens:
    """The callback's features for custom training loops.

    Example::

        lens = GradLens("logs/run1")
        for step, (x, y) in enumerate(data):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            lens.log_gradients(grads, model.trainable_variables, step)
            lens.compare_keras(model, x, y, step)     # a Keras model, or
            lens.compare(my_loss, variables, step)    # raw TF ops
            optimizer.apply(grads, model.trainable_variables)

    ``step`` may be a Python int (checked in Python: no work at all on
    other steps) or a tensor inside ``tf.function`` (then ``tf.cond``).
    Writes go to ``writer`` (default: a file writer on ``log_dir`` in the
    chief process, a no-op writer in other workers); do not call the
    logging methods inside an XLA-compiled function.

    Inside ``strategy.run`` (several replicas) call ``log_gradients`` from
    every replica with its own gradients: they are summed across replicas
    (the gradient the optimizer applies) and replica 0 writes; with
    ``replica_divergence`` each replica's gradient is also compared with the
    replica mean.  The collectives run on logged steps only for a Python
    ``step``, on every step for a tensor step.
    """

    def __init__(self, log_dir=None, writer=None, gradient_every=GRADIENT_EVERY,
                 compare_every=COMPARE_EVERY, variables=None, start_step=0, stop_step=None,
                 histogram=True, name="model", replica_divergence=False):
        if writer is None:
            if log_dir is None:
                raise ValueError("tb_gradlens.GradLens: give log_dir or writer")
            writer = distribute.chief_writer(log_dir)
        self.writer = writer
        self.replica_divergence = replica_divergence
        self.gradient_schedule = Schedule(gradient_every, start_step, stop_step)
        self.compare_schedule = Schedule(compare_every, start_step, stop_step)
        self.variables_pattern = variables
        self.histogram = histogram
        self.name = name
        self._passes = {}
        self._written_map = None

    def should_log(self, step):
        """Whether gradient statistics are logged at ``step``."""
        return self.gradient_schedule(step)

    def should_compare(self, step):
        """Whether comparisons run at ``step``."""
        return self.compare_schedule(step)

    def _when(self, due, fn):
        """Run ``fn`` when ``due`` (a bool, or a boolean tensor: tf.cond).

        A failure is reported by ``safety`` (cause: the calling method) and
        gives False.
        """
        cause = "tb_gradlens.keras." + fn.__qualname__.split(".<locals>")[0]
        if isinstance(due, bool):
            return safety.call(cause, fn, default=False) if due else False

        def branch():
            fn()
            return tf.constant(True)

        with safety.guard(cause):
            return tf.cond(due, branch, lambda: tf.constant(False))
        return tf.constant(False)

    def log_gradients(self, grads, variables, step):
        """Gradient statistics (and histograms) of the selected variables."""
        grads, variables = list(grads), list(variables)
        chosen = _select(variables, self.variables_pattern)
        grads, variables = [grads[i] for i in chosen], [variables[i] for i in chosen]
        due = self.should_log(step)
        gathered = None
        if due is not False and distribute.replica_context() is not None:
            # Collectives outside the condition, joined by every replica.
            local, grads = grads, distribute.sum_across_replicas(grads)
            if self.replica_divergence:
                gathered = distribute.replica_divergence(local, grads, due)

        def write():
            with self.writer.as_default():
                summary_v2.gradients(
                    grads, variables, step=step, name=self.name, histogram=self.histogram,
                    aggregate=False,
                )
                if gathered is not None:
                    summary_v2.write_replica_divergence(
                        gathered, summary_v2.variable_paths(variables), step, "replicas"
                    )
            return True

        return self._when(due, write)

    def log_updates(self, before, after, variables, step, gradients=None):
        """Update statistics (incl. lost-update fraction) of one optimizer step."""
        variables = list(variables)
        chosen = _select(variables, self.variables_pattern)

        def write():
            stats = numerics.update_statistics(
                [before[i] for i in chosen], [after[i] for i in chosen],
                [gradients[i] for i in chosen] if gradients is not None else None,
            )
            with self.writer.as_default():
                summary_v2.update_stats(
                    stats, summary_v2.variable_paths([variables[i] for i in chosen]),
                    step=step, name=self.name,
                    extras=records.update_extras([summary_v2.dtype_name(variables[i]) for i in chosen]),
                )
            return True

        return self._when(self.should_log(step), write)

    def compare(self, loss_fn, variables, step, reference="float32", candidate="mixed_bfloat16", names=None):
        """``compare.compare_fn`` on logged steps, written to the writer."""

        def run():
            result = compare.compare_fn(loss_fn, variables, reference, candidate, names)
            with self.writer.as_default():
                result.write(step)
            return True

        return self._when(self.should_compare(step), run)

    def compare_keras(self, model, x, y=None, step=None, sample_weight=None,
                      reference="float32", candidate=None, activations=True):
        """``compare.compare_keras`` on logged steps, written to the writer."""
        reference, candidate = compare.as_variant(reference), compare.as_variant(candidate)
        key = (id(model), reference, candidate, activations)
        if key not in self._passes:
            self._passes[key] = (
                compare.keras_pass(model, reference, activations),
                compare.keras_pass(model, candidate, activations),
            )

        def run():
            result = compare.compare_keras(
                model, x, y, sample_weight, reference, candidate, activations, self._passes[key]
            )
            with self.writer.as_default():
                result.write(step)
            return True

        return self._when(self.should_compare(step), run)

    def log_dtypes(self, model, x, step):
        """Write the dtype map (one eager forward pass on ``x``) if it changed."""
        return safety.call("tb_gradlens.keras.GradLens.log_dtypes", self._log_dtypes,
                           model, x, step, default=False)

    def _log_dtypes(self, model, x, step):
        current = compare.observe_dtypes(model, x)
        if current == self._written_map:
            return False
        with self.writer.as_default():
            summary_v2.dtypes(current, step=step, name=self.name)
        self._written_map = current
        return True

    def flush(self):
        self.writer.flush()

"""The lens on one model while ``fit`` runs: set up, train function, restore.

A ``Session`` exists from ``on_train_begin`` to ``on_train_end`` of a
``GradLensCallback`` (and is resumed by a later ``fit`` of the same model,
optimizer and variables, keeping its traced train functions as Keras keeps
its own: ``traces.TracedSteps``).  It builds the ``Tap`` and the lens's
step (``LiveStep`` without XLA, ``ProbeStep`` under ``jit_compile=True``),
installs a train function that writes the buffered records after every
call and also when the call raises (``writing``, paced by ``flushing``),
and restores every patch at the end, when the train function raises, or
when a later session finds it stale.  A call that logs nothing and checks
nothing runs Keras' own train function; the others run the lens's step
(``traces``: one trace for every call without a comparison, a second one
with the comparisons' passes when one is first due).

A model Keras builds at its first batch (subclassed models, Sequential
without an Input) has no variables at ``on_train_begin``: the session then
builds it from the first batch's specs (``keras_private.symbolic_build``,
what ``fit`` does itself under a distribution strategy) when the train
function is first called, and sets up before that first step.
"""

import weakref

from tb_gradlens import compare
from tb_gradlens import metadata
from tb_gradlens import safety
from tb_gradlens.keras import writing
from tb_gradlens.keras.flushing import FlushPacing
from tb_gradlens.keras.live import LiveStep
from tb_gradlens.keras.probe import ProbeStep
from tb_gradlens.keras.status import LensStatus
from tb_gradlens.keras.branches import COMPARISON_KINDS
from tb_gradlens.keras.branches import GRADIENT_KINDS
from tb_gradlens.keras.tap import Tap
from tb_gradlens.keras.traces import TracedSteps
from tb_gradlens.writing import keras_private

WRITER = "tb_gradlens.keras.GradLensCallback"
WRITE_CAUSE = WRITER + " (writing)"
XLA_REPLICAS_REASON = (
    "jit_compile=True under a strategy with several replicas: the lens cannot stay out of the "
    "XLA-compiled step there (train with jit_compile=False to log)"
)

_patched_by = weakref.WeakKeyDictionary()  # model -> the Session whose patches are on it


def is_built(model):
    return all(layer.built for layer in keras_private.flatten_layers(model))


def restore_stale(model):
    """Undo patches a previous session left (e.g. fit interrupted outside a step)."""
    session = _patched_by.get(model)
    if session is not None:
        session.restore()


class Session:
    """The lens on ``model`` while it trains, as ``options`` ask (see the module).

    Between train-function calls the model is exactly as without the lens:
    ``arm`` (``on_train_batch_begin``) points ``model.train_function`` at the
    lens's function, which shadows the step's methods for the call only and
    puts the plain function back when the call returns or raises.  A
    ``fit`` that ends without ``on_train_end`` (a callback raised, Ctrl-C)
    leaves nothing behind.
    """

    def __init__(self, model, options, writer):
        self.model = model
        self.options = options  # the callback's ``LensOptions``
        self.writer = writer
        self.status = LensStatus(WRITER, model, options.name)
        self.tap = None
        self.lens_step = None  # LiveStep or ProbeStep
        self.sink = None
        self.plain_function = None
        self.function = None
        self.entry = None  # what model.train_function is while armed
        self._traced = None  # TracedSteps: Tap.parts -> Keras' train function traced with the lens's step
        self.next_step = 0  # the train step the next call starts at
        self._lead = 0  # train step - optimizer step, where the watch is off (then constant)
        self._flushing = None  # FlushPacing, with the sink

    # -- lifecycle --------------------------------------------------------------

    def start(self):
        """``on_train_begin``: set up now, or at the first batch if unbuilt."""
        model = self.model
        restore_stale(model)
        self.plain_function = model.train_function
        if is_built(model):
            self._set_up()
        else:
            self.entry = self._build_at_first_batch
        self.arm()

    def resume(self):
        """A later ``fit`` with the same model, optimizer and variables."""
        restore_stale(self.model)
        self.plain_function = self.model.train_function
        self._begin_training()
        self.arm()

    def matches(self, model):
        return self.function is not None and self._traced.serves(model)

    def arm(self):
        """``on_train_batch_begin``: the next train-function call goes through the lens."""
        if self.entry is not None:
            keras_private.set_train_function(self.model, self.entry)
            _patched_by[self.model] = self

    def restore(self):
        """The model as without the lens (idempotent)."""
        if self.lens_step is not None:
            self.lens_step.restore()
        if self.plain_function is not None:
            keras_private.set_train_function(self.model, self.plain_function)
        if _patched_by.get(self.model) is self:
            del _patched_by[self.model]

    def end(self):
        """``on_train_end``: write what is left, restore."""
        try:
            self.flush()
        finally:
            self.restore()
            with safety.guard(WRITE_CAUSE):
                self.writer.flush()

    def sync(self):
        """Re-read the train step (once per epoch: a last execution of an
        epoch may run fewer than steps_per_execution steps): the lens's
        counter where every step counts itself (``StepWatch`` armed), else
        the optimizer's step, which then advances with every batch."""
        if self.tap is not None:
            if self.tap.watch.armed:
                self.next_step = int(self.tap.counter.numpy())
            else:
                self.next_step = int(self.model.optimizer.iterations.numpy()) + self._lead

    # -- set up ------------------------------------------------------------------

    def _build_at_first_batch(self, iterator):
        spec = getattr(iterator, "element_spec", None)
        if spec is None:
            self.status.cannot("the first train-function call", [], "the model was built by it")
            logs = self.plain_function(iterator)
        else:
            keras_private.symbolic_build(self.model, spec)
            logs = None
        self._set_up()
        if logs is not None or self.entry is None:
            return logs if logs is not None else self.plain_function(iterator)
        return self.entry(iterator)

    def _set_up(self):
        model, options = self.model, self.options
        xla = bool(model.jit_compile) and not model.run_eagerly
        replicas = model.distribute_strategy.num_replicas_in_sync
        self.status.environment = compare.environment(model)
        if xla and replicas > 1:
            self.entry = None
            self.status.cannot("gradient statistics and comparisons", GRADIENT_KINDS + COMPARISON_KINDS,
                               XLA_REPLICAS_REASON)
            with safety.guard(WRITE_CAUSE), self.writer.as_default():
                self.status.write(int(model.optimizer.iterations.numpy()))
            return
        live = keras_private.uses_default_train_step(model) and replicas == 1
        if live:  # (now, not in the step's first trace: TensorFlow traces again a first trace that makes variables)
            with safety.guard(WRITE_CAUSE), model.distribute_strategy.scope():
                keras_private.build_as_apply_does(model.optimizer, model.trainable_weights)
        self.sink = writing.RecordSink(self.writer, options.log_dir)
        self.tap = self.sink.tap = Tap(model, options, self.status, xla, live, self.sink)
        if self.tap.slots or self.tap.watch.replay is not None:  # (what float32 is where the references run)
            self.status.float32 = safety.call(compare.float32_probe.PROBE_CAUSE, compare.float32_probe.probe, None,
                                              xla)
        self.lens_step = ProbeStep(self.tap) if xla else LiveStep(self.tap)
        self.sink.write_in_step()
        self._flushing = FlushPacing(self.writer, self.sink, self.tap, self.status, options.flush_seconds,
                                     WRITE_CAUSE)
        self._traced = TracedSteps(model, self.tap, self.lens_step)
        self._begin_training()
        self._function_for(self._traced.parts_from(self.next_step))
        self.function = self.entry = self._writing_after_each_call()

    def _function_for(self, parts):
        """Keras' train function for the lens's step with ``parts`` (``TracedSteps.function_for``)."""
        return self._traced.function_for(parts)

    def _begin_training(self):
        first = int(self.tap.counter.numpy())  # the optimizer's step at the start, else where it left off
        self._lead = first - int(self.model.optimizer.iterations.numpy())
        self.next_step = first
        self.tap.watch.begin(first)
        self.sink.offset = writing.step_offset(self.options.log_dir, first, self.sink.offset)
        self.status.step_offset = self.sink.offset
        self.status.expected = []
        expect_records(self.status, self.tap, self.options.name, self.sink.offset)
        self._flushing.pending = True
        with safety.guard(WRITE_CAUSE):
            self.sink.write_status(first)

    # -- the train function ---------------------------------------------------------

    def _writing_after_each_call(self):
        def train_function(iterator):
            first = self.next_step
            if self._plain_call_suffices(first):
                # Nothing to log in this call: Keras' own function, so a step
                # the lens does not log is the step without the lens.
                logs = self.plain_function(iterator)
                self.next_step = first + self.tap.steps_per_call
                return logs
            parts = self._traced.parts_from(first)
            function = self._function_for(parts)
            self.tap.parts = parts  # read when the step is traced
            if not self.tap.watch.armed:
                self.tap.counter.assign(first)  # (Keras' own function ran the steps since)
            safety.call(WRITE_CAUSE, self.lens_step.prepare, iterator)
            self.lens_step.patch()
            try:
                logs = function(iterator)
            except BaseException:
                self.flush(first)
                raise
            finally:
                self.restore()
            self.next_step = first + self.tap.steps_per_call
            alarmed = safety.call(WRITE_CAUSE, self.tap.watch.after_call, default=True)
            if self.tap.watch.stop_requested():
                self._stop(first)
            if self._flushing.due_after_call(first, self.next_step, alarmed):
                self.flush(first)
            return logs

        return train_function

    def _plain_call_suffices(self, first):
        """Whether the call from train step ``first`` logs nothing, has
        nothing to write and no step to check (``StepWatch``), so Keras' own
        train function can run it."""
        return (self.plain_function is not None and not self._flushing.pending and not self.tap.watch.armed
                and not self.tap.any_due_in(first, first + self.tap.steps_per_call))

    def _stop(self, first):
        """``stop_on_nonfinite``: a step in this call was not finite and its
        update was held back; ``fit`` stops after this call."""
        if not self.model.stop_training:
            safety.notify("stop_on_nonfinite: a train step from %d on is not finite; its update was not applied "
                          "and training stops (the run's nonfinite_replay record says where it came from)"
                          % (first + self.sink.offset))
        self.model.stop_training = True

    def flush(self, first_step=None):
        """Write every buffered step, the status and dtype map if they may
        have changed, and flush the event file (``FlushPacing.flush``;
        never raises but in strict mode)."""
        if self.sink is None:
            return
        if self._flushing.flush(self.next_step if first_step is None else first_step):
            self.sync()


def expect_records(status, tap, name, offset):
    """Tell ``status`` the records ``tap`` is to write, and at which steps
    (``name``: the gradient records' tag prefix; ``offset``: the sink's);
    a kind said unsupported before is expected never."""
    expect = status.expect
    if tap.logs_gradients:
        expect(metadata.GRAD_STATS, name, tap.gradient_schedule, offset)
        if tap.watch.armed:
            expect(metadata.OPTIMIZER_STEP, name, tap.gradient_schedule, offset)
        if tap.histogram:
            expect(metadata.GRAD_HISTOGRAM, name, tap.gradient_schedule, offset)
        if tap.log_updates:
            expect(metadata.UPDATE_STATS, name, tap.update_schedule, offset)
    for slot in tap.slots:
        expect(metadata.DIVERGENCE, slot.name, tap.compare_schedule, offset)
        expect(metadata.LOSS_COMPARISON, slot.name, tap.compare_schedule, offset)
        if slot.activations:
            expect(metadata.ACTIVATION_DIVERGENCE, slot.name, tap.compare_schedule, offset)
    for u in status.unsupported:  # said before: still true
        for e in status.expected:
            if e["kind"] in u["kinds"]:
                e["every"] = 0

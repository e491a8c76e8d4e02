"""The lens inside a train step XLA does not compile: the step observed as it runs.

``LiveStep`` shadows, while training runs, ``model.train_step``,
``model.compute_loss`` and ``model.optimizer.apply`` (instance attributes,
removed by ``restore``).  Keras' own step and the custom ``train_step`` of
Keras' guide both end in ``optimizer.apply`` (``apply_gradients`` calls
it), so the gradient statistics are those of the gradients the optimizer
applies, divided by a ``LossScaleOptimizer``'s scale as it divides them.
With Keras' own step the comparisons take the step itself as the
candidate (its loss, those gradients and its layer outputs) and run only
the reference pass, which draws the step's random numbers again from the
seed states read before the step.  Train-function calls with no logged
step do not run this step at all: ``Session`` calls Keras' own function.
"""

import keras
import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens.keras.replicas import Replicas
from tb_gradlens.keras.branches import COMPARISONS
from tb_gradlens.keras.branches import COMPARISON_KINDS
from tb_gradlens.keras.branches import GRADIENTS
from tb_gradlens.keras.branches import UPDATES
from tb_gradlens.keras.branches import when
from tb_gradlens.writing import keras_private


def _after(dependencies, grads):
    """``grads`` as they are, computed after ``dependencies`` ran.  The
    dense ones through one ``IdentityN``: Grappler moves a lone ``Identity``
    of a gradient widened from 16 bits before the widening ``Cast``, which
    then runs twice (docs/benchmarks-history.md §13)."""
    dense = [k for k, g in enumerate(grads) if isinstance(g, tf.Tensor)]
    out = list(grads)
    with tf.control_dependencies(dependencies):
        if dense:
            for k, g in zip(dense, tf.raw_ops.IdentityN(input=[grads[k] for k in dense])):
                out[k] = g
        for k, g in enumerate(grads):
            if g is not None and not isinstance(g, tf.Tensor):  # an IndexedSlices
                out[k] = tf.identity(g)
    return out


class _Capture:
    """What one train step exposes to the optimizer hook (per replica thread)."""

    def __init__(self, step, data, seeds, recorder):
        self.step = step
        self.x, self.y, self.sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        self.seeds = seeds
        self.recorder = recorder
        self.loss = None

    def on_loss(self, loss):
        if self.loss is None:
            self.loss = loss
            self.recorder.stop()  # the forward pass is over


class LiveStep:
    """The lens's step where XLA does not compile the train step: it fills
    the ``Tap`` as the step runs (see the module)."""

    def __init__(self, tap):
        self.tap = tap
        model = tap.model
        self.model = model
        self.optimizer = model.optimizer
        self.default_step = keras_private.uses_default_train_step(model)
        self.seeds = compare.seed_states(model)
        self.replicas = Replicas(tap) if model.distribute_strategy.num_replicas_in_sync > 1 else None
        # A trace without the comparisons and one with them (``Tap.parts_due_in``);
        # with several replicas one trace keeps every replica's collectives alike.
        self.traces_by_parts = self.replicas is None
        self._original = {}
        self._prepared = False  # (``prepare``: once, before the first trace)

    # -- patching ------------------------------------------------------------

    def patch(self):
        model, optimizer = self.model, self.optimizer
        self._original = {"train_step": model.train_step, "apply": optimizer.apply,
                          "compute_loss": model.compute_loss}
        keras_private.shadow_method(model, "train_step", self.train_step)
        keras_private.shadow_method(model, "compute_loss", self.compute_loss)
        keras_private.shadow_method(optimizer, "apply", self.apply)
        if self.replicas is not None:
            self.replicas.patch(optimizer)

    def function(self):
        """Keras' train function, traced with the shadowed step."""
        self.model.make_train_function(force=True)
        return self.model.train_function

    def prepare(self, iterator):
        """Before the step is first traced: the variables the replay's kept
        step needs, from the batch's spec (``KeptStep.prepare``)."""
        spec = getattr(iterator, "element_spec", None)
        if self.tap.watch.replay is not None and spec is not None and not self._prepared:
            self.tap.watch.replay.kept.prepare(spec, self.seeds)
        self._prepared = True

    def restore(self):
        for name in ("train_step", "compute_loss"):
            keras_private.unshadow(self.model, name)
        keras_private.unshadow(self.optimizer, "apply")
        if self.replicas is not None:
            self.replicas.restore(self.optimizer)

    # -- the step ---------------------------------------------------------------

    def train_step(self, data):
        tap, model = self.tap, self.model
        tap.traces += 1
        step = tap.step_now()
        seeds = [tf.identity(tf.convert_to_tensor(v.value)) for v in self.seeds]
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        compares = tap.includes(COMPARISONS)
        for slot in tap.slots:
            if not slot.live and compares:
                when(tap.status, "comparison %s" % slot.name, COMPARISON_KINDS, tap.compare_due(step),
                     lambda slot=slot: slot.run(model, x, y, sample_weight, step, state_values=seeds),
                     name=slot.name)
        live = any(slot.live for slot in tap.slots) and self.default_step and compares
        recorder = compare.ActivationRecorder(model, keep_tensors=live)
        capture = _Capture(step, data, seeds, recorder)
        tap.local.capture = capture
        try:
            with recorder:
                out = self._original["train_step"](data)
        finally:
            tap.local.capture = None
            recorder.stop()
        if recorder.dtypes:
            tap.observed_dtypes = dict(recorder.dtypes)
            tap.observed_output_layer = recorder.output_layer
        tap.next_step()
        return out

    def compute_loss(self, *args, **kwargs):
        loss = type(self.model).compute_loss(self.model, *args, **kwargs)
        capture = getattr(self.tap.local, "capture", None)
        if capture is not None:
            capture.on_loss(loss)
        return loss

    # -- the optimizer ------------------------------------------------------------

    def apply(self, grads, trainable_variables=None):
        """The optimizer's ``apply``: on a logged step, the step's loss, the
        live comparisons and the gradient statistics (one conditional); the
        step's check (``forensics.StepWatch``: skips, the replay of a
        non-finite step); the update; then the update statistics (another
        conditional) and what the optimizer did."""
        tap = self.tap
        grads = list(grads)
        variables = (list(trainable_variables) if trainable_variables is not None
                     else keras_private.optimizer_variables(self.optimizer))
        capture = getattr(tap.local, "capture", None)
        if capture is not None:
            capture.recorder.stop()
        step = capture.step if capture is not None else tap.step_now()
        applied = keras_private.applied_gradients(self.optimizer, grads, variables)
        chosen = tap.choose(applied, variables)
        tap.note_gradient_dtypes(chosen)
        loss = None if capture is None else capture.loss
        if self.replicas is not None:  # collectives: every replica, every step, outside conditionals
            if loss is not None:
                loss = self.replicas.total_loss(loss)
            if tap.logs_gradients:
                self.replicas.before_update(step, chosen)
        if tap.logs_gradients and self.replicas is None and tap.includes(GRADIENTS):
            tap.describe_gradients_when_due(step, chosen)
        due = tap.any_due(step)
        if due is not None:
            when(tap.status, "logged step", (), due,
                 lambda: self._logged_step(step, capture, loss, applied, variables, chosen))
        check = tap.watch.check(step, grads, None if capture is None else capture.loss, capture)
        kept = tap.keep_weights_when_due(step)
        if kept:  # (the update reads the gradients after the weights are kept)
            grads = _after(kept[:1], grads)
        result = tap.watch.applying(check, lambda: self._original["apply"](grads, trainable_variables))
        tap.watch.after(step, check, tap.logs_gradients and tap.includes(GRADIENTS))
        if tap.logs_gradients and tap.log_updates and tap.includes(UPDATES):
            tap.describe_update_when_due(step, chosen if self.replicas is None else self.replicas.reduced())
        return result

    def _logged_step(self, step, capture, loss, applied, variables, chosen):
        tap = self.tap
        if loss is not None:
            tap.record_loss(step, loss)
        self._compare_live(step, capture, applied, variables)
        return tf.constant(True)

    def _compare_live(self, step, capture, applied, variables):
        tap = self.tap
        live = [slot for slot in tap.slots if slot.live]
        if not (live and tap.includes(COMPARISONS) and self.default_step) or capture is None or capture.loss is None:
            return
        by_id = {id(v): g for g, v in zip(applied, variables)}
        grads = [by_id.get(id(v)) for v in self.model.trainable_variables]
        outcome = (capture.loss, grads, list(capture.recorder.outputs))
        for slot in live:
            when(tap.status, "comparison %s" % slot.name, COMPARISON_KINDS, tap.compare_due(step),
                 lambda slot=slot: slot.run(self.model, capture.x, capture.y, capture.sample_weight, step,
                                            outcome, capture.seeds),
                 name=slot.name)

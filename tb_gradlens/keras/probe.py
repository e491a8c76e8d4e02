"""The lens beside a train step XLA compiles: the compiled step left as Keras builds it.

XLA optimizes a compiled step as a whole: anything the lens added to it (a
copy of a gradient, a shadow pass reading the step's values) could change
how XLA fuses the step's own computation, and with it the rounding of the
weights it trains (measured: two Adam slots 1 ULP apart on a
BatchNorm+Dropout CNN, and 7-10 s of compilation constant-folding the
lens's segment ids).  So under ``jit_compile=True`` the lens stays out of
the compiled step.  Keras' train function is built around ``ProbeStep.step``
(``keras_private.make_train_function_around``), which calls Keras'
``train_step`` compiled by XLA alone, as Keras compiles it.  On a logged
step, before that call, the *probe* recomputes the step in its own XLA
function from the same weights, batch and seed states (the step has not
run yet): Keras' forward pass with ``training=True``, ``compute_loss`` and
the optimizer's loss scaling, undone as the optimizer undoes it.  Its loss,
gradients and layer outputs are the candidate of the comparisons and the
source of the gradient statistics; the weights are copied, and after the
step the update statistics compare them with the weights it wrote.  Every
step is checked around the compiled step (``compiled_check``: the values
the replay of a non-finite step needs are held from before it).
Train-function calls with no logged step and no step to check run Keras'
own function instead (``Session``).

The probe's gradients are those of the step computed by XLA from the same
inputs, compiled separately: they can differ from the ones the compiled
step applies by float rounding (XLA's fusion choices), never more.  A
custom ``train_step`` cannot be recomputed: its gradient statistics and
loss are not logged (the lens status says so); its update statistics and
the comparisons (shadow passes of the model's forward and
``compute_loss``) are.
"""

import types

import keras
import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import metadata
from tb_gradlens.keras.branches import COMPARISON_KINDS
from tb_gradlens.keras.branches import GRADIENT_KINDS
from tb_gradlens.keras.branches import when
from tb_gradlens.keras import update_watch
from tb_gradlens.numerics import sparse
from tb_gradlens.writing import keras_private

CUSTOM_STEP_REASON = (
    "under jit_compile=True a custom train_step runs inside Keras' XLA-compiled step, where "
    "observing its gradients would change how XLA compiles (and rounds) training; "
    "train with jit_compile=False to log them"
)


class ProbeStep:
    """The lens's step beside an XLA-compiled train step: it fills the
    ``Tap`` from its recomputation of the step (see the module)."""

    def __init__(self, tap):
        self.tap = tap
        model = tap.model
        self.model = model
        self.default_step = keras_private.uses_default_train_step(model)
        self.seeds = compare.seed_states(model)
        self.xla_step = keras_private.function_per_instance(model.train_step, jit_compile=True,
                                                            reduce_retracing=True)
        self.traces_by_parts = False  # one trace: the XLA step and its probe
        self._prepared = False  # (``prepare``: once, before the first trace)
        live = [slot for slot in tap.slots if slot.live]
        self.candidate = None
        if self.default_step and (tap.logs_gradients or live):
            self.candidate = compare.KerasPass(
                model, compare.Variant(None, jit_compile=True),
                activations=any(slot.activations for slot in live), optimizer=model.optimizer)
        # bfloat16 weights: their lost updates need the gradient after the step.
        self.kept_gradients = {
            k: update_watch.buffer_like(v) for k, v in enumerate(tap.selected_vars)
            if tf.as_dtype(v.dtype) == tf.bfloat16
        }
        if not self.default_step:
            for slot in live:
                slot.live = False
            if tap.logs_gradients:
                tap.status.cannot("gradient statistics", GRADIENT_KINDS, CUSTOM_STEP_REASON, name=tap.status.name)
            tap.status.cannot("the loss scalar", (), CUSTOM_STEP_REASON)

    def patch(self):
        """Nothing to shadow: the train function is built around ``step``."""

    def prepare(self, iterator):
        """Before the step is first traced: the variables the replay's kept
        step needs, from the batch's spec (``KeptStep.prepare``)."""
        spec = getattr(iterator, "element_spec", None)
        if self.tap.watch.replay is not None and spec is not None and not self._prepared:
            self.tap.watch.replay.kept.prepare(spec, self.seeds)
        self._prepared = True

    def restore(self):
        """Nothing was shadowed."""

    def function(self):
        """Keras' train function around ``step``."""
        return keras_private.make_train_function_around(self.model, self.step)

    def step(self, data):
        tap, model = self.tap, self.model
        tap.traces += 1
        step = tap.step_now()
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        when(tap.status, "logged step", (), tap.any_due(step), lambda: self.probe(step, x, y, sample_weight))
        capture = None
        if tap.watch.replay is not None:  # (the seed states before the step: its replay draws its masks)
            capture = types.SimpleNamespace(x=x, y=y, sample_weight=sample_weight,
                                            seeds=[tf.identity(tf.convert_to_tensor(v.value)) for v in self.seeds])
        recorder = compare.ActivationRecorder(model, keep_tensors=False)
        with recorder:  # dtypes only, while traced: no op is added to the step
            out = tap.watch.around_compiled(step, lambda: self.xla_step(data), tap.logs_gradients, capture)
        if recorder.dtypes:
            tap.observed_dtypes = dict(recorder.dtypes)
            tap.observed_output_layer = recorder.output_layer
        if tap.logs_gradients and tap.log_updates:
            when(tap.status, "update statistics", (metadata.UPDATE_STATS,), tap.update_due(step),
                 lambda: tap.describe_update(step, self._kept()), name=tap.status.name)
        tap.next_step()
        return out

    def _kept(self):
        return [self.kept_gradients[k].read_value() if k in self.kept_gradients else None
                for k in range(len(self.tap.selected_vars))]

    def probe(self, step, x, y, sample_weight):
        """Before the compiled step: recompute it, describe it, compare it."""
        tap, model = self.tap, self.model
        seeds = [tf.convert_to_tensor(v.value) for v in self.seeds]
        outcome = None
        if self.candidate is not None:
            loss, grads, acts, draws = self.candidate(x, y, sample_weight, seeds)
            tap.record_loss(step, loss)
            chosen = tap.choose(grads, model.trainable_variables)
            tap.note_gradient_dtypes(chosen)
            if tap.logs_gradients:
                when(tap.status, "gradient statistics", GRADIENT_KINDS, tap.gradient_due(step),
                     lambda: self._describe(step, chosen), name=tap.status.name)
            named = list(zip(self.candidate.activation_rows, acts))
            outcome = (loss, grads, named, draws)
        tap.copy_weights_when_due(step)
        for slot in tap.slots:
            when(tap.status, "comparison %s" % slot.name, COMPARISON_KINDS, tap.compare_due(step),
                 lambda slot=slot: slot.run(model, x, y, sample_weight, step,
                                            outcome if slot.live else None, seeds),
                 name=slot.name)
        return tf.constant(True)

    def _describe(self, step, chosen):
        for k, buf in self.kept_gradients.items():
            if chosen[k] is not None:
                buf.assign(tf.cast(tf.convert_to_tensor(sparse.dense(chosen[k])), buf.dtype))
        return self.tap.describe_gradients(step, chosen)

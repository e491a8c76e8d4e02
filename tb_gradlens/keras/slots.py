"""One (reference, candidate) comparison of the Keras callback: its passes,
its per-step buffers and its records."""

import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import metadata
from tb_gradlens.keras.rings import StepRing
from tb_gradlens.writing import step_records


class ComparisonSlot:
    """Passes and buffers of one comparison.

    ``live``: the candidate is the training step itself (its loss,
    gradients and layer outputs; or, under XLA, the lens's recomputation
    of it), so only the reference pass runs.  Otherwise both sides are
    shadow passes.  Under XLA (``xla``) a variant that runs "as the
    surrounding code" runs as an XLA pass.
    """

    def __init__(self, model, reference, candidate, activations, max_rows, xla, steps_per_call, sink, live,
                 ieee_reference=True):
        self.reference, self.candidate = reference, candidate
        self.sink = sink  # the ``writing.RecordSink`` a compared step's values go to
        self.xla = xla
        self.live = live
        self.name = compare.default_name(reference, candidate)
        self.activations = activations
        self.max_rows = max_rows
        run_reference = reference.resolved(True) if xla else reference
        run_candidate = candidate.resolved(True) if xla else candidate
        self.passes = (
            compare.reference_pass_for(model, run_reference, run_candidate, activations,
                                       ieee_reference=ieee_reference, surrounding_jit=xla),
            None if live else compare.candidate_pass_for(model, run_candidate, activations, xla),
            compare.stable_pass_for(model, run_reference, run_candidate, activations,
                                    ieee_reference=ieee_reference, surrounding_jit=xla),
        )
        n_cols = len(metadata.DIVERGENCE_COLUMNS)
        self.ring = StepRing(steps_per_call, {
            "divergence": [len(model.trainable_variables), n_cols],
            "loss": [1, len(metadata.LOSS_COMPARISON_COLUMNS)],
            "activation": [max_rows, n_cols],
        })
        self.variable_rows = []
        self.activation_rows = []
        self.extras = None  # {kind: extras}, set when traced

    def run(self, model, x, y, sample_weight, step, candidate_outcome=None, state_values=None):
        """Compare step ``step`` (inside the train function, under ``tf.cond``)."""
        result = compare.compare_keras(
            model, x, y, sample_weight, self.reference, self.candidate,
            activations=self.activations, passes=self.passes, surrounding_jit=self.xla,
            own_step=compare.OwnStep(outcome=candidate_outcome, seeds=state_values),
        )
        if candidate_outcome is not None and self.xla:
            # Under XLA the live candidate is the lens's recomputation of the step (``probe``).
            result.candidate_extras["gradients"] = "recomputed"
        rows = result.activation_rows[: self.max_rows]
        result.activation_rows = rows
        result.activation_dtypes = result.activation_dtypes[: len(rows)]
        self.extras = {kind: result.extras(kind) for kind in (
            metadata.DIVERGENCE, metadata.LOSS_COMPARISON, metadata.ACTIVATION_DIVERGENCE)}
        self.variable_rows = result.variable_rows
        self.activation_rows = rows
        values = {"divergence": result.gradient_divergence, "loss": result.loss}
        if rows:
            act = result.activation_divergence[: len(rows)]
            pad = tf.fill([self.max_rows - len(rows), act.shape[1]], float("nan"))
            values["activation"] = tf.concat([act, pad], axis=0)
        self.sink.put(self.ring, step, values, step_records.comparison_records(
            self.name, self.variable_rows, rows, self.extras))
        return tf.constant(True)

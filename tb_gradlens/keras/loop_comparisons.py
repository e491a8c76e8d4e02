"""``GradLens``'s precision comparisons for custom loops: ``compare`` of raw
TensorFlow ops and ``compare_keras`` of the loop's own Keras step, on the
steps the comparison schedule picks."""

from typing import Callable, Optional, Sequence, Union

import keras
import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import metadata

Step = Union[int, tf.Tensor]  # a Python int (checked in Python) or a tensor inside tf.function
Logged = Union[bool, tf.Tensor]  # whether it logged: a bool for a Python step, a boolean tensor for a tensor step
VariantLike = Union[compare.Variant, str, None]


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


class LoopComparisons:
    """Mixed into ``GradLens`` (its writer, schedules, passes and ``_when``)."""

    def compare(self, loss_fn: Callable, variables: Sequence[tf.Variable], step: Step,
                reference: VariantLike = "float32", candidate: VariantLike = "mixed_bfloat16",
                names: Optional[Sequence[str]] = None) -> Logged:
        """``compare.compare_fn`` on logged steps, written to the writer."""
        name = compare.default_name(compare.as_variant(reference), compare.as_variant(candidate))
        self._expect(step, self.compare_schedule, name, metadata.DIVERGENCE, metadata.LOSS_COMPARISON)

        def run():
            result = compare.compare_fn(loss_fn, variables, reference, candidate, names)
            with self.writer.as_default():
                result.write(step)
            return True

        return self._when(self.should_compare(step), run)

    def compare_keras(self, model: keras.Model, x, y=None, step: Optional[Step] = None, sample_weight=None,
                      reference: VariantLike = "float32", candidate: VariantLike = None, activations: bool = True,
                      gradients: Optional[Sequence[tf.Tensor]] = None, loss: Optional[tf.Tensor] = None,
                      seeds: Optional[Sequence[tf.Tensor]] = None) -> Logged:
        """``compare.compare_keras`` on logged steps, written to the writer.

        The candidate (default: the model as configured) is the loop's own
        step: ``gradients`` (one per trainable variable, as applied), or
        else those ``log_gradients`` was given at this ``step`` for the
        model's variables; ``loss`` its loss.  Without them the candidate
        is recomputed.  The passes run as the caller does: eagerly in an
        eager loop, traced inside ``tf.function``.  ``seeds``: the model's
        seed-generator states before the step (``seed_states``), so the
        passes draw the step's dropout masks; a step that draws random
        numbers without them is recomputed from the current states.  The
        records' ``candidate`` extras say which (``gradients``: "applied"
        or "recomputed"; ``execution``: "eager", "graph" or "xla").  Before a
        model's first step has built it, there is nothing to compare: False.
        """
        reference, candidate = compare.as_variant(reference), compare.as_variant(candidate)
        if not getattr(model, "built", True):
            # A model built by its first step (subclassed, Sequential without an Input) has no
            # weights to compare before it: its passes would build it inside their traces.
            return False
        if gradients is not None and not candidate.is_model_as_configured(False):
            raise ValueError("tb_gradlens.GradLens.compare_keras: gradients= are the loop's own step: give them "
                             "only with a candidate that is the model as configured (candidate=None)")
        if gradients is None and candidate.is_model_as_configured(False):
            gradients = self._logged_gradients(model, step)
        kinds = (metadata.DIVERGENCE, metadata.LOSS_COMPARISON) + (
            (metadata.ACTIVATION_DIVERGENCE,) if activations else ())
        key = (id(model), reference, candidate, activations)
        if key not in self._passes:
            self._passes[key] = (
                compare.reference_pass_for(model, reference, candidate, activations,
                                           ieee_reference=self.ieee_reference),
                compare.candidate_pass_for(model, candidate, activations),
                compare.stable_pass_for(model, reference, candidate, activations,
                                        ieee_reference=self.ieee_reference),
            )
            self._status.status.float32 = self._passes[key][0].precision or self._status.status.float32
        self._expect(step, self.compare_schedule, compare.default_name(reference, candidate), *kinds)

        def run():
            result = compare.compare_keras(
                model, x, y, sample_weight, reference, candidate, activations, self._passes[key],
                own_step=compare.OwnStep(gradients=gradients, loss=loss, seeds=seeds),
            )
            with self.writer.as_default():
                result.write(step)
            return True

        return self._when(self.should_compare(step), run)

    def _logged_gradients(self, model, step):
        """The gradients ``log_gradients`` was given at ``step`` (the same
        int, or the same tensor), one per trainable variable of ``model``;
        None unless every variable had one."""
        if self._logged is None or step is None:
            return None
        logged_step, grads, variables = self._logged
        if not (logged_step is step or (_is_int(step) and _is_int(logged_step) and logged_step == step)):
            return None
        by_id = {id(v): g for g, v in zip(grads, variables)}
        wanted = model.trainable_variables
        if not all(id(v) in by_id for v in wanted):
            return None
        return [by_id[id(v)] for v in wanted]

"""``GradLens``: the callback's features for custom training loops."""

import os
from typing import Callable, Optional, Sequence, Union

import keras
import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import records
from tb_gradlens import safety
from tb_gradlens.keras.schedule import COMPARE_EVERY
from tb_gradlens.keras.schedule import GRADIENT_EVERY
from tb_gradlens.keras.schedule import Schedule
from tb_gradlens.keras.schedule import select
from tb_gradlens.keras.status import AskedAsCalled
from tb_gradlens.writing import distribute
from tb_gradlens.writing import keras_private
from tb_gradlens.writing import summary_ops

WRITER = "tb_gradlens.keras.GradLens"
Step = Union[int, tf.Tensor]  # a Python int (checked in Python) or a tensor inside tf.function
Logged = Union[bool, tf.Tensor]  # whether it logged: a bool for a Python step, a boolean tensor for a tensor step
VariantLike = Union[compare.Variant, str, None]


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


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
    ``compare_keras`` compares the loop's own step: the gradients it logged
    at that step (or hands over, ``gradients=``) are the candidate, and
    what the lens computes it computes as the loop runs (eagerly in an
    eager loop); a model with Dropout needs the seed states read before
    the step (``seeds=lens.seed_states(model)``).
    Writes go to ``writer`` (default: a file writer on ``log_dir`` in the
    chief process, a no-op writer in other workers); do not call the
    logging methods inside an XLA-compiled function.

    Inside ``strategy.run`` (several replicas) call ``log_gradients`` from
    every replica with its own gradients: they are summed across replicas
    (the gradient the optimizer applies) and replica 0 writes; with
    ``replica_divergence`` each replica's gradient is also compared with the
    replica mean.  The collectives run on logged steps only for a Python
    ``step``, on every step for a tensor step.

    ``ieee_reference``: as ``GradLensCallback``'s (a float32 reference is
    computed in float64 where float32 measured degraded here).
    """

    def __init__(self, log_dir: Optional[Union[str, os.PathLike]] = None,
                 writer: Optional[tf.summary.SummaryWriter] = None, gradient_every: int = GRADIENT_EVERY,
                 compare_every: int = COMPARE_EVERY, variables: Optional[str] = None, start_step: int = 0,
                 stop_step: Optional[int] = None, histogram: bool = True, name: str = "model",
                 replica_divergence: bool = False, ieee_reference: bool = True):
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
        self._logged = None  # (step, gradients, variables) of the last log_gradients call
        self._written_map = None
        self.ieee_reference = bool(ieee_reference)
        self._status = AskedAsCalled(WRITER, name, writer)
        with safety.guard(WRITER + " (environment)"):
            self._status.status.environment = compare.environment()

    def _expect(self, step, schedule, name, *kinds):
        self._status.expect(step, schedule, name, *kinds)

    def should_log(self, step: Step) -> Logged:
        """Whether gradient statistics are logged at ``step``."""
        return self.gradient_schedule(step)

    def should_compare(self, step: Step) -> Logged:
        """Whether comparisons run at ``step``."""
        return self.compare_schedule(step)

    def _when(self, due, fn):
        """Run ``fn`` when ``due`` (a bool, or a boolean tensor: tf.cond).

        A failure is reported by ``safety`` (cause: the calling method) and
        gives False.
        """
        method = fn.__qualname__.split(".<locals>")[0].split(".")[-1]  # also of the mixed-in methods
        cause = "tb_gradlens.keras.%s.%s" % (type(self).__name__, method)
        if isinstance(due, bool):
            return safety.call(cause, fn, default=False) if due else False

        def branch():
            fn()
            return tf.constant(True)

        with safety.guard(cause):
            out = tf.cond(due, branch, lambda: tf.constant(False))
            if distribute.replica_context() is None:
                # A functional If runs only the branch taken, and leaves no Merge node with a control
                # input for Grappler's loop optimizer to warn about ("Skipping loop optimization").
                keras_private.keep_branches_unlowered(out)
            return out
        return tf.constant(False)

    def log_gradients(self, grads: Sequence[Optional[tf.Tensor]], variables: Sequence[tf.Variable],
                      step: Step) -> Logged:
        """Gradient statistics (and histograms) of the selected variables."""
        grads, variables = list(grads), list(variables)
        self._logged = (step, grads, variables)  # compare_keras at this step compares them
        kinds = (metadata.GRAD_STATS, metadata.GRAD_HISTOGRAM) if self.histogram else (metadata.GRAD_STATS,)
        self._expect(step, self.gradient_schedule, self.name, *kinds)
        chosen = select(variables, self.variables_pattern)
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
                summary_ops.gradients(
                    grads, variables, step=step, name=self.name, histogram=self.histogram,
                    aggregate=False,
                )
                if gathered is not None:
                    summary_ops.write_replica_divergence(
                        gathered, summary_ops.variable_paths(variables), step, records.REPLICAS_NAME
                    )
            return True

        return self._when(due, write)

    def log_updates(self, before: Sequence[tf.Tensor], after: Sequence[tf.Tensor], variables: Sequence[tf.Variable],
                    step: Step, gradients: Optional[Sequence[tf.Tensor]] = None) -> Logged:
        """Update statistics (incl. lost-update fraction) of one optimizer step."""
        variables = list(variables)
        self._expect(step, self.gradient_schedule, self.name, metadata.UPDATE_STATS)
        chosen = select(variables, self.variables_pattern)

        def write():
            stats = numerics.update_statistics(
                [before[i] for i in chosen], [after[i] for i in chosen],
                [gradients[i] for i in chosen] if gradients is not None else None,
            )
            with self.writer.as_default():
                summary_ops.update_stats(
                    stats, summary_ops.variable_paths([variables[i] for i in chosen]),
                    step=step, name=self.name,
                    extras=records.update_extras([summary_ops.dtype_name(variables[i]) for i in chosen]),
                )
            return True

        return self._when(self.should_log(step), write)

    def log_dtypes(self, model: keras.Model, x, step: int) -> bool:
        """Write the dtype map (one eager forward pass on ``x``) if it changed."""
        return safety.call("tb_gradlens.keras.GradLens.log_dtypes", self._log_dtypes,
                           model, x, step, default=False)

    def _log_dtypes(self, model, x, step):
        current = compare.observe_dtypes(model, x)
        if current == self._written_map:
            return False
        with self.writer.as_default():
            summary_ops.dtypes(current, step=step, name=self.name)
        self._written_map = current
        return True

    def flush(self) -> None:
        """Write the lens status if it changed, and flush the writer."""
        self._status.flush()
        self.writer.flush()

    # Precision comparisons on the steps the comparison schedule picks.

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

    # The non-finite check per step and the replay of the first step that is not finite, before its update.

    @staticmethod
    def all_finite(gradients, loss=None):
        """Boolean scalar: every gradient (and the loss) is finite: one
        reduction over the gradients, no host synchronization inside
        ``tf.function`` (``bool()`` of it eagerly)."""
        from tb_gradlens.keras.forensics import all_finite

        return all_finite(list(gradients) + ([] if loss is None else [tf.convert_to_tensor(loss)]))

    def replay_nonfinite(self, model, x, y=None, step=None, sample_weight=None, seeds=None, reference="float32",
                         optimizer=None):
        """Replay a non-finite step before applying its update: as configured
        and in ``reference`` ("float32" or "float64"), from the same weights,
        batch and seed states (``seeds``: ``seed_states(model)`` read before
        the step), scaling the loss as ``optimizer`` does (a
        ``LossScaleOptimizer``); writes a ``nonfinite_replay`` record at
        ``step``.  Returns the verdict (``analysis.replays.verdict``: "16-bit
        precision: float32 is finite here" or "not precision: float32 is
        non-finite too ...", and where each side first went non-finite) when
        called eagerly, None inside ``tf.function`` (the record has it)::

            seeds = lens.seed_states(model)
            with tf.GradientTape() as tape:
                loss = ...
            grads = tape.gradient(loss, model.trainable_variables)
            if not lens.all_finite(grads, loss):
                print(lens.replay_nonfinite(model, x, y, step, seeds=seeds)["text"])
                break  # before the update
            optimizer.apply(grads, model.trainable_variables)
        """
        key = ("replay", id(model), reference, id(optimizer))
        if key not in self._passes:
            self._passes[key] = compare.ReplayPasses(model, reference, optimizer,
                                                     ieee_reference=self.ieee_reference)
            self._status.status.float32 = self._passes[key].reference.precision or self._status.status.float32
        self._expect(step, Schedule(0), self.name, metadata.NONFINITE_REPLAY)
        found = []

        def run():
            replay = compare.replay_step(model, x, y, sample_weight, seeds, passes=self._passes[key])
            with self.writer.as_default():
                summary_ops.write_record(self.name, replay.record(), replay.values,
                                        summary_ops.resolve_step(step))
            found.append(replay)
            return True

        self._when(True, run)
        if not found or not tf.executing_eagerly():
            return None
        from tb_gradlens.analysis import replays

        return replays.verdict(found[0].record(), found[0].values.numpy())

    @staticmethod
    def seed_states(model):
        """The values of ``model``'s seed-generator states now: read them
        before the step and pass them to ``compare_keras(seeds=...)``."""
        return [tf.identity(tf.convert_to_tensor(v.value)) for v in compare.seed_states(model)]

"""``GradLens``: the callback's features for custom training loops."""

import os
from typing import Optional, Sequence, Union

import keras
import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import records
from tb_gradlens import safety
from tb_gradlens.keras.loop_checks import LoopChecks
from tb_gradlens.keras.loop_comparisons import Logged, LoopComparisons, Step
from tb_gradlens.keras.schedule import COMPARE_EVERY
from tb_gradlens.keras.schedule import GRADIENT_EVERY
from tb_gradlens.keras.schedule import Schedule
from tb_gradlens.keras.schedule import select
from tb_gradlens.keras.status import AskedAsCalled
from tb_gradlens.writing import distribute
from tb_gradlens.writing import keras_private
from tb_gradlens.writing import summary_ops

WRITER = "tb_gradlens.keras.GradLens"


class GradLens(LoopComparisons, LoopChecks):
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


"""``GradLens``'s non-finite checks for custom loops: a check per step and the
replay of the first step that is not finite, before its update (the
Keras callback's ``forensics`` for loops that apply their own updates)."""

import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import metadata
from tb_gradlens.keras.schedule import Schedule
from tb_gradlens.writing import summary_ops


class LoopChecks:
    """Mixed into ``GradLens`` (its writer, name, passes and status)."""

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

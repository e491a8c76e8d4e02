"""``LensOptions``: what a ``GradLensCallback`` was asked to log, as one frozen value.

The callback builds it once from its arguments (and validates them there);
``Session``, ``Tap`` and ``StepWatch`` read it and nobody changes it.  A
``fit`` that resumes the lens reads the same value.
"""

import dataclasses
import os
from typing import Optional, Sequence, Union

from tb_gradlens.keras.schedule import COMPARE_EVERY
from tb_gradlens.keras.schedule import Schedule
from tb_gradlens.keras.schedule import update_schedule

NONFINITE_REPLAY_VALUES = ("auto", True, False, "float64", None)


@dataclasses.dataclass(frozen=True)
class LensOptions:
    """The callback's arguments, resolved (see ``GradLensCallback`` for each).

    Attributes:
      log_dir: the run directory the records go to.
      name: tag prefix of the gradient, update, dtype and status records.
      gradient_schedule: the steps that log gradient statistics.
      compare_schedule: the steps the comparisons run at.
      update_schedule: the steps that log update statistics (steps of the
        gradient schedule; never when ``update_stats`` is False).
      variables: regex selecting the variables logged (None: all).
      comparisons: "auto", or the Variants/policy names/pairs asked for.
      histogram: also the log2-magnitude gradient histogram.
      activations: comparisons also compare every layer's output.
      replica_divergence: each replica's gradient vs the replica mean.
      nonfinite_replay: "auto", True, False or "float64".
      stop_on_nonfinite: hold back a non-finite step's update and stop.
      flush_seconds: most seconds healthy logged steps wait for a flush.
      ieee_reference: a float32 reference computes in float64 where float32
        measured degraded (TF32, oneDNN's fpmath mode).
    """

    log_dir: Union[str, os.PathLike]
    name: str
    gradient_schedule: Schedule
    compare_schedule: Schedule
    update_schedule: Schedule
    variables: Optional[str]
    comparisons: Union[str, Sequence]
    histogram: bool
    activations: bool
    replica_divergence: bool
    nonfinite_replay: Union[str, bool]
    stop_on_nonfinite: bool
    flush_seconds: float
    ieee_reference: bool = True

    @classmethod
    def from_arguments(cls, log_dir, gradient_every, compare_every, variables, start_step, stop_step,
                       comparisons, histogram, update_stats, activations, name, replica_divergence,
                       update_every, nonfinite_replay, stop_on_nonfinite, flush_seconds,
                       ieee_reference=True) -> "LensOptions":
        """The options of ``GradLensCallback(...)``'s arguments; ValueError for a value it refuses."""
        gradients = Schedule(gradient_every, start_step, stop_step)
        comparing = compare_schedule(compare_every, start_step, stop_step)
        updates = update_schedule(gradients, update_every, update_stats)
        if nonfinite_replay not in NONFINITE_REPLAY_VALUES:
            raise ValueError("tb_gradlens: nonfinite_replay must be 'auto', True, False or 'float64', not %r"
                             % (nonfinite_replay,))
        if not flush_seconds >= 0:
            raise ValueError("tb_gradlens: flush_seconds must be a number >= 0, not %r" % (flush_seconds,))
        return cls(
            log_dir=log_dir,
            name=name,
            gradient_schedule=gradients,
            compare_schedule=comparing,
            update_schedule=updates,
            variables=variables,
            comparisons=comparisons,
            histogram=histogram,
            activations=activations,
            replica_divergence=replica_divergence,
            nonfinite_replay=nonfinite_replay or False,
            stop_on_nonfinite=bool(stop_on_nonfinite),
            flush_seconds=float(flush_seconds),
            ieee_reference=bool(ieee_reference),
        )


class ReadOnlyOption:
    """A callback attribute that reads the field of the same name of its
    ``options`` (as Keras' callbacks expose their arguments); setting it
    raises, since the lens would not see the change."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, callback, owner=None):
        return self if callback is None else getattr(callback.options, self.name)

    def __set__(self, callback, value):
        raise AttributeError("tb_gradlens: %s is fixed when the callback is made (make a new GradLensCallback)"
                             % self.name)


def compare_schedule(every, start_step, stop_step):
    """The comparisons' steps.  ``every`` None (the default): every
    ``COMPARE_EVERY`` steps from one interval in, so a short run does not
    pay for tracing the comparison's passes; a value given: from
    ``start_step`` on."""
    if every is None:
        return Schedule(COMPARE_EVERY, (start_step or 0) + COMPARE_EVERY, stop_step)
    return Schedule(every, start_step, stop_step)

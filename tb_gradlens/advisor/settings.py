"""``Advisor``: what the precision advisor in the Keras callback is asked to do."""

from typing import Any
from typing import Iterable
from typing import Optional

from tb_gradlens.advisor.rounds import MAX_VERIFICATIONS
from tb_gradlens.advisor.units import MAX_UNITS

UNITS_PER_STEP = 4


class Advisor:
    """The precision advisor of a ``GradLensCallback(advisor=Advisor(...))``.

    On the callback's comparison steps (or every ``every`` optimizer steps)
    it measures ``units_per_step`` units on ``data`` with the weights of
    that step; when every unit is measured it makes the recommendation,
    verifies it and writes an ``advice`` record (named ``name``), then
    starts the next round.  A round of U units costs ``2U`` passes, two
    more per step it spans, and one to ``max_verifications`` verification
    passes (docs/benchmarks-history.md, "Precision advisor"); nothing runs on other steps.

    Args:
      data: the batch ``(x, y[, sample_weight])`` (or a dataset: its first
        batch) measured at every round: one fixed batch, so rounds differ by
        the weights only.  Dropout and noise draw as a training step does.
      every: optimizer steps between measurements (None: the callback's
        ``compare_every``).
      units_per_step: units measured per step (the cost of one step).
      max_units: units at most (deep models: consecutive layers grouped).
      tolerance: the gradient divergence to reach (None: the calibrated
        tolerance of the alerts).
      max_verifications: verification passes at most per round.
      name: tag prefix of the ``advice`` records.
    """

    def __init__(self, data: Iterable[Any], every: Optional[int] = None, units_per_step: int = UNITS_PER_STEP,
                 max_units: int = MAX_UNITS, tolerance: Optional[float] = None,
                 max_verifications: int = MAX_VERIFICATIONS, name: str = "advisor") -> None:
        if data is None:
            raise ValueError("tb_gradlens.Advisor: give the batch to measure on, data=(x, y)")
        if int(units_per_step) < 1 or int(max_units) < 1:
            raise ValueError("tb_gradlens.Advisor: units_per_step and max_units must be at least 1")
        self.data = data
        self.every = every
        self.units_per_step = int(units_per_step)
        self.max_units = int(max_units)
        self.tolerance = tolerance
        self.max_verifications = int(max_verifications)
        self.name = name

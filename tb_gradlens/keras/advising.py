"""The precision advisor inside ``GradLensCallback`` (``advisor=Advisor(...)``).

After each train-function call (``on_train_batch_end``) the hook checks
whether the optimizer steps just taken include a due step; if so it runs
the next part of the advisor's round (traced passes) *between* steps, on
the advisor's fixed batch, outside the train function: every pass is
stateless (``keras.StatelessScope``, policies restored), so training is
bit-identical with and without it.  A failure is reported once
(``tb_gradlens.safety``) and training goes on.
"""

from tb_gradlens import safety
from tb_gradlens.advisor import api
from tb_gradlens.advisor import limits
from tb_gradlens.advisor import rounds
from tb_gradlens.keras.schedule import Schedule
from tb_gradlens.writing import summary_ops

CAUSE = "tb_gradlens.keras.GradLensCallback (precision advisor)"
WRITER = "tb_gradlens.keras.GradLensCallback"


class AdvisorHook:
    """The advisor's state during ``fit`` (see the module).

    Args:
      advisor: the ``Advisor`` settings.
      model: the model trained.
      writer: the callback's summary writer.
      compare_schedule: the callback's comparison ``Schedule`` (used when
        ``advisor.every`` is None).
    """

    def __init__(self, advisor, model, writer, compare_schedule):
        self.advisor = advisor
        self.model = model
        self.writer = writer
        self.schedule = Schedule(advisor.every) if advisor.every else compare_schedule
        self.batch = api.as_batch(advisor.data)
        self.measurer = None
        self.round = None
        self.refused = False
        self.last_step = int(model.optimizer.iterations.numpy())

    @classmethod
    def started(cls, hook, advisor, model, writer, compare_schedule):
        """``on_train_begin``: the hook of this ``fit`` (``hook`` kept for the
        same model and writer, with its traced passes); None when the
        advisor cannot start (reported once)."""
        with safety.guard(CAUSE):
            if hook is None or hook.model is not model or hook.writer is not writer:
                hook = cls(advisor, model, writer, compare_schedule)
            hook.last_step = int(model.optimizer.iterations.numpy())
            return hook
        return None

    def due_step(self, now):
        """The last due optimizer step in [last seen, now) (None: none)."""
        due = [s for s in range(self.last_step, now) if self.schedule(s)]
        self.last_step = now
        return due[-1] if due else None

    def after_batch(self, session=None):
        """``on_train_batch_end``: measure when a due step was taken (records
        at the session's record steps)."""
        step_offset = session.sink.offset if session is not None and session.sink is not None else 0
        step = self.due_step(int(self.model.optimizer.iterations.numpy()))
        if step is None or self.refused:
            return
        with safety.guard(CAUSE):
            payload = self._measure(step + step_offset)
            if payload is not None:
                with self.writer.as_default():
                    summary_ops.advice(payload, step=step + step_offset, name=self.advisor.name)

    def _measure(self, step):
        reason = limits.several_replicas(self.model)
        if reason is not None:
            self.refused = True
            return rounds.not_attributable_payload(self.model, WRITER, reason)
        if self.measurer is None:
            self.measurer = rounds.new_measurer(self.model, self.advisor.max_units, traced=True)
        if self.round is None or self.round.done:
            self.round = rounds.Round(self.measurer, WRITER, self.advisor.tolerance,
                                      self.advisor.units_per_step, self.advisor.max_verifications)
        return self.round.measure(self.batch, step)

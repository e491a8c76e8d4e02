"""The lens's traced train functions of one model, kept and reused as Keras keeps its own.

A call that logs something runs Keras' train function traced with the
lens's step (``LiveStep`` or ``ProbeStep``).  Which optional parts that
trace includes (``Tap.parts_due_in``: gradient and update statistics,
comparisons) depends on what the call's steps log: one trace for every call
without a comparison, a second one with the comparisons' passes when one
is first due (without XLA and with one replica; otherwise one trace with
every part).  ``TracedSteps`` makes each when first needed and keeps it for
the session, and for a later ``fit`` of the same model, optimizer and
variables (``trace_key``).
"""

import collections.abc


def trace_key(model):
    """What a traced train function depends on, besides the lens's options."""
    return (
        id(model), id(model.optimizer), tuple(id(v) for v in model.trainable_variables),
        model.jit_compile, model.run_eagerly, getattr(model, "steps_per_execution", 1),
        id(model.distribute_strategy),
    )


class TracedSteps(collections.abc.Mapping):
    """``{parts: Keras' train function traced with the lens's step}`` of one
    model (see the module); ``parts`` is a frozenset of ``Tap.parts``, or
    None where one trace holds every part.

    Args:
      model: the model, as it is when the lens sets up (``key``).
      tap: its ``Tap``.
      lens_step: its ``LiveStep`` or ``ProbeStep``.
    """

    def __init__(self, model, tap, lens_step):
        self.key = trace_key(model)
        self._tap = tap
        self._lens_step = lens_step
        self._functions = {}

    def serves(self, model):
        """Whether these traces are still those of ``model`` (nothing they depend on changed)."""
        return self.key == trace_key(model)

    def parts_from(self, first):
        """The key of the trace a call from train step ``first`` runs."""
        if not self._lens_step.traces_by_parts:
            return None
        return self._tap.parts_due_in(first, first + self._tap.steps_per_call)

    def function_for(self, parts):
        """Keras' train function for the lens's step with ``parts`` (made on
        first use, traced at its first call)."""
        function = self._functions.get(parts)
        if function is None:
            self._lens_step.patch()
            try:
                function = self._functions[parts] = self._lens_step.function()
            finally:
                self._lens_step.restore()
        return function

    def __getitem__(self, parts):
        return self._functions[parts]

    def __iter__(self):
        return iter(self._functions)

    def __len__(self):
        return len(self._functions)

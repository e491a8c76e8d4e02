"""The passes of an attribution and what they measure.

For one batch, with the same weights and the same random draws in every
pass (dropout masks, noise):

* the **candidate**: the model as configured (it draws the randomness, as
  the training step draws it);
* the **reference**: every layer in float32;
* per unit u, **leave-one-out**: u alone in float32, every other layer as
  configured; and **one-at-a-time**: u alone as configured, every other
  layer in float32.

The gradient divergence of a pass is the rel L2 of its gradients (all
trainable weights) against the reference's (``recommend.rel_l2``).  At the
output of u (its last layer output row), the candidate's divergence is
split into the error **born** in u (the one-at-a-time pass: u's inputs are
exact, only u rounds) and the error it **inherits** (the leave-one-out
pass: u is exact, its inputs carry what the layers before it did).
"""

import collections
import time

from tb_gradlens.advisor import limits
from tb_gradlens.advisor import recommend
from tb_gradlens.advisor.passes import ALL
from tb_gradlens.advisor.passes import MappedPass

UnitResult = collections.namedtuple(
    "UnitResult", ("leave_one_out", "one_at_a_time", "born", "inherited", "total", "row", "reason"))

MAX_VERIFY_MAPS = 8
KEPT = "; kept as configured in every pass, the float32 reference included"

Baseline = collections.namedtuple("Baseline", ("candidate", "reference", "draws", "divergence", "loss_rel_error"))


def output_row(unit, rows):
    """The row of ``rows`` (forward order) that is the unit's output: its
    last top layer's own row, else the last row of a layer inside it."""
    for path in reversed(unit.paths):
        if path in rows:
            return path
    inside = [r for r in rows if any(r.startswith(p + "/") for p in unit.paths)]
    return inside[-1] if inside else None


def _output_divergence(outcome, reference, row):
    if row is None or row not in outcome.outputs or row not in reference.outputs:
        return None
    return recommend.rel_l2([outcome.output(row)], [reference.output(row)])


class Measurer:
    """The passes of ``units`` of ``model`` (built once, reused by later
    rounds when ``traced``); counts the passes run and the seconds spent."""

    def __init__(self, model, units, traced=True):
        self.model = model
        self.units = units
        self.traced = traced
        self.candidate = MappedPass(model, (), traced)
        self.reference = MappedPass(model, ALL, traced)
        self._unit_passes = {}
        self._maps = {}
        self.passes = 0
        self.seconds = 0.0
        self.raw_reasons = None
        self.unscoped_ops = None
        self.kept_as_configured = {}  # unit index -> why (its switch changes the step's structure)
        self._probed = False

    def _run(self, mapped, batch, draws=None):
        start = time.perf_counter()
        try:
            return mapped(*batch, draws=draws)
        finally:
            self.passes += 1
            self.seconds += time.perf_counter() - start

    def _all_layers_but(self, k):
        """Every switchable unit's layers but unit ``k``'s."""
        return [layer for j, unit in enumerate(self.units)
                if j != k and j not in self.kept_as_configured for layer in unit.layers]

    def _keep_structure(self, batch, candidate, draws):
        """The float32 reference changes the step's structure: find the units
        whose own switch does (a leave-one-out pass each, once), keep them as
        configured in every pass from now on, the reference included."""
        self._probed = True
        for k, unit in enumerate(self.units):
            try:
                outcome, _ = self._run(MappedPass(self.model, unit.layers, self.traced), batch, draws)
                reason = limits.structure_change(candidate, outcome)
            except ValueError as error:  # another number of random draws
                reason = limits.STRUCTURE % error
            if reason is not None:
                self.kept_as_configured[k] = reason + KEPT
        self.reference = MappedPass(self.model, tuple(self._all_layers_but(None)), self.traced)

    def _unit_pass(self, k, kind):
        key = (k, kind)
        if key not in self._unit_passes:
            layers = self.units[k].layers if kind == "leave_one_out" else self._all_layers_but(k)
            self._unit_passes[key] = MappedPass(self.model, tuple(layers), self.traced)
        return self._unit_passes[key]

    def baseline(self, batch):
        """The candidate and the reference of ``batch`` (a Baseline); the
        first call also looks for layers that ignore their policy."""
        candidate, draws = self._run(self.candidate, batch)
        reference, _ = self._run(self.reference, batch, draws)
        if not self._probed and limits.structure_change(candidate, reference) is not None:
            self._keep_structure(batch, candidate, draws)
            reference, _ = self._run(self.reference, batch, draws)
        if self.raw_reasons is None:
            graph = self.reference.graph(*batch, draws=draws)
            self.raw_reasons, self.unscoped_ops = limits.raw_op_reasons(self.units, graph, self.model)
        divergence = recommend.rel_l2(candidate.gradients, reference.gradients)
        loss_rel = abs(candidate.loss - reference.loss) / max(abs(reference.loss), 1e-30)
        return Baseline(candidate, reference, draws, divergence, loss_rel)

    def unit(self, k, batch, base):
        """The UnitResult of unit ``k`` on the batch of ``base``."""
        row = output_row(self.units[k], base.candidate.rows)
        total = _output_divergence(base.candidate, base.reference, row)
        reason = self.raw_reasons[k] or self.kept_as_configured.get(k)
        if reason is not None:
            return UnitResult(None, None, None, None, total, row, reason)
        results = {}
        for kind in ("leave_one_out", "one_at_a_time"):
            try:
                outcome, _ = self._run(self._unit_pass(k, kind), batch, base.draws)
            except ValueError as error:  # another number of random draws
                return UnitResult(None, None, None, None, total, row, limits.STRUCTURE % error)
            reason = limits.structure_change(base.candidate, outcome)
            if reason is not None:
                return UnitResult(None, None, None, None, total, row, reason)
            results[kind] = outcome
        loo, alone = results["leave_one_out"], results["one_at_a_time"]
        return UnitResult(
            recommend.rel_l2(loo.gradients, base.reference.gradients),
            recommend.rel_l2(alone.gradients, base.reference.gradients),
            _output_divergence(alone, base.reference, row),
            _output_divergence(loo, base.reference, row),
            total, row, None,
        )

    def verify(self, kept, batch, base):
        """The gradient divergence with exactly the units ``kept`` in float32."""
        key = tuple(sorted(kept))
        if key not in self._maps:
            if len(self._maps) >= MAX_VERIFY_MAPS:  # bounded memory over a long training
                self._maps.clear()
            layers = tuple(layer for k in key for layer in self.units[k].layers)
            self._maps[key] = MappedPass(self.model, layers, self.traced)
        outcome, _ = self._run(self._maps[key], batch, base.draws)
        return recommend.rel_l2(outcome.gradients, base.reference.gradients)

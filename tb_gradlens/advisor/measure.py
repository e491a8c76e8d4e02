"""The passes of an attribution and what they measure.

For one batch, with the same weights and the same random draws in every
pass (dropout masks, noise):

* the **candidate**: the model as configured (it draws the randomness, as
  the training step draws it);
* the **reference**: every layer in float32;
* the **stable** pass: the reference rounded between layers as the
  candidate rounds (``compare.stable``): with the two above it gives every
  judged row its limit, by the alerts' rule (``judging``);
* per unit u, **leave-one-out**: u alone in float32, every other layer as
  configured; and **one-at-a-time**: u alone as configured, every other
  layer in float32.

A pass is judged by its harm index (the largest value / limit over the
rows; ``judging.Judge``) and, for context, by its gradient divergence (the
rel L2 of all its gradients against the reference's, ``recommend.rel_l2``).
At the output of u (its last layer output row), the candidate's divergence
is split into the error **born** in u (the one-at-a-time pass: u's inputs
are exact, only u rounds) and the error it **inherits** (the leave-one-out
pass: u is exact, its inputs carry what the layers before it did).
"""

import collections
import time

import numpy as np
import tensorflow as tf

from tb_gradlens.advisor import judging
from tb_gradlens.advisor import limits
from tb_gradlens.advisor import recommend
from tb_gradlens.advisor.passes import ALL
from tb_gradlens.advisor.passes import MappedPass
from tb_gradlens.advisor.passes import STABLE
from tb_gradlens.analysis import codes
from tb_gradlens.compare import keras_passes

# Per unit: the gradient divergences and harm indices of its leave-one-out
# ("without": it alone in float32) and one-at-a-time ("alone") passes, the
# rows' values of its one-at-a-time and leave-one-out passes (``alone_rows``,
# ``without_rows``, for the recommendation), the born / inherited / total divergence at its output row,
# and why it is not attributable (None: it is).
UnitResult = collections.namedtuple(
    "UnitResult", ("leave_one_out", "one_at_a_time", "harm_without", "harm_alone", "alone_rows", "without_rows",
                   "born", "inherited", "total", "row", "reason"))

MAX_VERIFY_MAPS = 8
# What a pass with some layers switched may raise when the switch breaks the
# step (another number of random draws, a model mixing its layers' outputs in
# dtypes that no longer match): the unit is then not attributable.
SWITCH_ERRORS = (ValueError, TypeError, tf.errors.InvalidArgumentError)
KEPT = "; kept as configured in every pass, the float32 reference included"

# The baseline of a batch: its passes, the Judge of their rows, the
# candidate's Harm, gradient divergence and loss relative error.
Baseline = collections.namedtuple("Baseline", ("candidate", "reference", "draws", "judge", "harm", "divergence",
                                               "loss_rel_error"))
# A verified map: its harm index, where it is worst, its gradient divergence
# and its rows' values (``flat``; None when the pass broke the step).
Verified = collections.namedtuple("Verified", ("harm", "worst", "divergence", "rows"))


def same_step(a, b):
    """Whether two Outcomes are the same step bit for bit (loss and gradients)."""
    if a.loss != b.loss or len(a.gradients) != len(b.gradients):
        return False
    return all((x is None and y is None) or (x is not None and y is not None and np.array_equal(x, y))
               for x, y in zip(a.gradients, b.gradients))


def held_harm(judge, outcome, again):
    """The Harm of two draws of one pass's rounding, each row at the smaller
    of its two values: beyond its limit only where both draws are."""
    first, second = judge.values(outcome), judge.values(again)
    return judge.harm(values={k: np.fmin(first[k], second[k]) for k in first})


def flat(values):
    """The rows of every judged kind in one vector (``judging.KINDS`` order)."""
    return np.concatenate([np.asarray(values[k], np.float64) for k in judging.KINDS])


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
        # A second draw of the candidate's rounding: a row is beyond its limit on
        # a batch only when both draws are, as an alert needs two comparisons.
        self.candidate_again = MappedPass(model, (), traced, realization=1)
        self.reference = MappedPass(model, ALL, traced, sampling_noise=True)
        # As many realizations of the stable rounding as the alerts' limits
        # take the largest of (over their last comparisons): one batch here.
        self.stables = [MappedPass(model, STABLE, traced, realization=k)
                        for k in range(codes.DEFAULT_THRESHOLDS.stable_window)]
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
            except SWITCH_ERRORS as error:  # another number of random draws, dtypes that no longer match
                reason = limits.STRUCTURE % error
            if reason is not None:
                self.kept_as_configured[k] = reason + KEPT
        self.reference = MappedPass(self.model, tuple(self._all_layers_but(None)), self.traced,
                                    sampling_noise=True)

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
        stables = [self._run(p, batch, draws)[0] for p in self.stables]
        gradient_dtypes = keras_passes.owner_compute_dtypes(self.model, self.model.trainable_variables)
        judge = judging.Judge(self.model, candidate, reference, stables, gradient_dtypes)
        again, _ = self._run(self.candidate_again, batch, draws)
        divergence = recommend.rel_l2(candidate.gradients, reference.gradients)
        loss_rel = abs(candidate.loss - reference.loss) / max(abs(reference.loss), 1e-30)
        return Baseline(candidate, reference, draws, judge, held_harm(judge, candidate, again), divergence, loss_rel)

    def unit(self, k, batch, base):
        """The UnitResult of unit ``k`` on the batch of ``base``."""
        row = output_row(self.units[k], base.candidate.rows)
        total = _output_divergence(base.candidate, base.reference, row)
        if k in self.kept_as_configured:
            return self._unmeasured(total, row, self.kept_as_configured[k])
        raw = self.raw_reasons[k]
        results = {}
        for kind in ("leave_one_out", "one_at_a_time"):
            try:
                outcome, _ = self._run(self._unit_pass(k, kind), batch, base.draws)
            except SWITCH_ERRORS as error:  # another number of random draws, dtypes that no longer match
                return self._unmeasured(total, row, limits.STRUCTURE % error)
            reason = limits.structure_change(base.candidate, outcome)
            if reason is not None:
                return self._unmeasured(total, row, reason)
            results[kind] = outcome
        # A unit with 16-bit ops whatever its policy is switched like any other where
        # its switch changes the step (a Normalization whose adapted mean is a 16-bit
        # constant still reads its input in float32 when switched); where it changes
        # nothing, its error is measured alone and stays in every prediction.
        if raw and same_step(results["leave_one_out"], base.candidate):
            del results["leave_one_out"]
        else:
            raw = None
        loo, alone = results.get("leave_one_out"), results["one_at_a_time"]
        alone_harm = base.judge.harm(alone)
        without = None if loo is None else base.judge.harm(loo)
        return UnitResult(
            None if loo is None else recommend.rel_l2(loo.gradients, base.reference.gradients),
            recommend.rel_l2(alone.gradients, base.reference.gradients),
            None if without is None else without.index, alone_harm.index, flat(alone_harm.values),
            None if without is None else flat(without.values),
            _output_divergence(alone, base.reference, row),
            None if loo is None else _output_divergence(loo, base.reference, row),
            total, row, raw,
        )

    @staticmethod
    def _unmeasured(total, row, reason):
        return UnitResult(None, None, None, None, None, None, None, None, total, row, reason)

    def verify(self, layers, batch, base, tolerance):
        """The Verified pass with exactly ``layers`` (every unit's kept in
        float32 as configured) in float32; above ``tolerance``, a second draw
        of its rounding decides with it (``held_harm``)."""
        key = tuple(sorted(id(layer) for layer in layers))
        if key not in self._maps:
            if len(self._maps) >= MAX_VERIFY_MAPS:  # bounded memory over a long training
                self._maps.clear()
            self._maps[key] = [MappedPass(self.model, tuple(layers), self.traced, realization=k) for k in (0, 1)]
        try:
            outcome, _ = self._run(self._maps[key][0], batch, base.draws)
        except SWITCH_ERRORS:
            return Verified(float("inf"), None, float("inf"), None)
        harm = base.judge.harm(outcome)
        if harm.index > tolerance:
            again, _ = self._run(self._maps[key][1], batch, base.draws)
            harm = held_harm(base.judge, outcome, again)
        return Verified(harm.index, harm.worst, recommend.rel_l2(outcome.gradients, base.reference.gradients),
                        flat(harm.values))

"""An attribution round: every unit measured (possibly over several steps),
then the recommendation, verified, as one ``advice`` record.

A round measures ``units_per_step`` units per ``measure`` call (each call:
the candidate and reference passes of that step, then two passes per
unit); the call that measures the last unit also makes the recommendation
(``recommend.greedy``) and verifies it with one pass with exactly that
policy map (more, up to ``max_verifications``, adding the next-ranked unit
while the verified divergence stays above the tolerance).  A round costs
``2 * units + 2 * calls + verifications`` passes.
"""

import time

from tb_gradlens import keras_private
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.advisor import limits
from tb_gradlens.advisor import recommend
from tb_gradlens.advisor import units as units_module
from tb_gradlens.advisor.measure import Measurer
from tb_gradlens.compare import dtype_maps

MAX_VERIFICATIONS = 3
NOT_ATTRIBUTABLE_UNSCOPED = "operations outside any Keras layer"


def default_tolerance(model, depth):
    """(limit, basis) the alerts judge a 16-bit gradient row against at
    ``depth`` (``analysis.tolerances``): the calibrated tolerance."""
    from tb_gradlens.analysis import codes
    from tb_gradlens.analysis import tolerances

    computes = {layer.compute_dtype for layer in keras_private.flatten_layers(model)}
    dtype = "float16" if "float16" in computes else "bfloat16"
    rule = tolerances.row_rule(metadata.DIVERGENCE, dtype, "float32", depth, codes.DEFAULT_THRESHOLDS)
    return rule.limit, "calibrated %s gradient tolerance: %s" % (dtype, rule.basis)


class Round:
    """One round of attribution of ``model`` (see the module).

    Args:
      measurer: the ``Measurer`` (its passes are reused by later rounds).
      writer: who measures, for the record.
      tolerance: the gradient divergence to reach (None: ``default_tolerance``).
      units_per_step: units measured per ``measure`` call (None: all).
      max_verifications: verification passes at most.
    """

    def __init__(self, measurer, writer, tolerance=None, units_per_step=None,
                 max_verifications=MAX_VERIFICATIONS):
        self.measurer = measurer
        self.writer = writer
        self.tolerance = tolerance
        self.units_per_step = units_per_step or max(1, len(measurer.units))
        self.max_verifications = max(1, int(max_verifications))
        self.results = [None] * len(measurer.units)
        self.steps = [None] * len(measurer.units)
        self.next = 0
        self.first_step = None
        self.started = None
        self.passes_before = measurer.passes
        self.seconds = 0.0

    @property
    def done(self):
        return self.next >= len(self.results)

    def measure(self, batch, step=0):
        """Measure the next units on ``batch``; the advice payload when the
        round is complete, else None."""
        start = time.perf_counter()
        if self.first_step is None:
            self.first_step = step
        base = self.measurer.baseline(batch)
        stop = min(len(self.results), self.next + self.units_per_step)
        for k in range(self.next, stop):
            self.results[k] = self.measurer.unit(k, batch, base)
            self.steps[k] = step
        self.next = stop
        payload = self._finish(batch, base, step) if self.done else None
        self.seconds += time.perf_counter() - start
        if payload is not None:
            payload["cost"]["seconds"] = round(self.seconds, 4)
        return payload

    def _tolerance(self, base):
        if self.tolerance is not None:
            return float(self.tolerance), "given by the user"
        return default_tolerance(self.measurer.model, max(1, len(base.candidate.rows)))

    def _finish(self, batch, base, step):
        measurer = self.measurer
        units = measurer.units
        tolerance, basis = self._tolerance(base)
        alone = [r.one_at_a_time for r in self.results]
        loo = [r.leave_one_out for r in self.results]
        ok = [r.reason is None for r in self.results]
        kept, predicted = recommend.greedy(base.divergence, alone, loo, ok, tolerance)
        after, verifications = base.divergence, 0
        if kept:
            after, verifications = measurer.verify(kept, batch, base), 1
            while after > tolerance and verifications < self.max_verifications:
                more = recommend.next_units(kept, alone, loo, ok)
                if more is None:
                    break
                kept.append(more)
                after, verifications = measurer.verify(kept, batch, base), verifications + 1
        model = measurer.model
        kept_units = [units[k] for k in kept]
        recommendation = records.advice_recommendation(
            [u.name for u in kept_units],
            [path for u in kept_units for path in u.paths],
            {"predicted": predicted, "after": after,
             "params_16bit_before": units_module.params_in_16_bits(model),
             "params_16bit_after": units_module.params_in_16_bits(model, kept_units),
             "params_total": units_module.model_params(model)},
            after <= tolerance, verifications)
        not_attributable = []
        if measurer.unscoped_ops:
            _, dtype, ops = measurer.unscoped_ops
            not_attributable.append({"what": NOT_ATTRIBUTABLE_UNSCOPED,
                                     "reason": limits.RAW_OPS % (dtype, ", ".join(ops[:3]))})
        return records.advice(
            self.writer, candidate_label(model), tolerance, basis, base.divergence, base.loss_rel_error,
            [self._unit_entry(k) for k in range(len(units))], recommendation, not_attributable,
            {"passes": measurer.passes - self.passes_before, "steps": [self.first_step, step],
             "units_per_step": self.units_per_step, "units": len(units), "traced": measurer.traced,
             "batch_size": batch_size(batch)})

    def _unit_entry(self, k):
        unit, r = self.measurer.units[k], self.results[k]
        numbers = {"leave_one_out": r.leave_one_out, "one_at_a_time": r.one_at_a_time,
                   "output_total": r.total, "output_born": r.born, "output_inherited": r.inherited}
        return records.advice_unit(unit.name, unit.paths, unit.classes, unit.params, numbers,
                                   self.steps[k], r.row, r.reason)


def candidate_label(model):
    return dtype_maps.dominant_policy(model)


def batch_size(batch):
    import tensorflow as tf

    first = tf.nest.flatten(batch[0])
    shape = tuple(first[0].shape) if first else ()
    return int(shape[0]) if shape and shape[0] is not None else 0


def not_attributable_payload(model, writer, reason, what="the model"):
    """The advice of a model the advisor cannot attribute at all."""
    return records.advice(writer, candidate_label(model), None, "", None, None, [], None,
                          [{"what": what, "reason": reason}], {"passes": 0})


def new_measurer(model, max_units, traced):
    return Measurer(model, units_module.candidate_units(model, max_units), traced)

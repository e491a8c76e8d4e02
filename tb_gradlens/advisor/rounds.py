"""An attribution round: every unit measured (possibly over several steps),
then the recommendation, verified and narrowed, as one ``advice`` record.

A round measures ``units_per_step`` units per ``measure`` call (each call:
the baseline passes of that step, then two passes per unit); the call that
measures the last unit also makes the recommendation (``recommend.greedy``:
the first unit on its measured leave-one-out rows, later ones on rows
predicted from those) and verifies it with one pass with exactly that
policy map (more, up to ``max_verifications``, adding the unit that lowers
the harm predicted from the last verified rows most while the verified
harm index stays above the tolerance), then narrows each recommended group
of layers to the layers that matter (``narrowing``, one pass per half
tried).  A round costs ``2 * units + (3 + stable_window) * calls +
verifications + narrowing`` passes (a call's baseline: the model as
configured twice, two draws of its rounding; the reference; the stable
pass's realizations).

The harm index of a pass is the largest value / limit over its rows (every
variable's gradient, every layer output, the loss), the limits being those
the alerts give the same rows on this batch (``judging``): the tolerance,
1 by default, is "every row within what stable rounding explains".
"""

import time

from tb_gradlens import compare
from tb_gradlens import records
from tb_gradlens.advisor import limits
from tb_gradlens.advisor import narrowing
from tb_gradlens.advisor import recommend
from tb_gradlens.advisor import units as units_module
from tb_gradlens.advisor.measure import Measurer
from tb_gradlens.advisor.measure import flat
from tb_gradlens.analysis.advice import STREAM_CLASSES
from tb_gradlens.compare import dtype_maps

MAX_VERIFICATIONS = 3
MAX_NARROWING_PASSES = 16
NOT_ATTRIBUTABLE_UNSCOPED = "operations outside any Keras layer"
DEFAULT_TOLERANCE = 1.0
TOLERANCE_BASIS = ("every judged row (each variable's gradient, each layer output, the loss) within the limit "
                   "the alerts give it on this batch: %g x what stable 16-bit rounding gives there")


class Round:
    """One round of attribution of ``model`` (see the module).

    Args:
      measurer: the ``Measurer`` (its passes are reused by later rounds).
      writer: who measures, for the record.
      tolerance: the harm index to reach (None: 1, every row within its limit).
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

    def _tolerance(self):
        from tb_gradlens.analysis import codes

        if self.tolerance is not None:
            return float(self.tolerance), "given by the user (harm index: value / limit)"
        return DEFAULT_TOLERANCE, TOLERANCE_BASIS % codes.DEFAULT_THRESHOLDS.stable_factor

    def _finish(self, batch, base, step):
        measurer = self.measurer
        units = list(measurer.units)
        tolerance, basis = self._tolerance()
        limits_ = flat(base.judge.limits)
        total = flat(base.harm.values)
        alone = [r.alone_rows if r.alone_rows is not None else total * 0.0 for r in self.results]
        ok = [r.reason is None for r in self.results]
        without = [r.without_rows for r in self.results]
        kept, predicted = recommend.greedy(total, alone, limits_, ok, tolerance, without)
        verified, verifications = None, 0
        if kept:
            verified, verifications = self._verify([units[k].tops for k in kept], batch, base), 1
            while verified.harm > tolerance and verified.rows is not None \
                    and verifications < self.max_verifications:
                more, _, _ = recommend.next_unit(kept, verified.rows, alone, limits_, ok, kept)
                if more is None:
                    break
                kept.append(more)
                verified = self._verify([units[k].tops for k in kept], batch, base)
                verifications += 1
        if base.harm.index > tolerance and (verified is None or verified.harm > tolerance):
            kept, verified, verifications = self._try_stream(kept, verified, verifications, batch, base)
        groups, narrowed = [units[k].tops for k in kept], 0
        if verified is not None and any(len(g) > 1 for g in groups):
            groups, narrowed = narrowing.narrow(
                groups, lambda trial: self._verify(trial, batch, base).harm, tolerance, verified.harm,
                MAX_NARROWING_PASSES)
            if narrowed:
                verified = self._verify(groups, batch, base)
                narrowed += 1
        return self._payload(batch, base, step, kept, groups, predicted, verified, verifications + narrowed,
                             tolerance, basis)

    def _try_stream(self, kept, verified, verifications, batch, base):
        """Damage a stream of large values makes at each merging layer is born at
        every Add, so no one unit lowers the harm: keep the units holding
        merging layers (a residual stream: two or more), the unit of the row
        worst off and the one before it (the layer that feeds the stream),
        verified as one policy map; taken when it does better than ``kept``."""
        units = self.measurer.units
        merging = [k for k, u in enumerate(units) if any(c in STREAM_CLASSES for c in u.classes)]
        if len(merging) < 2:
            return kept, verified, verifications
        worst = base.harm.worst[1] if base.harm.worst else None
        at = [k for k, u in enumerate(units) if worst in u.paths or any(worst == p or str(worst).startswith(p + "/")
                                                                        for p in u.paths)]
        stream = sorted(set(kept) | set(merging) | set(at) | {k - 1 for k in at if k > 0})
        trial = self._verify([units[k].tops for k in stream], batch, base)
        if verified is None or trial.harm < verified.harm:
            return stream, trial, verifications + 1
        return kept, verified, verifications + 1

    def _verify(self, groups, batch, base):
        layers = [layer for tops in groups for layer in units_module.unit_of(tops).layers]
        return self.measurer.verify(layers, batch, base, self._tolerance()[0])

    def _payload(self, batch, base, step, kept, groups, predicted, verified, verifications, tolerance, basis):
        """The advice record: ``float32`` names the measured units ``kept``,
        ``layers`` the layers of their narrowed ``groups``."""
        measurer, model = self.measurer, self.measurer.model
        kept_units = [units_module.unit_of(tops) for tops in groups]
        after = base.harm.index if verified is None else verified.harm
        recommendation = records.advice_recommendation(
            [measurer.units[k].name for k in kept],
            [path for u in kept_units for path in u.paths],
            {"predicted": predicted, "after": after,
             "gradient_after": base.divergence if verified is None else verified.divergence,
             "params_16bit_before": units_module.params_in_16_bits(model),
             "params_16bit_after": units_module.params_in_16_bits(model, kept_units),
             "params_total": units_module.model_params(model)},
            after <= tolerance, verifications,
            worst_after=(base.harm if verified is None else verified).worst)
        not_attributable = [{"what": unit.name, "reason": r.reason}
                            for unit, r in zip(measurer.units, self.results)
                            if r.reason is not None and r.reason in measurer.raw_reasons]
        if measurer.unscoped_ops:
            _, dtype, ops = measurer.unscoped_ops
            not_attributable.append({"what": NOT_ATTRIBUTABLE_UNSCOPED,
                                     "reason": limits.RAW_OPS % (dtype, ", ".join(ops[:3]))})
        return records.advice(
            self.writer, candidate_label(model), tolerance, basis, base.harm.index, base.loss_rel_error,
            [self._unit_entry(k) for k in range(len(measurer.units))], recommendation, not_attributable,
            {"passes": measurer.passes - self.passes_before, "steps": [self.first_step, step],
             "units_per_step": self.units_per_step, "units": len(measurer.units), "traced": measurer.traced,
             "batch_size": batch_size(batch)},
            gradient_before=base.divergence, worst_before=base.harm.worst,
            float32=measurer.reference.keras_pass.precision or compare.precision_options("float32", False, False)[
                "precision"])

    def _unit_entry(self, k):
        unit, r = self.measurer.units[k], self.results[k]
        numbers = {"leave_one_out": r.leave_one_out, "one_at_a_time": r.one_at_a_time,
                   "harm_without": r.harm_without, "harm_alone": r.harm_alone,
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

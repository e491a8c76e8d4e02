"""The advisor's passes judged by the alerts' own rule.

For one batch the baseline passes (the model as configured, the float32
reference and the stable-rounding pass) give every compared row — each
variable's gradient, each layer output, the loss — exactly the record a
comparison of that step writes, and ``analysis.tolerances.judge`` gives
each row its limit, as it does for the alerts, the tab and the CLI.  Any
other pass (a unit alone in 16 bits, a unit alone in float32, a
recommendation) is then judged by those limits: its harm index is the
largest ``value / limit`` over the rows, and at most 1 means every row is
within what stable rounding explains.
"""

import collections

import numpy as np
import tensorflow as tf

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import records
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import tolerances
from tb_gradlens.compare import dtype_maps

KINDS = (metadata.DIVERGENCE, metadata.ACTIVATION_DIVERGENCE, metadata.LOSS_COMPARISON)

# A pass judged: the largest value / limit over the rows (``index``), where
# it is (kind, row, value, limit), and per kind the values of the rows.
Harm = collections.namedtuple("Harm", ("index", "worst", "values"))


def _metrics(candidates, references, dtypes):
    """float64 [R, len(DIVERGENCE_METRICS)] of host arrays (``numerics``)."""
    if not candidates:
        return np.zeros((0, len(metadata.DIVERGENCE_METRICS)))
    return numerics.divergence_metrics([tf.constant(c) for c in candidates],
                                       [tf.constant(r) for r in references], dtypes).numpy().astype(np.float64)


def _paired(candidate, reference):
    """A gradient pair with ``None`` (no gradient) as zeros of the other's shape."""
    if candidate is None and reference is None:
        return np.zeros(1), np.zeros(1)
    if candidate is None:
        return np.zeros_like(reference), reference
    if reference is None:
        return candidate, np.zeros_like(candidate)
    return candidate, reference


def _loss_columns(candidate, reference):
    """[1, 4]: reference, candidate, |c - r|, |c - r| / |r| (``numerics.loss_comparison``)."""
    diff = abs(candidate - reference)
    rel = diff / abs(reference) if reference != 0 else (0.0 if diff == 0 else np.inf)
    return np.array([[reference, candidate, diff, rel]])


class Judge:
    """The limits of one batch's rows (from the baseline passes), and the harm of any pass.

    Args:
      model: the model (its layers' compute dtypes as configured).
      candidate, reference: ``passes.Outcome``s of the baseline.
      stables: ``passes.Outcome``s of realizations of the stable-rounding
        pass (each row takes the largest divergence of them, as the alerts
        take the largest over their last comparisons).
      gradient_dtypes: the candidate's compute dtype per trainable variable.
      thresholds: the alert rules' ``Thresholds``.
    """

    def __init__(self, model, candidate, reference, stables, gradient_dtypes, thresholds=codes.DEFAULT_THRESHOLDS):
        self.reference = reference
        self.variable_rows = [v.path for v in model.trainable_variables]
        self.gradient_dtypes = list(gradient_dtypes)
        self.activation_rows = [r for r in candidate.rows if r in reference.outputs]
        self.activation_dtypes = [candidate.dtypes[r] for r in self.activation_rows]
        model_policy = dtype_maps.dominant_policy(model)
        compute, stored = dtype_maps.model_dtypes(model)
        self.extras = {
            kind: records.comparison_extras(
                records.variant("float32", "float32", "float32", "float32"),
                records.variant(model_policy, model_policy, compute, stored),
                row_dtypes={metadata.DIVERGENCE: self.gradient_dtypes,
                            metadata.ACTIVATION_DIVERGENCE: self.activation_dtypes}.get(kind))
            for kind in KINDS
        }
        self.limits = self._limits(candidate, stables, thresholds)
        # A gradient at the rounding noise of the reference (a true value of 0, e.g. by a softmax's or a
        # normalization's symmetry) is no signal in any pass (``rounding_budget.noise``): switching a unit
        # to float32 can turn an exact zero of the configured model into 16-bit noise around 0.
        self.noise_levels = np.array([
            float_formats.unit_roundoff(d) / float_formats.unit_roundoff("float32") / thresholds.noise_factor
            if d in float_formats.FORMATS and d != "float32" else np.inf for d in self.gradient_dtypes])

    def tables(self, outcome, stables=()):
        """{kind: float64 [R, C]}: the records a comparison of ``outcome``
        against the reference writes (the stable column: the largest of
        the ``stables``' divergences; NaN without any)."""
        ref = self.reference
        pairs = [_paired(g, r) for g, r in zip(outcome.gradients, ref.gradients)]
        grad = _metrics([g for g, _ in pairs], [r for _, r in pairs], self.gradient_dtypes)
        acts = _metrics([outcome.output(r) for r in self.activation_rows],
                        [ref.output(r) for r in self.activation_rows], self.activation_dtypes)
        loss = _loss_columns(outcome.loss, ref.loss)
        stable_cols = [np.full(len(grad), np.nan), np.full(len(acts), np.nan), np.full(1, np.nan)]
        for stable in stables:
            other = self.values(stable)
            stable_cols = [np.fmax(col, other[k]) for col, k in zip(stable_cols, KINDS)]
        half_cols = [np.full(len(grad), np.nan), np.full(len(acts), np.nan), np.full(1, np.nan)]
        if stables and ref.half_gradients is not None:
            pairs = [_paired(h, r) for h, r in zip(ref.half_gradients, ref.gradients)]
            half_cols[0] = _metrics([h for h, _ in pairs], [r for _, r in pairs], self.gradient_dtypes)[:, 0]
            half_cols[2] = _loss_columns(ref.half_loss, ref.loss)[:, 3]
        return {kind: np.concatenate([table, column[:, None], half[:, None]], axis=1)
                for kind, table, column, half in zip(KINDS, (grad, acts, loss), stable_cols, half_cols)}

    def _series(self, kind, table):
        record = records.comparison_record(kind, self.rows(kind), self.extras[kind])
        steps = np.zeros(1, np.int64)
        return records.Series("advisor", kind, record, steps, steps.astype(np.float64),
                              table[None].astype(np.float32))

    def _limits(self, candidate, stables, thresholds):
        tables = self.tables(candidate, stables)
        context = tolerances.ComparisonContext(tuple(self.activation_dtypes), tuple(self.gradient_dtypes),
                                               max(1, len(self.activation_rows) or len(self.variable_rows)))
        output = tables[metadata.ACTIVATION_DIVERGENCE][-1:, -1] if self.activation_rows else None
        out = {}
        for kind in KINDS:
            if not len(tables[kind]):
                out[kind] = np.zeros(0)
                continue
            judged = tolerances.judge(self._series(kind, tables[kind]), context, thresholds,
                                      output if kind == metadata.LOSS_COMPARISON else None)
            out[kind] = judged.limits[0]
        return out

    def values(self, outcome):
        """{kind: [R]} the judged value of every row of ``outcome`` (rel_l2; the loss: rel_error)."""
        tables = self.tables(outcome)
        return {kind: tables[kind][:, 3 if kind == metadata.LOSS_COMPARISON else 0] for kind in KINDS}

    def harm(self, outcome=None, values=None):
        """The Harm of ``outcome`` (or of precomputed ``values``, per kind)."""
        values = self.values(outcome) if values is None else values
        best = (-np.inf, None)
        for kind in KINDS:
            with np.errstate(invalid="ignore", divide="ignore"):
                ratio = np.where(self.limits[kind] > 0, values[kind] / self.limits[kind], np.nan)
            ratio = np.where(np.isnan(values[kind]) & ~np.isnan(self.limits[kind]), np.inf, ratio)
            if kind == metadata.DIVERGENCE and len(ratio):
                with np.errstate(invalid="ignore"):
                    ratio = np.where(np.asarray(values[kind]) >= self.noise_levels, np.nan, ratio)
            for r in np.nonzero(~np.isnan(ratio))[0]:
                if ratio[r] > best[0]:
                    best = (float(ratio[r]), (kind, self.rows(kind)[r], float(values[kind][r]),
                                              float(self.limits[kind][r])))
        return Harm(best[0] if best[1] is not None else 0.0, best[1], values)

    def rows(self, kind):
        return {metadata.DIVERGENCE: self.variable_rows, metadata.ACTIVATION_DIVERGENCE: self.activation_rows,
                metadata.LOSS_COMPARISON: [records.LOSS_ROW]}[kind]

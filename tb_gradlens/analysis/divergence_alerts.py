"""Alerts of the comparison records: divergence, activation divergence and the loss.

TensorFlow-free.  Each row is judged against its per-step limit
(``tolerances``); what is beyond it, sustained, is a warning; the
comparison's non-finite values and 16-bit reference layers are named too.
"""

import numpy as np

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import detectors
from tb_gradlens.analysis import texts
from tb_gradlens.analysis import tolerances
from tb_gradlens.analysis.alerts import nonfinite_alert
from tb_gradlens.analysis.codes import Alert

_DEFAULT = codes.DEFAULT_THRESHOLDS


def alerts_for_divergence(series, thresholds=_DEFAULT, context=None, judgement=None, benign_steps=(),
                          replay=None):
    """Divergence, flush-to-zero and non-finite alerts of a divergence-like Series.

    ``judgement``: its ``tolerances.Judgement`` (``judge_entry``, made on the
    whole record); else judged here with ``context``, the ComparisonContext
    of its comparison (depth and dtypes of the sibling records; default:
    this record alone).  ``benign_steps`` and ``replay``: as in
    ``alerts_for_grad_stats``.
    """
    record, steps = series.record, series.steps
    if len(steps) == 0:
        return []
    if judgement is None:
        if context is None:
            context = tolerances.ComparisonContext((), (), max(1, len(record.rows)))
        judgement = tolerances.judge(series, context, thresholds)
    info = records.read_comparison(record, series.tag)
    names = (info.candidate.label, info.reference.label)
    out = []
    for code in sorted(set(judgement.codes)):
        in_code = np.array([c == code for c in judgement.codes])
        out += _divergence_alert(series, judgement, judgement.hit & in_code[None, :], code, names)
    if record.kind == metadata.LOSS_COMPARISON:
        ref, cand = series.column("reference"), series.column("candidate")
        counts = (~np.isfinite(ref)).astype(np.float32) + (~np.isfinite(cand))
        return out + nonfinite_alert(series, counts, "candidate", benign_steps, replay)
    out += _flush_alert(series, judgement, thresholds, names)
    if record.kind == metadata.DIVERGENCE:
        out += _hardcoded_alert(series, names)
    return out + nonfinite_alert(series, series.column("nonfinite"), "nonfinite", benign_steps, replay)


def _hardcoded_alert(series, names):
    """Layers the reference computed in 16 bits whatever their policy (one
    alert per comparison, from its gradient record): an info, since no
    comparison can say whether their error harms (Keras' Normalization
    with a given mean and variance keeps them in the compute dtype it was
    built in, as keras.applications' ConvNeXt does; a raw tf.bfloat16 op
    may lose every digit)."""
    found = records.read_reference_16_bit(series.record, series.tag)
    if not found:
        return []
    layers = sorted(found)
    a, b = int(series.steps[0]), int(series.steps[-1])
    dtype = sorted(set(found.values()))[0]
    return [Alert(
        codes.INFO, codes.HARDCODED_16_BIT, series.run, series.tag, a, b, layers,
        texts.HARDCODED.format(vars=texts.names(layers, range(len(layers))), dtype=dtype, ref=names[1], a=a, b=b),
        texts.HARDCODED_FIX,
        codes.view(series, "rel_l2", None, a),
        [{"variable": layer, "dtype": found[layer]} for layer in layers],
    )]


def _divergence_alert(series, judgement, flags, code, names):
    found = detectors.hits(judgement.values, flags)
    index = detectors.by_first(found)
    if not len(index):
        return []
    rows, steps, kind = series.record.rows, series.steps, series.record.kind
    a, b = int(steps[found["first"][index].min()]), int(steps[found["last"][index].max()])
    r0 = index[0]
    worst_row = index[np.argmax(np.where(np.isnan(found["worst"][index]), np.inf, found["worst"][index]))]
    first_limits = [_limit_at(judgement, found["first"][r], r) for r in range(len(rows))]
    explanation = texts.DIVERGENCE.format(
        cand=names[0], ref=names[1], quantity=texts.QUANTITY[kind].format(vars=texts.names(rows, index)),
        differ="differs" if kind == metadata.LOSS_COMPARISON else "differ",
        metric=judgement.column.replace("_", " "), worst=float(found["worst"][worst_row]),
        ws=int(steps[found["worst_index"][worst_row]]), limit=first_limits[r0],
        basis=judgement.basis[r0], a=a,
    )
    born, fix = where_born(series, judgement, int(found["first"][r0]), r0, code)
    explanation += born
    details = detectors.row_details(
        rows, steps, found, index, steps=found["count"].astype(int).tolist(),
        worst=found["worst"].tolist(), worst_step=[int(steps[i]) for i in found["worst_index"]],
        limit=first_limits, basis=judgement.basis,
    )
    return [Alert(
        codes.WARNING, code, series.run, series.tag, a, b, [rows[i] for i in index], explanation,
        fix, codes.view(series, judgement.column, rows[r0], a), details,
        limit=first_limits[r0],
    )]


def where_born(series, judgement, s, r, code):
    """(sentence, fix) saying where the damage of row ``r`` at step index
    ``s`` is born: where values enter the layer (its stable divergence jumps
    beyond what the rows before it carry), between layers (the loss: the
    stable pass reproduces it), or inside (beyond what the stable pass
    shows; a bias's gradient: TensorFlow's 16-bit sum over positions)."""
    kind, rows = series.record.kind, series.record.rows
    stable = float(judgement.stable[s, r])
    dtype = judgement.dtypes[r] or "bfloat16"
    bits = float_formats.get(dtype).mantissa_bits + 1 if dtype in float_formats.FORMATS else 8
    between_fix = texts.BETWEEN_FIX.format(dtype=dtype, bits=bits) + texts.ADVISOR
    if not judgement.measured[r] or not np.isfinite(stable):  # the depth formula, or a repeat of the reference
        return "", texts.DIVERGENCE_FIX[code]
    if judgement.between[s, r] and kind == metadata.ACTIVATION_DIVERGENCE:
        before = judgement.stable[s, :r]
        before = before[np.isfinite(before)]
        carried = max(float_formats.unit_roundoff(dtype), float(before.max()) if len(before) else 0.0)
        return (texts.BORN_AT_INPUT.format(layer=rows[r], stable=stable, jump=stable / carried, dtype=dtype),
                between_fix)
    if judgement.between[s, r]:
        return texts.BORN_BETWEEN.format(stable=stable, dtype=dtype), between_fix
    born = texts.BORN_INSIDE.format(stable=stable)
    if kind == metadata.DIVERGENCE and rows[r].rsplit("/", 1)[-1] == "bias":
        return born + texts.BIAS_SUM.format(dtype=dtype), texts.BIAS_FIX + texts.DIVERGENCE_FIX[code]
    return born, texts.DIVERGENCE_FIX[code]


def _limit_at(judgement, step_index, row):
    """The limit of ``row`` at a step index (None where it is not judged)."""
    if step_index < 0:
        return None
    value = judgement.limits[step_index, row]
    return float(value) if np.isfinite(value) else None


def _flush_alert(series, judgement, thresholds, names):
    """Flush to zero above the floor and above the row's own relative error at
    that step, for ``rise_steps`` logged comparisons in a row: a rounding error
    of relative size e moves about a fraction e of the elements across zero at
    most, and in a small tensor one element is already 1% by chance; more,
    held, is underflow or swamping."""
    flush = series.column("flush_to_zero").astype(np.float64)
    with np.errstate(invalid="ignore"):
        if not (flush > thresholds.flush_to_zero).any():
            return []
        limits = np.maximum(thresholds.flush_to_zero, np.nan_to_num(judgement.values, nan=0.0, posinf=np.inf))
        judged = np.isfinite(judgement.limits)
        flags = (flush > limits) & ~judgement.noise & judged
    found = detectors.hits(flush, detectors.sustained(flags, thresholds.rise_steps))
    index = detectors.by_first(found)
    if not len(index):
        return []
    rows, steps = series.record.rows, series.steps
    a, b = int(steps[found["first"][index].min()]), int(steps[found["last"][index].max()])
    r0 = index[0]
    first_limits = [float(limits[found["first"][r], r]) if found["first"][r] >= 0 else None
                    for r in range(len(rows))]
    return [Alert(
        codes.WARNING, codes.FLUSH_TO_ZERO, series.run, series.tag, a, b, [rows[i] for i in index],
        texts.FLUSH.format(cand=names[0], ref=names[1], vars=texts.names(rows, index), a=a,
                           share=float(np.nanmax(found["worst"][index])), limit=first_limits[r0]),
        texts.FLUSH_FIX, codes.view(series, "flush_to_zero", rows[r0], a),
        detectors.row_details(rows, steps, found, index, worst=found["worst"].tolist(), limit=first_limits),
        limit=first_limits[r0],
    )]

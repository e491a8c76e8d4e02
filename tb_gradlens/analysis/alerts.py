"""Alerts: one detector per record kind.

TensorFlow-free.  ``alerts_for_*`` turn one Series (or dtype maps) into
Alert objects (``findings`` collects them per tag and run).  The rules and
their reasons: docs/alerts.md; the tolerances of divergence-like
records: ``tolerances``.
"""

import numpy as np

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import detectors
from tb_gradlens.analysis import replays
from tb_gradlens.analysis import texts
from tb_gradlens.analysis.codes import Alert

_DEFAULT = codes.DEFAULT_THRESHOLDS


# ---------------------------------------------------------------------------
# grad_stats
# ---------------------------------------------------------------------------


def alerts_for_grad_stats(series, thresholds=_DEFAULT, benign_steps=(), replay=None):
    """None-gradient, all-zero-gradient and non-finite alerts of a grad_stats
    Series.  ``benign_steps``: steps whose non-finite gradients were a
    loss-scale skip (``loss_scale.benign_skips``); ``replay``: the run's
    replayed non-finite step (``replays.run_replays``), which the
    non-finite alert carries."""
    if len(series.steps) == 0:
        return []
    is_none = series.column("is_none") > 0.5
    out = _none_alert(series, is_none)
    out += _zero_alert(series, (series.column("zero_fraction") >= 1.0) & ~is_none, thresholds)
    counts = series.column("nan_count") + series.column("posinf_count") + series.column("neginf_count")
    return out + nonfinite_alert(series, counts, "nan_count", benign_steps, replay)


def _none_alert(series, is_none):
    if not is_none.any():
        return []
    rows, steps = series.record.rows, series.steps
    found = detectors.hits(is_none.astype(np.float64), is_none)
    index = detectors.by_first(found)
    if not len(index):
        return []
    a, b = int(steps[found["first"][index].min()]), int(steps[found["last"][index].max()])
    return [Alert(
        codes.WARNING, codes.NONE_GRADIENT, series.run, series.tag, a, b, [rows[i] for i in index],
        texts.NONE.format(vars=texts.names(rows, index), n=int(found["count"][index].max()), a=a),
        texts.NONE_FIX, codes.view(series, "is_none", rows[index[0]], a),
        detectors.row_details(rows, steps, found, index, steps=found["count"].astype(int).tolist()),
    )]


def _zero_alert(series, zero, thresholds):
    rows, steps = series.record.rows, series.steps
    k = max(1, int(thresholds.zero_gradient_steps))
    run_row, run_start, run_end = detectors.zero_runs(zero, k)
    if not len(run_row):
        return []
    details = []
    for r in np.unique(run_row):
        sel = run_row == r
        details.append({
            "variable": rows[r],
            "step_first": int(steps[run_start[sel].min()]),
            "step_last": int(steps[run_end[sel].max()]),
            "steps": int((run_end[sel] - run_start[sel] + 1).sum()),
            "zero_at_last_step": bool(zero[-1, r]),
        })
    details.sort(key=lambda d: (d["step_first"], d["variable"]))
    a, b = min(d["step_first"] for d in details), max(d["step_last"] for d in details)
    variables = [d["variable"] for d in details]
    return [Alert(
        codes.WARNING, codes.ZERO_GRADIENT, series.run, series.tag, a, b, variables,
        texts.ZERO.format(vars=texts.names(variables, range(len(variables))), k=k, a=a, b=b),
        texts.ZERO_FIX, codes.view(series, "zero_fraction", variables[0], a), details,
    )]


def nonfinite_alert(series, counts, column, benign_steps=(), replay=None):
    """The non-finite alert of a Series whose per-step NaN/Inf counts are
    ``counts`` [S, R]; steps in ``benign_steps`` (loss-scale skips, never
    applied) are left out; ``replay`` (a ``replays.verdict`` with its
    step) is the verdict the alert carries."""
    if len(benign_steps):
        counts = np.where(np.isin(series.steps, np.asarray(benign_steps))[:, None], 0, counts)
    first, first_rows = detectors.first_nonfinite(counts)
    if first < 0:
        return []
    rows, steps = series.record.rows, series.steps
    bad = counts > 0
    bad_any = bad.any(axis=1)
    a, b = int(steps[first]), int(steps[detectors.last_true(bad_any[:, None])[0]])
    firsts = detectors.first_true(bad)
    details = sorted(
        ({"variable": rows[r], "step_first": int(steps[firsts[r]]),
          "nonfinite_at_first_step": float(counts[first, r])}
         for r in np.nonzero(bad.any(axis=0))[0]),
        key=lambda d: (d["step_first"], d["variable"]),
    )
    what = texts.NONFINITE_WHAT[series.record.kind]
    shown = "" if series.record.kind == metadata.LOSS_COMPARISON else texts.names(rows, first_rows)
    explanation = texts.NONFINITE.format(what=what, vars=shown, a=a, b=b, m=int(bad_any.sum())).replace("  ", " ")
    fix = texts.NONFINITE_FIX.format(a=a)
    if replay is not None:
        explanation += " Step %d was %s" % (replay["step"], replays.summary(replay))
        fix = texts.REPLAY_FIX[replay["verdict"]].format(a=replay["step"], layer=replay["layer"] or "that layer")
        details = [dict(d, replay=replays.detail(replay)) for d in details]
    return [Alert(
        codes.ERROR, codes.NONFINITE, series.run, series.tag, a, b, [rows[i] for i in first_rows],
        explanation, fix, codes.view(series, column, rows[first_rows[0]], a), details,
    )]


# ---------------------------------------------------------------------------
# grad_histogram
# ---------------------------------------------------------------------------


def alerts_for_histogram(series, thresholds=_DEFAULT, gradient_dtypes=()):
    """Underflow alert of a grad_histogram Series: gradient elements within
    ``underflow_binades`` of the smallest normal number of their dtype
    (float32 unless ``gradient_dtypes`` says otherwise), subnormals included."""
    rows, steps = series.record.rows, series.steps
    if len(steps) == 0:
        return []
    counts = series.values  # float32 [S, R, bins]: summed in float64, never copied whole
    total = counts.sum(axis=2, dtype=np.float64)
    near = np.zeros(total.shape)
    dtypes = []
    for r in range(len(rows)):
        dtype = gradient_dtypes[r] if r < len(gradient_dtypes) else None
        dtypes.append(dtype if dtype in float_formats.LOW_PRECISION + ("float32",) else "float32")
    for dtype in set(dtypes):  # one slice per dtype, not per row (10^5 rows)
        index = np.array([r for r, d in enumerate(dtypes) if d == dtype], np.intp)
        top = float_formats.get(dtype).min_normal + int(thresholds.underflow_binades)
        bins = max(0, top - metadata.MIN_EXPONENT)
        near[:, index] = (counts[:, :, :bins].sum(axis=2, dtype=np.float64)[:, index] if len(index) == len(rows)
                          else counts[:, index, :bins].sum(axis=2, dtype=np.float64))
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(total > 0, near / total, 0.0)
        zero = np.where(total > 0, counts[:, :, metadata.N_EXP_BINS] / total, 0.0)
    found = detectors.hits(share, share > thresholds.underflow)
    index = detectors.by_first(found)
    if not len(index):
        return []
    a, b = int(steps[found["first"][index].min()]), int(steps[found["last"][index].max()])
    r0 = index[0]
    e = float_formats.get(dtypes[r0]).min_normal
    return [Alert(
        codes.WARNING, codes.UNDERFLOW, series.run, series.tag, a, b, [rows[i] for i in index],
        texts.UNDERFLOW.format(share=float(np.nanmax(found["worst"][index])), vars=texts.names(rows, index),
                               k=int(thresholds.underflow_binades), dtype=dtypes[r0], e=e, a=a,
                               zero=float(zero[found["first"][r0], r0])),
        texts.UNDERFLOW_FIX, codes.view(series, None, rows[r0], a),
        detectors.row_details(rows, steps, found, index, worst=found["worst"].tolist(), dtype=dtypes),
    )]


# ---------------------------------------------------------------------------
# update_stats, dtypes
# ---------------------------------------------------------------------------


def alerts_for_update_stats(series, thresholds=_DEFAULT):
    """Lost-update alert of an update_stats Series.

    A warning for weights stored in bfloat16 or float16 (the record's
    ``variable_dtypes``: the update is really lost); an info for weights
    whose dtype the record does not state (older records: what bfloat16
    storage would lose); nothing for float32 weights (Keras'
    mixed_bfloat16 keeps float32 master weights: nothing is lost).
    """
    record, rows, steps = series.record, series.record.rows, series.steps
    if len(steps) == 0:
        return []
    dtypes = records.read_update(record, series.tag)
    out = []
    for severity, wanted in ((codes.WARNING, float_formats.LOW_PRECISION), (codes.INFO, (None,))):
        mask = np.array([d in wanted for d in dtypes], dtype=bool)
        with np.errstate(invalid="ignore"):
            flags = (series.column("lost_update_bf16") > thresholds.lost_update) & mask[None, :]
        found = detectors.hits(series.column("lost_update_bf16"), flags)
        index = detectors.by_first(found)
        if not len(index):
            continue
        a, b = int(steps[found["first"][index].min()]), int(steps[found["last"][index].max()])
        template = texts.LOST if severity == codes.WARNING else texts.LOST_UNKNOWN
        out.append(Alert(
            severity, codes.LOST_UPDATE, series.run, series.tag, a, b, [rows[i] for i in index],
            template.format(share=float(np.nanmax(found["worst"][index])), vars=texts.names(rows, index),
                            thr=thresholds.lost_update, a=a, dtype=dtypes[index[0]]),
            texts.LOST_FIX, codes.view(series, "lost_update_bf16", rows[index[0]], a),
            detectors.row_details(rows, steps, found, index, worst=found["worst"].tolist(), dtype=list(dtypes)),
            limit=thresholds.lost_update,
        ))
    return out


def alerts_for_dtype_maps(entry, maps):
    """bfloat16-model-output alert from the dtype maps of a ``dtypes`` tag."""
    bad = [
        m for m in maps
        if isinstance(m.get("map"), dict) and m["map"].get("model_output_dtype") in float_formats.LOW_PRECISION
    ]
    if not bad:
        return []
    dtype = bad[0]["map"]["model_output_dtype"]
    layers = bad[-1]["map"].get("layers") or []
    low = [layer.get("path", "?") for layer in layers
           if isinstance(layer, dict) and layer.get("output_dtype") in float_formats.LOW_PRECISION]
    named = bad[-1]["map"].get("model_output_layer")
    if isinstance(named, str) and named != "unknown":
        low = [named]  # the layer the forward pass ended with (maps since it is recorded)
    variables = low[-1:] or ["model output"]
    a, b = int(bad[0]["step"]), int(bad[-1]["step"])
    return [Alert(
        codes.WARNING, codes.BF16_MODEL_OUTPUT, entry.run, entry.tag, a, b, variables,
        texts.OUTPUT.format(vars=", ".join(variables), a=a, dtype=dtype,
                            bits=float_formats.get(dtype).mantissa_bits + 1),
        texts.OUTPUT_FIX,
        {"name": metadata.DTYPES, "run": entry.run, "tag": entry.tag, "column": None,
         "row": variables[0] if low else None, "step": a},
        [{"step": int(m["step"]), "model_output_dtype": m["map"].get("model_output_dtype")} for m in bad],
    )]

"""Findings from logged gradlens numbers: alerts, run overview, run comparison.

Pure NumPy, TensorFlow-free, shared by the TensorBoard plugin and the
command line.  Every entry point takes a *source*: anything with the
methods of ``tb_gradlens.reading.Source`` (``runs``, ``entries``,
``entries_of_kind``, ``series``, ``dtype_maps``, ``scalars``, ``cached``).
The plugin builds one over TensorBoard's data provider; the CLI builds the
same over ``EventMultiplexer`` + ``MultiplexerDataProvider``.

The detectors (``zero_runs``, ``first_nonfinite``, ``exceedances`` ...) are
pure functions of arrays; ``alerts_for_*`` turn one series into Alert
objects; ``run_alerts``, ``overview`` and ``compare`` read through the
source.
"""

import dataclasses

import numpy as np
from tensorboard import errors

from tb_gradlens import metadata
from tb_gradlens import records

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)

# Alert codes.
NONE_GRADIENT = "none_gradient"
ZERO_GRADIENT = "zero_gradient"
NONFINITE = "nonfinite"
BF16_DIVERGENCE = "bf16_divergence"
F16_DIVERGENCE = "f16_divergence"
F32_F64_MISMATCH = "f32_f64_mismatch"
DIVERGENCE = "divergence"
FLUSH_TO_ZERO = "flush_to_zero"
LOST_UPDATE = "lost_update"
BF16_MODEL_OUTPUT = "bf16_model_output"

# Kinds whose records compare a candidate with a reference.
DIVERGENCE_KINDS = (
    metadata.DIVERGENCE,
    metadata.ACTIVATION_DIVERGENCE,
    metadata.LOSS_COMPARISON,
)

# Column shown by default for a kind (alerts' view, comparison quantity).
DEFAULT_COLUMN = {
    metadata.GRAD_STATS: "l2_norm",
    metadata.DIVERGENCE: "rel_l2",
    metadata.ACTIVATION_DIVERGENCE: "rel_l2",
    metadata.LOSS_COMPARISON: "rel_error",
    metadata.UPDATE_STATS: "update_ratio",
}


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """When an alert fires.  Defaults and their reasons: README "## Alerts".

    Attributes:
      zero_gradient_steps: K, consecutive logged steps with an all-zero
        gradient (zero_fraction == 1) before it is an alert.
      low_precision_gradient_rel_l2: rel L2 of a bfloat16/float16 gradient
        from its float32 reference (JAX tests bf16 gradients at 1e-1).
      low_precision_value_rel_l2: rel L2 of bfloat16/float16 activations,
        and relative error of the loss (TensorFlow tests bf16 values at 1e-2).
      float32_rel_l2: rel L2 of a float32 candidate from a float32 or
        float64 reference (cancellation, device or XLA differences).
      flush_to_zero: fraction of nonzero reference elements that are zero
        in the candidate.
      lost_update: fraction of elements whose optimizer update vanishes when
        rounded to bfloat16 (update_stats.lost_update_bf16).
    """

    zero_gradient_steps: int = 5
    low_precision_gradient_rel_l2: float = 0.1
    low_precision_value_rel_l2: float = 0.01
    float32_rel_l2: float = 1e-3
    flush_to_zero: float = 0.01
    lost_update: float = 0.1

    def replace(self, **changes):
        """A copy with some thresholds changed (unknown names: ValueError)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError("unknown threshold(s): %s" % ", ".join(sorted(unknown)))
        return dataclasses.replace(self, **changes)


DEFAULT_THRESHOLDS = Thresholds()


@dataclasses.dataclass
class Alert:
    """One finding: what, where, since when, why, and what to do."""

    severity: str
    code: str
    run: str
    tag: str
    step_first: int
    step_last: int
    variables: list
    explanation: str
    fix: str
    view: dict
    details: list = dataclasses.field(default_factory=list)

    @property
    def id(self):
        return "%s|%s|%s" % (self.code, self.run, self.tag)

    def to_json(self):
        """A JSON-ready dict (shallow: its lists and dicts are this alert's own;
        ``dataclasses.asdict`` deep-copied them, 3x the cost of encoding)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["id"] = self.id
        return out


# ---------------------------------------------------------------------------
# Detectors: pure functions of arrays.
# ---------------------------------------------------------------------------


def zero_runs(flags, min_length):
    """Maximal runs of True along axis 0 of ``flags`` [S, R] at least ``min_length`` long.

    Returns (row, start, end) int arrays, sorted by row then start, with
    ``flags[start:end+1, row]`` all True and maximal.
    """
    flags = np.asarray(flags, bool)
    if flags.size == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty, empty
    padded = np.zeros((flags.shape[0] + 2, flags.shape[1]), np.int8)
    padded[1:-1] = flags
    edges = np.diff(padded, axis=0).T  # [R, S + 1]
    start_row, start = np.nonzero(edges == 1)
    _, stop = np.nonzero(edges == -1)
    keep = (stop - start) >= min_length
    return start_row[keep], start[keep], stop[keep] - 1


def first_true(flags):
    """Index along axis 0 of the first True of each column (-1 if none)."""
    flags = np.asarray(flags, bool)
    if flags.shape[0] == 0:
        return np.full(flags.shape[1:], -1, np.int64)
    first = np.argmax(flags, axis=0)
    return np.where(flags.any(axis=0), first, -1)


def last_true(flags):
    """Index along axis 0 of the last True of each column (-1 if none)."""
    flags = np.asarray(flags, bool)
    n = flags.shape[0]
    if n == 0:
        return np.full(flags.shape[1:], -1, np.int64)
    last = n - 1 - np.argmax(flags[::-1], axis=0)
    return np.where(flags.any(axis=0), last, -1)


def first_nonfinite(counts):
    """(first step index, rows nonfinite there) of ``counts`` [S, R] > 0, or (-1, [])."""
    bad = np.asarray(counts) > 0
    any_bad = bad.any(axis=1)
    if not any_bad.any():
        return -1, np.zeros(0, np.int64)
    first = int(np.argmax(any_bad))
    return first, np.nonzero(bad[first])[0]


def exceedances(values, threshold):
    """Per row of ``values`` [S, R]: where it exceeds ``threshold``.

    NaN never exceeds; +Inf does.  Returns a dict of [R] arrays: ``count``
    of steps above, ``first`` and ``last`` step index above (-1 if none),
    ``worst`` (max, NaN ignored; NaN if all NaN) and ``worst_index``.
    """
    values = np.asarray(values, np.float64)
    with np.errstate(invalid="ignore"):
        above = values > threshold
    filled = np.where(np.isnan(values), -np.inf, values)
    worst_index = np.argmax(filled, axis=0) if len(values) else np.zeros(values.shape[1:], int)
    worst = (
        np.take_along_axis(filled, worst_index[None, :], axis=0)[0]
        if len(values)
        else np.full(values.shape[1:], np.nan)
    )
    worst = np.where(np.isneginf(worst), np.nan, worst)
    return {
        "count": above.sum(axis=0),
        "first": first_true(above),
        "last": last_true(above),
        "worst": worst,
        "worst_index": worst_index,
    }


# ---------------------------------------------------------------------------
# Comparison variants.
# ---------------------------------------------------------------------------


def compute_dtype(variant):
    """The compute dtype of a reference/candidate description, or None
    (``records.read_variant``: stated, or from an exact policy name)."""
    try:
        return records.read_variant(variant).compute_dtype
    except metadata.FormatError:
        return None


def variant_label(variant):
    """A short name of a reference/candidate description."""
    try:
        return records.read_variant(variant).label
    except metadata.FormatError:
        return "?"


def divergence_code(reference, candidate):
    """Alert code of a comparison: which precision question it answers."""
    ref, cand = compute_dtype(reference), compute_dtype(candidate)
    if cand == "bfloat16" and ref in ("float32", "float64", None):
        return BF16_DIVERGENCE
    if cand == "float16" and ref in ("float32", "float64", None):
        return F16_DIVERGENCE
    if cand == "float32" and ref == "float64":
        return F32_F64_MISMATCH
    return DIVERGENCE


def is_replica_disagreement(record):
    """True for a tf.distribute replica-vs-mean record (distribute.py).

    Replicas see different examples, so their disagreement (rel_l2 near 1
    is ordinary) is gradient noise, not precision loss: such records get
    non-finite alerts only and stay out of the worst-divergence headline.
    """
    return records.read_comparison(record).comparison == records.REPLICA_VS_MEAN


def divergence_threshold(kind, reference, candidate, thresholds=DEFAULT_THRESHOLDS):
    """The rel L2 (or loss rel_error) above which a comparison is an alert."""
    cand = compute_dtype(candidate)
    if cand in ("bfloat16", "float16") or cand is None:
        if kind == metadata.DIVERGENCE:
            return thresholds.low_precision_gradient_rel_l2
        return thresholds.low_precision_value_rel_l2
    return thresholds.float32_rel_l2


# ---------------------------------------------------------------------------
# Alerts of one series.
# ---------------------------------------------------------------------------

_NONE_EXPLANATION = (
    "The gradient of {vars} is None at every one of {n} logged steps from step {a}: "
    "the loss does not depend on it through the tape, usually because the tensor was "
    "not watched, an op ran outside the GradientTape, a value went through .numpy() "
    "or tf.stop_gradient, or there is no trainable path from it to the loss."
)
_NONE_FIX = (
    "Compute the loss from these variables inside the tape with TensorFlow ops only "
    "(no .numpy(), no stop_gradient on the path), or exclude them from the trainable "
    "variables if they are meant to be frozen."
)
_ZERO_EXPLANATION = (
    "The gradient of {vars} is exactly zero for {k} or more consecutive logged steps "
    "(steps {a}-{b}): the variable gets no learning signal, typically dead ReLU units, "
    "a tf.where whose condition is constant, tf.boolean_mask dropping every element, "
    "or a round/cast to integer on the path."
)
_ZERO_FIX = (
    "Check the layer's pre-activations: use a smaller learning rate or LeakyReLU/GELU "
    "for dead units, initialize biases near zero, and replace round/cast/boolean_mask "
    "on the gradient path with differentiable operations."
)
_NONFINITE_EXPLANATION = (
    "{what} of {vars} first became NaN or infinite at step {a} (non-finite at {m} "
    "logged steps up to step {b}); everything after follows from that step."
)
_NONFINITE_FIX = (
    "Look at the ops of these variables at step {a}: guard log/sqrt/division against "
    "zero (tf.math.log(x + eps), tf.math.divide_no_nan), clip gradients, lower the "
    "learning rate, and keep the loss and softmax in float32."
)
_DIVERGENCE_TITLES = {
    BF16_DIVERGENCE: "bfloat16",
    F16_DIVERGENCE: "float16",
    F32_F64_MISMATCH: "float32",
    DIVERGENCE: "the candidate",
}
_DIVERGENCE_EXPLANATION = (
    "{quantity} of {vars} in {cand} differ from {ref} by more than {metric} {thr:g} "
    "from step {a} (worst {worst:.3g} at step {ws}), more than rounding in {title} explains."
)
_DIVERGENCE_FIX = {
    BF16_DIVERGENCE: (
        "Keep these layers in float32 (dtype='float32' on the layer), keep the last "
        "activation and the loss in float32, and check for reductions over many elements "
        "in bfloat16 (normalization, softmax, large sums)."
    ),
    F16_DIVERGENCE: (
        "Use loss scaling (keras.mixed_precision.LossScaleOptimizer), keep these layers "
        "and the loss in float32, or switch to bfloat16."
    ),
    F32_F64_MISMATCH: (
        "float32 loses digits here to catastrophic cancellation (subtracting nearly equal "
        "numbers): reformulate (e.g. log-sum-exp, Welford variance, subtract the mean first) "
        "or compute this part in float64."
    ),
    DIVERGENCE: (
        "Compare with a noise-floor run (same precision, another seed or device) before "
        "trusting the difference, and pin the device or disable XLA on these layers to locate it."
    ),
}
_QUANTITY = {
    metadata.DIVERGENCE: "Gradients",
    metadata.ACTIVATION_DIVERGENCE: "Activations",
    metadata.LOSS_COMPARISON: "The loss",
}
_FTZ_EXPLANATION = (
    "In {cand} {worst:.1%} of the nonzero {ref} elements of {vars} become exactly zero "
    "(first above {thr:.0%} at step {a}): they underflow or are swamped by larger terms."
)
_FTZ_FIX = (
    "Scale the values up (loss scaling, a different normalization) or keep these layers in "
    "float32; check for subnormal values in the gradient histogram."
)
_LOST_EXPLANATION = (
    "Up to {worst:.0%} of the elements of {vars} would not move at a step if the weights "
    "were stored in bfloat16 (update below half a bfloat16 ulp of the weight; above "
    "{thr:.0%} from step {a}){tail}."
)
_LOST_FIX = (
    "Keep float32 master weights (Keras' mixed_bfloat16 policy does), or raise the "
    "learning rate / use stochastic rounding if weights must be bfloat16."
)
_OUTPUT_EXPLANATION = (
    "The model output ({vars}) is bfloat16 and is fed to the loss from step {a}: the loss "
    "and its gradient see only 8 bits of precision."
)
_OUTPUT_FIX = (
    "Give the last layer or activation dtype='float32' (e.g. "
    "keras.layers.Activation('softmax', dtype='float32')), as the mixed precision guide advises."
)


def _names(rows, index, limit=4):
    names = [rows[i] for i in index]
    if len(names) <= limit:
        return ", ".join(names)
    return "%s and %d more" % (", ".join(names[:limit]), len(names) - limit)


def _view(series_or_entry, column, row):
    return {
        "name": series_or_entry.record.kind,
        "run": series_or_entry.run,
        "tag": series_or_entry.tag,
        "column": column,
        "row": row,
    }


def alerts_for_grad_stats(series, thresholds=DEFAULT_THRESHOLDS):
    """None-gradient, all-zero-gradient and non-finite alerts of a grad_stats Series."""
    rows, steps = series.record.rows, series.steps
    out = []
    if len(steps) == 0:
        return out
    is_none = series.column("is_none") > 0.5
    none_rows = np.nonzero(is_none.any(axis=0))[0]
    if len(none_rows):
        first, last = first_true(is_none)[none_rows], last_true(is_none)[none_rows]
        a, b = int(steps[first.min()]), int(steps[last.max()])
        out.append(
            Alert(
                WARNING, NONE_GRADIENT, series.run, series.tag, a, b,
                [rows[i] for i in none_rows],
                _NONE_EXPLANATION.format(
                    vars=_names(rows, none_rows), n=int(is_none[:, none_rows].sum(axis=0).max()), a=a
                ),
                _NONE_FIX,
                _view(series, "is_none", rows[none_rows[0]]),
                [
                    {"variable": rows[r], "step_first": int(steps[f]), "step_last": int(steps[l]),
                     "steps": int(is_none[:, r].sum())}
                    for r, f, l in zip(none_rows, first, last)
                ],
            )
        )
    zero = (series.column("zero_fraction") >= 1.0) & ~is_none
    k = max(1, int(thresholds.zero_gradient_steps))
    run_row, run_start, run_end = zero_runs(zero, k)
    if len(run_row):
        zero_rows = np.unique(run_row)
        details = []
        for r in zero_rows:
            sel = run_row == r
            details.append(
                {
                    "variable": rows[r],
                    "step_first": int(steps[run_start[sel].min()]),
                    "step_last": int(steps[run_end[sel].max()]),
                    "steps": int((run_end[sel] - run_start[sel] + 1).sum()),
                    "zero_at_last_step": bool(zero[-1, r]),
                }
            )
        details.sort(key=lambda d: (d["step_first"], d["variable"]))
        a = min(d["step_first"] for d in details)
        b = max(d["step_last"] for d in details)
        variables = [d["variable"] for d in details]
        out.append(
            Alert(
                WARNING, ZERO_GRADIENT, series.run, series.tag, a, b, variables,
                _ZERO_EXPLANATION.format(vars=_names(variables, range(len(variables))), k=k, a=a, b=b),
                _ZERO_FIX,
                _view(series, "zero_fraction", variables[0]),
                details,
            )
        )
    counts = (
        series.column("nan_count") + series.column("posinf_count") + series.column("neginf_count")
    )
    out.extend(_nonfinite_alert(series, counts, "The gradient"))
    return out


def _nonfinite_alert(series, counts, what, column=None):
    first, first_rows = first_nonfinite(counts)
    if first < 0:
        return []
    rows, steps = series.record.rows, series.steps
    bad = counts > 0
    bad_any = bad.any(axis=1)
    a, b = int(steps[first]), int(steps[last_true(bad_any[:, None])[0]])
    ever = np.nonzero(bad.any(axis=0))[0]
    firsts = first_true(bad)
    details = sorted(
        (
            {
                "variable": rows[r],
                "step_first": int(steps[firsts[r]]),
                "nonfinite_at_first_step": float(counts[first, r]),
            }
            for r in ever
        ),
        key=lambda d: (d["step_first"], d["variable"]),
    )
    if column is None:
        column = "nan_count" if series.record.kind == metadata.GRAD_STATS else "nonfinite"
    return [
        Alert(
            ERROR, NONFINITE, series.run, series.tag, a, b,
            [rows[i] for i in first_rows],
            _NONFINITE_EXPLANATION.format(
                what=what, vars=_names(rows, first_rows), a=a, b=b, m=int(bad_any.sum())
            ),
            _NONFINITE_FIX.format(a=a),
            _view(series, column, rows[first_rows[0]]),
            details,
        )
    ]


def alerts_for_divergence(series, thresholds=DEFAULT_THRESHOLDS):
    """Divergence, flush-to-zero and non-finite alerts of a divergence-like Series."""
    record, rows, steps = series.record, series.record.rows, series.steps
    out = []
    if len(steps) == 0:
        return out
    reference = record.extras.get("reference")
    candidate = record.extras.get("candidate")
    ref_name, cand_name = variant_label(reference), variant_label(candidate)
    code = divergence_code(reference, candidate)
    threshold = divergence_threshold(record.kind, reference, candidate, thresholds)
    if record.kind == metadata.LOSS_COMPARISON:
        metric = "rel_error"
        ref_v, cand_v = series.column("reference"), series.column("candidate")
        counts = (~np.isfinite(ref_v)).astype(np.float32) + (~np.isfinite(cand_v))
    else:
        metric = "rel_l2"
        counts = series.column("nonfinite")
    found = exceedances(series.column(metric), threshold)
    hit = np.nonzero(found["count"] > 0)[0]
    if is_replica_disagreement(record):
        hit = hit[:0]  # replicas see different examples: no precision alert
    if len(hit):
        hit = hit[np.argsort(found["first"][hit], kind="stable")]
        a = int(steps[found["first"][hit].min()])
        b = int(steps[found["last"][hit].max()])
        worst_row = hit[np.argmax(np.nan_to_num(found["worst"][hit], nan=-np.inf))]
        details = [
            {
                "variable": rows[r],
                "step_first": int(steps[found["first"][r]]),
                "step_last": int(steps[found["last"][r]]),
                "steps": int(found["count"][r]),
                "worst": float(found["worst"][r]),
                "worst_step": int(steps[found["worst_index"][r]]),
            }
            for r in hit
        ]
        out.append(
            Alert(
                WARNING, code, series.run, series.tag, a, b, [rows[i] for i in hit],
                _DIVERGENCE_EXPLANATION.format(
                    quantity=_QUANTITY[record.kind], vars=_names(rows, hit), cand=cand_name,
                    ref=ref_name, metric=metric, thr=threshold, a=a,
                    worst=float(found["worst"][worst_row]),
                    ws=int(steps[found["worst_index"][worst_row]]), title=_DIVERGENCE_TITLES[code],
                ),
                _DIVERGENCE_FIX[code],
                _view(series, metric, rows[hit[0]]),
                details,
            )
        )
    if record.kind != metadata.LOSS_COMPARISON:
        ftz = exceedances(series.column("flush_to_zero"), thresholds.flush_to_zero)
        ftz_rows = np.nonzero(ftz["count"] > 0)[0]
        if len(ftz_rows):
            ftz_rows = ftz_rows[np.argsort(ftz["first"][ftz_rows], kind="stable")]
            a = int(steps[ftz["first"][ftz_rows].min()])
            b = int(steps[ftz["last"][ftz_rows].max()])
            out.append(
                Alert(
                    WARNING, FLUSH_TO_ZERO, series.run, series.tag, a, b,
                    [rows[i] for i in ftz_rows],
                    _FTZ_EXPLANATION.format(
                        cand=cand_name, ref=ref_name, vars=_names(rows, ftz_rows),
                        worst=float(np.nanmax(ftz["worst"][ftz_rows])),
                        thr=thresholds.flush_to_zero, a=a,
                    ),
                    _FTZ_FIX,
                    _view(series, "flush_to_zero", rows[ftz_rows[0]]),
                    [
                        {"variable": rows[r], "step_first": int(steps[ftz["first"][r]]),
                         "step_last": int(steps[ftz["last"][r]]), "worst": float(ftz["worst"][r])}
                        for r in ftz_rows
                    ],
                )
            )
    what = {
        metadata.DIVERGENCE: "The compared gradients",
        metadata.ACTIVATION_DIVERGENCE: "The compared activations",
        metadata.LOSS_COMPARISON: "The compared loss",
    }[record.kind]
    column = "candidate" if record.kind == metadata.LOSS_COMPARISON else "nonfinite"
    out.extend(_nonfinite_alert(series, counts, what, column))
    return out


def alerts_for_update_stats(series, thresholds=DEFAULT_THRESHOLDS):
    """Lost-update alert of an update_stats Series.

    Severity is warning when a variable is itself stored in bfloat16
    (``extras.variable_dtypes``), info otherwise (float32 master weights
    keep the update; the number says what pure bfloat16 would lose).
    """
    record, rows, steps = series.record, series.record.rows, series.steps
    if len(steps) == 0:
        return []
    found = exceedances(series.column("lost_update_bf16"), thresholds.lost_update)
    hit = np.nonzero(found["count"] > 0)[0]
    if not len(hit):
        return []
    hit = hit[np.argsort(found["first"][hit], kind="stable")]
    dtypes = records.read_update(record)
    bf16_rows = [i for i in hit if dtypes[i] == "bfloat16"]
    severity = WARNING if bf16_rows else INFO
    tail = (
        ": these weights are bfloat16, so the updates are really lost"
        if bf16_rows
        else "; with float32 master weights the update is kept"
    )
    a = int(steps[found["first"][hit].min()])
    b = int(steps[found["last"][hit].max()])
    return [
        Alert(
            severity, LOST_UPDATE, series.run, series.tag, a, b, [rows[i] for i in hit],
            _LOST_EXPLANATION.format(
                worst=float(np.nanmax(found["worst"][hit])), vars=_names(rows, hit),
                thr=thresholds.lost_update, a=a, tail=tail,
            ),
            _LOST_FIX,
            _view(series, "lost_update_bf16", rows[hit[0]]),
            [
                {"variable": rows[r], "step_first": int(steps[found["first"][r]]),
                 "step_last": int(steps[found["last"][r]]), "worst": float(found["worst"][r])}
                for r in hit
            ],
        )
    ]


def alerts_for_dtype_maps(entry, maps):
    """bfloat16-model-output alert from the dtype maps of a ``dtypes`` tag."""
    bad = [
        m for m in maps
        if isinstance(m.get("map"), dict)
        and m["map"].get("model_output_dtype") in ("bfloat16", "float16")
    ]
    if not bad:
        return []
    layers = bad[-1]["map"].get("layers") or []
    low = [
        layer.get("path", "?") for layer in layers
        if isinstance(layer, dict) and layer.get("output_dtype") in ("bfloat16", "float16")
    ]
    variables = low[-1:] or ["model output"]
    a, b = int(bad[0]["step"]), int(bad[-1]["step"])
    return [
        Alert(
            WARNING, BF16_MODEL_OUTPUT, entry.run, entry.tag, a, b, variables,
            _OUTPUT_EXPLANATION.format(vars=", ".join(variables), a=a),
            _OUTPUT_FIX,
            {"name": metadata.DTYPES, "run": entry.run, "tag": entry.tag, "column": None,
             "row": variables[0] if low else None},
            [{"step": int(m["step"]), "model_output_dtype": m["map"].get("model_output_dtype")}
             for m in bad],
        )
    ]


_SERIES_DETECTORS = {
    metadata.GRAD_STATS: alerts_for_grad_stats,
    metadata.DIVERGENCE: alerts_for_divergence,
    metadata.ACTIVATION_DIVERGENCE: alerts_for_divergence,
    metadata.LOSS_COMPARISON: alerts_for_divergence,
    metadata.UPDATE_STATS: alerts_for_update_stats,
}


class _AlertList(list):
    @property
    def nbytes(self):
        return 2048 * (1 + len(self))


def tag_alerts(source, entry, thresholds=DEFAULT_THRESHOLDS):
    """Alerts of one readable tag (memoized by the source until the tag grows)."""
    if entry.kind == metadata.DTYPES:

        def compute():
            return _AlertList(alerts_for_dtype_maps(entry, source.dtype_maps(entry.run, entry.tag)))

    elif entry.kind in _SERIES_DETECTORS:
        detector = _SERIES_DETECTORS[entry.kind]

        def compute():
            return _AlertList(detector(source.series(entry.run, entry.tag), thresholds))

    else:
        return []
    return list(source.cached(("alerts", thresholds), entry, compute))


SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}


def run_alerts(source, runs=None, thresholds=DEFAULT_THRESHOLDS):
    """(alerts, errors) of ``runs`` (default: every run).

    ``errors`` lists ``{"run","tag","error"}`` for tags that could not be
    read (newer format, bad tensor); the other tags are analysed anyway.
    Alerts are sorted by severity, then first step, run and tag.
    """
    alerts, problems = [], []
    for run in source.runs() if runs is None else runs:
        for entry in source.entries(run):
            if entry.record is None:
                problems.append({"run": run, "tag": entry.tag, "error": entry.error})
                continue
            try:
                alerts.extend(tag_alerts(source, entry, thresholds))
            except errors.InvalidArgumentError as e:
                problems.append({"run": run, "tag": entry.tag, "error": str(e)})
    alerts.sort(key=lambda a: (SEVERITY_ORDER[a.severity], a.step_first, a.run, a.tag, a.code))
    return alerts, problems


# ---------------------------------------------------------------------------
# Overview.
# ---------------------------------------------------------------------------


def worst_divergence(source, run):
    """The largest rel_l2 (loss: rel_error) of any divergence-like record of ``run``.

    Returns ``{"metric","value","row","step","tag","kind","reference","candidate"}``
    or None when the run has no comparison (or only NaN in it).
    """
    best = None
    for entry in source.entries(run):
        if entry.kind not in DIVERGENCE_KINDS or is_replica_disagreement(entry.record):
            continue
        try:
            found = source.cached(
                "worst", entry, lambda e=entry: _WorstOf(_worst_of(source.series(e.run, e.tag)))
            )
        except errors.InvalidArgumentError:
            continue
        found = found.value
        if found is not None and (best is None or found["value"] > best["value"]):
            best = found
    return best


class _WorstOf:
    nbytes = 1024

    def __init__(self, value):
        self.value = value


def _worst_of(series):
    if len(series.steps) == 0:
        return None
    metric = "rel_error" if series.record.kind == metadata.LOSS_COMPARISON else "rel_l2"
    values = series.column(metric).astype(np.float64)
    if np.isnan(values).all():
        return None
    flat = int(np.nanargmax(np.where(np.isnan(values), -np.inf, values)))
    s, r = np.unravel_index(flat, values.shape)
    return {
        "metric": metric,
        "value": float(values[s, r]),
        "row": series.record.rows[r],
        "step": int(series.steps[s]),
        "tag": series.tag,
        "kind": series.record.kind,
        "reference": series.record.extras.get("reference"),
        "candidate": series.record.extras.get("candidate"),
    }


def overview(source, thresholds=DEFAULT_THRESHOLDS):
    """The headline of every run: worst divergence, first NaN, dead variables, alert counts."""
    out = []
    for run in source.runs():
        alerts, _ = run_alerts(source, [run], thresholds)
        counts = {s: 0 for s in SEVERITIES}
        for a in alerts:
            counts[a.severity] += 1
        # Gradients first (what the optimizer applies), then any compared record.
        nonfinite = [a for a in alerts if a.code == NONFINITE and a.view["name"] == metadata.GRAD_STATS]
        nonfinite = nonfinite or [a for a in alerts if a.code == NONFINITE]
        first_nf = min(nonfinite, key=lambda a: a.step_first) if nonfinite else None
        out.append(
            {
                "run": run,
                "worst_divergence": worst_divergence(source, run),
                "first_nonfinite_step": first_nf.step_first if first_nf else None,
                "first_nonfinite_variables": list(first_nf.variables) if first_nf else [],
                "disconnected_variables": _union(a.variables for a in alerts if a.code == NONE_GRADIENT),
                "zero_gradient_variables": _union(a.variables for a in alerts if a.code == ZERO_GRADIENT),
                "alert_counts": counts,
            }
        )
    return out


def _union(lists):
    seen = []
    for names in lists:
        for n in names:
            if n not in seen:
                seen.append(n)
    return seen


# ---------------------------------------------------------------------------
# Run comparison.
# ---------------------------------------------------------------------------

SCALAR = "scalar"


@dataclasses.dataclass(frozen=True)
class Quantity:
    """What to compare: a scalar tag, or (kind, row, column) of a record.

    ``tag`` is the scalar tag for kind ``scalar``; for a record kind it is
    an optional tag prefix (e.g. ``gradients``) choosing among records of
    the same kind.  Records of a kind differ between runs only by the
    digest in their tag, so they are found by kind and row.
    """

    kind: str
    tag: str = None
    row: str = None
    column: str = None


def quantity_series(source, run, quantity):
    """(steps int64, values float64, tag) of ``quantity`` in ``run``.

    Raises NotFoundError when the run lacks it, InvalidArgumentError when
    the quantity is ill-formed.
    """
    if quantity.kind == SCALAR:
        if not quantity.tag:
            raise errors.InvalidArgumentError("a scalar comparison needs tag (e.g. tag=loss)")
        steps, _, values = source.scalars(run, quantity.tag)
        return steps, values, quantity.tag
    if quantity.kind not in metadata.KINDS or quantity.kind in metadata.JSON_KINDS:
        raise errors.InvalidArgumentError(
            "kind must be 'scalar' or a float record kind, not %r" % (quantity.kind,)
        )
    entries = source.entries_of_kind(run, quantity.kind)
    if quantity.tag:
        prefix = quantity.tag.rstrip("/") + "/"
        entries = [e for e in entries if e.tag == quantity.tag or e.tag.startswith(prefix)]
    if not entries:
        raise errors.NotFoundError(
            "run %r has no %s record%s" % (
                run, quantity.kind, " under %r" % quantity.tag if quantity.tag else "")
        )
    row = quantity.row
    if row is None:
        single = {e.record.rows[0] for e in entries if len(e.record.rows) == 1}
        if len(single) == 1 and all(len(e.record.rows) == 1 for e in entries):
            row = single.pop()
        else:
            raise errors.InvalidArgumentError("row is required for kind %r" % quantity.kind)
    entries = [e for e in entries if row in e.record.rows]
    if not entries:
        raise errors.NotFoundError("run %r has no %s record with row %r" % (run, quantity.kind, row))
    column = quantity.column or DEFAULT_COLUMN.get(quantity.kind)
    if column is None:
        raise errors.InvalidArgumentError("column is required for kind %r" % quantity.kind)
    if column not in metadata.KIND_COLUMNS[quantity.kind]:
        raise errors.InvalidArgumentError("kind %r has no column %r" % (quantity.kind, column))
    entry = max(entries, key=lambda e: (e.max_step if e.max_step is not None else -1, e.tag))
    series = source.series(run, entry.tag)
    values = series.values[:, series.record.rows.index(row), series.record.columns.index(column)]
    return series.steps, values.astype(np.float64), entry.tag


def last_per_step(steps, values):
    """(unique steps, value logged last at each) for series with repeated steps."""
    steps = np.asarray(steps)
    if len(steps) < 2 or np.all(np.diff(steps) > 0):
        return steps, values
    reverse = steps[::-1]
    uniq, index = np.unique(reverse, return_index=True)
    return uniq, values[::-1][index]


def relative_difference(a, b):
    """(b - a) / |a| elementwise (a = 0: +-inf, or NaN if b = 0 too)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (b - a) / np.abs(a)


def align(steps_a, values_a, steps_b, values_b):
    """(common steps, a at them, b at them, steps only in a, steps only in b)."""
    steps_a, values_a = last_per_step(steps_a, values_a)
    steps_b, values_b = last_per_step(steps_b, values_b)
    common, ia, ib = np.intersect1d(steps_a, steps_b, assume_unique=True, return_indices=True)
    return (
        common,
        values_a[ia],
        values_b[ib],
        np.setdiff1d(steps_a, steps_b, assume_unique=True),
        np.setdiff1d(steps_b, steps_a, assume_unique=True),
    )


def _max_abs(x):
    """max |x| ignoring NaN (+inf counts); None when nothing is left."""
    x = np.abs(np.asarray(x, np.float64))
    x = x[~np.isnan(x)]
    return float(x.max()) if len(x) else None


def compare(source, run_a, run_b, quantity, noise_run=None):
    """Step-aligned comparison of ``quantity`` between two runs of one logdir.

    At the steps both runs logged: a, b, difference b - a, ratio b / a and
    relative difference (b - a) / |a|.  Steps logged by one run only are
    listed, never dropped silently.  With ``noise_run`` (e.g. the reference
    precision with another seed), its relative difference to run A is the
    noise floor: ``summary.exceeds_noise`` says whether max |rel diff of B|
    exceeds max |rel diff of the noise run| over the steps all three share.

    Returns a JSON-ready dict whose long sequences are NumPy arrays.
    """
    steps_a, values_a, tag_a = quantity_series(source, run_a, quantity)
    steps_b, values_b, tag_b = quantity_series(source, run_b, quantity)
    common, a, b, only_a, only_b = align(steps_a, values_a, steps_b, values_b)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = b / a
    rel = relative_difference(a, b)
    noise = None
    noise_max = exceeds = None
    tag_noise = None
    if noise_run is not None:
        steps_n, values_n, tag_noise = quantity_series(source, noise_run, quantity)
        n_common, na, nn, _, _ = align(steps_a, values_a, steps_n, values_n)
        n_rel = relative_difference(na, nn)
        noise = {"steps": n_common, "rel_difference": n_rel}
        noise_max = _max_abs(n_rel)
        shared, ib, inn = np.intersect1d(common, n_common, assume_unique=True, return_indices=True)
        b_shared, n_shared = _max_abs(rel[ib]), _max_abs(n_rel[inn])
        if b_shared is not None and n_shared is not None:
            exceeds = bool(b_shared > n_shared)
    return {
        "quantity": {
            "kind": quantity.kind,
            "tag": quantity.tag,
            "row": quantity.row,
            "column": quantity.column if quantity.kind == SCALAR else (
                quantity.column or DEFAULT_COLUMN.get(quantity.kind)),
            "tags": {"a": tag_a, "b": tag_b, "noise": tag_noise},
        },
        "run_a": run_a,
        "run_b": run_b,
        "noise_run": noise_run,
        "steps": common,
        "a": a,
        "b": b,
        "difference": b - a,
        "ratio": ratio,
        "rel_difference": rel,
        "only_in_a": only_a,
        "only_in_b": only_b,
        "noise": noise,
        "summary": {
            "max_abs_rel_difference": _max_abs(rel),
            "noise_max_abs_rel_difference": noise_max,
            "exceeds_noise": exceeds,
        },
    }

"""What each column of the record contract means, in one plain line.

TensorFlow-free.  The runs route serves ``contract()`` with the tags; the
tab shows a line on hover of a table column or a metric choice, and keeps
no copy of its own.  ``c`` is the candidate (e.g. the bfloat16 step),
``r`` its reference (the float32 step).
"""

from typing import Dict

from tb_gradlens.metadata import kinds

# The columns of the comparison records (gradients and layer outputs); the
# Divergence view's Metric choices are these too.
DIVERGENCE = {
    "rel_l2": "How far the candidate is from the reference, relative to the reference's size: "
              "||c - r|| / ||r|| (0.01 is 1%).",
    "cosine": "Whether the candidate points the same way as the reference: 1 is the same direction, "
              "0 unrelated.",
    "norm_ratio": "The candidate's size over the reference's, ||c|| / ||r||: 1 is the same size, below 1 "
                  "the candidate shrank.",
    "max_abs": "The largest difference of a single element, max |c - r|, in the values' own units.",
    "max_rel": "The largest difference of a single element relative to the reference there, "
               "max |c - r| / |r| (tiny references floored).",
    "ulp_rms": "The typical difference counted in rounding steps of the candidate's format (ULPs): "
               "1 is one rounding step off per element.",
    "sign_flip": "The share of elements whose sign differs between candidate and reference (tiny "
                 "references left out).",
    "flush_to_zero": "The share of the reference's nonzero elements that are exactly zero in the "
                     "candidate: values too small for its format.",
    "nonfinite": "How many elements are NaN or infinite in the candidate or the reference.",
    kinds.STABLE_REL_L2: "rel_l2 of a stable 16-bit computation of the same step (the reference rounded to "
                         "the candidate's format between layers): what rounding alone does. The limit is a "
                         "multiple of it.",
    kinds.HALF_BATCH_REL_L2: "How much this gradient changes when computed from half the batch: its sampling "
                             "noise. An error well below it does not harm training, so the limit is at least "
                             "a share of it.",
}

LOSS_COMPARISON = {
    "reference": "The loss of the step computed as the reference (e.g. float32).",
    "candidate": "The loss of the same step computed as the candidate (e.g. bfloat16).",
    "abs_error": "The difference of the two losses, |c - r|.",
    "rel_error": "The difference of the two losses relative to the reference, |c - r| / |r|.",
    kinds.STABLE_REL_ERROR: "rel_error of a stable 16-bit computation of the same step: what rounding alone "
                            "does to the loss.",
    kinds.HALF_BATCH_REL_ERROR: "How much the loss changes when computed from half the batch: its sampling "
                                "noise.",
}

GRAD_STATS = {
    "l2_norm": "The gradient's size, sqrt(sum g^2), over its finite elements.",
    "mean": "The mean of the gradient's finite elements.",
    "std": "The spread of the gradient's finite elements (standard deviation).",
    "min": "The smallest finite element.",
    "max": "The largest finite element.",
    "max_abs": "The largest finite element by magnitude, max |g|.",
    "rms": "The typical element size, sqrt(mean g^2).",
    "zero_fraction": "The share of elements that are exactly zero.",
    "subnormal_fraction": "The share of elements below float32's smallest normal number (2^-126): values "
                          "that lose digits, and are zero on hardware that flushes them.",
    "nan_count": "How many elements are NaN.",
    "posinf_count": "How many elements are +Inf.",
    "neginf_count": "How many elements are -Inf.",
    "count": "How many elements the gradient has.",
    "is_none": "1 when the gradient was None: the variable is not connected to the loss.",
}

UPDATE_STATS = {
    "update_rms": "The typical change of a weight in this step, rms(w_after - w_before).",
    "update_ratio": "The step's change relative to the weights' size, ||w_after - w_before|| / ||w_before||.",
    "lost_update_bf16": "The share of weights whose update would be lost if they were stored in bfloat16: "
                        "the update is smaller than half the spacing of bfloat16 numbers near the weight.",
}

GRADIENT_INDICES = {
    "indices": "How many rows the sparse gradient names (with repeats).",
    "out_of_range": "Of them, how many are past the end of the table: an input id out of range.",
    "negative": "Of them, how many are negative (dropped).",
}

OPTIMIZER_STEP = {
    "iteration": "The optimizer's own step count before this train step.",
    "loss_scale": "The float16 loss scale this step used (none without loss scaling).",
    "next_loss_scale": "The loss scale after this step.",
    "skipped": "1 when the optimizer skipped the update (the scaled gradients were not finite).",
    "loss_nonfinite": "1 when the step's loss was NaN or infinite.",
}

NONFINITE_REPLAY = {
    "candidate_nonfinite": "NaN or infinite elements in the step as it ran (the candidate).",
    "reference_nonfinite": "NaN or infinite elements in the same step replayed in higher precision.",
    "candidate_max_abs": "The largest finite magnitude in the step as it ran.",
    "reference_max_abs": "The largest finite magnitude in the replayed step.",
}

COLUMNS = {
    kinds.GRAD_STATS: GRAD_STATS,
    kinds.DIVERGENCE: DIVERGENCE,
    kinds.ACTIVATION_DIVERGENCE: DIVERGENCE,
    kinds.LOSS_COMPARISON: LOSS_COMPARISON,
    kinds.UPDATE_STATS: UPDATE_STATS,
    kinds.GRADIENT_INDICES: GRADIENT_INDICES,
    kinds.OPTIMIZER_STEP: OPTIMIZER_STEP,
    kinds.NONFINITE_REPLAY: NONFINITE_REPLAY,
}

# The columns the tab's tables add to a record's own (keys as the tab names them).
TABLE = {
    "variable": "The variable, by its path in the model.",
    "layer": "The layer, by its path in the model.",
    "depth": "The layer's place from the input: 1 is the first layer.",
    "ratio": "The value over its limit at this step: above 1 is more than rounding (and, for a gradient, "
             "the batch's sampling noise) explains.",
    "limit": "What rounding explains for this row at this step; for a gradient at least a share of its "
             "sampling noise. Hover a limit for how it was measured.",
    "first": "The first logged step at which the row went above its limit.",
    "harmed": "The step from which the alert rules count the row as harmed (above its limit long enough, "
              "or far above it); never means no alert.",
    "worst": "The row's largest value over its limit in the steps shown.",
}


def column(kind: str, name: str) -> str:
    """The line of column ``name`` of a ``kind`` record ("" when there is none)."""
    return COLUMNS.get(kind, {}).get(name, "")


def contract() -> Dict[str, Dict[str, object]]:
    """What the runs route serves: ``{"columns": {kind: {column: line}},
    "table": {key: line}, "metrics": {metric: line}}`` (the metrics are the
    comparison columns)."""
    return {"columns": {kind: dict(lines) for kind, lines in COLUMNS.items()}, "table": dict(TABLE),
            "metrics": dict(DIVERGENCE)}

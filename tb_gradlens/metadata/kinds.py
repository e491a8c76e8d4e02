"""The record kinds of the gradlens format and the columns each holds.

TensorFlow-free.  ``tb_gradlens.metadata`` re-exports every name here; a
record's framing (``RecordMetadata``), its tag and its validation are there.
"""

from tb_gradlens import float_formats

# The newest content version this code writes and reads.  Version 2 added
# the stable-rounding and half-batch columns of the comparison records
# (``stable_rel_l2``, ``half_batch_rel_l2``; the loss: ``stable_rel_error``,
# ``half_batch_rel_error``); version 1 records are read as they are.
FORMAT_VERSION = 2

# ---------------------------------------------------------------------------
# Record kinds and their columns.
# ---------------------------------------------------------------------------

GRAD_STATS = "grad_stats"
GRAD_HISTOGRAM = "grad_histogram"
DIVERGENCE = "divergence"
ACTIVATION_DIVERGENCE = "activation_divergence"
LOSS_COMPARISON = "loss_comparison"
UPDATE_STATS = "update_stats"
GRADIENT_INDICES = "gradient_indices"
OPTIMIZER_STEP = "optimizer_step"
NONFINITE_REPLAY = "nonfinite_replay"
DTYPES = "dtypes"
LENS_STATUS = "lens_status"
ADVICE = "advice"

KINDS = (
    GRAD_STATS,
    GRAD_HISTOGRAM,
    DIVERGENCE,
    ACTIVATION_DIVERGENCE,
    LOSS_COMPARISON,
    UPDATE_STATS,
    GRADIENT_INDICES,
    OPTIMIZER_STEP,
    NONFINITE_REPLAY,
    DTYPES,
    LENS_STATUS,
    ADVICE,
)

# Kinds whose tensor is one scalar UTF-8 JSON string (rows name what it
# describes, no columns): the dtype map, the lens status and the precision
# advisor's advice.
JSON_KINDS = (DTYPES, LENS_STATUS, ADVICE)

# Per-variable gradient statistics (kind ``grad_stats``).  Value statistics
# (l2_norm .. rms) are taken over the finite elements; the counts say how
# many elements were left out.  A None gradient gives NaN value statistics,
# ``count`` = the variable's size and ``is_none`` = 1.
GRAD_STATS_COLUMNS = (
    "l2_norm",  # sqrt(sum g_i^2) over finite g_i
    "mean",  # sum g_i / n_finite
    "std",  # sqrt(sum (g_i - mean)^2 / n_finite)  (population)
    "min",
    "max",
    "max_abs",  # max |g_i|
    "rms",  # sqrt(sum g_i^2 / n_finite)
    "zero_fraction",  # #(g_i == +-0 exactly, by bits) / count
    "subnormal_fraction",  # #(0 < |g_i| < 2^-126) / count
    "nan_count",
    "posinf_count",
    "neginf_count",
    "count",  # number of elements
    "is_none",  # 1 if the gradient was None (variable disconnected)
)

# log2-magnitude histogram (kind ``grad_histogram``): column i < N_EXP_BINS
# counts finite nonzero |g| in [2^e, 2^(e+1)) with e = MIN_EXPONENT + i,
# i.e. e = floor(log2 |g|) over the whole float32/bfloat16 range, subnormals
# included; then exact zeros, +Inf, -Inf and NaN.
MIN_EXPONENT = float_formats.FORMATS["float32"].min_subnormal  # -149
MAX_EXPONENT = float_formats.FORMATS["float32"].max  # 127: largest finite float32 < 2^128
N_EXP_BINS = MAX_EXPONENT - MIN_EXPONENT + 1  # 277
HISTOGRAM_SPECIAL_COLUMNS = ("zero", "posinf", "neginf", "nan")
HISTOGRAM_COLUMNS = tuple(
    "2^%d" % e for e in range(MIN_EXPONENT, MAX_EXPONENT + 1)
) + HISTOGRAM_SPECIAL_COLUMNS

# Exponent limits a histogram view draws as lines: floor(log2) of the
# smallest subnormal, the smallest normal and the largest finite value.
DTYPE_EXPONENT_LIMITS = float_formats.exponent_limits()

# Divergence of a candidate c from a reference r (kinds ``divergence`` and
# ``activation_divergence``).  Formulas: tb_gradlens/numerics.py.
DIVERGENCE_COLUMNS_V1 = (
    "rel_l2",  # ||c - r||_2 / ||r||_2
    "cosine",  # <c, r> / (||c|| ||r||)
    "norm_ratio",  # ||c|| / ||r||
    "max_abs",  # max |c - r|
    "max_rel",  # max |c - r| / max(|r|, floor)
    "ulp_rms",  # rms((c - r) / spacing_candidate(r))
    "sign_flip",  # fraction sign(c) != sign(r) among |r| > floor
    "flush_to_zero",  # fraction r != 0 and c == 0
    "nonfinite",  # count of NaN/Inf in c or r
)
# rel_l2 of the stable-rounding pass (the reference rounded to the
# candidate's dtype between layers: compare/stable.py) against the
# reference; NaN where it was not measured.
STABLE_REL_L2 = "stable_rel_l2"
# rel_l2 of the reference gradient of the first half of the batch against
# the batch's: the gradient's sampling noise (gradients only; NaN elsewhere
# or where it was not measured).
HALF_BATCH_REL_L2 = "half_batch_rel_l2"
DIVERGENCE_COLUMNS = DIVERGENCE_COLUMNS_V1 + (STABLE_REL_L2, HALF_BATCH_REL_L2)
# The metrics of a candidate against a reference (numerics.divergence_metrics).
DIVERGENCE_METRICS = DIVERGENCE_COLUMNS_V1

# Loss of one step in both variants (kind ``loss_comparison``, row "loss").
LOSS_COMPARISON_COLUMNS_V1 = ("reference", "candidate", "abs_error", "rel_error")
STABLE_REL_ERROR = "stable_rel_error"  # rel_error of the stable-rounding pass's loss
HALF_BATCH_REL_ERROR = "half_batch_rel_error"  # rel_error of the half batch's reference loss
LOSS_COMPARISON_COLUMNS = LOSS_COMPARISON_COLUMNS_V1 + (STABLE_REL_ERROR, HALF_BATCH_REL_ERROR)

# What an optimizer step did to each variable (kind ``update_stats``).
UPDATE_STATS_COLUMNS = (
    "update_rms",  # rms(w_after - w_before)
    "update_ratio",  # ||w_after - w_before|| / ||w_before||
    "lost_update_bf16",  # fraction with w != w+dw but bf16(w+dw) == bf16(w)
)

# The indices of sparse (IndexedSlices) gradients, e.g. an Embedding's, per
# variable and logged step (kind ``gradient_indices``; only variables whose
# gradient is sparse).  An index past the table is an input id out of
# range: the applied gradient drops its row (XLA clamps the lookup).
GRADIENT_INDICES_COLUMNS = (
    "indices",  # indices the gradient names (with repeats)
    "out_of_range",  # of them, index >= the table's rows
    "negative",  # of them, index < 0 (dropped by TensorFlow too)
)

# What the optimizer did at a train step (kind ``optimizer_step``, row
# "optimizer"): written at every logged step and at every step the
# optimizer skipped (a float16 loss scale that overflowed).  Record steps
# count train steps (batches); the optimizer's own step is kept here.
OPTIMIZER_STEP_COLUMNS = (
    "iteration",  # optimizer.iterations before the step
    "loss_scale",  # the loss scale the step used (NaN without loss scaling)
    "next_loss_scale",  # the loss scale after it
    "skipped",  # 1 when the optimizer skipped the update (non-finite scaled gradients)
    "loss_nonfinite",  # 1 when the step's loss was NaN or infinite (NaN: not seen, under XLA)
)

# The first non-finite step replayed from its weights before its update (kind
# ``nonfinite_replay``): per row, in forward order (``row_kinds``: layer
# outputs, the loss, then the gradients), the non-finite element count and
# the largest finite magnitude in the step as configured (candidate) and
# in the reference (float32 or float64), from the same weights, batch and
# random draws.
NONFINITE_REPLAY_COLUMNS = (
    "candidate_nonfinite",
    "reference_nonfinite",
    "candidate_max_abs",
    "reference_max_abs",
)

# Columns a kind must have (readers check this); None: free-form.
KIND_COLUMNS = {
    GRAD_STATS: GRAD_STATS_COLUMNS,
    GRAD_HISTOGRAM: HISTOGRAM_COLUMNS,
    DIVERGENCE: DIVERGENCE_COLUMNS,
    ACTIVATION_DIVERGENCE: DIVERGENCE_COLUMNS,
    LOSS_COMPARISON: LOSS_COMPARISON_COLUMNS,
    UPDATE_STATS: UPDATE_STATS_COLUMNS,
    GRADIENT_INDICES: GRADIENT_INDICES_COLUMNS,
    OPTIMIZER_STEP: OPTIMIZER_STEP_COLUMNS,
    NONFINITE_REPLAY: NONFINITE_REPLAY_COLUMNS,
    DTYPES: (),
    LENS_STATUS: (),
    ADVICE: (),
}

# The columns of each kind in older format versions (where they differ).
KIND_COLUMNS_V1 = dict(KIND_COLUMNS, **{
    DIVERGENCE: DIVERGENCE_COLUMNS_V1,
    ACTIVATION_DIVERGENCE: DIVERGENCE_COLUMNS_V1,
    LOSS_COMPARISON: LOSS_COMPARISON_COLUMNS_V1,
})


def kind_columns(kind, version=FORMAT_VERSION):
    """The columns a record of ``kind`` has in format ``version``."""
    return (KIND_COLUMNS_V1 if version < 2 else KIND_COLUMNS)[kind]

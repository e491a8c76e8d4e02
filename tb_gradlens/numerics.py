"""Pure TensorFlow numerics: gradient statistics and the log2 histogram.

Each function maps tensors to tensors, has no side effects and works in
eager mode, inside ``tf.function`` and under XLA.  Formulas are in the
docstrings and in ``metadata.py``.

Exactness on CPU: TensorFlow's CPU kernels treat subnormal float32 inputs
as zero (denormals-are-zero).  Zero, subnormal, infinity and NaN counts and
the histogram are therefore computed from the IEEE-754 bits (integer ops),
which see every subnormal; value statistics (sums, min, max) see what the
hardware sees, so a subnormal contributes 0 to them on CPU.
"""

import tensorflow as tf

from tb_gradlens import float_formats
from tb_gradlens import metadata

# Histogram bin index of the special classes (after the exponent bins).
_ZERO_BIN = metadata.N_EXP_BINS
_POSINF_BIN = metadata.N_EXP_BINS + 1
_NEGINF_BIN = metadata.N_EXP_BINS + 2
_NAN_BIN = metadata.N_EXP_BINS + 3
_N_BINS = len(metadata.HISTOGRAM_COLUMNS)
_SUBNORMAL_BINS = -126 - metadata.MIN_EXPONENT  # exponents -149 .. -127


def log2_bin_index(x):
    """Histogram bin of each element of float32 ``x`` (int32, same shape).

    bin = floor(log2 |x|) - MIN_EXPONENT for finite nonzero x (subnormals
    included, computed from the bits), then ZERO, +INF, -INF, NAN bins.
    """
    bits = tf.bitcast(x, tf.int32)
    exponent_field = tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits, 23), 0xFF)
    mantissa = tf.bitwise.bitwise_and(bits, 0x7FFFFF)
    # floor(log2(mantissa)) for subnormals: the exponent of float32(mantissa),
    # exact because mantissa < 2^23.
    mantissa_exponent = (
        tf.bitwise.right_shift(tf.bitcast(tf.cast(mantissa, tf.float32), tf.int32), 23)
        - 127
    )
    exponent = tf.where(
        exponent_field == 0, mantissa_exponent - 149, exponent_field - 127
    )
    index = exponent - metadata.MIN_EXPONENT
    is_zero = tf.logical_and(exponent_field == 0, mantissa == 0)
    is_special = exponent_field == 0xFF
    negative = bits < 0
    special = tf.where(
        mantissa != 0,
        _NAN_BIN,
        tf.where(negative, _NEGINF_BIN, _POSINF_BIN),
    )
    index = tf.where(is_zero, _ZERO_BIN, index)
    return tf.where(is_special, special, index)


def _flat_float32(tensor):
    """``tensor`` flattened to rank 1, float32 (exact for bf16/f16)."""
    flat = tf.reshape(tensor, [-1])
    return flat if flat.dtype == tf.float32 else tf.cast(flat, tf.float32)


def gradient_statistics(gradients, sizes=None, use_xla=True):
    """Statistics and log2 histograms of a list of gradients, in one fused pass.

    All gradients are flattened into one float32 vector g with a segment id
    per variable, then per segment (n = element count, F = finite elements):

      l2_norm = sqrt(sum_F g^2)       mean = sum_F g / |F|
      std = sqrt(max(sum_F g^2/|F| - mean^2, 0))
      min, max, max_abs over F        rms = sqrt(sum_F g^2 / |F|)
      zero_fraction = #(g == 0) / n   subnormal_fraction = #(0<|g|<2^-126) / n
      nan_count, posinf_count, neginf_count, count = n, is_none = 0

    Sums are accumulated in float64.  A gradient that is None gives NaN
    value statistics, a zero histogram, count = its entry in ``sizes`` and
    is_none = 1.  An empty gradient gives NaN value statistics and
    fractions, and count = 0.

    A ``tf.IndexedSlices`` gradient (e.g. of an embedding table) is
    summarized without densifying it.  It stands for the dense gradient
    G = unsorted_segment_sum(values, indices, dense_shape[0]), what
    ``tf.convert_to_tensor`` and the optimizers' scatter-adds apply: rows
    named more than once are summed (in the gradient's dtype and in order
    of appearance, as TensorFlow sums them), rows not named are exact
    zeros.  The pass sees the k unique summed rows plus
    (prod(dense_shape) - k * row size) zeros that are only counted: the
    counts, the zero bin, sums and the min/max (0 is a value of G when a
    row is missing) are exactly those of G; only the float64 summation
    order differs.  Without a ``dense_shape`` the entry of ``sizes`` is
    the table size (else only the slices are counted).  Sparse gradients
    run the separate-kernel pass (their shapes change every step; XLA
    would compile each one).

    Args:
      gradients: list of tensors or ``tf.IndexedSlices`` (any float dtype)
        or None.
      sizes: element counts to report for None gradients (list of ints,
        same length; ignored for present dense gradients).
      use_xla: run the fused pass as one XLA-compiled function (default);
        False runs the same ops as separate kernels.

    Returns:
      (stats, histogram): float32 ``[V, len(GRAD_STATS_COLUMNS)]`` and
      float32 ``[V, len(HISTOGRAM_COLUMNS)]``.
    """
    n_vars = len(gradients)
    if not n_vars:
        return (
            tf.zeros([0, len(metadata.GRAD_STATS_COLUMNS)], tf.float32),
            tf.zeros([0, _N_BINS], tf.float32),
        )
    present = [i for i, g in enumerate(gradients) if g is not None]
    if sizes is None:
        sizes = [0] * n_vars
    n_present = len(present)
    if n_present:
        flats, implicit_zeros = [], []
        for i in present:
            flat, zeros = _gradient_parts(gradients[i], sizes[i])
            flats.append(flat)
            implicit_zeros.append(zeros)
        sparse = [isinstance(gradients[i], tf.IndexedSlices) for i in present]
        if use_xla and not any(sparse):
            stats, hist = _fused_statistics_xla(flats, tf.stack(implicit_zeros), _segment_counts(flats))
        elif use_xla and not all(sparse):
            # Dense gradients through XLA (shapes fixed); the unique rows of
            # sparse ones change every step, so XLA would recompile: kernels.
            dense = [k for k, is_sparse in enumerate(sparse) if not is_sparse]
            rest = [k for k, is_sparse in enumerate(sparse) if is_sparse]
            parts = [
                _fused_statistics_xla([flats[k] for k in dense], tf.stack([implicit_zeros[k] for k in dense]),
                                      _segment_counts([flats[k] for k in dense])),
                _fused_statistics([flats[k] for k in rest], tf.stack([implicit_zeros[k] for k in rest]),
                                  _segment_counts([flats[k] for k in rest])),
            ]
            order = [0] * len(present)
            for j, k in enumerate(dense + rest):
                order[k] = j
            stats = tf.gather(tf.concat([parts[0][0], parts[1][0]], 0), order)
            hist = tf.gather(tf.concat([parts[0][1], parts[1][1]], 0), order)
        else:
            stats, hist = _fused_statistics(flats, tf.stack(implicit_zeros), _segment_counts(flats))
    if n_present == n_vars:
        return stats, hist
    # Scatter present rows among rows for None gradients.
    nan = float("nan")
    none_stat = [nan] * 7 + [nan, nan, 0.0, 0.0, 0.0]
    rows_stats, rows_hist = [], []
    position = {v: k for k, v in enumerate(present)}
    for i in range(n_vars):
        if i in position:
            rows_stats.append(stats[position[i]])
            rows_hist.append(hist[position[i]])
        else:
            rows_stats.append(
                tf.constant(none_stat + [float(sizes[i]), 1.0], tf.float32)
            )
            rows_hist.append(tf.zeros([_N_BINS], tf.float32))
    return tf.stack(rows_stats), tf.stack(rows_hist)


def _gradient_parts(gradient, size):
    """(rank-1 float32 values, float64 count of implicit zeros) of a gradient.

    Dense: all its elements, no implicit zero.  ``tf.IndexedSlices``: the
    unique rows, duplicates summed as ``tf.convert_to_tensor`` sums them,
    and the elements of the rows not named (see ``gradient_statistics``).
    """
    if not isinstance(gradient, tf.IndexedSlices):
        return _flat_float32(gradient), tf.constant(0.0, tf.float64)
    indices = tf.reshape(gradient.indices, [-1])
    unique, position = tf.unique(indices)
    summed = tf.math.unsorted_segment_sum(gradient.values, position, tf.size(unique))
    flat = _flat_float32(summed)
    if gradient.dense_shape is not None:
        total = tf.reduce_prod(tf.cast(gradient.dense_shape, tf.float64))
    else:
        total = tf.cast(tf.maximum(int(size or 0), 0), tf.float64)
    listed = tf.cast(tf.size(flat), tf.float64)
    return flat, tf.maximum(total - listed, 0.0)


def _segment_counts(flats):
    """int32 ``[len(flats)]``: the element count of each tensor.

    Computed by the caller and passed to the XLA-compiled passes as an
    argument: computed inside, the counts are compile-time constants and
    XLA constant-folds the segment ids (a cumsum over every element), which
    took over a minute of compilation for a 5M-parameter model.
    """
    return tf.stack([tf.size(f, out_type=tf.int32) for f in flats])


def _fused_statistics(flats, implicit_zeros, counts):
    """Statistics and histograms of a non-empty list of rank-1 float32 tensors.

    ``implicit_zeros`` (float64 ``[len(flats)]``) adds that many exact
    zeros to each tensor without materializing them (sparse gradients);
    ``counts`` is ``_segment_counts(flats)``.
    """
    n_present = len(flats)
    values = flats[0] if n_present == 1 else tf.concat(flats, axis=0)
    segment = _segment_ids(counts, tf.shape(values)[0])
    hist = _segment_histogram(values, segment, n_present)
    zero_column = tf.one_hot(_ZERO_BIN, _N_BINS, dtype=tf.float64)
    hist64 = tf.cast(hist, tf.float64) + implicit_zeros[:, None] * zero_column[None, :]
    hist = tf.cast(hist64, tf.float32)
    value_stats = _segment_value_statistics(
        values, segment, n_present, hist64, implicit_zeros > 0
    )
    counts64 = tf.cast(counts, tf.float64) + implicit_zeros
    counts_f = tf.cast(counts64, tf.float32)
    safe_n = tf.maximum(counts64, 1.0)
    nan_if_empty = tf.where(counts64 > 0, tf.constant(1.0, tf.float64), float("nan"))
    zero_fraction = tf.cast(hist64[:, _ZERO_BIN] / safe_n * nan_if_empty, tf.float32)
    subnormal_fraction = tf.cast(
        tf.reduce_sum(hist64[:, :_SUBNORMAL_BINS], axis=1) / safe_n * nan_if_empty, tf.float32
    )
    stats = tf.concat(
        [
            value_stats,
            tf.stack(
                [
                    zero_fraction,
                    subnormal_fraction,
                    hist[:, _NAN_BIN],
                    hist[:, _POSINF_BIN],
                    hist[:, _NEGINF_BIN],
                    counts_f,
                    tf.zeros_like(counts_f),
                ],
                axis=1,
            ),
        ],
        axis=1,
    )
    return stats, hist


# The same computation compiled by XLA into a few fused loops: about 4x
# faster than ~30 separate kernels on CPU (benchmarks/BENCHMARKS.md).
# reduce_retracing: gradients whose shapes change between steps reuse one
# trace (XLA still compiles per shape, on demand).
_fused_statistics_xla = tf.function(
    _fused_statistics, jit_compile=True, autograph=False, reduce_retracing=True
)


def _segment_ids(counts, total):
    """Segment id of each element of the concatenation of segments of ``counts``.

    ids = cumsum(marks), marks[start_i] += 1 for i >= 1: two passes, no
    int32 constant of the full length, and compiles under XLA.
    """
    starts = tf.cumsum(counts)[:-1]
    marks = tf.math.unsorted_segment_sum(
        tf.ones_like(starts), starts, total + 1
    )[:total]
    return tf.cumsum(marks)


def _segment_histogram(values, segment, n_segments):
    """Counts of each log2 bin per segment: float32 ``[n_segments, N_BINS]``."""
    flat_index = segment * _N_BINS + log2_bin_index(values)
    # Counted in int32: float32 counts stop at 2^24 (16.7M elements).
    counts = tf.math.unsorted_segment_sum(
        tf.ones_like(flat_index, tf.int32), flat_index, n_segments * _N_BINS
    )
    return tf.reshape(counts, [n_segments, _N_BINS])


def _segment_value_statistics(values, segment, n_segments, hist, has_implicit_zero):
    """l2_norm, mean, std, min, max, max_abs, rms per segment (finite only).

    ``hist`` counts the implicit zeros; ``has_implicit_zero`` (bool
    ``[n_segments]``) brings 0 into the min and max of those segments.
    """
    finite = tf.math.is_finite(values)
    finite_values = tf.where(finite, values, 0.0)
    wide = tf.cast(finite_values, tf.float64)
    sums = tf.math.unsorted_segment_sum(
        tf.stack([wide, wide * wide], axis=1), segment, n_segments
    )
    sum_g, sum_g2 = sums[:, 0], sums[:, 1]
    n_finite = tf.cast(
        tf.reduce_sum(hist[:, : metadata.N_EXP_BINS + 1], axis=1), tf.float64
    )
    has_finite = n_finite > 0
    safe_n = tf.where(has_finite, n_finite, 1.0)
    nan = tf.constant(float("nan"), tf.float64)
    mean = tf.where(has_finite, sum_g / safe_n, nan)
    mean_sq = tf.where(has_finite, sum_g2 / safe_n, nan)
    std = tf.sqrt(tf.maximum(mean_sq - mean * mean, 0.0))
    rms = tf.sqrt(mean_sq)
    l2 = tf.sqrt(sum_g2)
    inf = float("inf")
    minimum = tf.math.unsorted_segment_min(
        tf.where(finite, values, inf), segment, n_segments
    )
    maximum = tf.math.unsorted_segment_max(
        tf.where(finite, values, -inf), segment, n_segments
    )
    minimum = tf.where(has_implicit_zero, tf.minimum(minimum, 0.0), minimum)
    maximum = tf.where(has_implicit_zero, tf.maximum(maximum, 0.0), maximum)
    nan32 = tf.constant(float("nan"), tf.float32)
    minimum = tf.where(has_finite, minimum, nan32)
    maximum = tf.where(has_finite, maximum, nan32)
    max_abs = tf.maximum(tf.abs(minimum), tf.abs(maximum))
    wide_stats = tf.cast(tf.stack([l2, mean, std], axis=1), tf.float32)
    return tf.concat(
        [
            wide_stats,
            tf.stack([minimum, maximum, max_abs, tf.cast(rms, tf.float32)], axis=1),
        ],
        axis=1,
    )


# ---------------------------------------------------------------------------
# Divergence of a candidate from a reference (kinds ``divergence`` and
# ``activation_divergence``), loss comparison and update statistics.
# ---------------------------------------------------------------------------

# Candidate dtype -> (explicit mantissa bits p, smallest normal exponent).
# The spacing of the dtype's values at |r| in [2^e, 2^(e+1)) is
# 2^(max(e, min_normal) - p): below 2^min_normal (subnormals, zero) it is
# the subnormal spacing 2^(min_normal - p).
DTYPE_PRECISION = {
    name: (f.mantissa_bits, f.min_normal) for name, f in float_formats.FORMATS.items()
}

# An element is "significant" for sign_flip (and the denominators of max_rel
# and ulp_rms are floored) at SIGNIFICANCE_FLOOR * rms(r): the rounding
# noise of a correct bfloat16 computation (~2^-8 of the typical value)
# stays well below a tenth of the typical value.
SIGNIFICANCE_FLOOR = 0.1

def exact_float64(x):
    """``x`` widened to float64 exactly, float32/bfloat16/float16 subnormals kept.

    TensorFlow's CPU Cast float32 -> float64 flushes subnormal inputs to
    zero; here a float32 subnormal is rebuilt from its bits as
    sign * mantissa * 2^-149 (exact: float64 represents it as a normal
    number).  bfloat16 and float16 go through float32, which is exact.
    """
    x = tf.convert_to_tensor(x)
    if x.dtype == tf.float64:
        return x
    x32 = x if x.dtype == tf.float32 else tf.cast(x, tf.float32)
    bits = tf.bitcast(x32, tf.int32)
    exponent_field = tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits, 23), 0xFF)
    mantissa = tf.cast(tf.bitwise.bitwise_and(bits, 0x7FFFFF), tf.float64)
    subnormal = tf.where(bits < 0, -mantissa, mantissa) * (2.0**-149)
    return tf.where(exponent_field == 0, subnormal, tf.cast(x32, tf.float64))


def is_zero(x):
    """Elementwise ``x == +-0`` from the bits (a subnormal is not zero)."""
    x = tf.convert_to_tensor(x)
    width = {2: (tf.int16, 0x7FFF), 4: (tf.int32, 0x7FFFFFFF), 8: (tf.int64, 0x7FFFFFFFFFFFFFFF)}
    int_dtype, magnitude_mask = width[x.dtype.size]
    bits = tf.bitcast(x, int_dtype)
    return tf.equal(tf.bitwise.bitwise_and(bits, tf.constant(magnitude_mask, int_dtype)), 0)


def spacing(reference, dtype):
    """Spacing (ULP) of ``dtype``'s values at float64 ``reference`` (float64).

    spacing = 2^(max(floor(log2 |r|), min_normal) - p) with (p, min_normal)
    from DTYPE_PRECISION: bfloat16 2^(e-7), float16 2^(e-10), float32
    2^(e-23), float64 2^(e-52); zero and subnormal r get the subnormal
    spacing 2^(min_normal - p).  floor(log2 |r|) is read from the bits;
    results are clamped at 2^-1022 so they stay normal float64 numbers.
    """
    p, min_normal = _precision(dtype)
    return _spacing_from(reference, p, min_normal)


def _precision(dtype):
    name = tf.as_dtype(dtype).name
    if name not in DTYPE_PRECISION:
        raise ValueError(
            "tb_gradlens: no ULP spacing for dtype %r (known: %s)"
            % (name, ", ".join(DTYPE_PRECISION))
        )
    return DTYPE_PRECISION[name]


def _spacing_from(reference, p, min_normal):
    """spacing() with per-element (or scalar) p and min_normal tensors."""
    bits = tf.bitcast(tf.convert_to_tensor(reference, tf.float64), tf.int64)
    exponent = tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits, 52), 0x7FF) - 1023
    exponent = tf.maximum(exponent, tf.cast(min_normal, tf.int64)) - tf.cast(p, tf.int64)
    exponent = tf.maximum(exponent, -1022)
    return tf.bitcast(tf.bitwise.left_shift(exponent + 1023, 52), tf.float64)


def tensor_divergence(candidate, reference, candidate_dtype=None, floor_fraction=SIGNIFICANCE_FLOOR):
    """Divergence metrics of one tensor pair: float64 ``[len(DIVERGENCE_COLUMNS)]``.

    Same definitions as ``divergence_metrics`` (which see).
    """
    return _divergence(
        [candidate], [reference], [candidate_dtype], floor_fraction
    )[0]


def divergence_metrics(candidates, references, candidate_dtypes=None, floor_fraction=SIGNIFICANCE_FLOOR):
    """Per-pair divergence of candidates c from references r, in one fused pass.

    Every tensor is widened exactly to float64 (``exact_float64``).  Over
    the compared elements F (both c and r finite), with d = c - r,
    n = |F|, floor = floor_fraction * rms_F(r) and s = the spacing of the
    candidate dtype (``spacing``) at max(|r|, floor) (the floor keeps a
    reference that is zero where the candidate is not, e.g. a ReLU on the
    other side of 0, from measuring in subnormal ULPs):

      rel_l2        = ||d|| / ||r||      (0 if both zero, inf if only r is)
      cosine        = <c,r> / sqrt(||c||^2 ||r||^2)
                                         (1 if both zero, 0 if one is)
      norm_ratio    = ||c|| / ||r||      (1 if both zero, inf if only r is)
      max_abs       = max |d|
      max_rel       = max |d| / max(|r|, floor)   (0/0 counts as 0)
      ulp_rms       = sqrt(sum (d/s)^2 / n)       (1/sqrt(12) ~ 0.29 for
                                                   one correct rounding)
      sign_flip     = #(sign c != sign r, |r| > floor) / #(|r| > floor)
                      (np.sign semantics: c == 0 is a flip; 0 if no
                      element is significant)
      flush_to_zero = #(r != 0, c == 0) / n   (zeros read from the bits:
                      exact on CPU despite denormals-are-zero)
      nonfinite     = #(elements where c or r is NaN or +-Inf); such
                      elements are left out of every other metric.

    With no compared element (empty tensors, or all non-finite) every
    metric but ``nonfinite`` is NaN.  A pair with a None member gives a
    NaN row with nonfinite = 0.

    Args:
      candidates, references: lists of tensors of equal length; each pair
        has the same number of elements (dtypes may differ).
      candidate_dtypes: the dtype whose spacing defines ``ulp_rms`` for
        each pair (e.g. bfloat16 for a mixed_bfloat16 candidate whose
        gradients are float32); default each candidate's dtype.
      floor_fraction: the significance floor as a fraction of rms(r).

    Returns:
      float32 ``[V, len(metadata.DIVERGENCE_COLUMNS)]``.
    """
    return tf.cast(
        _divergence(candidates, references, candidate_dtypes, floor_fraction), tf.float32
    )


def _divergence(candidates, references, candidate_dtypes, floor_fraction):
    """float64 ``[V, 9]`` divergence (see ``divergence_metrics``)."""
    candidates, references = list(candidates), list(references)
    n_pairs = len(candidates)
    if len(references) != n_pairs:
        raise ValueError(
            "tb_gradlens: %d candidates for %d references" % (n_pairs, len(references))
        )
    if candidate_dtypes is None:
        candidate_dtypes = [None] * n_pairs
    n_columns = len(metadata.DIVERGENCE_COLUMNS)
    nan_row = tf.constant([float("nan")] * (n_columns - 1) + [0.0], tf.float64)
    present = [
        i for i in range(n_pairs) if candidates[i] is not None and references[i] is not None
    ]
    if not present:
        return tf.reshape(tf.tile(nan_row, [n_pairs]), [n_pairs, n_columns])
    c_flat, r_flat, precisions = [], [], []
    for i in present:
        c = tf.reshape(tf.convert_to_tensor(candidates[i]), [-1])
        r = tf.reshape(tf.convert_to_tensor(references[i]), [-1])
        if c.shape.is_fully_defined() and r.shape.is_fully_defined() and c.shape != r.shape:
            raise ValueError(
                "tb_gradlens: pair %d has %d candidate and %d reference elements"
                % (i, c.shape[0], r.shape[0])
            )
        c_flat.append(c)
        r_flat.append(r)
        precisions.append(_precision(candidate_dtypes[i] or c.dtype))
    p = tf.constant([q[0] for q in precisions], tf.int64)
    min_normal = tf.constant([q[1] for q in precisions], tf.int64)
    static = all(t.shape.is_fully_defined() for t in c_flat + r_flat)
    # Fully known shapes (every dense gradient and activation of a built
    # model): one XLA-compiled pass, a few fused loops instead of ~60
    # float64 kernels.  Unknown shapes: the same ops as kernels.
    segment_divergence = _segment_divergence_xla if static else _segment_divergence
    metrics = segment_divergence(c_flat, r_flat, _segment_counts(c_flat), p, min_normal, floor_fraction)
    if len(present) == n_pairs:
        return metrics
    position = {v: k for k, v in enumerate(present)}
    return tf.stack(
        [metrics[position[i]] if i in position else nan_row for i in range(n_pairs)]
    )


def _segment_divergence(c_flat, r_flat, counts, p_per_segment, min_normal_per_segment, floor_fraction):
    """float64 ``[len(c_flat), 9]``: the metrics of ``divergence_metrics``
    per pair of rank-1 tensors; ``counts`` is ``_segment_counts(c_flat)``,
    (p, min_normal) of each candidate dtype int64 ``[len(c_flat)]``."""
    n_seg = len(c_flat)

    def concat(tensors):
        return tensors[0] if n_seg == 1 else tf.concat(tensors, axis=0)

    c64 = concat([exact_float64(c) for c in c_flat])
    if n_seg == 1:
        # One pair: plain reductions (XLA's CPU scatters are serial).
        def segment_sum(x):
            return tf.reduce_sum(x, axis=0, keepdims=True)

        def segment_max(x):
            return tf.reduce_max(x, axis=0, keepdims=True)

        def per_element(v):
            return v  # [1]: broadcasts against the elements
    else:
        segment = _segment_ids(counts, tf.shape(c64)[0])

        def segment_sum(x):
            return tf.math.unsorted_segment_sum(x, segment, n_seg)

        def segment_max(x):
            return tf.math.unsorted_segment_max(x, segment, n_seg)

        def per_element(v):
            return tf.gather(v, segment)

    r64 = concat([exact_float64(r) for r in r_flat])
    c_zero = concat([is_zero(c) for c in c_flat])
    r_zero = concat([is_zero(r) for r in r_flat])
    finite = tf.logical_and(tf.math.is_finite(c64), tf.math.is_finite(r64))
    c = tf.where(finite, c64, 0.0)
    r = tf.where(finite, r64, 0.0)
    d = c - r
    p = per_element(p_per_segment)
    min_normal = per_element(min_normal_per_segment)
    finite64 = tf.cast(finite, tf.float64)
    n_and_r2 = segment_sum(tf.stack([finite64, r * r], axis=1))
    n, sum_r2 = tf.unstack(n_and_r2, axis=1)
    has_n = n > 0
    safe_n = tf.where(has_n, n, 1.0)
    floor = floor_fraction * tf.sqrt(sum_r2 / safe_n)
    floor_e = per_element(floor)
    abs_d = tf.abs(d)
    floored_r = tf.maximum(tf.abs(r), floor_e)
    d_ulp = d / _spacing_from(floored_r, p, min_normal)
    sums = segment_sum(tf.stack([d * d, c * c, c * r, d_ulp * d_ulp], axis=1))
    sum_d2, sum_c2, sum_cr, sum_ulp2 = tf.unstack(sums, axis=1)
    rel = tf.math.divide_no_nan(abs_d, floored_r)
    rel = tf.where(
        tf.logical_and(abs_d > 0, floored_r == 0),
        tf.constant(float("inf"), tf.float64),
        rel,
    )
    maxima = segment_max(tf.stack([abs_d, rel], axis=1))
    significant = tf.logical_and(finite, tf.abs(r) > floor_e)
    flipped = tf.logical_and(significant, tf.not_equal(tf.sign(c), tf.sign(r)))
    flushed = tf.logical_and(finite, tf.logical_and(tf.logical_not(r_zero), c_zero))
    counts64 = segment_sum(
        tf.cast(
            tf.stack([significant, flipped, flushed, tf.logical_not(finite)], axis=1),
            tf.float64,
        )
    )
    n_significant, n_flipped, n_flushed, n_nonfinite = tf.unstack(counts64, axis=1)
    norm_d, norm_r, norm_c = tf.sqrt(sum_d2), tf.sqrt(sum_r2), tf.sqrt(sum_c2)
    inf = tf.constant(float("inf"), tf.float64)
    rel_l2 = _ratio_or(norm_d, norm_r, inf, 0.0)
    norm_ratio = _ratio_or(norm_c, norm_r, inf, 1.0)
    both_nonzero = tf.logical_and(sum_c2 > 0, sum_r2 > 0)
    cosine = tf.where(
        both_nonzero,
        tf.clip_by_value(
            sum_cr / tf.sqrt(tf.where(both_nonzero, sum_c2 * sum_r2, 1.0)), -1.0, 1.0
        ),
        tf.cast(tf.logical_and(sum_c2 == 0, sum_r2 == 0), tf.float64),
    )
    ulp_rms = tf.sqrt(sum_ulp2 / safe_n)
    sign_flip = n_flipped / tf.maximum(n_significant, 1.0)
    flush = n_flushed / safe_n
    values = tf.stack(
        [rel_l2, cosine, norm_ratio, maxima[:, 0], maxima[:, 1], ulp_rms, sign_flip, flush],
        axis=1,
    )
    values = tf.where(has_n[:, None], values, tf.constant(float("nan"), tf.float64))
    return tf.concat([values, n_nonfinite[:, None]], axis=1)


_segment_divergence_xla = tf.function(
    _segment_divergence, jit_compile=True, autograph=False, reduce_retracing=True
)


def _ratio_or(numerator, denominator, if_only_denominator_zero, if_both_zero):
    """numerator / denominator with the two zero-denominator cases defined."""
    safe = tf.where(denominator > 0, denominator, 1.0)
    return tf.where(
        denominator > 0,
        numerator / safe,
        tf.where(numerator > 0, if_only_denominator_zero, if_both_zero),
    )


def loss_comparison(reference_loss, candidate_loss):
    """float32 ``[1, 4]``: reference, candidate, |c - r|, |c - r| / |r|.

    Computed in float64; rel_error is 0 when both are zero and inf when
    only the reference is.
    """
    r = tf.reshape(exact_float64(reference_loss), [])
    c = tf.reshape(exact_float64(candidate_loss), [])
    abs_error = tf.abs(c - r)
    rel_error = _ratio_or(abs_error, tf.abs(r), tf.constant(float("inf"), tf.float64), 0.0)
    return tf.cast(tf.stack([[r, c, abs_error, rel_error]]), tf.float32)


def update_statistics(before, after, gradients=None):
    """What one optimizer step did to each variable: float32 ``[V, 3]``.

    Columns (metadata.UPDATE_STATS_COLUMNS), computed in float64 with
    u = after - before over n elements:

      update_rms       = sqrt(sum u^2 / n)
      update_ratio     = ||u|| / ||before||  (0 if both zero; 1 if only
                         before is: zero-initialized weights, e.g. biases at
                         their first step, move by their whole size, u = after)
      lost_update_bf16 = for float32 (or wider) weights: the fraction of
                         elements the step changed whose bfloat16 rounding
                         did not change, #(after != before and bf16(after)
                         == bf16(before)) / n, i.e. updates a bfloat16 copy
                         of the weights would lose;
                         for weights stored in bfloat16: the fraction whose
                         gradient is finite and nonzero but whose value did
                         not change, #(g != 0 and after == before) / n
                         (NaN when no gradient is given).
    "Changed" and "equal" compare bits (+0 and -0 are equal), so they are
    exact for subnormals on CPU.  An empty variable gives NaN.

    Args:
      before, after: lists of tensors (weights before and after the step).
      gradients: optional list of the step's gradients (for bfloat16 weights).
    """
    rows = []
    for i, (b, a) in enumerate(zip(before, after)):
        g = gradients[i] if gradients is not None else None
        rows.append(_update_row(tf.reshape(b, [-1]), tf.reshape(a, [-1]), g))
    if not rows:
        return tf.zeros([0, len(metadata.UPDATE_STATS_COLUMNS)], tf.float32)
    return tf.cast(tf.stack(rows), tf.float32)


def _same_value(x, y):
    """Bitwise equality of two same-dtype tensors, +0 == -0."""
    int_dtype = {2: tf.int16, 4: tf.int32, 8: tf.int64}[x.dtype.size]
    same_bits = tf.equal(tf.bitcast(x, int_dtype), tf.bitcast(y, int_dtype))
    return tf.logical_or(same_bits, tf.logical_and(is_zero(x), is_zero(y)))


def _update_row(before, after, gradient):
    b64, a64 = exact_float64(before), exact_float64(after)
    u = a64 - b64
    n = tf.cast(tf.size(u), tf.float64)
    safe_n = tf.maximum(n, 1.0)
    sum_u2 = tf.reduce_sum(u * u)
    update_rms = tf.sqrt(sum_u2 / safe_n)
    norm_b = tf.sqrt(tf.reduce_sum(b64 * b64))
    update_ratio = _ratio_or(tf.sqrt(sum_u2), norm_b, tf.constant(1.0, tf.float64), 0.0)
    unchanged = _same_value(before, after)
    if before.dtype == tf.bfloat16:
        if gradient is None:
            lost = tf.constant(float("nan"), tf.float64)
        else:
            # Per element of the variable: a sparse gradient is densified
            # here (the size of the variable, like before and after).
            g = tf.reshape(tf.convert_to_tensor(gradient), [-1])
            asked = tf.logical_and(tf.math.is_finite(tf.cast(g, tf.float32)), tf.logical_not(is_zero(g)))
            lost = tf.reduce_sum(tf.cast(tf.logical_and(asked, unchanged), tf.float64)) / safe_n
    else:
        b16 = tf.cast(tf.cast(before, tf.float32), tf.bfloat16)
        a16 = tf.cast(tf.cast(after, tf.float32), tf.bfloat16)
        lost_mask = tf.logical_and(tf.logical_not(unchanged), _same_value(b16, a16))
        lost = tf.reduce_sum(tf.cast(lost_mask, tf.float64)) / safe_n
    row = tf.stack([update_rms, update_ratio, lost])
    return tf.where(n > 0, row, tf.constant(float("nan"), tf.float64))

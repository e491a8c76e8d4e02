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


def gradient_statistics(gradients, sizes=None):
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
    is_none = 1.

    Args:
      gradients: list of tensors (any float dtype) or None.
      sizes: element counts to report for None gradients (list of ints,
        same length; ignored for present gradients).

    Returns:
      (stats, histogram): float32 ``[V, len(GRAD_STATS_COLUMNS)]`` and
      float32 ``[V, len(HISTOGRAM_COLUMNS)]``.
    """
    n_vars = len(gradients)
    present = [i for i, g in enumerate(gradients) if g is not None]
    if sizes is None:
        sizes = [0] * n_vars
    n_present = len(present)
    if n_present:
        flats = [_flat_float32(gradients[i]) for i in present]
        counts = tf.stack([tf.size(f, out_type=tf.int32) for f in flats])
        values = flats[0] if n_present == 1 else tf.concat(flats, axis=0)
        segment = tf.repeat(tf.range(n_present, dtype=tf.int32), counts)
        hist = _segment_histogram(values, segment, n_present)
        value_stats = _segment_value_statistics(values, segment, n_present, hist)
        counts_f = tf.cast(counts, tf.float32)
        safe_n = tf.maximum(counts_f, 1.0)
        nan_if_empty = tf.where(counts_f > 0, 1.0, float("nan"))
        zero_fraction = hist[:, _ZERO_BIN] / safe_n * nan_if_empty
        subnormal_fraction = (
            tf.reduce_sum(hist[:, :_SUBNORMAL_BINS], axis=1) / safe_n * nan_if_empty
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


def _segment_histogram(values, segment, n_segments):
    """Counts of each log2 bin per segment: float32 ``[n_segments, N_BINS]``."""
    flat_index = segment * _N_BINS + log2_bin_index(values)
    counts = tf.math.bincount(
        flat_index,
        minlength=n_segments * _N_BINS,
        maxlength=n_segments * _N_BINS,
        dtype=tf.int32,
    )
    return tf.reshape(tf.cast(counts, tf.float32), [n_segments, _N_BINS])


def _segment_value_statistics(values, segment, n_segments, hist):
    """l2_norm, mean, std, min, max, max_abs, rms per segment (finite only)."""
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

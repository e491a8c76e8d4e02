"""Reading IEEE-754 bits: exact zeros, exact widening, ULP spacing, log2 bins.

TensorFlow's CPU kernels treat subnormal inputs as zero (denormals-are-
zero), so everything that must see a subnormal reads the bits with integer
ops.  Format limits come from ``tb_gradlens.float_formats``.
"""

import tensorflow as tf

from tb_gradlens import float_formats
from tb_gradlens import metadata

FLOAT32 = float_formats.get("float32")
FLOAT64 = float_formats.get("float64")
# float32 bits: sign | exponent field (bias 127) | 23 fraction bits.
MANTISSA_BITS = FLOAT32.mantissa_bits
BIAS = float_formats.bias("float32")
FIELD_MASK = 2 * BIAS + 1  # the all-ones exponent field: Inf and NaN
MANTISSA_MASK = (1 << MANTISSA_BITS) - 1
MAGNITUDE_MASK = (1 << (float_formats.total_bits("float32") - 1)) - 1
FLOAT64_MANTISSA_BITS = FLOAT64.mantissa_bits
FLOAT64_BIAS = float_formats.bias("float64")
FLOAT64_FIELD_MASK = 2 * FLOAT64_BIAS + 1

# Candidate dtype -> (explicit mantissa bits p, smallest normal exponent).
# The spacing of the dtype's values at |r| in [2^e, 2^(e+1)) is
# 2^(max(e, min_normal) - p): below 2^min_normal (subnormals, zero) it is
# the subnormal spacing 2^(min_normal - p).
DTYPE_PRECISION = {
    name: (f.mantissa_bits, f.min_normal) for name, f in float_formats.FORMATS.items()
}

# Histogram bins (metadata.HISTOGRAM_COLUMNS): exponent bins, then these.
N_BINS = len(metadata.HISTOGRAM_COLUMNS)
ZERO_BIN = metadata.N_EXP_BINS + metadata.HISTOGRAM_SPECIAL_COLUMNS.index("zero")
POSINF_BIN = metadata.N_EXP_BINS + metadata.HISTOGRAM_SPECIAL_COLUMNS.index("posinf")
NEGINF_BIN = metadata.N_EXP_BINS + metadata.HISTOGRAM_SPECIAL_COLUMNS.index("neginf")
NAN_BIN = metadata.N_EXP_BINS + metadata.HISTOGRAM_SPECIAL_COLUMNS.index("nan")
# Bins of exponents below the smallest normal float32 exponent.
SUBNORMAL_BINS = FLOAT32.min_normal - metadata.MIN_EXPONENT


def _field_and_mantissa(bits):
    field = tf.bitwise.bitwise_and(tf.bitwise.right_shift(bits, MANTISSA_BITS), FIELD_MASK)
    return field, tf.bitwise.bitwise_and(bits, MANTISSA_MASK)


def log2_bin_index(x):
    """Histogram bin of each element of float32 ``x`` (int32, same shape).

    bin = floor(log2 |x|) - MIN_EXPONENT for finite nonzero x; for a
    subnormal x = m * 2^min_subnormal, floor(log2 |x|) = floor(log2 m) +
    min_subnormal, read from the bits; then the ZERO, +INF, -INF and NAN
    bins (metadata.HISTOGRAM_COLUMNS).
    """
    bits = tf.bitcast(x, tf.int32)
    field, mantissa = _field_and_mantissa(bits)
    # floor(log2 m) of a subnormal's m < 2^23: the exponent of float32(m), exact.
    mantissa_exponent = tf.bitwise.right_shift(
        tf.bitcast(tf.cast(mantissa, tf.float32), tf.int32), MANTISSA_BITS
    ) - BIAS
    exponent = tf.where(field == 0, mantissa_exponent + FLOAT32.min_subnormal, field - BIAS)
    index = exponent - metadata.MIN_EXPONENT
    special = tf.where(
        mantissa != 0, NAN_BIN, tf.where(bits < 0, NEGINF_BIN, POSINF_BIN)
    )
    index = tf.where(tf.logical_and(field == 0, mantissa == 0), ZERO_BIN, index)
    return tf.where(field == FIELD_MASK, special, index)


def exact_float64(x):
    """``x`` widened to float64 exactly, float32/bfloat16/float16 subnormals kept.

    TensorFlow's CPU Cast float32 -> float64 flushes subnormal inputs to
    zero; here a float32 subnormal is rebuilt from its bits as
    sign * m * 2^min_subnormal (exact: float64 represents it as a normal
    number).  bfloat16 and float16 go through float32, which is exact.
    """
    x = tf.convert_to_tensor(x)
    if x.dtype == tf.float64:
        return x
    x32 = x if x.dtype == tf.float32 else tf.cast(x, tf.float32)
    bits = tf.bitcast(x32, tf.int32)
    field, mantissa = _field_and_mantissa(bits)
    mantissa = tf.cast(mantissa, tf.float64)
    subnormal = tf.where(bits < 0, -mantissa, mantissa) * (2.0**FLOAT32.min_subnormal)
    return tf.where(field == 0, subnormal, tf.cast(x32, tf.float64))


_INTEGER_OF_WIDTH = {2: tf.int16, 4: tf.int32, 8: tf.int64}


def is_zero(x):
    """Elementwise ``x == +-0`` from the bits (a subnormal is not zero)."""
    x = tf.convert_to_tensor(x)
    int_dtype = _INTEGER_OF_WIDTH[x.dtype.size]
    magnitude_mask = (1 << (8 * x.dtype.size - 1)) - 1
    bits = tf.bitcast(x, int_dtype)
    return tf.equal(tf.bitwise.bitwise_and(bits, tf.constant(magnitude_mask, int_dtype)), 0)


def same_value(x, y):
    """Bitwise equality of two same-dtype tensors, +0 == -0."""
    int_dtype = _INTEGER_OF_WIDTH[x.dtype.size]
    same_bits = tf.equal(tf.bitcast(x, int_dtype), tf.bitcast(y, int_dtype))
    return tf.logical_or(same_bits, tf.logical_and(is_zero(x), is_zero(y)))


def precision(dtype):
    """(mantissa bits p, smallest normal exponent) of a float dtype."""
    name = tf.as_dtype(dtype).name
    if name not in DTYPE_PRECISION:
        raise ValueError(
            "tb_gradlens: no ULP spacing for dtype %r (known: %s)"
            % (name, ", ".join(DTYPE_PRECISION))
        )
    return DTYPE_PRECISION[name]


def spacing(reference, dtype):
    """Spacing (ULP) of ``dtype``'s values at float64 ``reference`` (float64).

    spacing = 2^(max(floor(log2 |r|), min_normal) - p) with (p, min_normal)
    from DTYPE_PRECISION: bfloat16 2^(e-7), float16 2^(e-10), float32
    2^(e-23), float64 2^(e-52); zero and subnormal r get the subnormal
    spacing 2^(min_normal - p).  floor(log2 |r|) is read from the bits;
    results are clamped at the smallest normal float64 2^-1022.
    """
    p, min_normal = precision(dtype)
    return spacing_from(reference, p, min_normal)


def spacing_from(reference, p, min_normal):
    """spacing() with per-element (or scalar) p and min_normal tensors."""
    bits = tf.bitcast(tf.convert_to_tensor(reference, tf.float64), tf.int64)
    field = tf.bitwise.bitwise_and(
        tf.bitwise.right_shift(bits, FLOAT64_MANTISSA_BITS), FLOAT64_FIELD_MASK
    )
    exponent = tf.maximum(field - FLOAT64_BIAS, tf.cast(min_normal, tf.int64)) - tf.cast(p, tf.int64)
    exponent = tf.maximum(exponent, FLOAT64.min_normal)
    return tf.bitcast(
        tf.bitwise.left_shift(exponent + FLOAT64_BIAS, FLOAT64_MANTISSA_BITS), tf.float64
    )

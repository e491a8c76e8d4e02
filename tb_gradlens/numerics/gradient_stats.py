"""Per-variable gradient statistics (kind ``grad_stats``) and log2 histograms.

One pass over every gradient gives raw sums per variable: over the finite
elements F, sum g and sum g^2 (float64), min and max; and the histogram
counts (``histogram.py``).  The columns follow from those (functions below,
NumPy or TensorFlow arrays alike), with n = element count:

  l2_norm = sqrt(sum_F g^2)       mean = sum_F g / |F|
  std = sqrt(max(sum_F g^2/|F| - mean^2, 0))
  min, max, max_abs over F        rms = sqrt(sum_F g^2 / |F|)
  zero_fraction = #(g == 0) / n   subnormal_fraction = #(0<|g|<2^min_normal) / n
  nan_count, posinf_count, neginf_count, count = n, is_none = 0

|F| = 0 gives NaN value statistics (l2_norm 0); n = 0 NaN fractions.
"""

import numpy as np
import tensorflow as tf
import tensorflow.experimental.numpy as tnp

from tb_gradlens import metadata
from tb_gradlens.numerics import backend as backends
from tb_gradlens.numerics import bits
from tb_gradlens.numerics import histogram
from tb_gradlens.numerics import kernel
from tb_gradlens.numerics import library_calls
from tb_gradlens.numerics import packing
from tb_gradlens.numerics import sparse

N_COLUMNS = len(metadata.GRAD_STATS_COLUMNS)
NAN = float("nan")
INF = float("inf")

# ---------------------------------------------------------------------------
# The columns, from raw sums (xp: numpy or tensorflow.experimental.numpy).
# ---------------------------------------------------------------------------


def element_count(hist, xp):
    """n = the sum of every bin (NaN and Inf included)."""
    return xp.sum(hist, axis=1)


def finite_count(hist, xp):
    """|F| = the exponent bins plus the zero bin."""
    return xp.sum(hist[:, : bits.ZERO_BIN + 1], axis=1)


def _per(total, n, xp):
    return xp.where(n > 0, total / xp.maximum(n, 1.0), NAN)


def mean(total, n_finite, xp):
    """mean = sum_F g / |F| (NaN when F is empty)."""
    return _per(total, n_finite, xp)


def std(total, total_squares, n_finite, xp):
    """std = sqrt(max(sum_F g^2 / |F| - mean^2, 0)), the population deviation."""
    m = mean(total, n_finite, xp)
    return xp.sqrt(xp.maximum(_per(total_squares, n_finite, xp) - m * m, 0.0))


def rms(total_squares, n_finite, xp):
    """rms = sqrt(sum_F g^2 / |F|)."""
    return xp.sqrt(_per(total_squares, n_finite, xp))


def l2_norm(total_squares, xp):
    """l2_norm = sqrt(sum_F g^2) (0 when F is empty)."""
    return xp.sqrt(total_squares)


def extremes(minimum, maximum, n_finite, implicit_zeros, xp):
    """(min, max, max_abs) over F: implicit zeros (rows a sparse gradient
    does not name) take part; NaN when F is empty."""
    minimum = xp.where(implicit_zeros > 0, xp.minimum(minimum, 0.0), minimum)
    maximum = xp.where(implicit_zeros > 0, xp.maximum(maximum, 0.0), maximum)
    minimum = xp.where(n_finite > 0, minimum, NAN)
    maximum = xp.where(n_finite > 0, maximum, NAN)
    return minimum, maximum, xp.maximum(xp.abs(minimum), xp.abs(maximum))


def zero_fraction(hist, n, xp):
    """#(g == +-0, by the bits) / n."""
    return _per(hist[:, bits.ZERO_BIN], n, xp)


def subnormal_fraction(hist, n, xp):
    """#(0 < |g| < 2^min_normal) / n: the bins below the smallest normal."""
    return _per(xp.sum(hist[:, : bits.SUBNORMAL_BINS], axis=1), n, xp)


def columns_from_sums(sums, hist, implicit_zeros, xp):
    """float64 ``[V, GRAD_STATS_COLUMNS]`` from raw sums ``[V, 4]`` (sum,
    sum of squares, min, max over F) and float64 counts ``[V, bins]`` that
    already include the ``implicit_zeros`` ``[V]`` in the zero bin."""
    n = element_count(hist, xp)
    n_finite = finite_count(hist, xp)
    total, squares = sums[:, 0], sums[:, 1]
    minimum, maximum, max_abs = extremes(sums[:, 2], sums[:, 3], n_finite, implicit_zeros, xp)
    return xp.stack([
        l2_norm(squares, xp), mean(total, n_finite, xp), std(total, squares, n_finite, xp),
        minimum, maximum, max_abs, rms(squares, n_finite, xp),
        zero_fraction(hist, n, xp), subnormal_fraction(hist, n, xp),
        hist[:, bits.NAN_BIN], hist[:, bits.POSINF_BIN], hist[:, bits.NEGINF_BIN],
        n, xp.zeros_like(n),
    ], axis=1)


def none_row(size):
    """The row of a None gradient: NaN value statistics and fractions, no
    NaN/Inf, count = the variable's size, is_none = 1."""
    return [NAN] * 9 + [0.0, 0.0, 0.0, float(size), 1.0]


# ---------------------------------------------------------------------------
# The pass.
# ---------------------------------------------------------------------------


@tf.autograph.experimental.do_not_convert
def gradient_statistics(gradients, sizes=None, use_xla=None, backend=None, when=None):
    """Statistics and log2 histograms of a list of gradients, in one pass.

    Columns: see the module docstring and ``metadata.GRAD_STATS_COLUMNS``;
    sums are float64.  A gradient that is None gives NaN value statistics,
    a zero histogram, count = its entry in ``sizes`` and is_none = 1.  An
    empty gradient gives NaN value statistics and fractions, and count = 0.
    bfloat16/float16 gradients are widened exactly; float64 ones rounded
    to float32.

    A ``tf.IndexedSlices`` gradient (e.g. of an embedding table) is
    summarized without densifying it (``sparse.py``): the counts, the zero
    bin, sums and the min/max (0 is a value of the dense gradient when a
    row is missing) are exactly those of the dense gradient TensorFlow
    builds; only the float64 summation order differs.  Without a
    ``dense_shape`` the entry of ``sizes`` is the table size.

    Args:
      gradients: list of tensors or ``tf.IndexedSlices`` (any float dtype)
        or None.
      sizes: element counts of the variables (list of ints, same length):
        reported for None gradients, the bound of sparse indices.
      use_xla: former flag: True is ``backend="xla"``, False ``"tf"``.
      backend: "kernel", "tf" or "xla" (``backend.py``); default: the
        compiled kernel on CPU when it loads, XLA on GPU and inside XLA.
      when: optional boolean scalar: when false nothing is computed and
        both results have 0 rows.  In a graph the compiled kernel takes it
        as an input, where a ``tf.cond`` would capture every gradient
        (seconds of TensorFlow setup per 10^4 variables).

    Returns:
      (stats, histogram): float32 ``[V, len(GRAD_STATS_COLUMNS)]`` and
      float32 ``[V, len(HISTOGRAM_COLUMNS)]`` (0 rows when ``when`` is false).
    """
    n_vars = len(gradients)
    sizes = list(sizes) if sizes is not None else [0] * n_vars
    if when is not None:
        static = tf.get_static_value(when)
        if static is not None and not bool(static):
            return _empty()
        when = None if static is not None else when
    if not n_vars:
        return _empty()
    chosen = backends.choose(backend, use_xla)
    if when is not None and (chosen != "kernel" or kernel.ops() is None):
        return tf.cond(when, lambda: _statistics(gradients, sizes, chosen, None), _empty)
    return _statistics(gradients, sizes, chosen, when)


def _empty():
    return tf.zeros([0, N_COLUMNS], tf.float32), tf.zeros([0, bits.N_BINS], tf.float32)


def _statistics(gradients, sizes, chosen, when):
    """The pass; ``when`` (a tensor) only with the kernel's op."""
    present = [i for i, g in enumerate(gradients) if g is not None]
    values, implicit = _present_values(gradients, sizes, present, when)
    if chosen == "kernel":
        stats, hist = _kernel_pass(values, implicit, when)
    else:
        stats, hist = _tf_pass(values, implicit, chosen)
    if len(present) == len(sizes):
        return stats, hist
    if when is None:
        return _with_none_rows(stats, hist, present, sizes)
    return tf.cond(when, lambda: _with_none_rows(stats, hist, present, sizes), lambda: (stats, hist))


def _present_values(gradients, sizes, present, when):
    """(values, implicit zeros) of the present gradients: dense ones as
    they are, sparse ones as their unique rows (``sparse.py``), computed
    under ``when`` when given."""
    sparse_at = [k for k, i in enumerate(present) if isinstance(gradients[i], tf.IndexedSlices)]
    values = [_dense(gradients[i]) for i in present]
    implicit = [None] * len(present)
    if not sparse_at:
        return values, implicit

    def rows():
        out = [sparse.unique_rows(gradients[present[k]], sizes[present[k]]) for k in sparse_at]
        return [tf.reshape(r, [-1]) for r, _ in out], [z for _, z in out]

    def nothing():
        return ([tf.zeros([0], gradients[present[k]].values.dtype) for k in sparse_at],
                [tf.constant(0.0, tf.float64) for _ in sparse_at])

    summed, zeros = rows() if when is None else tf.cond(when, rows, nothing)
    for k, r, z in zip(sparse_at, summed, zeros):
        values[k], implicit[k] = r, z
    return values, implicit


def _dense(gradient):
    """A dense gradient as a tensor; None for a sparse one (its rows come later)."""
    if isinstance(gradient, tf.IndexedSlices):
        return None
    return gradient if isinstance(gradient, tf.Tensor) else tf.convert_to_tensor(gradient)


def _implicit_vector(implicit):
    """float64 ``[P]`` of implicit zeros (0 for dense gradients)."""
    if all(z is None for z in implicit):
        return tf.zeros([len(implicit)], tf.float64)
    return tf.stack([tf.constant(0.0, tf.float64) if z is None else z for z in implicit])


_KERNEL_DTYPES = frozenset(tf.as_dtype(d) for d in kernel.DTYPES)
_LAYOUT = dict(min_exponent=metadata.MIN_EXPONENT, zero_bin=bits.ZERO_BIN, n_bins=bits.N_BINS,
               subnormal_bins=bits.SUBNORMAL_BINS)


def _kernel_pass(values, implicit, when=None):
    """The compiled kernel: one op in a graph (``when`` its input), the C
    library directly in eager mode, or through numpy_function."""
    if not values:
        return _empty()
    values = [v if v.dtype in _KERNEL_DTYPES else tf.cast(v, tf.float32) for v in values]
    ops = None if tf.executing_eagerly() else kernel.ops()
    if ops is not None:
        record = tf.constant(True) if when is None else when
        stats, hist = kernel.in_op_chunks(
            lambda v, z: ops.gradlens_gradient_statistics(v, _implicit_vector(z), record, **_LAYOUT),
            values, implicit,
        )
        if when is None:
            stats.set_shape([len(values), N_COLUMNS])
            hist.set_shape([len(values), bits.N_BINS])
        kernel.report_failed_rows(stats[:, metadata.GRAD_STATS_COLUMNS.index("count")], "gradient statistics")
        return stats, hist
    stats, hist = backends.run_kernel(
        lambda *arrays: library_calls.gradient_statistics(arrays[:-1], arrays[-1], **_LAYOUT),
        values + [_implicit_vector(implicit)], [tf.float32, tf.float32],
    )
    stats.set_shape([len(values), N_COLUMNS])
    hist.set_shape([len(values), bits.N_BINS])
    return stats, hist


def _tf_pass(values, implicit, chosen):
    if not values:
        return _empty()
    flats = [v if v.dtype == tf.float32 else tf.cast(v, tf.float32) for v in values]
    groups = packing.pack([flats], [NAN])
    sums, counts = _tf_sums(groups, len(flats), chosen)
    zeros = _implicit_vector(implicit)
    counts = counts + zeros[:, None] * tf.one_hot(bits.ZERO_BIN, bits.N_BINS, dtype=tf.float64)
    stats = tf.cast(columns_from_sums(sums, counts, zeros, tnp), tf.float32)
    return stats, tf.cast(counts, tf.float32)


def _with_none_rows(stats, hist, present, sizes):
    """The rows of None gradients (constants) among the computed ones."""
    n_vars = len(sizes)
    if len(present) == n_vars:
        return stats, hist
    present_set = set(present)
    missing = [i for i in range(n_vars) if i not in present_set]
    fixed_stats = tf.constant([none_row(sizes[i]) for i in missing], tf.float32)
    fixed_hist = tf.zeros([len(missing), bits.N_BINS], tf.float32)
    if present:
        fixed_stats = tf.concat([stats, fixed_stats], 0)
        fixed_hist = tf.concat([hist, fixed_hist], 0)
    order = np.empty(n_vars, np.int32)
    order[present + missing] = np.arange(n_vars, dtype=np.int32)
    return tf.gather(fixed_stats, order), tf.gather(fixed_hist, order)


def _group_sums(matrix, pads, backend):
    """``[k, 4 + N_BINS]`` of one group's float32 matrix: sum, sum of
    squares (float64), min, max over the finite elements of each row, then
    the bin counts; ``pads`` (int64 [k]) NaN pads come out of the NaN bin."""
    finite = tf.math.is_finite(matrix)
    wide = tf.cast(tf.where(finite, matrix, 0.0), tf.float64)
    sums = tf.stack([
        tf.reduce_sum(wide, axis=1),
        tf.reduce_sum(wide * wide, axis=1),
        tf.cast(tf.reduce_min(tf.where(finite, matrix, INF), axis=1), tf.float64),
        tf.cast(tf.reduce_max(tf.where(finite, matrix, -INF), axis=1), tf.float64),
    ], axis=1)
    counts = histogram.row_counts(matrix, backend)
    pads = tf.cast(pads, tf.float64)[:, None] * tf.one_hot(bits.NAN_BIN, bits.N_BINS, dtype=tf.float64)
    return tf.concat([sums, counts - pads], axis=1)


def _tf_sums(groups, n, backend):
    """(sums [n, 4], counts [n, N_BINS]) in input order."""
    out = backends.run_groups(
        _group_sums, [(g.matrices[0], packing.pad_counts(g)) for g in groups],
        [g.width is not None for g in groups], backend,
    )
    rows = packing.unpack(groups, out, n)
    return rows[:, :4], rows[:, 4:]

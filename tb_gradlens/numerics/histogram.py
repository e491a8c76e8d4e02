"""The log2-magnitude histogram (kind ``grad_histogram``), counted by TensorFlow.

Column i < N_EXP_BINS counts finite nonzero |g| in [2^e, 2^(e+1)) with
e = MIN_EXPONENT + i, i.e. e = floor(log2 |g|) over the whole float32 range,
subnormals included (``bits.log2_bin_index``); then exact zeros, +Inf, -Inf
and NaN.  The compiled kernel counts the same bins in its own pass.
"""

import tensorflow as tf

from tb_gradlens.numerics import bits


def row_counts(matrix, backend):
    """float64 ``[k, N_BINS]``: the bins of each row of float32 ``[k, n]``.

    One count over (row, bin) keys: ``tf.math.bincount`` (multi-threaded
    TensorFlow kernel) for the "tf" backend, a scatter-add for "xla",
    which has no bincount.  Counted in int32 (float32 counts stop at 2^24).
    """
    k = tf.shape(matrix)[0]
    keys = bits.log2_bin_index(matrix) + bits.N_BINS * tf.range(k)[:, None]
    keys = tf.reshape(keys, [-1])
    n_keys = k * bits.N_BINS
    if backend == "xla":
        counts = tf.math.unsorted_segment_sum(tf.ones_like(keys), keys, n_keys)
    else:
        counts = tf.math.bincount(keys, minlength=n_keys, maxlength=n_keys, dtype=tf.int32)
    return tf.cast(tf.reshape(counts, [k, bits.N_BINS]), tf.float64)

"""The loss of one step on both sides of a comparison (kind ``loss_comparison``)."""

import tensorflow as tf
import tensorflow.experimental.numpy as tnp

from tb_gradlens.numerics import bits
from tb_gradlens.numerics import divergence


@tf.autograph.experimental.do_not_convert
def loss_comparison(reference_loss, candidate_loss):
    """float32 ``[1, 4]``: reference r, candidate c, |c - r|, |c - r| / |r|.

    Computed in float64 after exact widening; rel_error is 0 when both are
    zero and inf when only the reference is.
    """
    r = tf.reshape(bits.exact_float64(reference_loss), [])
    c = tf.reshape(bits.exact_float64(candidate_loss), [])
    abs_error = tf.abs(c - r)
    rel_error = divergence.ratio_or(abs_error, tf.abs(r), float("inf"), 0.0, tnp)
    return tf.cast(tf.stack([[r, c, abs_error, rel_error]]), tf.float32)

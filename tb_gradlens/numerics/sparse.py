"""Sparse gradients (``tf.IndexedSlices``) summarized without densifying them.

An IndexedSlices gradient stands for the dense gradient TensorFlow builds
from it (``tf.convert_to_tensor``; optimizers scatter-add the same rows)::

    G = unsorted_segment_sum(values, indices, dense_shape[0])

so, as TensorFlow does: rows named more than once are summed (in the
gradient's dtype, in order of appearance), rows not named are exact zeros,
rows with a negative index are dropped, and an index >= dense_shape[0]
raises ``tf.errors.InvalidArgumentError`` when the graph runs.
"""

import tensorflow as tf


def unique_rows(gradient, size=None):
    """(rows, implicit_zeros) of an IndexedSlices: the summed rows of the
    distinct valid indices, and the float64 count of G's elements they
    leave out (exact zeros, counted, never materialized).

    ``size`` (the variable's element count) bounds the indices and gives
    G's size when ``dense_shape`` is None.
    """
    values = gradient.values
    indices = tf.reshape(gradient.indices, [-1])
    row_size = values.shape[1:].num_elements()
    if gradient.dense_shape is not None:
        dense_shape = tf.cast(gradient.dense_shape, tf.int64)
        n_rows = dense_shape[0]
        total = tf.reduce_prod(tf.cast(gradient.dense_shape, tf.float64))
    else:
        total = tf.constant(float(max(int(size or 0), 0)), tf.float64)
        n_rows = (int(size) // row_size) if size and row_size else None
    checks = []
    if n_rows is not None:
        checks.append(tf.debugging.assert_less(
            tf.cast(indices, tf.int64), tf.cast(n_rows, tf.int64),
            message="tb_gradlens: an IndexedSlices gradient names a row out of range "
                    "(TensorFlow raises the same when it densifies or applies it)",
        ))
    with tf.control_dependencies(checks):
        unique, position = tf.unique(indices)
    summed = tf.math.unsorted_segment_sum(values, position, tf.size(unique))
    summed = tf.boolean_mask(summed, unique >= 0)  # negative indices: dropped
    listed = tf.cast(tf.size(summed), tf.float64)
    return summed, tf.maximum(total - listed, 0.0)

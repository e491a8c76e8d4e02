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


def _checked_indices(gradient, n_rows):
    """The gradient's indices, flat, asserted below ``n_rows`` (if known)."""
    indices = tf.reshape(gradient.indices, [-1])
    if n_rows is None:
        return indices
    check = tf.debugging.assert_less(
        tf.cast(indices, tf.int64), tf.cast(n_rows, tf.int64),
        message="tb_gradlens: an IndexedSlices gradient names a row out of range "
                "(TensorFlow raises the same when it densifies or applies it)",
    )
    with tf.control_dependencies([check]):
        return tf.identity(indices)


def unique_rows(gradient, size=None):
    """(rows, implicit_zeros) of an IndexedSlices: the summed rows of the
    distinct valid indices, and the float64 count of G's elements they
    leave out (exact zeros, counted, never materialized).

    ``size`` (the variable's element count) bounds the indices and gives
    G's size when ``dense_shape`` is None.
    """
    values = gradient.values
    row_size = values.shape[1:].num_elements()
    if gradient.dense_shape is not None:
        dense_shape = tf.cast(gradient.dense_shape, tf.int64)
        n_rows = dense_shape[0]
        total = tf.reduce_prod(tf.cast(gradient.dense_shape, tf.float64))
    else:
        total = tf.constant(float(max(int(size or 0), 0)), tf.float64)
        n_rows = (int(size) // row_size) if size and row_size else None
    unique, position = tf.unique(_checked_indices(gradient, n_rows))
    summed = tf.math.unsorted_segment_sum(values, position, tf.size(unique))
    summed = tf.boolean_mask(summed, unique >= 0)  # negative indices: dropped
    listed = tf.cast(tf.size(summed), tf.float64)
    return summed, tf.maximum(total - listed, 0.0)


def pairable(candidate, reference):
    """Whether ``paired_rows`` takes the two: both IndexedSlices with a
    dense shape and rows of one known size."""
    return all(isinstance(g, tf.IndexedSlices) and g.dense_shape is not None for g in (candidate, reference)) \
        and candidate.values.shape[1:].is_fully_defined() \
        and candidate.values.shape[1:] == reference.values.shape[1:]


def paired_rows(candidate, reference):
    """(candidate rows, reference rows, implicit_zeros) of two IndexedSlices
    of one dense shape: the rows either names (valid indices), each side's
    rows summed as TensorFlow densifies it (zero where a side does not name
    a row), and the float64 count of the dense elements neither names
    (zero on both sides: a divergence counts them in n only)."""
    shape = tf.cast(candidate.dense_shape, tf.int64)
    same = tf.debugging.assert_equal(shape, tf.cast(reference.dense_shape, tf.int64),
                                     message="tb_gradlens: the two IndexedSlices have different dense shapes")
    with tf.control_dependencies([same]):
        n_rows = tf.identity(shape[0])
    indices = [tf.cast(_checked_indices(g, n_rows), tf.int64) for g in (candidate, reference)]
    unique, position = tf.unique(tf.concat(indices, 0))
    n_candidate = tf.size(indices[0])
    valid = unique >= 0  # negative indices: dropped
    rows = [tf.boolean_mask(tf.math.unsorted_segment_sum(g.values, at, tf.size(unique)), valid)
            for g, at in ((candidate, position[:n_candidate]), (reference, position[n_candidate:]))]
    total = tf.reduce_prod(tf.cast(shape, tf.float64))
    return rows[0], rows[1], tf.maximum(total - tf.cast(tf.size(rows[0]), tf.float64), 0.0)

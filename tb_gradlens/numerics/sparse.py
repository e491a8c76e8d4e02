"""Sparse gradients (``tf.IndexedSlices``) summarized without densifying them.

An IndexedSlices gradient stands for the dense gradient an optimizer
applies from it::

    G = unsorted_segment_sum(values, indices, dense_shape[0])

so, as TensorFlow does: rows named more than once are summed (in the
gradient's dtype, in order of appearance), rows not named are exact zeros,
rows with a negative index are dropped.  A row whose index is past the
table (index >= dense_shape[0]: an input id out of range, e.g. a float id
rounded up by a 16-bit autocast) is dropped as well, as XLA and
TensorFlow's GPU kernels drop it when they apply the gradient (TensorFlow's
CPU kernels raise instead).  The lens never raises on it inside a step: it
describes the gradient as applied and counts such indices
(``index_counts``), a finding the ``gradient_indices`` record carries and
an ``index_out_of_range`` alert reports.
"""

import tensorflow as tf

INDEX_COLUMNS = 3  # indices, out_of_range, negative (metadata.GRADIENT_INDICES_COLUMNS)


def _valid_indices(gradient, n_rows):
    """The gradient's indices, flat, with every index past ``n_rows`` (if
    known) made -1: dropped, as negative ones are."""
    indices = tf.reshape(gradient.indices, [-1])
    if n_rows is None:
        return indices
    wide = tf.cast(indices, tf.int64)
    return tf.where(wide < tf.cast(n_rows, tf.int64), wide, tf.constant(-1, tf.int64))


def _table_rows(gradient, size=None):
    """(rows of the table or None, float64 element count of G)."""
    values = gradient.values
    row_size = values.shape[1:].num_elements()
    if gradient.dense_shape is not None:
        dense_shape = tf.cast(gradient.dense_shape, tf.int64)
        return dense_shape[0], tf.reduce_prod(tf.cast(dense_shape, tf.float64))
    total = tf.constant(float(max(int(size or 0), 0)), tf.float64)
    return ((int(size) // row_size) if size and row_size else None), total


def unique_rows(gradient, size=None):
    """(rows, implicit_zeros) of an IndexedSlices: the summed rows of the
    distinct valid indices, and the float64 count of G's elements they
    leave out (exact zeros, counted, never materialized).

    ``size`` (the variable's element count) bounds the indices and gives
    G's size when ``dense_shape`` is None.
    """
    n_rows, total = _table_rows(gradient, size)
    unique, position = tf.unique(_valid_indices(gradient, n_rows))
    summed = tf.math.unsorted_segment_sum(gradient.values, position, tf.size(unique))
    summed = tf.boolean_mask(summed, unique >= 0)  # negative and past the table: dropped
    listed = tf.cast(tf.size(summed), tf.float64)
    return summed, tf.maximum(total - listed, 0.0)


def index_counts(gradient, size=None):
    """float32 ``[3]`` of an IndexedSlices: its indices, those past the
    table (index >= rows; 0 when the table size is not known) and the
    negative ones."""
    n_rows, _ = _table_rows(gradient, size)
    indices = tf.cast(tf.reshape(gradient.indices, [-1]), tf.int64)
    past = tf.zeros([], tf.int64) if n_rows is None else tf.math.count_nonzero(
        indices >= tf.cast(n_rows, tf.int64), dtype=tf.int64)
    negative = tf.math.count_nonzero(indices < 0, dtype=tf.int64)
    return tf.cast(tf.stack([tf.size(indices, out_type=tf.int64), past, negative]), tf.float32)


def sparse_positions(gradients):
    """Positions of the ``tf.IndexedSlices`` among ``gradients``."""
    return [i for i, g in enumerate(gradients) if isinstance(g, tf.IndexedSlices)]


def gradient_index_counts(gradients, sizes=None):
    """float32 ``[S, 3]``: ``index_counts`` of each IndexedSlices among
    ``gradients`` (in order; ``sizes`` as in ``unique_rows``), the rows of
    a ``gradient_indices`` record."""
    at = sparse_positions(gradients)
    if not at:
        return tf.zeros([0, INDEX_COLUMNS], tf.float32)
    sizes = list(sizes) if sizes is not None else [None] * len(gradients)
    return tf.stack([index_counts(gradients[i], sizes[i]) for i in at])


def dense(gradient):
    """The dense gradient of an IndexedSlices (any other value unchanged),
    past-the-table rows dropped as negative ones are (never raising)."""
    if not isinstance(gradient, tf.IndexedSlices) or gradient.dense_shape is None:
        return gradient if not isinstance(gradient, tf.IndexedSlices) else tf.convert_to_tensor(gradient)
    shape = tf.cast(gradient.dense_shape, tf.int64)
    summed = tf.math.unsorted_segment_sum(gradient.values, _valid_indices(gradient, shape[0]), shape[0])
    return tf.reshape(summed, shape)


def pairable(candidate, reference):
    """Whether ``paired_rows`` takes the two: both IndexedSlices with a
    dense shape and rows of one known size."""
    return all(isinstance(g, tf.IndexedSlices) and g.dense_shape is not None for g in (candidate, reference)) \
        and candidate.values.shape[1:].is_fully_defined() \
        and candidate.values.shape[1:] == reference.values.shape[1:]


def same_dense_shape(candidate, reference):
    """Boolean scalar: the two IndexedSlices stand for tensors of one shape
    (False at run time is a pair that cannot be compared; a rank that
    differs is known when traced)."""
    a, b = (tf.cast(g.dense_shape, tf.int64) for g in (candidate, reference))
    if a.shape.is_fully_defined() and b.shape.is_fully_defined() and a.shape != b.shape:
        return tf.constant(False)
    return tf.reduce_all(tf.equal(a, b))


def paired_rows(candidate, reference):
    """(candidate rows, reference rows, implicit_zeros) of two IndexedSlices
    of one dense shape: the rows either names (valid indices), each side's
    rows summed as TensorFlow densifies it (zero where a side does not name
    a row), and the float64 count of the dense elements neither names
    (zero on both sides: a divergence counts them in n only).  The caller
    checks the dense shapes (``same_dense_shape``); the candidate's rows
    bound both sides' indices."""
    shape = tf.cast(candidate.dense_shape, tf.int64)
    indices = [_valid_indices(g, shape[0]) for g in (candidate, reference)]
    unique, position = tf.unique(tf.concat(indices, 0))
    n_candidate = tf.size(indices[0])
    valid = unique >= 0  # negative and past the table: dropped
    rows = [tf.boolean_mask(tf.math.unsorted_segment_sum(g.values, at, tf.size(unique)), valid)
            for g, at in ((candidate, position[:n_candidate]), (reference, position[n_candidate:]))]
    total = tf.reduce_prod(tf.cast(shape, tf.float64))
    return rows[0], rows[1], tf.maximum(total - tf.cast(tf.size(rows[0]), tf.float64), 0.0)

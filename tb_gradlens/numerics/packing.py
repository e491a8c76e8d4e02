"""Lay many tensors out as a few matrices, so that per-tensor reductions run
as row-wise reductions of a few large ops (the TensorFlow backends).

Row i of a group's matrix holds tensor i flattened.  Tensors of one large
size share a group ``[k, n]`` (stacked; a lone one is only reshaped).
Small tensors (fewer than SMALL elements) share one group per dtype and
power-of-two width, padded with a value the caller chooses (NaN for
statistics: the caller takes the pads out of the NaN counts).  Tensors
whose size is only known when the graph runs get a group of their own.
So a model with 10^5 tiny variables gives a few dozen ops, not 10^5 per
statistic; the cost is one copy of the tensors that share a group.
"""

import collections

import numpy as np
import tensorflow as tf

SMALL = 4096

Group = collections.namedtuple("Group", ("rows", "matrices", "sizes", "width"))
Group.__doc__ = """rows: positions in the input lists; matrices: one ``[k, width]``
tensor per input list; sizes: int64 ``[k]`` element counts (a tensor when
only known at run time); width: columns (None when unknown)."""


def _static_size(t):
    n = t.shape.num_elements()
    return None if n is None else int(n)


def _flat(t):
    return tf.reshape(t, [-1])


def pack(lists, pad_values):
    """Groups of parallel lists of tensors (row i: one tensor per list, all
    with the same element count; dtypes may differ between lists).

    Args:
      lists: sequences of tensors of equal length.
      pad_values: one pad value per list.

    Returns:
      A list of ``Group``; every row appears in exactly one.
    """
    n = len(lists[0])
    keys = collections.OrderedDict()
    for i in range(n):
        size = _static_size(lists[0][i])
        dtypes = tuple(lst[i].dtype for lst in lists)
        if size is None:
            key = ("dynamic", i)
        elif size >= SMALL:
            key = ("size", size, dtypes)
        else:
            key = ("small", max(1, 1 << max(size - 1, 0).bit_length()), dtypes)
        keys.setdefault(key, []).append(i)
    groups = []
    for key, rows in keys.items():
        if key[0] == "dynamic":
            i = rows[0]
            groups.append(Group(rows, [tf.reshape(lst[i], [1, -1]) for lst in lists],
                                tf.reshape(tf.size(lists[0][i], out_type=tf.int64), [1]), None))
        elif key[0] == "size":
            matrices = [
                tf.reshape(lst[rows[0]], [1, -1]) if len(rows) == 1
                else tf.stack([_flat(lst[i]) for i in rows]) for lst in lists
            ]
            groups.append(Group(rows, matrices, np.full(len(rows), key[1], np.int64), key[1]))
        else:
            groups.append(_padded_group(lists, pad_values, rows, key[1]))
    return groups


def _padded_group(lists, pad_values, rows, width):
    """``[k, width]`` matrices of small tensors, padded: one concat and one
    gather per list (the index is built in NumPy when tracing)."""
    sizes = np.array([_static_size(lists[0][i]) for i in rows], np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    total = int(sizes.sum())
    column = np.arange(width)[None, :]
    index = np.where(column < sizes[:, None], starts[:, None] + column, total).astype(np.int32)
    matrices = []
    for lst, pad in zip(lists, pad_values):
        dtype = lst[rows[0]].dtype
        flat = tf.concat([_flat(lst[i]) for i in rows] + [tf.constant([pad], dtype)], axis=0)
        matrices.append(tf.gather(flat, index))
    return Group(rows, matrices, sizes, width)


def unpack(groups, outputs, n):
    """The rows of per-group outputs ``[k_i, ...]`` back in input order: ``[n, ...]``."""
    return reorder(outputs, [g.rows for g in groups], n)


def reorder(parts, orders, n):
    """``[n, ...]`` from parts ``[k_i, ...]`` whose rows are at ``orders[i]``."""
    order = [i for rows in orders for i in rows]
    stacked = parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)
    if order == list(range(n)):
        return stacked
    inverse = np.empty(n, np.int32)
    inverse[order] = np.arange(n, dtype=np.int32)
    return tf.gather(stacked, inverse)


def pad_counts(group):
    """int64 ``[k]``: how many pad elements each row of ``group`` holds."""
    if group.width is None:
        return tf.zeros([1], tf.int64)
    return tf.constant(group.width - np.asarray(group.sizes), tf.int64)

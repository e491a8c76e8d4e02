"""What one optimizer step did to each variable (kind ``update_stats``).

One pass over the weights before and after the step (and the step's
gradients, for weights stored in bfloat16) gives per variable, with
u = after - before in float64 over n elements, the raw sums
``n, sum u^2, sum before^2, lost``; the columns follow:

  update_rms       = sqrt(sum u^2 / n)
  update_ratio     = ||u|| / ||before||  (0 if both zero; 1 if only
                     before is: zero-initialized weights, e.g. biases at
                     their first step, move by their whole size, u = after)
  lost_update_bf16 = lost / n, where lost counts
                     - for float32 (or wider) weights: the elements the
                       step changed whose bfloat16 rounding did not change,
                       #(after != before and bf16(after) == bf16(before)),
                       i.e. updates a bfloat16 copy of the weights would lose;
                     - for weights stored in bfloat16: the elements whose
                       gradient is finite and nonzero but whose value did
                       not change, #(g != 0 and after == before) (NaN when
                       no gradient is given).

"Changed" and "equal" compare bits (+0 and -0 are equal), so they are
exact for subnormals on CPU.  An empty variable gives NaN.
"""

import tensorflow as tf
import tensorflow.experimental.numpy as tnp

from tb_gradlens import metadata
from tb_gradlens.numerics import backend as backends
from tb_gradlens.numerics import bits
from tb_gradlens.numerics import divergence
from tb_gradlens.numerics import kernel
from tb_gradlens.numerics import library_calls
from tb_gradlens.numerics import packing
from tb_gradlens.numerics import sparse

N_COLUMNS = len(metadata.UPDATE_STATS_COLUMNS)
NAN = float("nan")


def update_rms(n, sum_u2, xp):
    """sqrt(sum u^2 / n)."""
    return xp.sqrt(sum_u2 / xp.maximum(n, 1.0))


def update_ratio(sum_u2, sum_before2, xp):
    """||u|| / ||before|| (0 if both zero; 1 if only before is: weights
    that were all zero moved by their whole size)."""
    return divergence.ratio_or(xp.sqrt(sum_u2), xp.sqrt(sum_before2), 1.0, 0.0, xp)


def lost_update_fraction(lost, n, xp):
    """lost / n (see the module docstring for what is lost)."""
    return lost / xp.maximum(n, 1.0)


def columns_from_sums(sums, xp):
    """float64 ``[V, UPDATE_STATS_COLUMNS]`` from raw sums ``[V, 4]``."""
    n, sum_u2, sum_before2, lost = (sums[:, i] for i in range(4))
    rows = xp.stack([
        update_rms(n, sum_u2, xp), update_ratio(sum_u2, sum_before2, xp), lost_update_fraction(lost, n, xp),
    ], axis=1)
    return xp.where(n[:, None] > 0, rows, NAN)


def kept_by_op_possible(variables):
    """Whether ``keep_if`` and ``update_statistics(when=...)`` can run as
    the compiled kernel's ops for ``variables`` (on CPU, the ops loaded);
    otherwise a step keeps its weights under a conditional."""
    return (backends.choose() == "kernel" and kernel.ops() is not None
            and all(tf.as_dtype(v.dtype).name in kernel.DTYPES for v in variables))


def keep_if(when, values):
    """In a graph, one op: ``values`` themselves when ``when`` is true
    (their buffers shared: a variable read before an in-place update keeps
    its value, TensorFlow copying the buffer it writes), else empty
    tensors.  The weights before an update, kept without a conditional
    (whose every captured value is an input of both branches); the update
    must wait for it, so that a step that keeps nothing holds no read
    across the update (``kept_by_op_possible`` says where it runs)."""
    return list(kernel.ops().gradlens_keep_if(when, list(values)))


@tf.autograph.experimental.do_not_convert
def update_statistics(before, after, gradients=None, backend=None, when=None):
    """What one optimizer step did to each variable: float32 ``[V, 3]``.

    Columns: see the module docstring (metadata.UPDATE_STATS_COLUMNS).

    Args:
      before, after: lists of tensors (weights before and after the step).
      gradients: optional list of the step's gradients (for bfloat16
        weights; a ``tf.IndexedSlices`` is densified to the variable's size,
        rows past the table dropped: ``sparse.dense``).
      backend: "kernel", "tf" or "xla" (``backend.py``); default from the
        context.
      when: optional boolean scalar, with ``before`` from ``keep_if(when,
        ...)`` (``kept_by_op_possible``): when false ``before`` is empty and the rows
        mean nothing (NaN, no failure reported).
    """
    before = [tf.convert_to_tensor(b) for b in before]
    after = [tf.convert_to_tensor(a) for a in after]
    if not before:
        return tf.zeros([0, N_COLUMNS], tf.float32)
    grads = [None] * len(before)
    for i, b in enumerate(before):
        g = gradients[i] if gradients is not None else None
        if g is not None and b.dtype == tf.bfloat16:
            grads[i] = _dense_when(g, when)  # only bfloat16 weights read it
    if when is not None or backends.choose(backend) == "kernel":
        return _kernel_pass(before, after, grads, when)
    return tf.cast(columns_from_sums(_tf_sums(before, after, grads, backends.choose(backend)), tnp), tf.float32)


def _dense_when(gradient, when):
    """A gradient as a dense tensor (an IndexedSlices densified only when
    ``when`` is, if given)."""
    if when is None or not isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(sparse.dense(gradient))
    return tf.cond(when, lambda: tf.convert_to_tensor(sparse.dense(gradient)),
                   lambda: tf.zeros([0], gradient.values.dtype))


def _kernel_pass(before, after, grads, when=None):
    """The compiled kernel: one op (or one numpy_function call)."""
    before = [b if b.dtype.name in kernel.DTYPES else tf.cast(b, tf.float32) for b in before]
    after = [a if a.dtype == b.dtype else tf.cast(a, b.dtype) for a, b in zip(after, before)]
    rows = [i for i, g in enumerate(grads) if g is not None]
    given = [grads[i] if grads[i].dtype.name in kernel.DTYPES else tf.cast(grads[i], tf.float32) for i in rows]
    ops = None if tf.executing_eagerly() else kernel.ops()
    if ops is not None:
        def chunk(b, a, g):
            present = [k for k, x in enumerate(g) if x is not None]
            return (ops.gradlens_update_statistics(b, a, [g[k] for k in present], gradient_rows=present),)

        by_row = dict(zip(rows, given))
        (out,) = kernel.in_op_chunks(chunk, before, after, [by_row.get(i) for i in range(len(before))])
        sized = [i for i, b in enumerate(before) if b.shape.num_elements() != 0]  # (empty: NaN by definition)
        if sized:  # a failed op leaves every column NaN; NaN weights leave lost_update finite
            every = tf.reduce_all(tf.math.is_nan(tf.gather(out, sized)), axis=1)
            if when is not None:  # (nothing kept: nothing computed)
                every = tf.logical_and(every, when)
            kernel.report_failed_rows(tf.where(every, float("nan"), 0.0), "update statistics")
        return out
    n = len(before)

    def compute(*arrays):
        full = [None] * n
        for k, i in enumerate(rows):
            full[i] = arrays[2 * n + k]
        return (library_calls.update_statistics(arrays[:n], arrays[n:2 * n], full),)

    (out,) = backends.run_kernel(compute, before + after + given, [tf.float32])
    out.set_shape([n, N_COLUMNS])
    return out


def _group_sums(b, a, g, pads, backend=None):
    """Raw sums ``[k, 4]`` of one group of ``[k, n]`` matrices (zero pads
    change nothing but n, which comes from ``pads``)."""
    b64, a64 = bits.exact_float64(b), bits.exact_float64(a)
    u = a64 - b64
    unchanged = bits.same_value(b, a)
    if b.dtype == tf.bfloat16:
        if g is None:
            lost = tf.fill([tf.shape(b)[0]], tf.constant(NAN, tf.float64))
        else:
            asked = tf.logical_and(tf.math.is_finite(tf.cast(g, tf.float32)), tf.logical_not(bits.is_zero(g)))
            lost = tf.reduce_sum(tf.cast(tf.logical_and(asked, unchanged), tf.float64), axis=1)
    else:
        b16 = tf.cast(tf.cast(b, tf.float32), tf.bfloat16)
        a16 = tf.cast(tf.cast(a, tf.float32), tf.bfloat16)
        lost_mask = tf.logical_and(tf.logical_not(unchanged), bits.same_value(b16, a16))
        lost = tf.reduce_sum(tf.cast(lost_mask, tf.float64), axis=1)
    n = tf.cast(tf.shape(b)[1], tf.float64) - tf.cast(pads, tf.float64)
    return tf.stack([n, tf.reduce_sum(u * u, axis=1), tf.reduce_sum(b64 * b64, axis=1), lost], axis=1)


def _tf_sums(before, after, grads, backend):
    """Raw sums ``[V, 4]``; variables with a gradient (bfloat16 weights)
    and without one are packed apart."""
    parts, orders = [], []
    for want in (False, True):
        rows = [i for i, g in enumerate(grads) if (g is not None) == want]
        if not rows:
            continue
        lists = [[before[i] for i in rows], [after[i] for i in rows]] + ([[grads[i] for i in rows]] if want else [])
        groups = packing.pack(lists, [0] * len(lists))
        args = [(g.matrices[0], g.matrices[1], g.matrices[2] if want else None, packing.pad_counts(g))
                for g in groups]
        out = backends.run_groups(_group_sums, args, [g.width is not None for g in groups], backend)
        parts.append(packing.unpack(groups, out, len(rows)))
        orders.append(rows)
    return packing.reorder(parts, orders, len(before))

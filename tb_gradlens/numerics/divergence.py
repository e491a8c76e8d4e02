"""Divergence of a candidate c from a reference r (kinds ``divergence`` and
``activation_divergence``).

Every element is widened exactly to float64 (``bits.exact_float64``).  Over
the compared elements F (both c and r finite), with d = c - r, n = |F|,
floor = floor_fraction * rms_F(r) and s = the spacing of the candidate
dtype (``bits.spacing``) at max(|r|, floor) (the floor keeps a reference
that is zero where the candidate is not, e.g. a ReLU on the other side of
0, from measuring in subnormal ULPs), one pass gives the raw sums

  n, sum r^2, sum d^2, sum c^2, sum c*r, sum (d/s)^2, max |d|,
  max |d| / max(|r|, floor), #significant (|r| > floor), #sign flips among
  them, #flushed (r != 0, c == 0), #non-finite

(``SUMS``; a pass before it gives n and sum r^2 for the floor), and the
metrics follow (functions below, NumPy or TensorFlow arrays alike).  With
no compared element every metric but ``nonfinite`` is NaN.
"""

import numpy as np
import tensorflow as tf
import tensorflow.experimental.numpy as tnp

from tb_gradlens import metadata
from tb_gradlens.numerics import backend as backends
from tb_gradlens.numerics import bits
from tb_gradlens.numerics import kernel
from tb_gradlens.numerics import library_calls
from tb_gradlens.numerics import packing
from tb_gradlens.numerics import sparse
from tb_gradlens.numerics import step_failures
from tb_gradlens.records import comparisons as comparison_records

# An element is "significant" for sign_flip (and the denominators of max_rel
# and ulp_rms are floored) at SIGNIFICANCE_FLOOR * rms(r): the rounding
# noise of a correct bfloat16 computation (~2^-8 of the typical value)
# stays well below a tenth of the typical value.  One constant with the
# record format's default (what a record that does not state it means).
SIGNIFICANCE_FLOOR = comparison_records.DEFAULT_FLOOR_FRACTION

SUMS = ("n", "sum_r2", "sum_d2", "sum_c2", "sum_cr", "sum_ulp2", "max_abs", "max_rel",
        "significant", "flipped", "flushed", "nonfinite")  # the kernel's row, in order
_S = {name: i for i, name in enumerate(SUMS)}
N_COLUMNS = len(metadata.DIVERGENCE_METRICS)
NAN = float("nan")
INF = float("inf")

# ---------------------------------------------------------------------------
# The metrics, from raw sums (xp: numpy or tensorflow.experimental.numpy).
# ---------------------------------------------------------------------------


def ratio_or(numerator, denominator, if_only_denominator_zero, if_both_zero, xp):
    """numerator / denominator, with the two zero-denominator cases defined."""
    safe = xp.where(denominator > 0, denominator, 1.0)
    return xp.where(
        denominator > 0,
        numerator / safe,
        xp.where(numerator > 0, if_only_denominator_zero, if_both_zero),
    )


def rel_l2(sum_d2, sum_r2, xp):
    """||d|| / ||r||  (0 if both zero, inf if only r is)."""
    return ratio_or(xp.sqrt(sum_d2), xp.sqrt(sum_r2), INF, 0.0, xp)


def cosine(sum_cr, sum_c2, sum_r2, xp):
    """<c,r> / sqrt(||c||^2 ||r||^2)  (1 if both zero, 0 if one is)."""
    both = xp.logical_and(sum_c2 > 0, sum_r2 > 0)
    value = xp.clip(sum_cr / xp.sqrt(xp.where(both, sum_c2 * sum_r2, 1.0)), -1.0, 1.0)
    neither = xp.logical_and(sum_c2 == 0, sum_r2 == 0)
    return xp.where(both, value, xp.where(neither, 1.0, 0.0))


def norm_ratio(sum_c2, sum_r2, xp):
    """||c|| / ||r||  (1 if both zero, inf if only r is)."""
    return ratio_or(xp.sqrt(sum_c2), xp.sqrt(sum_r2), INF, 1.0, xp)


def ulp_rms(sum_ulp2, n, xp):
    """sqrt(sum (d/s)^2 / n): 1/sqrt(12) ~ 0.29 for one correct rounding."""
    return xp.sqrt(sum_ulp2 / xp.maximum(n, 1.0))


def sign_flip(flipped, significant, xp):
    """#(sign c != sign r, |r| > floor) / #(|r| > floor): np.sign semantics
    (c == 0 is a flip); 0 if no element is significant."""
    return flipped / xp.maximum(significant, 1.0)


def flush_to_zero(flushed, n, xp):
    """#(r != 0, c == 0) / n (zeros exact: widening keeps subnormals)."""
    return flushed / xp.maximum(n, 1.0)


def metrics_from_sums(sums, xp):
    """float64 ``[V, DIVERGENCE_COLUMNS]`` from raw sums ``[V, SUMS]``:
    rel_l2, cosine, norm_ratio, max_abs, max_rel (max |d| / max(|r|, floor),
    0/0 counted as 0), ulp_rms, sign_flip, flush_to_zero, nonfinite."""
    s = {name: sums[:, i] for name, i in _S.items()}
    values = xp.stack([
        rel_l2(s["sum_d2"], s["sum_r2"], xp),
        cosine(s["sum_cr"], s["sum_c2"], s["sum_r2"], xp),
        norm_ratio(s["sum_c2"], s["sum_r2"], xp),
        s["max_abs"], s["max_rel"],
        ulp_rms(s["sum_ulp2"], s["n"], xp),
        sign_flip(s["flipped"], s["significant"], xp),
        flush_to_zero(s["flushed"], s["n"], xp),
    ], axis=1)
    values = xp.where(s["n"][:, None] > 0, values, NAN)
    return xp.concatenate([values, s["nonfinite"][:, None]], axis=1)


# ---------------------------------------------------------------------------
# The pass.
# ---------------------------------------------------------------------------


@tf.autograph.experimental.do_not_convert
def tensor_divergence(candidate, reference, candidate_dtype=None, floor_fraction=SIGNIFICANCE_FLOOR,
                      backend=None):
    """Divergence metrics of one tensor pair: float64 ``[len(DIVERGENCE_COLUMNS)]``.

    Same definitions as ``divergence_metrics`` (which see).
    """
    return divergence64([candidate], [reference], [candidate_dtype], floor_fraction, backend)[0]


@tf.autograph.experimental.do_not_convert
def divergence_metrics(candidates, references, candidate_dtypes=None, floor_fraction=SIGNIFICANCE_FLOOR,
                       backend=None):
    """Per-pair divergence of candidates c from references r, in one pass.

    Metrics (see the module docstring and ``metrics_from_sums``):

      rel_l2        = ||d|| / ||r||      (0 if both zero, inf if only r is)
      cosine        = <c,r> / sqrt(||c||^2 ||r||^2)
                                         (1 if both zero, 0 if one is)
      norm_ratio    = ||c|| / ||r||      (1 if both zero, inf if only r is)
      max_abs       = max |d|
      max_rel       = max |d| / max(|r|, floor)   (0/0 counts as 0)
      ulp_rms       = sqrt(sum (d/s)^2 / n)
      sign_flip     = #(sign c != sign r, |r| > floor) / #(|r| > floor)
      flush_to_zero = #(r != 0, c == 0) / n
      nonfinite     = #(elements where c or r is NaN or +-Inf); such
                      elements are left out of every other metric.

    A pair with a None member gives a NaN row with nonfinite = 0.

    Args:
      candidates, references: lists of tensors of equal length; each pair
        has the same number of elements (dtypes may differ).  A pair of
        ``tf.IndexedSlices`` of one dense shape (an Embedding's gradients)
        gives the metrics of the dense pair; the kernel computes them over
        the rows either names (``sparse.paired_rows``), the TensorFlow
        backends densify.
      candidate_dtypes: the dtype whose spacing defines ``ulp_rms`` for
        each pair (e.g. bfloat16 for a mixed_bfloat16 candidate whose
        gradients are float32); default each candidate's dtype.
      floor_fraction: the significance floor as a fraction of rms(r).
      backend: "kernel", "tf" or "xla" (``backend.py``); default from the
        context.

    Returns:
      float32 ``[V, len(metadata.DIVERGENCE_COLUMNS)]``.
    """
    return tf.cast(divergence64(candidates, references, candidate_dtypes, floor_fraction, backend), tf.float32)


@tf.autograph.experimental.do_not_convert
def divergence64(candidates, references, candidate_dtypes, floor_fraction, backend=None):
    """float64 ``[V, 9]`` divergence (see ``divergence_metrics``)."""
    candidates, references = list(candidates), list(references)
    n_pairs = len(candidates)
    if len(references) != n_pairs:
        raise ValueError("tb_gradlens: %d candidates for %d references" % (n_pairs, len(references)))
    candidate_dtypes = list(candidate_dtypes) if candidate_dtypes is not None else [None] * n_pairs
    present = [i for i in range(n_pairs) if candidates[i] is not None and references[i] is not None]
    nan_row = [NAN] * (N_COLUMNS - 1) + [0.0]
    if not present:
        return tf.constant([nan_row] * n_pairs, tf.float64, shape=[n_pairs, N_COLUMNS])
    chosen = backends.choose(backend)
    cands, refs, implicit, precisions, checked = [], [], [], [], []
    for k, i in enumerate(present):
        c, r, zeros, ok = _pair(candidates[i], references[i], sparse_ok=chosen == "kernel")
        nc, nr = c.shape.num_elements(), r.shape.num_elements()
        if nc is not None and nr is not None and nc != nr:
            raise ValueError("tb_gradlens: pair %d has %d candidate and %d reference elements" % (i, nc, nr))
        if ok is None and (nc is None or nr is None):  # element counts known when the step runs
            ok = tf.equal(tf.size(c, out_type=tf.int64), tf.size(r, out_type=tf.int64))
        if ok is not None:
            c, r, zeros = _or_nothing(ok, c, r, zeros)
            checked.append((k, i, ok))
        cands.append(c)
        refs.append(r)
        implicit.append(zeros)
        precisions.append(bits.precision(candidate_dtypes[i] or c.dtype))
    p = np.array([q[0] for q in precisions], np.int32)
    min_normal = np.array([q[1] for q in precisions], np.int32)
    if chosen == "kernel":
        metrics = _kernel_pass(cands, refs, implicit, p, min_normal, floor_fraction)
    else:
        metrics = metrics_from_sums(_tf_sums(cands, refs, p, min_normal, floor_fraction, chosen), tnp)
    if checked:
        metrics = _unpaired_rows_nan(metrics, checked, len(present))
    if len(present) == n_pairs:
        return metrics
    missing = [i for i in range(n_pairs) if i not in set(present)]
    order = np.empty(n_pairs, np.int32)
    order[present + missing] = np.arange(n_pairs, dtype=np.int32)
    return tf.gather(tf.concat([metrics, tf.constant([nan_row] * len(missing), tf.float64)], 0), order)


def _pair(candidate, reference, sparse_ok):
    """(c, r, implicit zeros, ok) of one pair: two IndexedSlices (for the
    kernel) as the rows either names, the rest counted (``sparse.py``);
    anything else as dense tensors (IndexedSlices densified, never
    raising).  ``ok``: a boolean tensor when whether the two can be paired
    is known only when the step runs (their dense shapes), else None."""
    if sparse_ok and sparse.pairable(candidate, reference):
        ok = sparse.same_dense_shape(candidate, reference)
        return sparse.paired_rows(candidate, reference) + (ok,)
    return (tf.convert_to_tensor(sparse.dense(candidate)), tf.convert_to_tensor(sparse.dense(reference)),
            tf.constant(0.0, tf.float64), None)


def _or_nothing(ok, c, r, zeros):
    """(c, r, zeros) flattened when ``ok``, else empty tensors: a pair that
    cannot be compared gives the kernel nothing to refuse."""
    def paired():
        return tf.reshape(c, [-1]), tf.reshape(r, [-1]), zeros

    def nothing():
        return tf.zeros([0], c.dtype), tf.zeros([0], r.dtype), tf.zeros([], tf.float64)

    return tf.cond(ok, paired, nothing) if not isinstance(ok, bool) else (paired() if ok else nothing())


def _unpaired_rows_nan(metrics, checked, n):
    """``metrics`` [n, 9] with the rows of pairs that could not be compared
    NaN (every column), reported through ``step_failures``."""
    ok = [tf.constant(True)] * n
    for k, _, flag in checked:
        ok[k] = tf.convert_to_tensor(flag)
    ok = tf.stack(ok)
    pairs = tf.constant([i for _, i, _ in checked], tf.int64)
    bad = tf.boolean_mask(pairs, tf.logical_not(tf.stack([tf.convert_to_tensor(f) for _, _, f in checked])))
    step_failures.report_if(
        "tb_gradlens.numerics.divergence (a pair that cannot be compared)", tf.logical_not(tf.reduce_all(ok)),
        "comparison pair(s) %s differ in shape when the step ran (a layer output whose size depends on its "
        "values?): their rows are NaN", bad)
    return tf.where(ok[:, None], metrics, tf.constant(NAN, metrics.dtype))


def _kernel_pass(cands, refs, implicit, p, min_normal, floor_fraction):
    """The compiled kernel: one op (or one numpy_function call)."""
    cands = [c if c.dtype.name in kernel.DTYPES else tf.cast(c, tf.float32) for c in cands]
    refs = [r if r.dtype.name in kernel.DTYPES else tf.cast(r, tf.float32) for r in refs]
    ops = None if tf.executing_eagerly() else kernel.ops()
    if ops is not None:
        floor = tf.constant(float(floor_fraction), tf.float64)
        (out,) = kernel.in_op_chunks(
            lambda c, r, z, q, e: (ops.gradlens_divergence_metrics(
                c, r, floor, tf.stack(z), mantissa_bits=q, min_normal=e),),
            cands, refs, implicit, p.tolist(), min_normal.tolist(),
        )
        kernel.report_failed_rows(out[:, metadata.DIVERGENCE_COLUMNS.index("nonfinite")], "divergence")
        return out
    n = len(cands)
    (out,) = backends.run_kernel(
        lambda *arrays: (library_calls.divergence_metrics(
            arrays[:n], arrays[n:2 * n], p, min_normal, floor_fraction, arrays[2 * n]),),
        cands + refs + [tf.stack(implicit)], [tf.float64],
    )
    out.set_shape([n, N_COLUMNS])
    return out


def _group_sums(c, r, p, min_normal, pads, floor_fraction, backend=None):
    """Raw sums ``[k, SUMS]`` of one group (``[k, n]`` matrices; ``pads``
    NaN pads per row are taken out of the non-finite count)."""
    c64, r64 = bits.exact_float64(c), bits.exact_float64(r)
    finite = tf.logical_and(tf.math.is_finite(c64), tf.math.is_finite(r64))
    c64, r64 = tf.where(finite, c64, 0.0), tf.where(finite, r64, 0.0)

    def total(x):
        return tf.reduce_sum(tf.cast(x, tf.float64), axis=1)

    n, sum_r2 = total(finite), total(r64 * r64)
    floor = (floor_fraction * tf.sqrt(sum_r2 / tf.maximum(n, 1.0)))[:, None]
    d = c64 - r64
    abs_d, abs_r = tf.abs(d), tf.abs(r64)
    floored = tf.maximum(abs_r, floor)
    ulps = d / bits.spacing_from(floored, p[:, None], min_normal[:, None])
    rel = tf.where(abs_d == 0, tf.constant(0.0, tf.float64),
                   tf.where(floored == 0, tf.constant(INF, tf.float64), tf.math.divide_no_nan(abs_d, floored)))
    significant = tf.logical_and(finite, abs_r > floor)
    flipped = tf.logical_and(significant, tf.not_equal(tf.sign(c64), tf.sign(r64)))
    flushed = tf.logical_and(finite, tf.logical_and(r64 != 0, c64 == 0))
    return tf.stack([
        n, sum_r2, total(d * d), total(c64 * c64), total(c64 * r64), total(ulps * ulps),
        tf.reduce_max(abs_d, axis=1), tf.reduce_max(rel, axis=1),
        total(significant), total(flipped), total(flushed),
        total(tf.logical_not(finite)) - tf.cast(pads, tf.float64),
    ], axis=1)


def _tf_sums(cands, refs, p, min_normal, floor_fraction, backend):
    groups = packing.pack([cands, refs], [NAN, NAN])
    args = [(g.matrices[0], g.matrices[1], tf.constant(p[g.rows], tf.int64),
             tf.constant(min_normal[g.rows], tf.int64), packing.pad_counts(g), floor_fraction) for g in groups]
    out = backends.run_groups(_group_sums, args, [g.width is not None for g in groups], backend)
    return packing.unpack(groups, out, len(cands))


def comparison_values(values, stable=None, half_batch=None):
    """``[R, C]`` metrics with the two columns a comparison record adds:
    ``stable`` (``[R]``, the stable-rounding pass's rel_l2 against the
    reference, or its loss's rel_error) and ``half_batch`` (the half batch's
    reference gradient's rel_l2 against the batch's, or its loss's
    rel_error), NaN where not measured (None)."""
    values = tf.convert_to_tensor(values, tf.float32)
    columns = [values]
    for column in (stable, half_batch):
        if column is None:
            column = tf.fill(tf.shape(values)[:1], float("nan"))
        columns.append(tf.reshape(tf.cast(column, tf.float32), [-1, 1]))
    return tf.concat(columns, axis=1)

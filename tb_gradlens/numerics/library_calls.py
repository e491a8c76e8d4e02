"""The compiled kernel's C library on NumPy arrays (through ``ctypes``).

Used in eager mode (one ``np.asarray`` per tensor: no TensorFlow op with
one input per tensor) and, inside graphs, through ``tf.numpy_function``
when the kernel's TensorFlow ops cannot be built.  ``kernel.py`` finds and
builds the library.
"""

import numpy as np

from tb_gradlens import metadata
from tb_gradlens import safety
from tb_gradlens.numerics import kernel
from tb_gradlens.numerics.kernel import FLOAT32
from tb_gradlens.numerics.kernel import NONE

_NUMPY_CODES = {}  # numpy dtype -> code (dtype.name is slow, per array)
FAILURE_CAUSE = "tb_gradlens compiled kernel"


def _code(dtype):
    try:
        return _NUMPY_CODES[dtype]
    except KeyError:
        code = _NUMPY_CODES[dtype] = kernel.CODES.get(dtype.name)
        return code


def _prepared(arrays):
    """(kept arrays, pointers, dtype codes, sizes) for the C calls."""
    kept, codes, pointers, sizes = [], [], [], []
    for a in arrays:
        if a is None:
            kept.append(None)
            codes.append(NONE)
            pointers.append(0)
            sizes.append(0)
            continue
        a = np.asarray(a)  # a CPU tensor's memory, not a copy
        code = _code(a.dtype)
        if code is None:
            a = a.astype(np.float32)
            code = FLOAT32
        if not a.flags.c_contiguous:
            a = np.ascontiguousarray(a)
        kept.append(a)
        codes.append(code)
        pointers.append(a.__array_interface__["data"][0])
        sizes.append(a.size)
    return kept, np.array(pointers, np.uint64), np.array(codes, np.int32), np.array(sizes, np.int64)


def _check(result, what, *outputs):
    """A failed C call (out of memory) leaves ``outputs`` NaN and is
    reported through the failure policy: this runs inside a training step
    (eagerly or through ``tf.numpy_function``), where nothing may raise but
    in strict mode."""
    if result != 0:
        for out in outputs:
            out.fill(np.nan)
        safety.report(FAILURE_CAUSE, MemoryError("the compiled kernel ran out of memory (%s): its rows are NaN"
                                                 % what))


def gradient_statistics(arrays, implicit_zeros, min_exponent, zero_bin, n_bins, subnormal_bins):
    """(stats float32 [n, 14], histogram float32 [n, n_bins]) of NumPy arrays."""
    kept, pointers, codes, sizes = _prepared(arrays)
    n = len(kept)
    stats = np.empty((n, len(metadata.GRAD_STATS_COLUMNS)), np.float32)
    hist = np.empty((n, n_bins), np.float32)
    zeros = np.ascontiguousarray(implicit_zeros, np.float64)
    if n:
        _check(kernel.library().gl_gradient_statistics(
            n, pointers.ctypes.data, codes.ctypes.data, sizes.ctypes.data, zeros.ctypes.data,
            min_exponent, zero_bin, n_bins, subnormal_bins, stats.ctypes.data, hist.ctypes.data,
            kernel.threads_for(sizes)), "gradient statistics", stats, hist)
    return stats, hist


def divergence_metrics(candidates, references, mantissa_bits, min_normal, floor_fraction, implicit_zeros=None):
    """float64 ``[pairs, 9]`` divergence metrics of NumPy arrays
    (``implicit_zeros``: per pair, the (0, 0) pairs left out)."""
    kept_c, c_pointers, c_codes, sizes = _prepared(candidates)
    kept_r, r_pointers, r_codes, r_sizes = _prepared(references)
    out = np.empty((len(kept_c), len(metadata.DIVERGENCE_METRICS)), np.float64)
    if not np.array_equal(sizes, r_sizes):  # (divergence.py never sends such pairs)
        out.fill(np.nan)
        safety.report(FAILURE_CAUSE, ValueError("candidate and reference sizes differ: %s vs %s"
                                                % (sizes.tolist(), r_sizes.tolist())))
        return out
    p = np.ascontiguousarray(mantissa_bits, np.int32)
    e = np.ascontiguousarray(min_normal, np.int32)
    zeros = np.zeros(len(kept_c)) if implicit_zeros is None else implicit_zeros
    zeros = np.ascontiguousarray(zeros, np.float64)
    if len(kept_c):
        _check(kernel.library().gl_divergence_metrics(
            len(kept_c), c_pointers.ctypes.data, c_codes.ctypes.data, r_pointers.ctypes.data,
            r_codes.ctypes.data, sizes.ctypes.data, zeros.ctypes.data, p.ctypes.data, e.ctypes.data,
            float(floor_fraction),
            out.ctypes.data, kernel.threads_for(sizes)), "divergence", out)
    return out


def update_statistics(before, after, gradients):
    """float32 ``[variables, 3]`` update statistics of NumPy arrays."""
    kept_b, b_pointers, codes, sizes = _prepared(before)
    kept_a = _prepared([np.asarray(a, b.dtype) for a, b in zip(after, kept_b)])
    a_pointers = kept_a[1]
    _, g_pointers, g_codes, _ = _prepared(gradients)
    out = np.empty((len(kept_b), len(metadata.UPDATE_STATS_COLUMNS)), np.float32)
    if len(kept_b):
        _check(kernel.library().gl_update_statistics(
            len(kept_b), b_pointers.ctypes.data, a_pointers.ctypes.data, codes.ctypes.data,
            g_pointers.ctypes.data, g_codes.ctypes.data, sizes.ctypes.data, out.ctypes.data,
            kernel.threads_for(sizes)), "update statistics", out)
    return out

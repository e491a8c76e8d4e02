"""The float64 NumPy references of the gradient statistics and log2 histograms
(``reference_statistics``, ``reference_histogram``, ``assert_stats_match``), and the
``backend`` fixture: every numerics backend that must compute the same numbers."""

import numpy as np
import pytest

from tb_gradlens import metadata
from tb_gradlens.numerics import kernel

COLUMNS = metadata.GRAD_STATS_COLUMNS
TINY = 2.0**-126  # smallest normal float32


def reference_statistics(grad, size_if_none=0):
    """The statistics of one gradient, computed in float64 NumPy.

    Value statistics are taken over the finite elements.  Subnormal float32
    values are counted by the bits (they are not zero), but TensorFlow's CPU
    kernels treat them as zero in arithmetic, so value statistics are compared
    with an absolute tolerance far above 2^-126.
    """
    if grad is None:
        row = {c: np.nan for c in COLUMNS}
        row.update(nan_count=0, posinf_count=0, neginf_count=0)
        row.update(count=size_if_none, is_none=1)
        return np.array([row[c] for c in COLUMNS])
    a = np.asarray(grad).astype(np.float64).ravel()
    n = a.size
    finite = a[np.isfinite(a)]
    row = {"count": n, "is_none": 0}
    row["nan_count"] = np.isnan(a).sum()
    row["posinf_count"] = np.isposinf(a).sum()
    row["neginf_count"] = np.isneginf(a).sum()
    row["zero_fraction"] = (a == 0).sum() / n if n else np.nan
    row["subnormal_fraction"] = ((a != 0) & (np.abs(a) < TINY)).sum() / n if n else np.nan
    if finite.size:
        row["l2_norm"] = np.sqrt(np.sum(finite**2))
        row["mean"] = finite.mean()
        row["std"] = finite.std()
        row["min"] = finite.min()
        row["max"] = finite.max()
        row["max_abs"] = np.abs(finite).max()
        row["rms"] = np.sqrt(np.mean(finite**2))
    else:
        row.update({c: np.nan for c in ("mean", "std", "min", "max", "max_abs", "rms")})
        row["l2_norm"] = 0.0
    return np.array([row[c] for c in COLUMNS], dtype=np.float64)


def reference_histogram(grad):
    """Counts per log2 bin: floor(log2|x|) from np.frexp, then zero/+inf/-inf/nan."""
    counts = np.zeros(len(metadata.HISTOGRAM_COLUMNS))
    if grad is None:
        return counts
    a = np.asarray(grad).astype(np.float64).ravel()
    for x in a:
        if np.isnan(x):
            counts[-1] += 1
        elif np.isposinf(x):
            counts[-3] += 1
        elif np.isneginf(x):
            counts[-2] += 1
        elif x == 0:
            counts[-4] += 1
        else:
            _, e = np.frexp(abs(x))  # |x| = m * 2^e, m in [0.5, 1)
            counts[(e - 1) - metadata.MIN_EXPONENT] += 1
    return counts


def assert_stats_match(actual, expected):
    """Records are float32: compare with the float64 reference rounded to float32
    (so an l2_norm beyond 3.4e38 is +inf in both)."""
    actual = np.asarray(actual, np.float64)
    with np.errstate(over="ignore"):
        expected = np.asarray(expected, np.float64).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(actual), np.isnan(expected))
    np.testing.assert_allclose(actual, expected, rtol=2e-6, atol=1e-30, equal_nan=True)


# Every backend computes the same numbers: "kernel" the compiled one
# (_kernel.c) as TensorFlow ops, "kernel_library" the same C code through
# ctypes and tf.numpy_function (when the ops cannot be built), "tf" separate
# TensorFlow kernels, "xla" one XLA-compiled pass.
BACKENDS = ["kernel", "kernel_library", "tf", "xla"]
# XLA compiles each new shape (seconds per case on 2 cores): its cases run in the slow lane only.
BACKEND_PARAMS = [pytest.param(b, marks=pytest.mark.slow) if b == "xla" else b for b in BACKENDS]


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request, monkeypatch):
    """The ``backend`` argument of a numerics call, for each backend."""
    if request.param != "kernel_library":
        yield request.param
        return
    monkeypatch.setenv(kernel.ENV_KERNEL, "library")
    kernel.reset()
    assert kernel.library() is not None and kernel.ops() is None, kernel.status()
    yield "kernel"
    monkeypatch.undo()
    kernel.reset()

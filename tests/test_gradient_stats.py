"""Gradient statistics and log2 histograms against an independent float64 NumPy computation."""

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from tb_gradlens import metadata
from tb_gradlens import numerics

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


RNG = np.random.default_rng(1234)
FIXED_CASES = {
    "zeros": np.zeros((3, 4), np.float32),
    "signed_zeros": np.array([0.0, -0.0, 0.0], np.float32),
    "denormals": np.array([1e-40, -3e-42, 2.0**-149, 1.0, 0.0, -2.0], np.float32),
    "nan": np.array([np.nan, 1.0, -3.0, 2.0], np.float32),
    "pos_neg_inf": np.array([np.inf, -np.inf, np.inf, 0.5, -0.25], np.float32),
    "all_nonfinite": np.array([np.nan, np.inf], np.float32),
    "empty": np.zeros((0, 5), np.float32),
    "scalar": np.float32(-7.5),
    "huge": np.array([3.0e38, -3.0e38, 1.0e-38], np.float32),
    "random_normal": (RNG.normal(size=(257, 33)) * 1e-3).astype(np.float32),
    "bfloat16": RNG.normal(size=(64,)).astype(ml_dtypes.bfloat16),
    "bfloat16_tiny": np.array([1e-39, 2.0**-133, 0.0, 1.0], ml_dtypes.bfloat16),
    "float16": np.array([6.0e-8, 1.0, -65504.0, np.inf], np.float16),
    "float64": np.array([1e-3, -2.5, 2e10], np.float64),
}


@pytest.mark.parametrize("use_xla", [True, False], ids=["xla", "kernels"])
@pytest.mark.parametrize("name", sorted(FIXED_CASES))
def test_statistics_of_fixed_gradients_match_numpy(name, use_xla):
    grad = FIXED_CASES[name]
    stats, hist = numerics.gradient_statistics(
        [tf.constant(grad)], [np.size(grad)], use_xla=use_xla
    )
    assert stats.shape == (1, len(COLUMNS))
    assert hist.shape == (1, len(metadata.HISTOGRAM_COLUMNS))
    assert_stats_match(stats.numpy()[0], reference_statistics(grad))
    np.testing.assert_array_equal(hist.numpy()[0], reference_histogram(grad))


def test_none_gradient_is_recorded_not_skipped():
    grads = [tf.constant([1.0, -1.0]), None, tf.constant([[0.0, 2.0]])]
    stats, hist = numerics.gradient_statistics(grads, [2, 12, 2])
    stats = stats.numpy()
    assert stats.shape == (3, len(COLUMNS))
    assert_stats_match(stats[0], reference_statistics(np.array([1.0, -1.0], np.float32)))
    assert_stats_match(stats[1], reference_statistics(None, 12))
    assert_stats_match(stats[2], reference_statistics(np.array([0.0, 2.0], np.float32)))
    np.testing.assert_array_equal(hist.numpy()[1], np.zeros(len(metadata.HISTOGRAM_COLUMNS)))


def test_no_variables_gives_empty_records():
    stats, hist = numerics.gradient_statistics([])
    assert stats.shape == (0, len(COLUMNS)) and hist.shape == (0, len(metadata.HISTOGRAM_COLUMNS))


@pytest.mark.parametrize("use_xla", [True, False], ids=["xla", "kernels"])
def test_many_variables_fused_match_per_variable_numpy(use_xla):
    grads = [RNG.normal(scale=10.0**-k, size=s).astype(np.float32)
             for k, s in enumerate([(1,), (7, 3), (100,), (0,), (31, 31), (5, 2, 2)])]
    grads[2][::7] = 0.0
    grads[4][3, 3] = np.nan
    stats, hist = numerics.gradient_statistics([tf.constant(g) for g in grads], use_xla=use_xla)
    for i, g in enumerate(grads):
        assert_stats_match(stats.numpy()[i], reference_statistics(g))
        np.testing.assert_array_equal(hist.numpy()[i], reference_histogram(g))


def test_eager_and_tf_function_compute_identical_values():
    grads = [tf.constant(FIXED_CASES[k]) for k in ("random_normal", "denormals", "nan")]
    eager = numerics.gradient_statistics(grads)
    traced = tf.function(numerics.gradient_statistics)(grads)
    for a, b in zip(eager, traced):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_log2_bin_index_covers_every_float32_exponent():
    exponents = np.arange(metadata.MIN_EXPONENT, metadata.MAX_EXPONENT + 1)
    powers = np.ldexp(1.0, exponents).astype(np.float32)  # exact, subnormals included
    index = numerics.log2_bin_index(tf.constant(powers)).numpy()
    np.testing.assert_array_equal(index, exponents - metadata.MIN_EXPONENT)
    normal = exponents[(exponents >= -126) & (exponents < 127)]
    just_below_next = np.ldexp(1.75, normal).astype(np.float32)
    index = numerics.log2_bin_index(tf.constant(-just_below_next)).numpy()
    np.testing.assert_array_equal(index, normal - metadata.MIN_EXPONENT)


@pytest.mark.parametrize("use_xla", [True, False], ids=["xla", "kernels"])
def test_counts_stay_exact_beyond_float32_integers(use_xla):
    """A variable of 2^24 + 3 elements: float32 counting would stall at 2^24."""
    n = 2**24 + 3
    grad = np.zeros(n, np.float32)
    grad[-1] = 1.0
    stats, _ = numerics.gradient_statistics([tf.constant(grad)], use_xla=use_xla)
    row = dict(zip(COLUMNS, stats.numpy()[0].tolist()))
    assert row["zero_fraction"] == np.float32((n - 1) / n)
    assert row["count"] == np.float32(n)
    assert row["mean"] == np.float32(1.0 / n)

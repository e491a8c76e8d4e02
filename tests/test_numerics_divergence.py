"""Divergence, loss-comparison and update metrics vs independent NumPy float64."""

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from divergence_reference import np_divergence, np_spacing
from tb_gradlens import metadata
from tb_gradlens import numerics

SUB = np.float32(1e-40)  # a float32 subnormal (TF's CPU kernels treat it as 0)

CASES = {
    "equal": ([1.0, -2.0, 3.5, 0.0], [1.0, -2.0, 3.5, 0.0]),
    "both_zero": ([0.0, 0.0, -0.0], [0.0, -0.0, 0.0]),
    "only_reference_zero": ([1.0, 0.0, 0.0], [0.0, 0.0, 0.0]),
    "only_candidate_zero": ([0.0, 0.0], [1.0, -2.0]),
    "denormals": ([0.0, SUB, 1.0, 2.0, 0.0], [SUB, SUB, 1.0, 2.5, 2 * SUB]),
    "nan_inf": ([np.nan, 1.0, np.inf, 2.0, 3.0], [1.0, 1.0, 5.0, -np.inf, 3.5]),
    "all_nonfinite": ([np.nan, np.inf], [1.0, 2.0]),
    "empty": ([], []),
    "sign_flips": ([1.0, -1.0, 0.01, -3.0, 0.0], [-1.0, -1.1, -0.02, 3.0, 2.0]),
    "random": (
        np.random.default_rng(0).normal(size=200),
        np.random.default_rng(0).normal(size=200) * 1.01 + 1e-3,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_every_metric_matches_numpy(case, dtype):
    c, r = (np.asarray(a, np.float32) for a in CASES[case])
    got = numerics.divergence_metrics([tf.constant(c)], [tf.constant(r)], [dtype]).numpy()
    assert got.shape == (1, len(metadata.DIVERGENCE_COLUMNS))
    want = np_divergence(c, r, dtype)
    np.testing.assert_allclose(got[0], want.astype(np.float32), rtol=2e-6, equal_nan=True)


def test_defined_edge_cases():
    cols = {n: i for i, n in enumerate(metadata.DIVERGENCE_COLUMNS)}
    rows = numerics.divergence_metrics(
        [tf.zeros([3]), tf.ones([2]), tf.zeros([0]), tf.constant([np.nan])],
        [tf.zeros([3]), tf.zeros([2]), tf.zeros([0]), tf.constant([1.0])],
    ).numpy()
    both_zero, only_r_zero, empty, nonfinite = rows
    assert both_zero[cols["rel_l2"]] == 0 and both_zero[cols["cosine"]] == 1
    assert np.isinf(only_r_zero[cols["rel_l2"]]) and np.isinf(only_r_zero[cols["norm_ratio"]])
    assert np.isnan(empty[:-1]).all() and empty[cols["nonfinite"]] == 0
    assert np.isnan(nonfinite[:-1]).all() and nonfinite[cols["nonfinite"]] == 1


def test_flush_to_zero_sees_subnormals_on_cpu():
    # r holds subnormals only; c flushed them.  A float cast would see r == 0.
    r = np.array([SUB, -SUB, 3 * SUB, 0.0], np.float32)
    c = np.array([0.0, 0.0, 3 * SUB, 0.0], np.float32)
    got = numerics.tensor_divergence(tf.constant(c), tf.constant(r)).numpy()
    assert got[list(metadata.DIVERGENCE_COLUMNS).index("flush_to_zero")] == 0.5
    np.testing.assert_allclose(got, np_divergence(c, r, "float32"), rtol=1e-12)


def test_float32_vs_itself_is_exactly_zero():
    x = np.random.default_rng(1).normal(size=(17, 5)).astype(np.float32)
    got = numerics.divergence_metrics([tf.constant(x)], [tf.constant(x)]).numpy()[0]
    np.testing.assert_array_equal(got, [0, 1, 1, 0, 0, 0, 0, 0, 0])


def test_pairs_with_none_and_mixed_dtypes():
    r = np.random.default_rng(2).normal(size=30).astype(np.float32)
    c16 = r.astype(ml_dtypes.bfloat16)
    got = numerics.divergence_metrics(
        [None, tf.constant(c16)], [tf.constant(r), tf.constant(r)]
    ).numpy()
    assert np.isnan(got[0, :-1]).all() and got[0, -1] == 0
    np.testing.assert_allclose(got[1], np_divergence(c16, r, "bfloat16"), rtol=2e-6)
    # one correct rounding: ulp_rms well below 0.5
    assert 0.1 < got[1, 5] < 0.5


def test_xla_matches_eager():
    rng = np.random.default_rng(3)
    c, r = rng.normal(size=50).astype(np.float32), rng.normal(size=50).astype(np.float32)
    fn = tf.function(lambda a, b: numerics.divergence_metrics([a], [b], ["bfloat16"]), jit_compile=True)
    np.testing.assert_allclose(
        fn(tf.constant(c), tf.constant(r)).numpy(),
        numerics.divergence_metrics([c], [r], ["bfloat16"]).numpy(),
        rtol=1e-6,
    )


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32", "float64"])
def test_spacing(dtype):
    x = np.array([1.0, 1.5, 3.0, 0.0, 2.0**-130, 1e-300, 1e5, -7.0])
    np.testing.assert_array_equal(numerics.spacing(tf.constant(x), dtype).numpy(), np_spacing(x, dtype))
    if dtype in ("float16", "float32"):  # also NumPy's own spacing, where representable
        typed = x[[0, 1, 2, 3, 7]].astype(dtype)
        np.testing.assert_array_equal(
            numerics.spacing(tf.constant(typed.astype(np.float64)), dtype).numpy(),
            np.abs(np.spacing(np.abs(typed))).astype(np.float64),
        )


def test_exact_float64_keeps_subnormals():
    x = np.array([SUB, -SUB, 1.5, np.inf, -0.0, np.float32(2**-149)], np.float32)
    np.testing.assert_array_equal(numerics.exact_float64(tf.constant(x)).numpy(), x.astype(np.float64))


def test_loss_comparison():
    got = numerics.loss_comparison(tf.constant(2.0), tf.constant(2.5, tf.bfloat16)).numpy()
    np.testing.assert_allclose(got, [[2.0, 2.5, 0.5, 0.25]])
    assert numerics.loss_comparison(0.0, 0.0).numpy()[0, 3] == 0
    assert np.isinf(numerics.loss_comparison(0.0, 1.0).numpy()[0, 3])


def _np_update(before, after, grad=None):
    b = before.astype(np.float64).ravel()
    a = after.astype(np.float64).ravel()
    u = a - b
    rms = np.sqrt(np.mean(u * u))
    ratio = np.linalg.norm(u) / np.linalg.norm(b)
    if before.dtype == ml_dtypes.bfloat16:
        lost = np.mean((grad.astype(np.float64).ravel() != 0) & (a == b))
    else:
        b16 = before.astype(ml_dtypes.bfloat16).astype(np.float64).ravel()
        a16 = after.astype(ml_dtypes.bfloat16).astype(np.float64).ravel()
        lost = np.mean((a != b) & (a16 == b16))
    return np.array([rms, ratio, lost])


def test_update_statistics_float32_and_bfloat16_weights():
    rng = np.random.default_rng(4)
    w = rng.normal(size=100).astype(np.float32)
    step = np.where(np.arange(100) % 2 == 0, 1e-5, 1e-1).astype(np.float32) * np.sign(rng.normal(size=100)).astype(np.float32)
    step[:5] = 0.0
    w_after = w + step
    w16 = w.astype(ml_dtypes.bfloat16)
    w16_after = (w16.astype(np.float32) + step).astype(ml_dtypes.bfloat16)
    grad = -step
    got = numerics.update_statistics(
        [tf.constant(w), tf.constant(w16)], [tf.constant(w_after), tf.constant(w16_after)],
        [tf.constant(grad), tf.constant(grad)],
    ).numpy()
    np.testing.assert_allclose(got[0], _np_update(w, w_after), rtol=1e-6)
    np.testing.assert_allclose(got[1], _np_update(w16, w16_after, grad), rtol=1e-6)
    assert 0.3 < got[0, 2] < 0.5  # the 1e-5 steps are lost in bfloat16
    assert np.isnan(numerics.update_statistics([tf.zeros([0])], [tf.zeros([0])]).numpy()).all()


def test_update_ratio_of_zero_initialized_weights_is_one_not_inf():
    """Issue 13 item 7: a bias initialized to zero moves by its whole size at its
    first step: ||w_after - 0|| / max(||0||, ...) is 1 (it was inf); no step is 0."""
    after = np.array([0.01, -0.02, 0.0], np.float32)
    got = numerics.update_statistics(
        [tf.zeros([3]), tf.zeros([3])], [tf.constant(after), tf.zeros([3])]
    ).numpy()
    assert got[0, 1] == 1.0 and got[1, 1] == 0.0
    assert np.isfinite(got).all()

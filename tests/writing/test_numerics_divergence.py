"""Divergence, loss-comparison and update metrics vs independent NumPy float64."""

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from tests.support.divergence_reference import np_divergence, np_spacing
from tb_gradlens import metadata
from tb_gradlens import numerics
from tests.support.gradient_reference import backend  # noqa: F401 - the fixture: every backend

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
def test_every_metric_matches_numpy(case, dtype, backend):
    c, r = (np.asarray(a, np.float32) for a in CASES[case])
    got = numerics.divergence_metrics([tf.constant(c)], [tf.constant(r)], [dtype], backend=backend).numpy()
    assert got.shape == (1, len(metadata.DIVERGENCE_METRICS))
    want = np_divergence(c, r, dtype)
    np.testing.assert_allclose(got[0], want.astype(np.float32), rtol=2e-6, equal_nan=True)


def test_defined_edge_cases(backend):
    cols = {n: i for i, n in enumerate(metadata.DIVERGENCE_METRICS)}
    rows = numerics.divergence_metrics(
        [tf.zeros([3]), tf.ones([2]), tf.zeros([0]), tf.constant([np.nan])],
        [tf.zeros([3]), tf.zeros([2]), tf.zeros([0]), tf.constant([1.0])], backend=backend,
    ).numpy()
    both_zero, only_r_zero, empty, nonfinite = rows
    assert both_zero[cols["rel_l2"]] == 0 and both_zero[cols["cosine"]] == 1
    assert np.isinf(only_r_zero[cols["rel_l2"]]) and np.isinf(only_r_zero[cols["norm_ratio"]])
    assert np.isnan(empty[:-1]).all() and empty[cols["nonfinite"]] == 0
    assert np.isnan(nonfinite[:-1]).all() and nonfinite[cols["nonfinite"]] == 1


def test_flush_to_zero_sees_subnormals_on_cpu(backend):
    # r holds subnormals only; c flushed them.  A float cast would see r == 0.
    r = np.array([SUB, -SUB, 3 * SUB, 0.0], np.float32)
    c = np.array([0.0, 0.0, 3 * SUB, 0.0], np.float32)
    got = numerics.tensor_divergence(tf.constant(c), tf.constant(r), backend=backend).numpy()
    assert got[list(metadata.DIVERGENCE_METRICS).index("flush_to_zero")] == 0.5
    np.testing.assert_allclose(got, np_divergence(c, r, "float32"), rtol=1e-12)


def test_float32_vs_itself_is_exactly_zero():
    x = np.random.default_rng(1).normal(size=(17, 5)).astype(np.float32)
    got = numerics.divergence_metrics([tf.constant(x)], [tf.constant(x)]).numpy()[0]
    np.testing.assert_array_equal(got, [0, 1, 1, 0, 0, 0, 0, 0, 0])


def test_pairs_with_none_and_mixed_dtypes(backend):
    r = np.random.default_rng(2).normal(size=30).astype(np.float32)
    c16 = r.astype(ml_dtypes.bfloat16)
    got = numerics.divergence_metrics(
        [None, tf.constant(c16)], [tf.constant(r), tf.constant(r)], backend=backend
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


def test_update_statistics_float32_and_bfloat16_weights(backend):
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
        [tf.constant(grad), tf.constant(grad)], backend=backend,
    ).numpy()
    np.testing.assert_allclose(got[0], _np_update(w, w_after), rtol=1e-6)
    np.testing.assert_allclose(got[1], _np_update(w16, w16_after, grad), rtol=1e-6)
    assert 0.3 < got[0, 2] < 0.5  # the 1e-5 steps are lost in bfloat16
    assert np.isnan(numerics.update_statistics([tf.zeros([0])], [tf.zeros([0])], backend=backend).numpy()).all()


def _pair(n, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=n).astype(np.float32)
    c = (r * (1 + rng.normal(scale=1e-2, size=n))).astype(np.float32)
    c[::11] = 0.0  # flushed
    c[1::13] *= -1  # flips
    r[2::17] = 0.0
    if n > 100:
        c[n // 2], r[n // 3], c[n // 4] = np.nan, np.inf, np.float32(1e-40)
    return c.astype(dtype), r


def test_many_pairs_of_every_size_match_numpy(backend):
    """Pairs around the kernel's chunk (65,536) and the packing limits, with
    mixed candidate dtypes, a float64 reference and non-finite elements."""
    pairs = [_pair(n, n) for n in (1, 7, 513, 4095, 4096, 4096, 65537, 140_003)]
    pairs.append(_pair(9_000, 1, ml_dtypes.bfloat16))
    pairs.append((pairs[3][0], pairs[3][1].astype(np.float64)))
    dtypes = ["bfloat16"] * 8 + ["bfloat16", "float32"]
    got = numerics.divergence_metrics(
        [tf.constant(c) for c, _ in pairs], [tf.constant(r) for _, r in pairs], dtypes, backend=backend
    ).numpy()
    for i, (c, r) in enumerate(pairs):
        np.testing.assert_allclose(got[i], np_divergence(c, r, dtypes[i]).astype(np.float32), rtol=2e-6,
                                   equal_nan=True, err_msg="pair %d" % i)


def test_divergence_inside_tf_function_equals_eager(backend):
    c, r = _pair(70_000, 3)
    fn = tf.function(lambda a, b: numerics.divergence_metrics([a, b], [b, a], ["bfloat16"] * 2, backend=backend))
    np.testing.assert_array_equal(
        fn(tf.constant(c), tf.constant(r)).numpy(),
        numerics.divergence_metrics([c, r], [r, c], ["bfloat16"] * 2, backend=backend).numpy(),
    )


def _weights(n, seed, dtype=np.float32):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=n).astype(np.float32)
    step = (np.where(np.arange(n) % 3 == 0, 1e-6, 1e-2) * np.sign(rng.normal(size=n))).astype(np.float32)
    step[::7] = 0.0
    return w.astype(dtype), (w + step).astype(dtype), -step


def test_update_statistics_of_every_size_and_dtype_match_numpy(backend):
    cases = [_weights(n, n) for n in (1, 5, 4096, 4096, 65537, 140_001)]
    cases.append(_weights(3000, 1, ml_dtypes.bfloat16))
    cases.append(_weights(70_000, 2, np.float64))
    cases.append(_weights(900, 3, np.float16))
    before, after, grads = zip(*cases)
    got = numerics.update_statistics(
        [tf.constant(b) for b in before], [tf.constant(a) for a in after],
        [tf.constant(g) for g in grads], backend=backend,
    ).numpy()
    for i, (b, a, g) in enumerate(cases):
        np.testing.assert_allclose(got[i], _np_update(b, a, g), rtol=2e-6, err_msg="variable %d" % i)
    no_grads = numerics.update_statistics([tf.constant(before[6])], [tf.constant(after[6])], backend=backend).numpy()
    assert np.isnan(no_grads[0, 2]) and not np.isnan(no_grads[0, :2]).any()


def test_update_statistics_at_bfloat16_rounding_edges_match_numpy(backend):
    """Float32 weights whose low 16 bits sit at and around bfloat16's rounding
    ties (even and odd), signed zeros and subnormals, moved by a few float32
    ulps: every column is numpy's (the kernel's float32 path computes the
    lost count from the bits, branch-free, and the sums in vectors)."""
    rng = np.random.default_rng(11)
    n = 20_011  # several vector blocks and a tail
    high = rng.integers(0x3000, 0x4800, size=n, dtype=np.uint32) << 16
    low = rng.choice(np.array([0x0000, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x7FFE], np.uint32), size=n)
    sign = rng.integers(0, 2, size=n, dtype=np.uint32) << 31
    before = (sign | high | low).view(np.float32).copy()
    after = (before.view(np.uint32).astype(np.int64) + rng.integers(-3, 4, size=n)).astype(np.uint32).view(np.float32)
    before[:4] = [0.0, -0.0, np.float32(1e-40), -np.float32(1e-40)]
    after[:4] = [-0.0, 0.0, np.float32(1e-40), np.float32(2e-40)]
    got = numerics.update_statistics([tf.constant(before)], [tf.constant(after)], backend=backend).numpy()
    expected = _np_update(before, after)
    assert 0.1 < expected[2] < 0.9  # many moves lost in bfloat16, not all
    np.testing.assert_allclose(got[0], expected, rtol=1e-6)


def test_ops_split_many_tensors_into_several_calls(monkeypatch):
    """The kernel's ops take at most kernel.OP_INPUTS tensors each (TensorFlow
    sets up one op of 10^4 inputs slowly); the rows come back in order."""
    from tb_gradlens.numerics import kernel

    monkeypatch.setattr(kernel, "OP_INPUTS", 2)
    pairs = [_pair(n, n) for n in (3, 70, 5, 600, 9)]
    got = tf.function(lambda c, r: numerics.divergence_metrics(c, r, ["bfloat16"] * 5, backend="kernel"))(
        [tf.constant(c) for c, _ in pairs], [tf.constant(r) for _, r in pairs]).numpy()
    for i, (c, r) in enumerate(pairs):
        np.testing.assert_allclose(got[i], np_divergence(c, r, "bfloat16").astype(np.float32), rtol=2e-6,
                                   equal_nan=True)
    cases = [_weights(n, n) for n in (4, 9)] + [_weights(7, 1, ml_dtypes.bfloat16)] + [_weights(300, 2)]
    before, after, grads = zip(*cases)
    stats = tf.function(lambda b, a, g: numerics.update_statistics(b, a, g, backend="kernel"))(
        [tf.constant(b) for b in before], [tf.constant(a) for a in after], [tf.constant(g) for g in grads]).numpy()
    for i, (b, a, g) in enumerate(cases):
        np.testing.assert_allclose(stats[i], _np_update(b, a, g), rtol=2e-6)
    grads = [tf.constant(c) for c, _ in pairs] + [None]
    gstats, _ = tf.function(lambda g: numerics.gradient_statistics(g, [0] * 5 + [4], backend="kernel"))(grads)
    assert gstats.shape == (6, len(metadata.GRAD_STATS_COLUMNS))
    np.testing.assert_array_equal(gstats.numpy()[:, -2], [3, 70, 5, 600, 9, 4])


def test_update_ratio_of_zero_initialized_weights_is_one_not_inf(backend):
    """Issue 13 item 7: a bias initialized to zero moves by its whole size at its
    first step: ||w_after - 0|| / max(||0||, ...) is 1 (it was inf); no step is 0."""
    after = np.array([0.01, -0.02, 0.0], np.float32)
    got = numerics.update_statistics(
        [tf.zeros([3]), tf.zeros([3])], [tf.constant(after), tf.zeros([3])], backend=backend
    ).numpy()
    assert got[0, 1] == 1.0 and got[1, 1] == 0.0
    assert np.isfinite(got).all()


# ---------------------------------------------------------------------------
# Sparse gradients (an Embedding's): compared without densifying them.
# ---------------------------------------------------------------------------


def _embedding_pair():
    """A candidate and a reference IndexedSlices over a 40 x 3 table, as a
    bfloat16 and a float32 step would give them: duplicate rows, rows only
    one side names, a NaN, a negative index, a row that is zero on one side."""
    rng = np.random.default_rng(7)
    r_indices = np.array([3, 7, 3, 12, 30, 7, -2], np.int64)
    c_indices = np.array([3, 7, 3, 12, 30, 7, 19], np.int64)
    r_values = rng.normal(size=(7, 3)).astype(np.float32)
    c_values = (r_values * (1 + 1e-2 * rng.normal(size=(7, 3)))).astype(ml_dtypes.bfloat16).astype(np.float32)
    c_values[3] = 0.0
    c_values[4, 1] = np.nan
    shape = tf.constant([40, 3], tf.int64)
    return (tf.IndexedSlices(tf.constant(c_values), tf.constant(c_indices), shape),
            tf.IndexedSlices(tf.constant(r_values), tf.constant(r_indices), shape))


def test_indexed_slices_pairs_give_the_metrics_of_their_dense_gradients(backend):
    c, r = _embedding_pair()
    dense_c, dense_r = tf.convert_to_tensor(c).numpy(), tf.convert_to_tensor(r).numpy()
    want = np_divergence(dense_c.ravel(), dense_r.ravel(), "bfloat16").astype(np.float32)
    eager = numerics.divergence_metrics([c], [r], ["bfloat16"], backend=backend).numpy()[0]
    graph = tf.function(lambda: numerics.divergence_metrics([c], [r], ["bfloat16"], backend=backend))().numpy()[0]
    for got in (eager, graph):
        np.testing.assert_allclose(got, want, rtol=2e-6, equal_nan=True)
    cols = list(metadata.DIVERGENCE_METRICS)
    assert want[cols.index("nonfinite")] == 1 and want[cols.index("flush_to_zero")] > 0


def test_indexed_slices_pairs_are_compared_on_the_rows_they_name():
    c, r = _embedding_pair()

    @tf.function
    def compared():
        return numerics.divergence_metrics([c], [r], ["bfloat16"], backend="kernel")

    graph = compared.get_concrete_function().graph
    sums = [op.outputs[0].shape for op in graph.get_operations() if op.type == "UnsortedSegmentSum"]
    assert sums and all(shape[0] != 40 for shape in sums), sums  # the 6 rows named, not the 40-row table


def test_weights_kept_by_op_are_the_values_before_an_in_place_update_and_nothing_when_not_due():
    """``keep_if`` passes the weights read before an optimizer's in-place
    update on, without a conditional: when due the statistics are those of
    the weights before and after (NumPy's), when not the kept tensors are
    empty and nothing is reported; the update itself is unchanged."""
    if not numerics.kept_by_op_possible([tf.Variable(0.0)]):
        pytest.skip("the compiled kernel's ops are not available here")
    cases = [_weights(4096, 4), _weights(7, 5), _weights(3000, 6, ml_dtypes.bfloat16)]
    variables = [tf.Variable(b) for b, _, _ in cases]
    steps = [tf.constant(a.astype(np.float64) - b.astype(np.float64), v.dtype) for (b, a, _), v in zip(cases, variables)]
    grads = [tf.constant(g) for _, _, g in cases]

    @tf.function
    def step(due):
        kept = numerics.keep_if(due, [v.read_value() for v in variables])
        with tf.control_dependencies(kept[:1]):
            for v, s in zip(variables, steps):
                v.assign_add(s)
        rows = numerics.update_statistics(kept, [v.read_value() for v in variables], grads, when=due)
        return rows, [tf.size(k) for k in kept]

    rows, sizes = step(tf.constant(True))
    want = [_np_update(b, v.numpy(), g) for (b, _, g), v in zip(cases, variables)]
    np.testing.assert_allclose(rows.numpy(), want, rtol=2e-6)
    assert all((v.numpy() != b).any() for (b, _, _), v in zip(cases, variables))
    assert [int(n) for n in sizes] == [4096, 7, 3000]
    _, sizes = step(tf.constant(False))
    assert [int(n) for n in sizes] == [0, 0, 0]

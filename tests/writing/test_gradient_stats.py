"""Gradient statistics and log2 histograms against an independent float64 NumPy computation."""

import os
import subprocess
import sys
import zipfile

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens.numerics import backend as backends
from tb_gradlens.numerics import kernel
from tb_gradlens.numerics import packing
from tests.support.gradient_reference import assert_stats_match
from tests.support.gradient_reference import backend  # noqa: F401 - the fixture: every backend
from tests.support.gradient_reference import reference_histogram
from tests.support.gradient_reference import reference_statistics

COLUMNS = metadata.GRAD_STATS_COLUMNS

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
def _big(n, seed, scale=1e-3):
    return (np.random.default_rng(seed).normal(size=n) * scale).astype(np.float32)


def _with_rare_values(n, seed):
    """A large gradient (many kernel blocks) with subnormals, NaN, +-Inf and
    zeros far apart: the fast path must hand each to the exact one."""
    g = _big(n, seed)
    g[::97] = 0.0
    g[5] = np.float32(1e-40)
    g[n // 2] = -np.float32(2.0**-149)
    g[n - 3] = np.nan
    g[n // 3] = np.inf
    g[n // 3 + 1] = -np.inf
    g[7] = 3.0e38  # a value at the top of the range
    return g


# Sizes around the kernel's chunk (65,536 elements), block (2,048) and
# exact-path (512) limits, and the TF path's small-tensor groups (4,096).
SIZE_CASES = [0, 1, 3, 511, 512, 2047, 2049, 4095, 4096, 4097, 65535, 65536, 65537, 200_003]



@pytest.mark.parametrize("name", sorted(FIXED_CASES))
def test_statistics_of_fixed_gradients_match_numpy(name, backend):
    grad = FIXED_CASES[name]
    stats, hist = numerics.gradient_statistics([tf.constant(grad)], [np.size(grad)], backend=backend)
    assert stats.shape == (1, len(COLUMNS))
    assert hist.shape == (1, len(metadata.HISTOGRAM_COLUMNS))
    assert_stats_match(stats.numpy()[0], reference_statistics(grad))
    np.testing.assert_array_equal(hist.numpy()[0], reference_histogram(grad))


def test_every_size_and_rare_value_matches_numpy(backend):
    """One call with tensors of every size class, equal sizes sharing groups,
    and large tensors holding subnormals, NaN and Inf between ordinary values."""
    grads = [_big(n, seed=n) for n in SIZE_CASES]
    grads += [_big(4096, seed=1), _big(4096, seed=2), _big(3, seed=3)]  # shared groups
    grads += [_with_rare_values(70_000, 5), _with_rare_values(3_000, 6)]
    grads += [_with_rare_values(140_001, 7).astype(ml_dtypes.bfloat16)]
    half = _big(9_000, 8, scale=1.0).astype(np.float16)
    half[[3, 4, 5, 6]] = [np.float16(6e-8), np.inf, -np.inf, np.nan]  # a float16 subnormal
    grads += [half]
    stats, hist = numerics.gradient_statistics([tf.constant(g) for g in grads], backend=backend)
    for i, g in enumerate(grads):
        assert_stats_match(stats.numpy()[i], reference_statistics(g))
        np.testing.assert_array_equal(hist.numpy()[i], reference_histogram_fast(g))


def reference_histogram_fast(grad):
    """reference_histogram for large arrays, vectorized (np.frexp)."""
    a = np.asarray(grad).astype(np.float64).ravel()
    counts = np.zeros(len(metadata.HISTOGRAM_COLUMNS))
    finite = a[np.isfinite(a) & (a != 0)]
    _, e = np.frexp(np.abs(finite))
    np.add.at(counts, (e - 1) - metadata.MIN_EXPONENT, 1)
    counts[-4] = np.sum(a == 0)
    counts[-3] = np.sum(np.isposinf(a))
    counts[-2] = np.sum(np.isneginf(a))
    counts[-1] = np.sum(np.isnan(a))
    return counts


def test_none_gradient_is_recorded_not_skipped(backend):
    grads = [tf.constant([1.0, -1.0]), None, tf.constant([[0.0, 2.0]])]
    stats, hist = numerics.gradient_statistics(grads, [2, 12, 2], backend=backend)
    stats = stats.numpy()
    assert stats.shape == (3, len(COLUMNS))
    assert_stats_match(stats[0], reference_statistics(np.array([1.0, -1.0], np.float32)))
    assert_stats_match(stats[1], reference_statistics(None, 12))
    assert_stats_match(stats[2], reference_statistics(np.array([0.0, 2.0], np.float32)))
    np.testing.assert_array_equal(hist.numpy()[1], np.zeros(len(metadata.HISTOGRAM_COLUMNS)))
    only_none, _ = numerics.gradient_statistics([None, None], [3, 4], backend=backend)
    assert_stats_match(only_none[1], reference_statistics(None, 4))


def test_no_variables_gives_empty_records():
    stats, hist = numerics.gradient_statistics([])
    assert stats.shape == (0, len(COLUMNS)) and hist.shape == (0, len(metadata.HISTOGRAM_COLUMNS))


def test_many_variables_fused_match_per_variable_numpy(backend):
    grads = [RNG.normal(scale=10.0**-k, size=s).astype(np.float32)
             for k, s in enumerate([(1,), (7, 3), (100,), (0,), (31, 31), (5, 2, 2)])]
    grads[2][::7] = 0.0
    grads[4][3, 3] = np.nan
    stats, hist = numerics.gradient_statistics([tf.constant(g) for g in grads], backend=backend)
    for i, g in enumerate(grads):
        assert_stats_match(stats.numpy()[i], reference_statistics(g))
        np.testing.assert_array_equal(hist.numpy()[i], reference_histogram(g))


def test_eager_and_tf_function_compute_identical_values(backend):
    grads = [tf.constant(FIXED_CASES[k]) for k in ("random_normal", "denormals", "nan")]
    eager = numerics.gradient_statistics(grads, backend=backend)
    traced = tf.function(lambda g: numerics.gradient_statistics(g, backend=backend))(grads)
    for a, b in zip(eager, traced):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_nothing_is_computed_and_no_row_returned_when_not_asked(backend):
    """``when`` false: no pass (a sparse gradient out of range would raise)
    and 0 rows; true: the same rows as without ``when``."""
    bad = _slices(np.ones((2, 2), np.float32), [3, 8], [8, 2])
    grads = [tf.constant(FIXED_CASES["random_normal"]), None, bad]
    fn = tf.function(lambda g, w: numerics.gradient_statistics(g, [8481, 4, 16], backend=backend, when=w))
    stats, hist = fn(grads, tf.constant(False))
    assert stats.shape == (0, len(COLUMNS)) and hist.shape == (0, len(metadata.HISTOGRAM_COLUMNS))
    eager = numerics.gradient_statistics(grads, [8481, 4, 16], backend=backend, when=False)
    assert eager[0].shape[0] == 0
    good = [grads[0], None, _slices(np.ones((2, 2), np.float32), [3, 5], [8, 2])]
    with_when = fn(good, tf.constant(True))
    without = numerics.gradient_statistics(good, [8481, 4, 16], backend=backend)
    for a, b in zip(with_when, without):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_inside_an_xla_compiled_function_the_tf_ops_are_used():
    """numpy_function cannot compile: inside jit_compile the pass stays in TF."""
    grads = [tf.constant(FIXED_CASES["random_normal"]), tf.constant(FIXED_CASES["denormals"])]
    compiled = tf.function(lambda g: numerics.gradient_statistics(g), jit_compile=True)
    stats, hist = compiled(grads)
    for i, name in enumerate(("random_normal", "denormals")):
        assert_stats_match(stats.numpy()[i], reference_statistics(FIXED_CASES[name]))
        np.testing.assert_array_equal(hist.numpy()[i], reference_histogram(FIXED_CASES[name]))


def test_log2_bin_index_covers_every_float32_exponent():
    exponents = np.arange(metadata.MIN_EXPONENT, metadata.MAX_EXPONENT + 1)
    powers = np.ldexp(1.0, exponents).astype(np.float32)  # exact, subnormals included
    index = numerics.log2_bin_index(tf.constant(powers)).numpy()
    np.testing.assert_array_equal(index, exponents - metadata.MIN_EXPONENT)
    normal = exponents[(exponents >= -126) & (exponents < 127)]
    just_below_next = np.ldexp(1.75, normal).astype(np.float32)
    index = numerics.log2_bin_index(tf.constant(-just_below_next)).numpy()
    np.testing.assert_array_equal(index, normal - metadata.MIN_EXPONENT)


def test_every_float32_exponent_is_binned_by_each_backend(backend):
    exponents = np.arange(metadata.MIN_EXPONENT, metadata.MAX_EXPONENT + 1)
    grad = np.concatenate([np.ldexp(1.0, exponents), -np.ldexp(1.5, exponents[23:])]).astype(np.float32)
    _, hist = numerics.gradient_statistics([tf.constant(np.tile(grad, 3))], backend=backend)
    np.testing.assert_array_equal(hist.numpy()[0], reference_histogram_fast(np.tile(grad, 3)))


@pytest.mark.slow
def test_counts_stay_exact_beyond_float32_integers(backend):
    """A variable of 2^24 + 3 elements: float32 counting would stall at 2^24."""
    n = 2**24 + 3
    grad = np.zeros(n, np.float32)
    grad[-1] = 1.0
    stats, _ = numerics.gradient_statistics([tf.constant(grad)], backend=backend)
    row = dict(zip(COLUMNS, stats.numpy()[0].tolist()))
    assert row["zero_fraction"] == np.float32((n - 1) / n)
    assert row["count"] == np.float32(n)
    assert row["mean"] == np.float32(1.0 / n)


def test_the_kernel_keeps_subnormals_in_value_statistics():
    """TensorFlow's CPU kernels read subnormal inputs as 0; the compiled
    kernel sums them exactly, as NumPy does."""
    grad = np.array([1e-40, 3e-40, -2e-41], np.float32)
    stats, _ = numerics.gradient_statistics([tf.constant(grad)], backend="kernel")
    row = dict(zip(COLUMNS, stats.numpy()[0].tolist()))
    wide = grad.astype(np.float64)
    assert row["min"] == grad.min() and row["max"] == grad.max()
    assert row["mean"] == np.float32(wide.mean())


# ---------------------------------------------------------------------------
# Sparse gradients: as TensorFlow densifies them (issue 16, item 8).
# ---------------------------------------------------------------------------


def _slices(values, indices, dense_shape):
    return tf.IndexedSlices(tf.constant(values, tf.float32), tf.constant(indices, tf.int64),
                            None if dense_shape is None else tf.constant(dense_shape, tf.int64))


def test_negative_indices_are_dropped_as_tensorflow_drops_them(backend):
    values = np.arange(1, 9, dtype=np.float32).reshape(4, 2)
    slices = _slices(values, [1, -1, 1, -3], [8, 2])
    dense = tf.convert_to_tensor(slices).numpy()  # what TensorFlow makes of it
    stats, hist = numerics.gradient_statistics([slices], [16], backend=backend)
    assert_stats_match(stats.numpy()[0], reference_statistics(dense))
    np.testing.assert_array_equal(hist.numpy()[0], reference_histogram(dense))
    assert stats.numpy()[0][COLUMNS.index("count")] == 16


@pytest.mark.parametrize("dense_shape", [[8, 2], None], ids=["dense_shape", "size_only"])
def test_out_of_range_indices_are_dropped_as_xla_applies_them_and_counted(backend, dense_shape):
    """An index past the table (an input id out of range) never raises in
    the lens: its row is dropped, as XLA drops it when it densifies or
    applies the gradient (TensorFlow's CPU kernels raise instead), and the
    indices are counted for the gradient_indices record."""
    values = np.array([[1.0, 2.0], [4.0, -8.0], [0.5, 0.5]], np.float32)
    slices = _slices(values, [3, 8, 3], dense_shape)
    dense = np.zeros((8, 2), np.float32)
    dense[3] = values[0] + values[2]  # NumPy: row 8 of 8 is not in the table
    if dense_shape is not None:
        with pytest.raises(tf.errors.InvalidArgumentError):
            tf.convert_to_tensor(slices)  # TensorFlow's CPU kernel refuses row 8 of 8
        xla_dense = tf.function(tf.convert_to_tensor, jit_compile=True)(slices)
        np.testing.assert_array_equal(xla_dense.numpy(), dense)  # XLA drops it
    stats, hist = numerics.gradient_statistics([slices], [16], backend=backend)
    assert_stats_match(stats.numpy()[0], reference_statistics(dense))
    np.testing.assert_array_equal(hist.numpy()[0], reference_histogram(dense))
    traced = tf.function(lambda s: numerics.gradient_statistics([s], [16], backend=backend)[0])
    assert_stats_match(traced(slices).numpy()[0], reference_statistics(dense))
    np.testing.assert_array_equal(numerics.gradient_index_counts([None, slices], [4, 16]).numpy(), [[3, 1, 0]])


def test_indexed_slices_in_range_equal_tensorflow_densified(backend):
    values = np.random.default_rng(9).normal(size=(5, 3)).astype(np.float32)
    slices = _slices(values, [0, 6, 0, 2, 6], [7, 3])
    dense = tf.convert_to_tensor(slices).numpy()
    stats, hist = numerics.gradient_statistics([slices, tf.constant(values)], [21, 15], backend=backend)
    assert_stats_match(stats.numpy()[0], reference_statistics(dense))
    np.testing.assert_array_equal(hist.numpy()[0], reference_histogram(dense))
    assert_stats_match(stats.numpy()[1], reference_statistics(values))


def test_sparse_rows_never_reach_the_xla_pass(monkeypatch):
    """A sparse gradient's unique rows change every step: XLA would compile
    a pass per step.  They run as plain kernels; only static shapes are
    compiled."""
    shapes = []
    compiled = backends._compiled

    def recording(group_fn):
        run = compiled(group_fn)

        def call(args_list, backend):
            shapes.extend(a.shape for args in args_list for a in args if isinstance(a, tf.Tensor))
            return run(args_list, backend)

        return call

    monkeypatch.setattr(backends, "_compiled", recording)
    dense = tf.constant(_big(5000, 3))
    step = tf.function(lambda s: numerics.gradient_statistics([dense, s], [5000, 40], backend="xla"))
    for k in (2, 5):
        values = np.random.default_rng(k).normal(size=(k, 4)).astype(np.float32)
        slices = _slices(values, np.arange(k), [10, 4])
        stats, _ = step(slices)
        assert_stats_match(stats.numpy()[0], reference_statistics(dense.numpy()))
        assert_stats_match(stats.numpy()[1], reference_statistics(tf.convert_to_tensor(slices).numpy()))
    assert shapes and all(s.is_fully_defined() for s in shapes), shapes


# ---------------------------------------------------------------------------
# Backends: choice, fallback, the packing of many tensors.
# ---------------------------------------------------------------------------


def test_default_backend_is_the_kernel_on_cpu_when_it_builds():
    """This machine has C and C++ compilers: the kernel builds, as ops."""
    assert kernel.library() is not None and kernel.ops() is not None, kernel.status()
    assert kernel.status().startswith("compiled kernel as TensorFlow ops")
    assert backends.choose() == "kernel"
    assert backends.choose(use_xla=True) == "xla" and backends.choose(use_xla=False) == "tf"
    with pytest.raises(ValueError, match="backend must be one of"):
        backends.choose("cuda")


def _op_types(function, *args):
    """Every op type of the traced ``function`` (its nested functions included)."""
    graph = function.get_concrete_function(*args).graph.as_graph_def()
    return {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}


@pytest.mark.slow
def test_with_a_gpu_the_compiled_cpu_kernel_is_never_in_the_step(monkeypatch):
    """GPU users: the compiled kernel reads host memory, so where a GPU
    holds the gradients the pass must be TensorFlow ops (the "xla" path,
    whose cost BENCHMARKS.md measures on CPU beside the kernel's).  Proxy
    for a machine with a GPU: the device list says one is there."""
    grads = [tf.constant(FIXED_CASES["random_normal"]), tf.constant(FIXED_CASES["denormals"])]
    function = tf.function(lambda g: numerics.gradient_statistics(g))
    kernel_ops = {"GradlensGradientStatistics", "PyFunc", "EagerPyFunc"}
    assert _op_types(function, grads) & kernel_ops  # on this CPU: the kernel
    monkeypatch.setattr(backends, "_gpu", [True])
    assert backends.choose() == "xla"
    function = tf.function(lambda g: numerics.gradient_statistics(g))
    assert not _op_types(function, grads) & kernel_ops
    stats, hist = function(grads)
    for i, name in enumerate(("random_normal", "denormals")):
        assert_stats_match(stats.numpy()[i], reference_statistics(FIXED_CASES[name]))


def test_without_a_compiler_the_tensorflow_path_computes_the_same(tmp_path, monkeypatch):
    grads = [tf.constant(FIXED_CASES[k]) for k in ("random_normal", "denormals", "nan")]
    with_kernel = numerics.gradient_statistics(grads)
    monkeypatch.setenv("TB_GRADLENS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    kernel.reset()
    try:
        assert kernel.library() is None
        assert "no compiled kernel" in kernel.status()
        assert backends.choose() == "xla"
        with pytest.raises(RuntimeError, match="not available"):
            numerics.gradient_statistics(grads, backend="kernel")
        without = numerics.gradient_statistics(grads)
    finally:
        monkeypatch.undo()
        kernel.reset()
    for i, name in enumerate(("random_normal", "denormals", "nan")):
        assert_stats_match(without[0].numpy()[i], reference_statistics(FIXED_CASES[name]))
        np.testing.assert_array_equal(without[1].numpy()[i], with_kernel[1].numpy()[i])


def test_kernel_can_be_disabled_by_the_environment(monkeypatch):
    monkeypatch.setenv(kernel.ENV_KERNEL, "0")
    kernel.reset()
    try:
        assert kernel.library() is None and "disabled" in kernel.status()
    finally:
        monkeypatch.undo()
        kernel.reset()


@pytest.mark.slow
def test_the_wheel_ships_the_kernel_source_and_it_builds(tmp_path):
    """pip install needs no compiler (a pure-Python wheel); the C source
    ships inside it and compiles on first use where a compiler exists."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path), root], check=True, timeout=600, capture_output=True)
    (wheel,) = tmp_path.glob("tb_gradlens-*.whl")
    assert wheel.name.endswith("-py3-none-any.whl")  # nothing compiled at install
    with zipfile.ZipFile(wheel) as z:
        for path in (kernel.SOURCE, kernel.OP_SOURCE):
            with open(path, "rb") as f:
                assert z.read("tb_gradlens/numerics/" + os.path.basename(path)) == f.read()
    assert os.path.exists(kernel.build(str(tmp_path / "built")))


@pytest.mark.slow
def test_two_thousand_tiny_variables_in_one_call(backend):
    """Many small tensors of many sizes (the packing's padded groups, the
    kernel's one-chunk rows), some None, all against NumPy."""
    rng = np.random.default_rng(11)
    sizes = rng.integers(0, 40, 2000)
    grads = [rng.normal(size=n).astype(np.float32) if i % 97 else None for i, n in enumerate(sizes)]
    grads[5] = np.array([np.nan, 1e-40, 0.0], np.float32)
    fn = tf.function(lambda g: numerics.gradient_statistics(g, [int(n) for n in sizes], backend=backend))
    stats, hist = fn([None if g is None else tf.constant(g) for g in grads])
    for i in list(range(0, 2000, 37)) + [5, 97]:
        g = grads[i]
        assert_stats_match(stats.numpy()[i], reference_statistics(g, int(sizes[i])))
        np.testing.assert_array_equal(hist.numpy()[i], reference_histogram(g))


def test_many_tiny_variables_pack_into_few_groups():
    sizes = [1, 2, 3, 5, 8, 13, 4096, 4096, 5000] * 50
    tensors = [tf.zeros([n]) for n in sizes]
    groups = packing.pack([tensors], [float("nan")])
    assert len(groups) <= 16
    assert sorted(i for g in groups for i in g.rows) == list(range(len(sizes)))


def test_float32_bit_layout_comes_from_the_format_table():
    assert float_formats.bias("float32") == 127 and float_formats.exponent_bits("float32") == 8
    assert float_formats.total_bits("bfloat16") == 16 and float_formats.total_bits("float64") == 64
    assert float_formats.exponent_bits("float16") == 5
    assert numerics.bits.SUBNORMAL_BINS == 23

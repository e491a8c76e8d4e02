"""Logging never breaks training: sparse gradients, odd dtypes, empty and
reshaped tensors, failing writers, and the strict mode that raises instead.

Every statistic is compared with an independent float64 NumPy computation
(tests/support/gradient_reference.py: reference_statistics / reference_histogram); sparse
gradients with the table densified by NumPy (np.add.at), never by TF.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support.readback import only_tag
from tests.support.readback import read_records
from tests.support.gradient_reference import assert_stats_match
from tests.support.gradient_reference import reference_histogram
from tests.support.gradient_reference import reference_statistics
from tb_gradlens import compare
from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import safety
from tb_gradlens import summary
from tb_gradlens.keras import GradLens
from tb_gradlens.keras import GradLensCallback

COLUMNS = metadata.GRAD_STATS_COLUMNS


pytestmark = [pytest.mark.usefixtures("fresh_safety"), pytest.mark.slow]  # conftest.py; trains Keras models


def numpy_dense(values, indices, shape):
    """The dense gradient an IndexedSlices stands for, built by NumPy: rows
    named twice are summed (in float32, as TF sums them), others are 0."""
    dense = np.zeros(shape, np.float32)
    np.add.at(dense, np.asarray(indices), np.asarray(values, np.float32))
    return dense


def sparse_case():
    """An IndexedSlices over a 50 x 4 table: duplicates, a NaN, an Inf, a zero row."""
    rng = np.random.default_rng(7)
    values = rng.normal(size=(6, 4)).astype(np.float32)
    values[2, 1] = np.nan
    values[4, 3] = np.inf
    values[5] = 0.0
    indices = np.array([3, 17, 3, 49, 0, 17], np.int64)  # 3 and 17 twice
    return values, indices, (50, 4)


@pytest.mark.parametrize("use_xla", [True, False])
def test_indexed_slices_statistics_equal_numpy_densified(use_xla):
    values, indices, shape = sparse_case()
    slices = tf.IndexedSlices(tf.constant(values), tf.constant(indices), tf.constant(shape, tf.int64))
    dense_other = np.array([[1.5, -0.0], [np.nan, 2.0**-140]], np.float32)
    stats, hist = numerics.gradient_statistics(
        [slices, tf.constant(dense_other), None], [0, 0, 9], use_xla=use_xla
    )
    dense = numpy_dense(values, indices, shape)
    assert_stats_match(stats[0], reference_statistics(dense))
    np.testing.assert_array_equal(hist[0], reference_histogram(dense))
    assert_stats_match(stats[1], reference_statistics(dense_other))
    assert_stats_match(stats[2], reference_statistics(None, 9))
    # Exact counts: 50*4 elements; zeros = the 46 rows not named.
    assert stats[0][COLUMNS.index("count")] == 200
    assert stats[0][COLUMNS.index("zero_fraction")] == np.float32((200 - 4 * 4) / 200)


def test_indexed_slices_of_a_huge_table_are_never_densified():
    """A 10^8 x 64 float32 table (25.6 GB densified): the statistics come from
    the 3 rows named, in milliseconds and without the memory."""
    rows = np.array([[1.0, -2.0] * 32, [0.5] * 64, [1.0, -2.0] * 32], np.float32)
    indices = np.array([5, 99_999_999, 5], np.int64)
    slices = tf.IndexedSlices(tf.constant(rows), tf.constant(indices), tf.constant([10**8, 64], tf.int64))
    stats, hist = numerics.gradient_statistics([slices])
    total = 64 * 10**8
    summed = np.concatenate([rows[0] + rows[2], rows[1]]).astype(np.float64)  # the 2 unique rows
    row = dict(zip(COLUMNS, stats.numpy()[0].astype(np.float64)))
    assert row["count"] == np.float32(total)
    np.testing.assert_allclose(row["zero_fraction"], (total - 128) / total, rtol=1e-7)
    np.testing.assert_allclose(row["l2_norm"], np.sqrt(np.sum(summed**2)), rtol=1e-6)
    np.testing.assert_allclose(row["mean"], summed.sum() / total, rtol=1e-6)
    np.testing.assert_allclose(row["rms"], np.sqrt(np.sum(summed**2) / total), rtol=1e-6)
    assert (row["min"], row["max"], row["max_abs"]) == (-4.0, 2.0, 4.0)
    assert hist.numpy()[0][len(metadata.HISTOGRAM_COLUMNS) - 4] == np.float32(total - 128)


def test_embedding_gradient_from_a_tape_logged_sparse_in_tf_function(tmp_path):
    """A real embedding gradient (tf.IndexedSlices from the tape) logged inside
    tf.function by GradLens; read back and compared with NumPy's densified gradient."""
    table = tf.Variable(np.random.default_rng(3).normal(size=(1000, 8)).astype(np.float32), name="emb/table")
    ids = np.array([[4, 4, 900], [17, 4, 0]], np.int32)
    weights = np.random.default_rng(4).normal(size=(2, 3, 8)).astype(np.float32)
    lens = GradLens(str(tmp_path / "run"), gradient_every=1)

    @tf.function
    def step(s):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.nn.embedding_lookup(table, ids) * weights)
        grad = tape.gradient(loss, table)
        lens.log_gradients([grad], [table], s)
        return grad.values, grad.indices

    values, indices = step(tf.constant(0, tf.int64))
    assert isinstance(values, tf.Tensor) and values.shape == (6, 8)  # it was sparse
    lens.flush()
    record, data = only_tag(read_records(str(tmp_path)), "run", metadata.GRAD_STATS)
    dense = numpy_dense(weights.reshape(6, 8), ids.ravel(), (1000, 8))
    assert record.rows == ("emb/table",)
    assert_stats_match(data[0].numpy[0], reference_statistics(dense))
    _, hist_data = only_tag(read_records(str(tmp_path)), "run", metadata.GRAD_HISTOGRAM)
    np.testing.assert_array_equal(hist_data[0].numpy[0], reference_histogram(dense))


def test_integer_boolean_complex_variables_are_skipped_with_a_reason(tmp_path):
    variables = [
        tf.Variable(np.ones(3, np.float32), name="w"),
        tf.Variable(np.ones(2, np.int32), name="counter"),
        tf.Variable(np.ones(2, np.bool_), name="mask"),
        tf.Variable(np.ones(2, np.complex64), name="phase"),
    ]
    grads = [
        tf.constant([1.0, -2.0, 0.0]),
        tf.constant([1, 2], tf.int32),
        None,
        tf.constant([1 + 2j, 0j], tf.complex64),
    ]
    writer = tf.summary.create_file_writer(str(tmp_path / "run"))
    with writer.as_default(), warnings.catch_warnings():
        warnings.simplefilter("error")  # skipping is recorded, not a failure
        assert bool(summary.gradients(grads, variables, step=0))
    writer.close()
    record, data = only_tag(read_records(str(tmp_path)), "run", metadata.GRAD_STATS)
    assert record.rows == ("w",)
    skipped = {s["row"]: s for s in record.extras["skipped"]}
    assert sorted(skipped) == ["counter", "mask", "phase"]
    assert skipped["counter"]["dtype"] == "int32" and "integer" in skipped["counter"]["reason"]
    assert skipped["mask"]["dtype"] == "bool"
    assert skipped["phase"]["dtype"] == "complex64" and "complex" in skipped["phase"]["reason"]
    assert_stats_match(data[0].numpy[0], reference_statistics(np.array([1.0, -2.0, 0.0])))


def test_empty_gradients_and_shapes_that_change_between_steps(tmp_path):
    """Empty tensors give count 0 and NaN statistics; a gradient whose shape
    changes from step to step (eagerly, and in one tf.function trace with an
    unknown dimension) is summarized at its shape of the step."""
    variables = [tf.Variable(np.zeros(0, np.float32), name="empty"), tf.Variable([0.0], name="ragged", shape=tf.TensorShape(None))]
    writer = tf.summary.create_file_writer(str(tmp_path / "run"))
    sizes = [1, 4, 0, 7]
    grads_at = [np.arange(n, dtype=np.float32) - 1.5 for n in sizes]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32), tf.TensorSpec([], tf.int64)])
    def traced(g, step):
        return summary.gradients([tf.zeros([0]), g], variables, step=step, histogram=False)

    with writer.as_default():
        for step, g in enumerate(grads_at):
            if step % 2:
                assert bool(traced(tf.constant(g), tf.constant(step, tf.int64)))
            else:
                assert bool(summary.gradients([tf.zeros([0]), tf.constant(g)], variables, step=step, histogram=False))
    writer.close()
    record, data = only_tag(read_records(str(tmp_path)), "run", metadata.GRAD_STATS)
    assert [d.step for d in data] == [0, 1, 2, 3]
    for d, g in zip(data, grads_at):
        assert_stats_match(d.numpy[0], reference_statistics(np.zeros(0)))
        assert_stats_match(d.numpy[1], reference_statistics(g))


def test_closed_writer_warns_once_and_returns_false_strict_raises(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path / "run"))
    variable = tf.Variable([1.0, 2.0], name="w")
    with writer.as_default():
        assert bool(summary.gradients([tf.constant([1.0, 0.0])], [variable], step=0))
        writer.close()
        with pytest.warns(safety.GradLensWarning, match="summary.gradients failed") as caught:
            results = [summary.gradients([tf.constant([1.0, 0.0])], [variable], step=s) for s in (1, 2, 3)]
        assert [bool(r) for r in results] == [False, False, False]
        assert len([w for w in caught if issubclass(w.category, safety.GradLensWarning)]) == 1
        assert safety.reported() == {"tb_gradlens.summary.gradients": 3}
        with safety.strict(), pytest.raises((RuntimeError, tf.errors.NotFoundError)):
            summary.gradients([tf.constant([1.0, 0.0])], [variable], step=4)
    record, data = only_tag(read_records(str(tmp_path)), "run", metadata.GRAD_STATS)
    assert [d.step for d in data] == [0]  # what was written before is intact


def test_strict_mode_from_the_environment(monkeypatch):
    monkeypatch.setenv(safety.ENV_STRICT, "1")
    assert safety.strict_mode()
    with pytest.raises(ZeroDivisionError):
        safety.call("cause", lambda: 1 / 0)
    monkeypatch.setenv(safety.ENV_STRICT, "0")
    with pytest.warns(safety.GradLensWarning, match="cause failed"):
        assert safety.call("cause", lambda: 1 / 0, default="skipped") == "skipped"


def test_usage_errors_still_raise():
    variable = tf.Variable([1.0])
    with pytest.raises(ValueError, match="1 gradients for 2 variables"):
        summary.gradients([None], [variable, variable], step=0)


def _disk_full(*args, **kwargs):
    raise tf.errors.ResourceExhaustedError(None, None, "No space left on device")


def _fit(model, x, y, callbacks):
    return model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=callbacks).history["loss"]


def _embedding_model(seed=5):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([
        keras.Input((3,), dtype="int32"),
        keras.layers.Embedding(200, 4, name="emb"),
        keras.layers.Flatten(),
        keras.layers.Dense(1, name="out"),
    ])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def _embedding_data():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 20, size=(16, 3)).astype(np.int32)  # rows 0..19 of 200
    return x, rng.normal(size=(16, 1)).astype(np.float32)


def test_fit_with_a_failing_disk_trains_exactly_as_without_the_lens(tmp_path, monkeypatch):
    x, y = _embedding_data()
    plain = _fit(_embedding_model(), x, y, [])
    monkeypatch.setattr(tf.summary, "write", _disk_full)  # the eager writes (status, dtype map)
    # The step's own records are queued by WriteSummary ops in the step and
    # reach the disk at the flush after each call: the flush fails.
    monkeypatch.setattr(tf.raw_ops, "FlushSummaryWriter", _disk_full)
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=1, comparisons=["float32"])
    with pytest.warns(safety.GradLensWarning, match="No space left on device"):
        lensed = _fit(_embedding_model(), x, y, [callback])
    assert lensed == plain  # same losses, bit for bit
    reported = safety.reported()
    assert reported.get("tb_gradlens event file writer", 0) >= 1  # the step's records
    assert reported.get("tb_gradlens.summary.lens_status", 0) >= 1  # the eager writes
    assert "train_step" not in callback.model.__dict__  # restored


def test_fit_logs_a_sparse_embedding_gradient(tmp_path):
    x, y = _embedding_data()
    model = _embedding_model()
    _fit(model, x, y, [GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=0)])
    record, data = only_tag(read_records(str(tmp_path)), "run", metadata.GRAD_STATS)
    emb = [i for i, r in enumerate(record.rows) if r.endswith("emb/embeddings")][0]
    assert record.extras["gradient_dtypes"][emb] == "float32"
    for d, start in zip(data, (0, 8)):
        row = dict(zip(COLUMNS, d.numpy[emb]))
        used = len(np.unique(x[start : start + 8]))
        assert row["count"] == 800 and row["nan_count"] == 0
        # Rows not in the batch are exact zeros; the used rows' gradients are not.
        assert row["zero_fraction"] == np.float32((800 - used * 4) / 800)


def test_fit_survives_a_comparison_that_cannot_be_traced_and_setup_failure(tmp_path, monkeypatch):
    x, y = _embedding_data()
    plain = _fit(_embedding_model(), x, y, [])

    def broken(*args, **kwargs):
        raise TypeError("cannot compare this model")

    monkeypatch.setattr(compare, "compare_keras", broken)
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=1, comparisons=["float32"])
    with pytest.warns(safety.GradLensWarning, match="cannot compare this model"):
        assert _fit(_embedding_model(), x, y, [callback]) == plain
    record, data = only_tag(read_records(str(tmp_path)), "run", metadata.GRAD_STATS)
    assert [d.step for d in data] == [0, 1]  # gradients still logged
    # A callback that cannot even set up (invalid variables regex): training goes on ...
    with pytest.warns(safety.GradLensWarning, match="setup"):
        assert _fit(_embedding_model(), x, y, [GradLensCallback(str(tmp_path / "bad"), variables="(")]) == plain
    # ... and strict mode raises it.
    with safety.strict(), pytest.raises(Exception, match="missing \\)"):
        _fit(_embedding_model(), x, y, [GradLensCallback(str(tmp_path / "bad"), variables="(")])


def test_custom_loop_logging_with_failing_writes_returns_false(tmp_path, monkeypatch):
    variable = tf.Variable([1.0, -1.0], name="w")
    lens = GradLens(str(tmp_path / "run"), gradient_every=1, compare_every=1)
    monkeypatch.setattr(tf.summary, "write", _disk_full)

    def loss_fn(weights, dtype):
        return tf.reduce_sum(tf.cast(weights[0], dtype) ** 2)

    with pytest.warns(safety.GradLensWarning):
        lens.log_gradients([tf.constant([1.0, 2.0])], [variable], 0)
        lens.log_updates([variable], [variable], [variable], 0)
        lens.compare(loss_fn, [variable], 0)
        lens.log_dtypes(None, None, 0)  # not a model: fails inside, reported
    assert safety.reported() == {
        "tb_gradlens.summary.gradients": 1,
        "tb_gradlens.summary.update_stats": 1,
        "tb_gradlens.summary.divergence": 1,  # Comparison.write's records
        "tb_gradlens.summary.loss_comparison": 1,
        "tb_gradlens.summary.lens_status": 1,  # what it was asked to log
        "tb_gradlens.keras.GradLens.log_dtypes": 1,
    }
    with safety.strict(), pytest.raises(tf.errors.ResourceExhaustedError):
        lens.log_gradients([tf.constant([1.0, 2.0])], [variable], 1)


# ---------------------------------------------------------------------------
# Issue 16 item 3: never lose a logged step.
# ---------------------------------------------------------------------------


def _nan_at_step(step, steps=10, batch=4, seed=0):
    """Regression data whose batch ``step`` holds a NaN input: the loss and
    every gradient are NaN from that optimizer step on."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(steps * batch, 3)).astype(np.float32)
    y = rng.normal(size=(steps * batch, 1)).astype(np.float32)
    x[step * batch] = np.nan
    return x, y


def _dense_model(steps_per_execution=1):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="hidden"),
                              keras.layers.Dense(1, name="out")])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", steps_per_execution=steps_per_execution)
    return model


def _first_nan_step(logdir):
    record, data = only_tag(read_records(logdir), "run", metadata.GRAD_STATS)
    nan = COLUMNS.index("nan_count")
    return [d.step for d in data], next(d.step for d in data if d.numpy[:, nan].sum() > 0)


def test_steps_per_execution_writes_every_logged_step(tmp_path):
    x, y = _nan_at_step(5, steps=40)
    model = _dense_model(steps_per_execution=4)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False,
              callbacks=[GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=0)])
    steps, first_nan = _first_nan_step(str(tmp_path))
    assert steps == list(range(40))
    assert first_nan == 5


class _StopAt(keras.callbacks.Callback):
    """Listed before the lens: acts at the end of batch ``at``."""

    def __init__(self, at, action):
        super().__init__()
        self.at, self.action = at, action

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.at:
            if self.action == "stop":
                self.model.stop_training = True
            elif self.action == "interrupt":
                raise KeyboardInterrupt
            else:
                raise RuntimeError("NaN loss: stopping")


@pytest.mark.parametrize("action", ["raise", "interrupt", "stop"])
@pytest.mark.parametrize("spe", [1, 4])
def test_buffered_records_reach_the_disk_when_training_stops(tmp_path, action, spe):
    """A callback listed before the lens raises (or stops training) at the
    NaN step: the NaN step is on disk."""
    x, y = _nan_at_step(5, steps=12)
    model = _dense_model(steps_per_execution=spe)
    lens = GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=0)
    stop_batch = 5 if spe == 1 else 7  # with spe=4 Keras reports the last step of an execution
    try:
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False, callbacks=[_StopAt(stop_batch, action), lens])
    except (RuntimeError, KeyboardInterrupt):
        assert action != "stop"
    steps, first_nan = _first_nan_step(str(tmp_path))
    assert first_nan == 5
    assert steps[-1] >= 5
    # Nothing of the lens is left on the model, although on_train_end never ran.
    assert not {"train_step", "compute_loss"} & set(model.__dict__) and "apply" not in model.optimizer.__dict__
    plain = model.train_function
    model.fit(x[:8], y[:8], batch_size=4, epochs=1, verbose=0)
    assert model.train_function is plain


def test_records_before_a_failing_step_reach_the_disk(tmp_path):
    """The step itself raises (a numeric check in the model) at step 5; with
    steps_per_execution=4, step 4 ran in the same execution and is written."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 3)).astype(np.float32)
    y = rng.normal(size=(48, 1)).astype(np.float32)
    x[20] = np.nan

    class Check(keras.layers.Layer):
        def call(self, inputs):
            return tf.debugging.check_numerics(inputs, "input")

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), Check(), keras.layers.Dense(1, name="out")])
    model.compile(optimizer="sgd", loss="mse", steps_per_execution=4)
    with pytest.raises(tf.errors.InvalidArgumentError):
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False,
                  callbacks=[GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=0)])
    record, data = only_tag(read_records(str(tmp_path)), "run", metadata.GRAD_STATS)
    assert [d.step for d in data] == [0, 1, 2, 3, 4]


def test_fit_survives_statistics_that_cannot_be_built_outside_a_conditional(tmp_path, monkeypatch):
    """The gradient statistics, the kept weights and the update statistics
    are built as ops outside any conditional where the kernel's ops run: a
    failure to build them is reported (a GradLensWarning, the lens status)
    and training goes on exactly as without the lens; strict mode raises."""
    from tb_gradlens import numerics

    x, y = _embedding_data()
    plain = _fit(_embedding_model(), x, y, [])

    def broken(*args, **kwargs):
        raise TypeError("cannot build this part")

    for part in ("gradient_statistics", "keep_if", "update_statistics"):
        with monkeypatch.context() as m:
            m.setattr(numerics, part, broken)
            callback = GradLensCallback(str(tmp_path / part), gradient_every=1, update_every=1, compare_every=0)
            with pytest.warns(safety.GradLensWarning, match="cannot build this part"):
                assert _fit(_embedding_model(), x, y, [callback]) == plain, part
            with safety.strict(), pytest.raises(TypeError, match="cannot build this part"):
                _fit(_embedding_model(), x, y, [GradLensCallback(str(tmp_path / (part + "_strict")),
                                                                 gradient_every=1, update_every=1, compare_every=0)])

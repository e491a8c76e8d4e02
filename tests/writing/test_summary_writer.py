"""tb_gradlens.summary.gradients: eager and tf.function, recording rules, read back in full."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support import readback
from tests.support.gradient_reference import assert_stats_match
from tests.support.gradient_reference import reference_histogram
from tests.support.gradient_reference import reference_statistics
from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import summary


def _variables():
    return [
        tf.Variable(np.ones((3, 2), np.float32), name="layer/kernel"),
        tf.Variable(np.zeros(2, np.float32), name="layer/bias"),
        tf.Variable(np.ones(4, np.float32), name="frozen/kernel"),
    ]


def _grads(step):
    rng = np.random.default_rng(step)
    return [
        tf.constant(rng.normal(size=(3, 2)).astype(np.float32)),
        tf.constant(np.array([0.0, np.nan if step == 3 else 1.0], np.float32)),
        None,
    ]


def _write_steps(logdir, fn, steps=5):
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        for step in range(steps):
            fn(_grads(step), step)
    writer.close()


def test_eager_and_tf_function_write_the_same_records(tmp_path):
    variables = _variables()

    def eager(grads, step):
        assert bool(summary.gradients(grads, variables, step=step))

    @tf.function
    def traced(g0, g1, step):
        return summary.gradients([g0, g1, None], variables, step=step)

    def graph(grads, step):
        assert bool(traced(grads[0], grads[1], tf.constant(step, tf.int64)))

    _write_steps(str(tmp_path / "eager"), eager)
    _write_steps(str(tmp_path / "graph"), graph)
    records = readback.read_records(str(tmp_path))
    assert set(records) == {"eager", "graph"}
    assert set(records["eager"]) == set(records["graph"])
    for tag, (record, data) in records["eager"].items():
        other_record, other_data = records["graph"][tag]
        assert record == other_record
        assert [d.step for d in data] == [0, 1, 2, 3, 4]
        assert [d.step for d in other_data] == [0, 1, 2, 3, 4]
        for a, b in zip(data, other_data):
            np.testing.assert_array_equal(a.numpy, b.numpy)

    record, data = readback.only_tag(records, "eager", metadata.GRAD_STATS)
    assert record.rows == ("layer/kernel", "layer/bias", "frozen/kernel")
    assert record.extras["variable_dtypes"] == ["float32"] * 3
    assert record.extras["gradient_dtypes"] == ["float32", "float32", "none"]
    for datum in data:
        grads = _grads(datum.step)
        sizes = [6, 2, 4]
        for i, g in enumerate(grads):
            expected = reference_statistics(None if g is None else g.numpy(), sizes[i])
            assert_stats_match(datum.numpy[i], expected)
    assert data[3].numpy[1, metadata.GRAD_STATS_COLUMNS.index("nan_count")] == 1
    record, data = readback.only_tag(records, "eager", metadata.GRAD_HISTOGRAM)
    for datum in data:
        for i, g in enumerate(_grads(datum.step)):
            expected = reference_histogram(None if g is None else g.numpy())
            np.testing.assert_array_equal(datum.numpy[i], expected)


def test_nothing_is_computed_without_writer_or_when_record_if_is_false(tmp_path, monkeypatch):
    calls = tf.Variable(0, dtype=tf.int64)
    original = numerics.gradient_statistics

    def counting(grads, sizes=None, when=None):
        """Counts the passes that compute: in a graph the pass takes the
        recording condition (test_gradient_stats checks each backend
        computes nothing and returns no row when it is false)."""
        if when is None:
            calls.assign_add(1)
        else:
            tf.cond(when, lambda: calls.assign_add(1), lambda: calls.assign_add(0))
        return original(grads, sizes, when=when)

    monkeypatch.setattr(numerics, "gradient_statistics", counting)
    variables = _variables()
    # Eager, no default writer: returns False and computes nothing.
    assert not bool(summary.gradients(_grads(0), variables, step=0))
    assert int(calls.numpy()) == 0

    writer = tf.summary.create_file_writer(str(tmp_path / "run"))

    @tf.function
    def step_fn(g0, g1, step):
        with writer.as_default(), tf.summary.record_if(step % 3 == 0):
            return summary.gradients([g0, g1, None], variables, step=step)

    written = []
    for step in range(9):
        grads = _grads(step)
        written.append(bool(step_fn(grads[0], grads[1], tf.constant(step, tf.int64))))
    writer.close()
    assert written == [s % 3 == 0 for s in range(9)]
    assert int(calls.numpy()) == 3  # the statistics ran on logged steps only
    records = readback.read_records(str(tmp_path))
    _, data = readback.only_tag(records, "run", metadata.GRAD_STATS)
    assert [d.step for d in data] == [0, 3, 6]


def test_step_comes_from_default_step_or_raises(tmp_path):
    variables = _variables()
    writer = tf.summary.create_file_writer(str(tmp_path / "run"))
    with writer.as_default():
        with pytest.raises(ValueError, match="no step given"):
            summary.gradients(_grads(0), variables)
        tf.summary.experimental.set_step(42)
        try:
            assert bool(summary.gradients(_grads(0), variables))
        finally:
            tf.summary.experimental.set_step(None)
    writer.close()
    records = readback.read_records(str(tmp_path))
    _, data = readback.only_tag(records, "run", metadata.GRAD_STATS)
    assert [d.step for d in data] == [42]


def test_length_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="2 gradients for 3 variables"):
        summary.gradients([None, None], _variables(), step=0)


def train_keras_mlp_custom_loop(logdir, steps, policy="float32"):
    """A small Keras MLP trained in a GradientTape loop; returns the gradients of every step."""
    keras.utils.set_random_seed(7)
    model = keras.Sequential(
        [
            keras.Input((12,)),
            keras.layers.Dense(16, activation="relu", dtype=policy, name="hidden"),
            keras.layers.Dense(3, dtype=policy, name="logits"),
            keras.layers.Activation("softmax", dtype="float32", name="probs"),
        ],
        name="mlp",
    )
    optimizer = keras.optimizers.SGD(0.05)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    writer = tf.summary.create_file_writer(os.path.join(logdir, policy))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps, 8, 12)).astype(np.float32)
    y = rng.integers(0, 3, size=(steps, 8)).astype(np.int32)

    @tf.function
    def train_step(xb, yb, step):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        with writer.as_default():
            summary.gradients(grads, model.trainable_variables, step=step)
        optimizer.apply(grads, model.trainable_variables)
        return grads

    all_grads = []
    for step in range(steps):
        grads = train_step(x[step], y[step], tf.constant(step, tf.int64))
        all_grads.append([g.numpy() for g in grads])
    writer.close()
    return model, all_grads


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_keras_custom_loop_reads_back_every_step_exactly(tmp_path, policy):
    steps = 500
    model, all_grads = train_keras_mlp_custom_loop(str(tmp_path), steps, policy)
    records = readback.read_records(str(tmp_path))
    record, data = readback.only_tag(records, policy, metadata.GRAD_STATS)
    assert record.rows == ("mlp/hidden/kernel", "mlp/hidden/bias", "mlp/logits/kernel", "mlp/logits/bias")
    assert [d.step for d in data] == list(range(steps))
    for datum in data:
        for i, g in enumerate(all_grads[datum.step]):
            assert_stats_match(datum.numpy[i], reference_statistics(g))
    _, hist = readback.only_tag(records, policy, metadata.GRAD_HISTOGRAM)
    assert [d.step for d in hist] == list(range(steps))
    for datum in hist[::50]:
        for i, g in enumerate(all_grads[datum.step]):
            np.testing.assert_array_equal(datum.numpy[i], reference_histogram(g))


def _events_with_metadata(logdir):
    """{tag: (events, events carrying metadata)} of the event files under logdir."""
    from tensorboard.backend.event_processing import event_file_loader

    out = {}
    for path in sorted(str(p) for p in __import__("pathlib").Path(logdir).rglob("events.out.tfevents.*")):
        for event in event_file_loader.EventFileLoader(path).Load():
            for value in event.summary.value:
                n, with_meta = out.get(value.tag, (0, 0))
                out[value.tag] = (n + 1, with_meta + bool(value.metadata.plugin_data.content))
    return out


def test_metadata_goes_with_each_tags_first_event_per_writer(tmp_path):
    """TensorBoard keeps a tag's first metadata: every later copy is bytes
    per step that grow with the variable count.  Each writer (each run) gets
    it once, from a traced step, an eager call, or both."""
    variables = _variables()
    writers = {run: tf.summary.create_file_writer(str(tmp_path / run)) for run in ("a", "b")}

    def make_step(writer):
        @tf.function
        def step_fn(g0, g1, step):
            with writer.as_default(), tf.summary.record_if(step % 2 == 0):
                return summary.gradients([g0, g1, None], variables, step=step)
        return step_fn

    steps = {run: make_step(w) for run, w in writers.items()}
    for step in range(6):
        for run in ("a", "b"):
            grads = _grads(step)
            steps[run](grads[0], grads[1], tf.constant(step, tf.int64))
    with writers["b"].as_default():
        summary.gradients(_grads(6), variables, step=6)  # eager, after the traced steps
    for w in writers.values():
        w.close()
    for run, logged in (("a", 3), ("b", 4)):
        counts = _events_with_metadata(str(tmp_path / run))
        assert len(counts) == 2  # grad_stats and grad_histogram
        assert all(c == (logged, 1) for c in counts.values()), counts
    records = readback.read_records(str(tmp_path))
    for run, steps_logged in (("a", [0, 2, 4]), ("b", [0, 2, 4, 6])):
        _, data = readback.only_tag(records, run, metadata.GRAD_STATS)
        assert [d.step for d in data] == steps_logged
        for datum in data:
            assert_stats_match(datum.numpy[0], reference_statistics(_grads(datum.step)[0].numpy()))


def test_a_new_writer_for_the_same_run_gets_the_metadata_again(tmp_path):
    """A writer made anew (e.g. after a failed write) starts a new event
    file: it carries the metadata again, so the file stands on its own."""
    variables = _variables()
    for step in range(2):
        writer = tf.summary.create_file_writer(str(tmp_path / "run"), filename_suffix=".%d" % step)
        with writer.as_default():
            summary.gradients(_grads(step), variables, step=step)
        writer.close()
    counts = _events_with_metadata(str(tmp_path / "run"))
    assert all(c == (2, 2) for c in counts.values()), counts


def test_a_logged_fit_step_flushes_the_event_file_once(tmp_path, monkeypatch):
    """Each flush of the callback's writer is a file flush plus a check of the
    new bytes (event_writer): a logged step's record sets (gradients,
    updates, loss) are written inside one as_default() block and flushed
    once, not once per record set."""
    from tb_gradlens.writing import event_writer
    from tb_gradlens.keras import GradLensCallback

    flushes = []
    original = event_writer.ResilientFileWriter._flush_now
    monkeypatch.setattr(event_writer.ResilientFileWriter, "_flush_now",
                        lambda self: (flushes.append(1), original(self))[1])
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", jit_compile=False)
    x = np.random.default_rng(0).normal(size=(80, 5)).astype(np.float32)
    steps = 10
    model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0,
              callbacks=[GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=0)])
    records = readback.read_records(str(tmp_path))["run"]
    stats = [v for v in records.values() if v[0].kind == metadata.GRAD_STATS]
    assert len(stats) == 1 and sorted(d.step for d in stats[0][1]) == list(range(steps))
    # One per logged step, plus set-up and the end of training.
    assert len(flushes) <= steps + 3, len(flushes)


@pytest.mark.parametrize("jit_compile", [False, True])
def test_a_logged_fit_step_writes_its_records_inside_the_train_function(tmp_path, monkeypatch, jit_compile):
    """Issue 17: writing a logged step's records after the train function (a
    graph call per record set, host reads of the buffers) cost ~3 ms per
    logged step, 2.4x a plain step of the 1 ms MLP.  With one replica the
    train function writes them itself (under jit_compile=True, from the
    function around Keras' XLA step) and the call's wrapper only flushes:
    no record set is written after the call, every step's records are on
    disk, and each tag carries its metadata once."""
    from tb_gradlens.writing import record_writing
    from tb_gradlens.keras import GradLensCallback

    after_the_call = []
    original = record_writing.RecordWriter.__call__
    monkeypatch.setattr(record_writing.RecordWriter, "__call__",
                        lambda self, step: (after_the_call.append(step), original(self, step))[1])
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, dtype="mixed_bfloat16"),
                              keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", jit_compile=jit_compile)
    x = np.random.default_rng(0).normal(size=(48, 5)).astype(np.float32)
    model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0,
              callbacks=[GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=2)])
    assert after_the_call == []
    records = readback.read_records(str(tmp_path))["run"]
    steps = {r.kind: sorted(d.step for d in data) for r, data in records.values()}
    for kind in (metadata.GRAD_STATS, metadata.GRAD_HISTOGRAM, metadata.UPDATE_STATS):
        assert steps[kind] == list(range(6)), (kind, steps)
    for kind in (metadata.DIVERGENCE, metadata.LOSS_COMPARISON, metadata.ACTIVATION_DIVERGENCE):
        assert steps[kind] == [0, 2, 4], (kind, steps)
    counts = _events_with_metadata(str(tmp_path / "run"))
    ours = {tag: c for tag, c in counts.items() if "/" in tag}
    assert ours and all(with_metadata == 1 for _, with_metadata in ours.values()), ours
    assert counts["loss"][0] == 6

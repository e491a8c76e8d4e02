"""GradLensCallback under model.fit: logged steps, values, restoration."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.support.divergence_reference import np_divergence, records_of_kind
from tests.support.readback import read_records
from tb_gradlens import compare
from tb_gradlens import demo
from tb_gradlens import metadata
from tb_gradlens.keras import GradLensCallback
from tb_gradlens.keras import Schedule

pytestmark = [pytest.mark.slow]  # trains Keras models

STEPS_PER_EPOCH = 5
BATCH = 16

METRICS = len(metadata.DIVERGENCE_METRICS)  # the columns before the stable-rounding one


@pytest.fixture(scope="module")
def data():
    x, y = demo.load_digits_784()
    n = STEPS_PER_EPOCH * BATCH
    return x[:n], y[:n]


def _model(run_eagerly=False, jit_compile=False):
    model = demo.build_mlp("mixed_bfloat16", seed=2)
    model.compile(
        optimizer="adam", loss="sparse_categorical_crossentropy",
        run_eagerly=run_eagerly, jit_compile=jit_compile,
    )
    return model


def _steps(records, run, kind):
    found = records_of_kind(records, run, kind)
    assert len(found) == 1, (kind, list(records[run]))
    (record, data), = found.values()
    return record, [d.step for d in data], data


class _KernelsAroundEachStep(keras.callbacks.Callback):
    """The kernels before and after each optimizer step: {step: (before, after)}."""

    def __init__(self):
        super().__init__()
        self.around = {}

    def _kernels(self):
        return [v.numpy().astype(np.float64) for v in self.model.trainable_variables if v.path.endswith("kernel")]

    def on_train_batch_begin(self, batch, logs=None):
        self._step, self._before = int(self.model.optimizer.iterations), self._kernels()

    def on_train_batch_end(self, batch, logs=None):
        self.around[self._step] = (self._before, self._kernels())


@pytest.mark.parametrize("mode", ["graph", "eager", "xla"])
def test_fit_logs_at_true_optimizer_steps_only(data, tmp_path, mode):
    x, y = data
    model = _model(run_eagerly=mode == "eager", jit_compile=mode == "xla")
    model.fit(x[: 3 * BATCH], y[: 3 * BATCH], batch_size=BATCH, epochs=1, verbose=0, shuffle=False)
    assert int(model.optimizer.iterations) == 3  # logging starts at optimizer step 3
    policies = [(layer, layer.dtype_policy) for layer in compare.model_layers(model)]
    train_step = model.train_step
    callback = GradLensCallback(
        str(tmp_path / "run"), gradient_every=2, compare_every=3, start_step=4, stop_step=12,
        variables=r"kernel$", update_every=4,
    )
    kernels = _KernelsAroundEachStep()
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=[kernels, callback])
    assert int(model.optimizer.iterations) == 13
    records = read_records(str(tmp_path))

    grad_record, grad_steps, grad_data = _steps(records, "run", metadata.GRAD_STATS)
    assert grad_steps == [4, 6, 8, 10]
    assert grad_record.rows == ("mlp/dense_1/kernel", "mlp/dense_2/kernel", "mlp/logits/kernel")
    count = list(metadata.GRAD_STATS_COLUMNS).index("count")
    sizes = [784 * 64, 64 * 64, 64 * 10]
    for datum in grad_data:
        assert datum.numpy[:, count].tolist() == sizes
        assert (datum.numpy[:, 0] > 0).all()  # nonzero l2 norms
    _, hist_steps, hist_data = _steps(records, "run", metadata.GRAD_HISTOGRAM)
    assert hist_steps == grad_steps
    assert hist_data[0].numpy.sum(axis=1).tolist() == sizes
    _, update_steps, update_data = _steps(records, "run", metadata.UPDATE_STATS)
    assert update_steps == [4, 8]  # every 4th step of the gradient steps
    for datum in update_data:  # the weights copied on that step, not on another gradient step
        before, after = kernels.around[datum.step]
        rms = [np.sqrt(np.mean((a.astype(np.float64) - b) ** 2)) for b, a in zip(before, after)]
        np.testing.assert_allclose(datum.numpy[:, 0], rms, rtol=1e-6)
        assert ((0 <= datum.numpy[:, 2]) & (datum.numpy[:, 2] <= 1)).all()

    div_record, div_steps, div_data = _steps(records, "run", metadata.DIVERGENCE)
    assert div_steps == [4, 7, 10]
    assert div_record.extras["reference"]["policy"] == "float32"
    assert div_record.extras["candidate"]["policy"] == "mixed_bfloat16"
    assert div_record.extras["candidate"]["jit_compile"] is (mode == "xla")
    for datum in div_data:
        assert (datum.numpy[:, 0] > 1e-4).all() and (datum.numpy[:, 0] < 0.5).all()
    assert _steps(records, "run", metadata.LOSS_COMPARISON)[1] == div_steps
    act_record, act_steps, _ = _steps(records, "run", metadata.ACTIVATION_DIVERGENCE)
    assert act_steps == div_steps
    assert act_record.rows == ("mlp/dense_1", "mlp/dense_2", "mlp/logits", "predictions")
    _, dtype_steps, _ = _steps(records, "run", metadata.DTYPES)
    assert dtype_steps == [3]  # written once, at the start

    # everything restored
    assert all(p is layer.dtype_policy for layer, p in policies)
    assert "train_step" not in model.__dict__ and "apply_gradients" not in model.optimizer.__dict__
    assert model.train_step == train_step


def test_logged_gradients_equal_recomputation(data, tmp_path):
    """Step 0's logged grad_stats equal statistics of the gradient the test computes."""
    x, y = data
    model = _model()
    weights = model.get_weights()
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=100, update_every=100, compare_every=0, histogram=False)
    model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    twin = _model()
    twin.set_weights(weights)
    xb, yb = tf.constant(x[:BATCH]), tf.constant(y[:BATCH])
    with tf.GradientTape() as tape:
        loss = twin.compute_loss(x=xb, y=yb, y_pred=twin(xb, training=True))
    grads = tape.gradient(loss, twin.trainable_variables)
    _, steps, got = _steps(read_records(str(tmp_path)), "run", metadata.GRAD_STATS)
    assert steps == [0]
    for row, g in zip(got[0].numpy, grads):
        g = g.numpy().astype(np.float64).ravel()
        np.testing.assert_allclose(row[[0, 1, 4]], [np.linalg.norm(g), g.mean(), g.max()], rtol=1e-5, atol=1e-9)


def test_restored_when_fit_raises(data, tmp_path):
    x, y = data
    model = _model()
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=1)
    bad = np.full_like(y, 99)  # label out of range: the loss raises inside the step
    with pytest.raises(Exception):
        model.fit(x, np.stack([bad, bad], 1), batch_size=BATCH, epochs=1, verbose=0, callbacks=[callback])
    assert "train_step" not in model.__dict__ and "apply_gradients" not in model.optimizer.__dict__
    assert not any("call" in layer.__dict__ for layer in compare.model_layers(model))
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)  # trains normally afterwards


def test_schedule():
    s = Schedule(3, start=2, stop=10)
    assert [k for k in range(15) if s(k)] == [2, 5, 8]
    assert [k for k in range(15) if bool(s(tf.constant(k, tf.int64)))] == [2, 5, 8]
    assert not Schedule(0)(0)


def test_update_statistics_are_taken_on_gradient_steps_every_20_by_default():
    """Logging gradients every step does not copy the weights every step:
    update statistics come every 20 steps (a multiple of gradient_every),
    or as asked; an update_every off the gradient steps is refused."""
    from tb_gradlens.keras.schedule import update_schedule

    def steps(gradient_every, update_every=None, enabled=True, start=0):
        schedule = update_schedule(Schedule(gradient_every, start), update_every, enabled)
        return [k for k in range(61) if schedule(k)]

    assert steps(1) == [0, 20, 40, 60]
    assert steps(20) == [0, 20, 40, 60]
    assert steps(3) == [0, 21, 42]  # the first multiple of 3 from 20
    assert steps(50) == [0, 50]
    assert steps(1, 1) == list(range(61))
    assert steps(2, 4, start=5) == [5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57]
    assert steps(1, enabled=False) == [] and steps(0) == [] and steps(1, 0) == []
    with pytest.raises(ValueError, match="multiple of gradient_every=3"):
        update_schedule(Schedule(3), 20)


def test_at_the_defaults_a_short_fit_pays_no_comparison_trace_and_the_first_comparison_is_one_interval_in(
        data, tmp_path):
    """A newcomer's smoke run is short: the comparison's passes traced at
    step 0 doubled a 50-step fit of a keras.applications model.  At the
    defaults the first comparison is at step 100 (then every 100); a
    compare_every given compares from start_step on."""
    def compared(callback, last=250):
        return [k for k in range(last) if callback.compare_schedule(k)]

    assert compared(GradLensCallback(str(tmp_path / "a"))) == [100, 200]
    assert compared(GradLensCallback(str(tmp_path / "b"), start_step=7)) == [107, 207]
    assert compared(GradLensCallback(str(tmp_path / "c"), compare_every=100)) == [0, 100, 200]
    x, y = data
    callback = GradLensCallback(str(tmp_path / "run"))
    _model().fit(x, y, batch_size=BATCH, epochs=1, verbose=0, callbacks=[callback])
    assert all("comparisons" not in parts for parts in callback._session._traced)
    records = read_records(str(tmp_path))
    assert _steps(records, "run", metadata.GRAD_STATS)[1] == [0]
    assert not records_of_kind(records, "run", metadata.DIVERGENCE)
    # What the overview, the tab and `report` say instead of a bare "no comparison logged":
    from tests.support.readback import source_of
    from tb_gradlens.analysis.coverage import comparison_note

    note = comparison_note(source_of(str(tmp_path)), "run")
    assert note.startswith("the first comparison is due at step 100 (then every 100); the run's last record is at step 0")


def test_a_flush_interval_that_is_not_a_number_at_least_0_is_refused_when_the_callback_is_made(tmp_path):
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError, match="flush_seconds must be a number >= 0"):
            GradLensCallback(str(tmp_path), flush_seconds=bad)
    assert GradLensCallback(str(tmp_path), flush_seconds=0).flush_seconds == 0.0


def _twin_grads(model, x, y):
    with tf.GradientTape() as tape:
        y_pred = model(x, training=True)
        loss = model.compute_loss(x=x, y=y, y_pred=y_pred)
    return loss, tape.gradient(loss, model.trainable_variables)


@pytest.mark.parametrize("mode", ["graph", "xla"])
def test_fit_comparison_equals_recomputation(data, tmp_path, mode):
    """The callback compares the training step itself (its loss, gradients
    and layer outputs) with one float32 shadow pass: the records equal a
    float64 NumPy recomputation from independent bf16 and f32 twins."""
    x, y = data
    model = _model(jit_compile=mode == "xla")
    weights = model.get_weights()
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=0, compare_every=100)
    model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    assert [slot.live for slot in callback._session.tap.slots] == [True]  # one shadow pass, not two

    xb, yb = tf.constant(x[:BATCH]), tf.constant(y[:BATCH])
    candidate = demo.build_mlp("mixed_bfloat16", seed=2)
    reference = demo.build_mlp("float32", seed=2)
    for twin in (candidate, reference):
        twin.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        twin.set_weights(weights)
    twin_grads = tf.function(_twin_grads, jit_compile=True) if mode == "xla" else _twin_grads
    cand_loss, cand = twin_grads(candidate, xb, yb)  # under XLA, bf16 rounds differently
    ref_loss, ref = twin_grads(reference, xb, yb)

    records = read_records(str(tmp_path))
    record, steps, got = _steps(records, "run", metadata.DIVERGENCE)
    assert steps == [0]
    assert record.rows == tuple(v.path for v in model.trainable_variables)
    want = np.stack([np_divergence(c.numpy(), r.numpy(), "bfloat16") for c, r in zip(cand, ref)])
    np.testing.assert_allclose(got[0].numpy[:, :METRICS], want.astype(np.float32), rtol=1e-5)
    assert (want[:, 0] > 1e-3).all()
    _, _, loss = _steps(records, "run", metadata.LOSS_COMPARISON)
    np.testing.assert_allclose(loss[0].numpy[0, :2], [float(ref_loss), float(cand_loss)], rtol=1e-6)
    act_record, _, act = _steps(records, "run", metadata.ACTIVATION_DIVERGENCE)
    assert act_record.rows == ("mlp/dense_1", "mlp/dense_2", "mlp/logits", "predictions")

    def layer_outputs(twin, h):
        outs = []
        for layer in twin.layers:
            h = layer(h)
            outs.append(h)
        return outs

    if mode == "xla":
        layer_outputs = tf.function(layer_outputs, jit_compile=True)
    outs = zip(layer_outputs(candidate, xb), layer_outputs(reference, xb))
    for (h_c, h_r), row in zip(outs, act[0].numpy[:, :METRICS]):
        np.testing.assert_allclose(row, np_divergence(h_c.numpy(), h_r.numpy(), h_c.dtype.name), rtol=1e-5)


def test_fit_comparison_reference_draws_the_steps_dropout_mask(data, tmp_path):
    """float32 model vs float32 reference with Dropout: the reference pass
    must see the dropout mask of the step it shadows (seed state read before
    the step), so the divergence is zero; another mask gives rel_l2 ~ 1."""
    import keras

    x, y = data
    keras.utils.set_random_seed(4)
    model = keras.Sequential([
        keras.Input((784,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dropout(0.5),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=0, compare_every=1,
                                comparisons=[("float32", None)], activations=False)
    model.fit(x[: 3 * BATCH], y[: 3 * BATCH], batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
              callbacks=[callback])
    assert [slot.live for slot in callback._session.tap.slots] == [True]
    _, steps, got = _steps(read_records(str(tmp_path)), "run", metadata.DIVERGENCE)
    assert steps == [0, 1, 2]
    for datum in got:
        rel_l2, cosine = datum.numpy[:, 0], datum.numpy[:, 1]
        assert (rel_l2 < 1e-6).all(), rel_l2
        np.testing.assert_allclose(cosine, 1.0, atol=1e-6)


def test_fit_again_reuses_the_trace_and_keeps_logging(data, tmp_path, monkeypatch):
    """A second fit() with the same callback does not retrace the patched
    step (Keras keeps its train function across fit calls too), logs the
    second call's steps, and a later fit without the callback trains plain."""
    from tb_gradlens.keras import live

    x, y = data
    model = _model()
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=2, histogram=False)
    traced = []
    step_fn = live.LiveStep.train_step

    def counting_step(self, data):
        traced.append(1)
        return step_fn(self, data)

    monkeypatch.setattr(live.LiveStep, "train_step", counting_step)
    counts = []
    for _ in range(2):
        model.fit(x[: 2 * BATCH], y[: 2 * BATCH], batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
                  callbacks=[callback])
        counts.append(len(traced))
    assert counts[0] >= 1 and counts[1] == counts[0]  # (Keras itself traces twice on a first call)
    records = read_records(str(tmp_path))
    assert _steps(records, "run", metadata.GRAD_STATS)[1] == [0, 1, 2, 3]
    assert _steps(records, "run", metadata.DIVERGENCE)[1] == [0, 2]
    assert "train_step" not in model.__dict__
    model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, epochs=1, verbose=0)
    assert len(traced) == counts[0] and int(model.optimizer.iterations) == 5


def test_metadata_is_written_with_each_tags_first_event_only(data, tmp_path):
    """TensorBoard keeps a tag's first metadata: later events carry only the
    step and tensor, and every step still reads back with its record."""
    import glob

    from tensorboard.backend.event_processing import event_file_loader

    x, y = data
    model = _model()
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=1)
    model.fit(x[: 3 * BATCH], y[: 3 * BATCH], batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
              callbacks=[callback])
    (path,) = glob.glob(str(tmp_path / "run" / "events.out.tfevents.*"))
    with_metadata, events = {}, {}
    for event in event_file_loader.EventFileLoader(path).Load():
        for value in event.summary.value:
            if value.tag == "loss":  # the training loss: a TensorBoard scalar
                continue
            events.setdefault(value.tag, []).append(event.step)
            if value.HasField("metadata"):
                assert value.metadata.plugin_data.plugin_name == metadata.PLUGIN_NAME
                with_metadata.setdefault(value.tag, []).append(event.step)
    float_tags = [t for t in events if metadata.DTYPES not in t and metadata.LENS_STATUS not in t]
    # grad_stats, histogram, update_stats, divergence, loss, activations, optimizer_step
    assert len(float_tags) == 7
    for tag in float_tags:
        assert events[tag] == [0, 1, 2] and with_metadata[tag] == [0], tag
    records = read_records(str(tmp_path))
    assert sorted(len(data) for tag, (record, data) in records["run"].items() if tag in float_tags) == [3] * 7


# ---------------------------------------------------------------------------
# Issue 13: the right numbers on the models people train.
# ---------------------------------------------------------------------------


from evaluation import real_models
from tests.support import twin_step  # noqa: E402
from tests.support.readback import only_tag  # noqa: E402


def _zoo_batch(name, batch=8, steps=1, seed=0):
    return real_models.ZOO[name].data(batch * steps, np.random.default_rng(seed))


def _fit(model, x, y, callbacks=(), batch=8, epochs=1):
    return model.fit(x, y, batch_size=batch, epochs=epochs, verbose=0, shuffle=False,
                     callbacks=list(callbacks)).history["loss"]


def _assert_close_rows(got, want, rtol=1e-5, atol=1e-12):
    np.testing.assert_allclose(got, np.asarray(want, np.float64).astype(np.float32), rtol=rtol, atol=atol)


@pytest.mark.parametrize("mode", ["graph", "xla"])
def test_dropout_reference_uses_the_candidates_mask(tmp_path, mode):
    """bf16 step vs float32 reference on the keras-io Transformer (Dropout in
    attention and feed-forward): the reference drops the units the step
    dropped, so the divergence equals a twin recomputation that shares the
    mask (float64 NumPy metric), and is a bf16 rounding effect, not ~1."""
    name = "transformer"
    x, y = _zoo_batch(name)
    model = real_models.build_compiled(name, "mixed_bfloat16", jit_compile=mode == "xla")
    model(x[:1])
    weights = twin_step.weights_of(model)
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=0, compare_every=100, activations=False)
    _fit(model, x, y, [callback])

    draws = twin_step.SharedDraws()
    build = real_models.ZOO[name].build
    loss = real_models.ZOO[name].loss
    candidate = twin_step.build_twin(build, "mixed_bfloat16", weights, loss)
    reference = twin_step.build_twin(build, "float32", weights, loss)
    cand_loss, cand = twin_step.twin_step(candidate, x, y, mode, draws=draws)
    ref_loss, ref = twin_step.twin_step(reference, x, y, mode, draws=draws)
    assert draws.draws, "the twins drew no dropout mask"

    record, data = only_tag(read_records(str(tmp_path)), "run", metadata.DIVERGENCE)
    assert [d.step for d in data] == [0]
    want = np.stack([np_divergence(c, r, "bfloat16") for c, r in zip(cand, ref)])
    rows = list(record.rows)
    _assert_close_rows(data[0].numpy[:, :METRICS], want)
    # The attention key bias has a zero true gradient (softmax ignores it):
    # its rel L2 compares two rounding noises (issue 13 item 5, not a mask).
    signal = [i for i, r in enumerate(rows) if not r.endswith("key/bias")]
    assert (data[0].numpy[signal, 0] < 0.1).all(), dict(zip(rows, data[0].numpy[:, 0]))
    _, loss_data = only_tag(read_records(str(tmp_path)), "run", metadata.LOSS_COMPARISON)
    np.testing.assert_allclose(loss_data[0].numpy[0, :2], [ref_loss, cand_loss], rtol=1e-6)


@pytest.mark.parametrize("name", ["subclassed", "sequential_unbuilt"])
def test_models_built_by_fit_get_full_records_from_the_first_step(tmp_path, name):
    x, y = _zoo_batch(name, steps=2)
    model = real_models.build_compiled(name, "mixed_bfloat16")
    assert not model.built
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=1)
    _fit(model, x, y, [callback])
    records = read_records(str(tmp_path))
    for kind in (metadata.GRAD_STATS, metadata.GRAD_HISTOGRAM, metadata.UPDATE_STATS,
                 metadata.DIVERGENCE, metadata.LOSS_COMPARISON):
        record, data = only_tag(records, "run", kind)
        assert [d.step for d in data] == [0, 1], kind
    record, data = only_tag(records, "run", metadata.GRAD_STATS)
    assert len(record.rows) == len(model.trainable_variables) == 4
    assert (data[0].numpy[:, 0] > 0).all()


def test_models_built_by_fit_train_exactly_as_without_the_lens(tmp_path):
    x, y = _zoo_batch("subclassed", steps=3)
    plain = real_models.build_compiled("subclassed", "mixed_bfloat16")
    lensed = real_models.build_compiled("subclassed", "mixed_bfloat16")
    assert _fit(plain, x, y) == _fit(lensed, x, y, [GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1,
                                                                      compare_every=1)])
    for a, b in zip(plain.variables, lensed.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_custom_train_step_with_optimizer_apply_gets_gradient_and_update_statistics(tmp_path):
    name = "custom_train_step"
    x, y = _zoo_batch(name, steps=2)
    model = real_models.build_compiled(name, "mixed_bfloat16")
    weights = twin_step.weights_of(model)
    _fit(model, x, y, [GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=0)])
    records = read_records(str(tmp_path))
    record, data = only_tag(records, "run", metadata.GRAD_STATS)
    assert [d.step for d in data] == [0, 1]
    twin = twin_step.build_twin(real_models.ZOO[name].build, "mixed_bfloat16", weights, real_models.ZOO[name].loss)
    _, grads = twin_step.twin_step(twin, x[:8], y[:8])
    for row, g in zip(data[0].numpy, grads):
        g = g.astype(np.float64).ravel()
        np.testing.assert_allclose(row[[0, 1, 4]], [np.linalg.norm(g), g.mean(), g.max()], rtol=1e-5, atol=1e-9)
    _, update = only_tag(records, "run", metadata.UPDATE_STATS)
    assert [d.step for d in update] == [0, 1] and (update[0].numpy[:, 0] > 0).all()


def test_mixed_float16_gradients_are_the_unscaled_ones_the_optimizer_applies(tmp_path):
    name = "mlp"
    x, y = _zoo_batch(name)
    model = real_models.build_compiled(name, "mixed_float16")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    weights = twin_step.weights_of(model)
    _fit(model, x, y, [GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=0)])
    twin = twin_step.build_twin(real_models.ZOO[name].build, "mixed_float16", weights, real_models.ZOO[name].loss)
    _, grads = twin_step.twin_step(twin, x, y, scale=2.0**15)
    _, data = only_tag(read_records(str(tmp_path)), "run", metadata.GRAD_STATS)
    for row, g in zip(data[0].numpy, grads):
        g = g.astype(np.float64).ravel()
        np.testing.assert_allclose(row[[0, 5]], [np.linalg.norm(g), np.abs(g).max()], rtol=1e-5)


def test_recompiling_continues_the_runs_steps(tmp_path):
    x, y = _zoo_batch("mlp", steps=3)
    model = real_models.build_compiled("mlp", "mixed_bfloat16")
    _fit(model, x, y, [GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=2)])
    model.compile(optimizer="sgd", loss=real_models.SPARSE_CE)  # a new optimizer: iterations restart at 0
    _fit(model, x, y, [GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=2)])
    records = read_records(str(tmp_path))
    _, data = only_tag(records, "run", metadata.GRAD_STATS)
    assert [d.step for d in data] == [0, 1, 2, 3, 4, 5]
    _, data = only_tag(records, "run", metadata.DIVERGENCE)
    assert [d.step for d in data] == [0, 2, 3, 5]


def test_loss_scalar_is_each_logged_steps_own_loss(tmp_path):
    from tensorboard.backend.event_processing import event_accumulator

    x, y = _zoo_batch("mlp", steps=4)
    model = real_models.build_compiled("mlp", "mixed_bfloat16")
    losses = []

    class StepLoss(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            w = twin_step.weights_of(self.model)
            twin = twin_step.build_twin(real_models.ZOO["mlp"].build, "mixed_bfloat16", w, real_models.SPARSE_CE)
            losses.append(twin_step.twin_step(twin, x[8 * batch:8 * batch + 8], y[8 * batch:8 * batch + 8])[0])

    _fit(model, x, y, [StepLoss(), GradLensCallback(str(tmp_path / "run"), gradient_every=2, update_every=2, compare_every=3)])
    acc = event_accumulator.EventAccumulator(str(tmp_path / "run"), size_guidance={"tensors": 0})
    acc.Reload()
    events = acc.Tensors("loss")
    assert [e.step for e in events] == [0, 2, 3]
    got = [float(tf.make_ndarray(e.tensor_proto)) for e in events]
    np.testing.assert_allclose(got, [losses[0], losses[2], losses[3]], rtol=1e-6)


def test_xla_training_with_batchnorm_and_dropout_is_bit_identical_with_the_lens(tmp_path):
    name = "bn_dropout_cnn"
    x, y = _zoo_batch(name, steps=3)
    runs = []
    for callbacks in ([], [GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=1)]):
        model = real_models.build_compiled(name, "mixed_bfloat16", jit_compile=True)
        runs.append((_fit(model, x, y, callbacks), [v.numpy() for v in model.variables],
                     [v.numpy() for v in model.optimizer.variables]))
    (plain_loss, plain_vars, plain_opt), (lens_loss, lens_vars, lens_opt) = runs
    assert plain_loss == lens_loss
    for a, b in zip(plain_vars + plain_opt, lens_vars + lens_opt):
        np.testing.assert_array_equal(a, b)
    records = read_records(str(tmp_path))
    for kind in (metadata.GRAD_STATS, metadata.DIVERGENCE, metadata.UPDATE_STATS):
        assert [d.step for d in only_tag(records, "run", kind)[1]] == [0, 1, 2], kind


def test_what_cannot_be_logged_is_said_once_per_model_and_recorded(tmp_path):
    """Under XLA a custom train_step's gradients cannot be observed without
    changing the compiled step: each model warns once and its lens_status
    record says what is missing and why."""
    import json

    from tb_gradlens import safety

    safety.reset()
    name = "custom_train_step"
    x, y = _zoo_batch(name, steps=2)
    for run in ("first", "second"):
        model = real_models.build_compiled(name, "mixed_bfloat16", jit_compile=True)
        with pytest.warns(safety.GradLensWarning, match="gradient statistics"):
            _fit(model, x, y, [GradLensCallback(str(tmp_path / run), gradient_every=1, update_every=1, compare_every=0)])
        records = read_records(str(tmp_path))
        _, data = only_tag(records, run, metadata.LENS_STATUS)
        status = json.loads(data[-1].numpy.item().decode())
        missing = {k for u in status["unsupported"] for k in u["kinds"]}
        assert metadata.GRAD_STATS in missing, status
        assert [d.step for d in only_tag(records, run, metadata.UPDATE_STATS)[1]] == [0, 1]


@pytest.mark.parametrize("mode", ["graph", "xla"])
def test_steps_not_logged_run_keras_own_train_function(data, tmp_path, monkeypatch, mode):
    """A step the lens does not log is the step without the lens: Keras' own
    train function runs it.  (Before, the lens's function ran every step and
    its conditionals, which take every gradient, cost 1.05x a plain step on
    the transformer and 1.17x on ResNet50 with nothing logged.)  Logged steps
    still go through the lens and are all written."""
    from tb_gradlens.keras import session

    x, y = data
    model = _model(jit_compile=mode == "xla")
    lens_calls = []
    wrap = session.Session._function_for

    def counting(self, parts):
        function = wrap(self, parts)

        def counted(iterator):
            lens_calls.append(int(self.model.optimizer.iterations.numpy()))
            return function(iterator)

        return counted

    monkeypatch.setattr(session.Session, "_function_for", counting)
    # (nonfinite_replay=False: by default every step is checked, tests/writing/test_nonfinite_steps.py)
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=4, update_every=4, compare_every=8, histogram=False,
                                nonfinite_replay=False)
    model.fit(x[: 4 * BATCH], y[: 4 * BATCH], batch_size=BATCH, epochs=3, verbose=0, shuffle=False,
              callbacks=[callback])
    assert int(model.optimizer.iterations) == 12
    assert lens_calls == [0, 4, 8]
    records = read_records(str(tmp_path))
    assert _steps(records, "run", metadata.GRAD_STATS)[1] == [0, 4, 8]
    assert _steps(records, "run", metadata.UPDATE_STATS)[1] == [0, 4, 8]
    assert _steps(records, "run", metadata.DIVERGENCE)[1] == [0, 8]
    assert "train_step" not in model.__dict__


def test_with_comparisons_off_no_reference_pass_is_traced(data, tmp_path, monkeypatch):
    """compare_every=0 on a bfloat16 model: the step's trace held a float32
    reference pass that never ran (MobileNetV2's first step with the lens
    12.8 s; 8.1-8.9 s without it; 4.0 s plain)."""
    x, y = data
    traced = []
    original = compare.KerasPass._run
    monkeypatch.setattr(compare.KerasPass, "_run",
                        lambda self, *args: (traced.append(self.variant), original(self, *args))[1])
    model = _model()
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
              callbacks=[GradLensCallback(str(tmp_path / "grads"), gradient_every=1, update_every=1, compare_every=0,
                                          nonfinite_replay=False)])  # (the replay traces its own passes)
    assert traced == []
    assert [d.step for d in _steps(read_records(str(tmp_path)), "grads", metadata.GRAD_STATS)[2]] == list(
        range(STEPS_PER_EPOCH))
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
              callbacks=[GradLensCallback(str(tmp_path / "both"), gradient_every=1, update_every=1, compare_every=2)])
    assert traced  # the same model with comparisons on traces its reference pass


def test_every_call_without_a_comparison_shares_one_trace_and_comparisons_get_a_second(data, tmp_path):
    """A new user pays for each trace of the model's step (a second trace
    of a keras.applications model costs about Keras' own first one): the
    calls that log gradients, update statistics or nothing share one trace
    (untaken conditionals), the comparisons' passes are traced into a
    second one when first due; every record where it belongs, and training
    bit-identical to training without the lens."""
    x, y = data
    plain, lensed = _model(), _model()
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=3, compare_every=4)
    fitted = [m.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=c)
              for m, c in ((plain, []), (lensed, [callback]))]
    assert fitted[0].history["loss"] == fitted[1].history["loss"]
    for a, b in zip(plain.variables + plain.optimizer.variables, lensed.variables + lensed.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    records = read_records(str(tmp_path))
    assert _steps(records, "run", metadata.GRAD_STATS)[1] == list(range(2 * STEPS_PER_EPOCH))
    assert _steps(records, "run", metadata.UPDATE_STATS)[1] == [0, 3, 6, 9]
    assert _steps(records, "run", metadata.DIVERGENCE)[1] == [0, 4, 8]
    assert _steps(records, "run", metadata.ACTIVATION_DIVERGENCE)[1] == [0, 4, 8]
    assert _steps(records, "run", metadata.LOSS_COMPARISON)[1] == [0, 4, 8]
    gradients, updates, comparisons = "gradients", "updates", "comparisons"
    assert set(callback._session._traced) == {frozenset({gradients, updates, comparisons}),
                                              frozenset({gradients, updates})}


def _widening_casts_run(fit, log_dir):
    """How many times a ``Cast`` in the gradient's computation ran while
    ``fit()`` ran (TensorFlow's profiler: the ops of the graph Grappler
    optimized, as they ran)."""
    import glob

    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    tf.profiler.experimental.start(str(log_dir))
    try:
        fit()
    finally:
        tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    with open(glob.glob(str(log_dir / "**" / "*.xplane.pb"), recursive=True)[0], "rb") as f:
        space.ParseFromString(f.read())
    names = (plane.event_metadata[event.metadata_id].name
             for plane in space.planes for line in plane.lines for event in line.events)
    return sum(1 for name in names if name.endswith(":Cast") and "/gradient_tape/" in name)


def test_the_lens_step_widens_each_16_bit_gradient_once(tmp_path):
    """A mixed_bfloat16 step widens each weight's 16-bit gradient to float32
    once; the lens's step must not do it again.  (The update waits for the
    weights the lens keeps: through one Identity per gradient, Grappler
    moved each Identity before the widening Cast, which then ran twice:
    2-3% of a ResNet50 or transformer step.)"""
    rng = np.random.default_rng(0)
    x, y = real_models.images(16)(4 * BATCH, rng)
    counts = []
    for name, callbacks in (("plain", []), ("lens", [GradLensCallback(str(tmp_path / "run"), gradient_every=1,
                                                                      compare_every=0)])):
        model = real_models.bn_dropout_cnn("mixed_bfloat16")
        model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)  # traced
        counts.append(_widening_casts_run(
            lambda: model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=callbacks),
            tmp_path / ("profile_" + name)))
    plain, lens = counts
    assert plain >= 4 * len(model.trainable_weights) // 2  # (4 steps; the kernels' gradients at least)
    assert lens == plain


@pytest.mark.parametrize("kernel_ops", [True, False], ids=["kernel_ops", "no_kernel_ops"])
def test_the_lens_step_is_traced_once_and_its_update_statistics_hold_either_way(data, tmp_path, monkeypatch,
                                                                                 kernel_ops):
    """TensorFlow traces a function's first trace again when it made
    variables, and Keras' Adam makes its moments inside the step's first
    trace: Keras' own step is traced twice at the first batch, which is
    most of what a short fit pays first.  The lens builds the optimizer
    before (as its first ``apply`` would) and makes its own variables
    before, so its step is traced once.  Training stays bit-identical and
    the optimizer's variables keep their paths; the update statistics equal
    NumPy's whether the weights before the update are kept by the kernel's
    op or copied under a conditional (no compiled ops: a GPU, no compiler)."""
    from tb_gradlens.numerics import kernel

    x, y = data
    plain, lensed = _model(), _model()
    traces = []
    with monkeypatch.context() as m:
        step = type(plain).train_step
        m.setattr(type(plain), "train_step", lambda self, batch: (traces.append(1), step(self, batch))[1])
        plain.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False)
    if not kernel_ops:
        monkeypatch.setenv(kernel.ENV_KERNEL, "library")
        kernel.reset()
    try:
        callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=2, compare_every=0)
        kernels = _KernelsAroundEachStep()
        lensed.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[kernels, callback])
        assert callback._session.tap.update_watch.by_op is kernel_ops
    finally:
        monkeypatch.delenv(kernel.ENV_KERNEL, raising=False)
        kernel.reset()
    assert callback._session.tap.traces == 1 < len(traces) == 2
    assert plain.history.history["loss"] == lensed.history.history["loss"]
    paths = [[v.path.replace(m.optimizer.name + "/", "", 1) for v in m.optimizer.variables] for m in (plain, lensed)]
    assert paths[0] == paths[1] and all(v.path.startswith(lensed.optimizer.name + "/")
                                        for v in lensed.optimizer.variables)
    for a, b in zip(plain.variables + plain.optimizer.variables, lensed.variables + lensed.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    _, update_steps, update_data = _steps(read_records(str(tmp_path)), "run", metadata.UPDATE_STATS)
    assert update_steps == [0, 2, 4]
    kernel_rows = [k for k, v in enumerate(lensed.trainable_variables) if v.path.endswith("kernel")]
    for datum in update_data:
        before, after = kernels.around[datum.step]
        rms = [np.sqrt(np.mean((a - b) ** 2)) for b, a in zip(before, after)]
        np.testing.assert_allclose(datum.numpy[kernel_rows, 0], rms, rtol=1e-6)

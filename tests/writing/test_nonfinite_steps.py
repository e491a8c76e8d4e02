"""Non-finite steps explained (issue 26): float16 loss-scale skips told apart
from real NaNs, one logged step per train step, and the first real NaN
replayed in float32 before its update.  Real models, tiny sizes."""

import collections

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from evaluation import real_models
from tests.support.readback import read_records
from tests.support.readback import source_of
from tests.support.twin_step import model_state
from tb_gradlens import analysis
from tb_gradlens import metadata
from tb_gradlens import safety
from tb_gradlens.analysis import replays
from tb_gradlens.keras import GradLens
from tb_gradlens.keras import GradLensCallback
from tb_gradlens.keras import forensics
from tb_gradlens.serving import judgment_json

BATCH = 8


pytestmark = [pytest.mark.usefixtures("fresh_safety"), pytest.mark.slow]  # conftest.py; trains Keras models


def _fit_twice(build, x, y, callback, compile_kwargs=None, optimizer=lambda: "adam"):
    """The same model trained without and with the lens: (plain, lensed, histories)."""
    models = []
    for _ in range(2):
        model = build()
        model.compile(optimizer=optimizer(), loss=real_models.SPARSE_CE, **(compile_kwargs or {}))
        models.append(model)
    histories = [m.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=c).history["loss"]
                 for m, c in ((models[0], []), (models[1], [callback]))]
    return models[0], models[1], histories


FIRST_LOSS_SCALE = 2.0 ** 20


def _loss_scaled_adam():
    return keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(), initial_scale=FIRST_LOSS_SCALE)


def _by_kind(records, run="run"):
    out = collections.defaultdict(list)
    for tag, (record, data) in records[run].items():
        out[record.kind].append((tag, record, data))
    return out


@pytest.mark.parametrize("name", ["vit", "cnn"])
def test_healthy_float16_runs_with_loss_scale_skips_are_not_errors_and_log_one_step_per_batch(tmp_path, name):
    build = {"vit": lambda: real_models.vit("mixed_float16"),
             "cnn": lambda: real_models.bn_dropout_cnn("mixed_float16")}[name]
    x, y = real_models.unnormalized_images(10 * BATCH)
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, compare_every=5)
    # Keras' default first scale, 2**15, overflowed these models' float16 gradients by a hair on one
    # machine and not on another (their float32 gradients reach 0.7-0.85x float16's largest value at
    # it); 2**20 overflows by ~20x, so the first steps are skipped on every machine.
    plain, lensed, (want, got) = _fit_twice(build, x, y, callback, optimizer=_loss_scaled_adam)
    np.testing.assert_array_equal(got, want)  # bit-identical with the watch armed
    for a, b in zip(model_state(plain), model_state(lensed)):
        np.testing.assert_array_equal(a, b)
    iterations = int(lensed.optimizer.iterations.numpy())
    assert iterations < 10  # the optimizer skipped updates

    kinds = _by_kind(read_records(str(tmp_path)))
    for kind, tags in kinds.items():  # no tag holds two records at one step
        for tag, _, data in tags:
            steps = [d.step for d in data]
            assert len(steps) == len(set(steps)), (tag, steps)
    (_, _, stats), = kinds[metadata.GRAD_STATS]
    assert [d.step for d in stats] == list(range(10))  # one logged step per batch
    (_, record, opt), = kinds[metadata.OPTIMIZER_STEP]
    assert record.extras["loss_scaling"] is True
    table = np.stack([d.numpy[0] for d in opt])
    columns = list(metadata.OPTIMIZER_STEP_COLUMNS)
    skipped = table[:, columns.index("skipped")] == 1
    assert skipped.sum() == 10 - iterations
    # optimizer.iterations kept: it falls behind by the skips before each step
    np.testing.assert_array_equal(table[:, columns.index("iteration")],
                                  np.arange(10) - np.concatenate([[0], np.cumsum(skipped)[:-1]]))
    scale, after = table[:, columns.index("loss_scale")], table[:, columns.index("next_loss_scale")]
    np.testing.assert_array_equal(after[skipped], scale[skipped] / 2)
    assert scale[0] == FIRST_LOSS_SCALE and skipped[0]

    source = source_of(str(tmp_path))
    alerts, problems = analysis.run_alerts(source)
    assert problems == []
    assert [a for a in alerts if a.severity == analysis.ERROR] == []
    (skip,) = [a for a in alerts if a.code == analysis.LOSS_SCALE_SKIP]
    assert skip.severity == analysis.INFO and skip.step_first == int(np.argmax(skipped))
    headline = judgment_json.overview_json(analysis.overview(source))[0]
    assert headline["first_nonfinite_step"] is None
    assert headline["optimizer_steps"]["skips"] == [int(s) for s in np.nonzero(skipped)[0]]
    assert headline["optimizer_steps"]["last_iteration"] == 9 - int(skipped[:-1].sum())


def test_healthy_float16_run_under_xla_records_its_skips_around_the_compiled_step(tmp_path):
    """Under jit_compile=True the lens stays out of the compiled step: the
    loss scale read before and after it tells the skips, the loss tracker's
    total whether the loss was finite; training is bit-identical.  The
    replay is armed there too ("auto", and asked for explicitly: no
    warning), and a healthy run replays nothing."""
    x, y = real_models.unnormalized_images(10 * BATCH)
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=3, compare_every=0)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", safety.GradLensWarning)
        plain, lensed, (want, got) = _fit_twice(lambda: real_models.bn_dropout_cnn("mixed_float16"), x, y, callback,
                                                {"jit_compile": True}, optimizer=_loss_scaled_adam)
    np.testing.assert_array_equal(got, want)
    for a, b in zip(model_state(plain), model_state(lensed)):
        np.testing.assert_array_equal(a, b)
    skipped_updates = 10 - int(lensed.optimizer.iterations.numpy())
    assert skipped_updates > 0
    kinds = _by_kind(read_records(str(tmp_path)))
    (_, _, opt), = kinds[metadata.OPTIMIZER_STEP]
    columns = list(metadata.OPTIMIZER_STEP_COLUMNS)
    skips = [d.step for d in opt if d.numpy[0, columns.index("skipped")] == 1]
    assert len(skips) == skipped_updates
    assert all(d.numpy[0, columns.index("loss_nonfinite")] == 0 for d in opt)  # seen: the loss tracker's total
    recorded = {d.step for d in opt}
    assert {0, 3, 6, 9} <= recorded and recorded - {0, 3, 6, 9} <= set(skips)  # logged steps and every skip
    assert metadata.NONFINITE_REPLAY not in kinds
    source = source_of(str(tmp_path))
    alerts, _ = analysis.run_alerts(source)
    assert [a for a in alerts if a.severity == analysis.ERROR] == []
    assert analysis.coverage(source, "run")["unsupported"] == []
    model = real_models.bn_dropout_cnn("mixed_float16")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE, jit_compile=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", safety.GradLensWarning)
        model.fit(x[:BATCH], y[:BATCH], batch_size=BATCH, verbose=0,
                  callbacks=[GradLensCallback(str(tmp_path / "asked"), nonfinite_replay=True)])
    assert analysis.coverage(source_of(str(tmp_path)), "asked")["unsupported"] == []


def _replay_of(tmp_path):
    source = source_of(str(tmp_path))
    found = replays.run_replays(source, "run")
    alerts, problems = analysis.run_alerts(source)
    assert problems == []
    return found, alerts, judgment_json.overview_json(analysis.overview(source))[0]


def test_float16_overflow_in_unscaled_attention_logits_is_replayed_as_precision(tmp_path):
    """One outlier batch (inputs 300x larger) overflows float16 in q.k^T:
    the loss is NaN, the loss scale skips that update; the replay finds the
    logits layer non-finite in float16 and finite in float32."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6 * BATCH, 4, 16)).astype(np.float32)
    x[3 * BATCH:4 * BATCH] *= 300.0
    y = rng.integers(0, 3, 6 * BATCH).astype(np.int32)
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=2, compare_every=0)
    build = lambda: real_models.unscaled_attention_logits("mixed_float16")  # noqa: E731
    plain, lensed, (want, got) = _fit_twice(build, x, y, callback)
    np.testing.assert_array_equal(got, want)
    for a, b in zip(model_state(plain), model_state(lensed)):
        np.testing.assert_array_equal(a, b)
    found, alerts, headline = _replay_of(tmp_path)
    assert [f["step"] for f in found] == [3]  # an unlogged step: every step is checked
    (replay,) = found
    assert replay["verdict"] == replays.PRECISION
    assert replay["candidate"]["row"] == "attention_logits" and replay["reference"] is None
    assert replay["text"] == "16-bit precision: float32 is finite here"
    # One event, one alert (issue 38 item 5): the replay's, naming the loss-scale failure it causes (step 3
    # is not a logged one, so no gradient record holds it).
    (error,) = [a for a in alerts if a.severity == analysis.ERROR]
    assert error.code == analysis.NONFINITE and error.view["name"] == metadata.NONFINITE_REPLAY
    assert "16-bit precision" in error.explanation and "attention_logits" in error.explanation
    assert [(o["code"], o["view"]["name"]) for o in error.also] == [(analysis.LOSS_SCALE_FAILURE,
                                                                      metadata.OPTIMIZER_STEP)]
    assert "loss scaling cannot explain them" in error.explanation
    assert headline["first_nonfinite_step"] == 3
    assert headline["nonfinite_replay"]["layer"] == "attention_logits"

    # the replay's numbers, independently: float16 logits overflow, float32 ones do not
    records = _by_kind(read_records(str(tmp_path)))
    (_, record, data), = records[metadata.NONFINITE_REPLAY]
    row = record.rows.index("attention_logits")
    columns = list(metadata.NONFINITE_REPLAY_COLUMNS)
    assert data[0].numpy[row, columns.index("candidate_nonfinite")] > 0
    assert data[0].numpy[row, columns.index("reference_nonfinite")] == 0
    assert data[0].numpy[row, columns.index("reference_max_abs")] > np.finfo(np.float16).max


def test_nan_from_the_log_of_a_negative_is_replayed_as_not_precision(tmp_path):
    """One data batch holds a negative input below -1: log(x + 1) is NaN in
    bfloat16 and in float32 alike."""
    x, y = real_models.digits(6 * BATCH, np.random.default_rng(0))
    x = x.copy()
    x[2 * BATCH + 1] = -5.0
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=4, compare_every=0)
    model = real_models.log_input_mlp("mixed_bfloat16")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    found, alerts, headline = _replay_of(tmp_path)
    (replay,) = found
    assert replay["step"] == 2 and replay["verdict"] == replays.NOT_PRECISION
    assert replay["candidate"]["row"] == replay["reference"]["row"] == "log_inputs"
    assert replay["text"].startswith("not precision: float32 is non-finite too")
    assert headline["first_nonfinite_step"] == 2


class _OnDisk(keras.callbacks.Callback):
    """After each batch: the kinds of record the run's event files hold now (read from disk)."""

    def __init__(self, logdir):
        super().__init__()
        self.logdir, self.seen = logdir, {}

    def on_train_batch_end(self, batch, logs=None):
        found = read_records(self.logdir).get("run", {})
        self.seen[batch] = {(record.kind, datum.step) for _, (record, data) in found.items() for datum in data}


def test_a_nonfinite_step_the_schedule_does_not_log_is_on_disk_with_its_replay_when_its_call_returns(tmp_path):
    """The NaN step 2 is not a logged step (gradients every 100): its
    optimizer_step record and its replay are on disk before the next batch
    starts, so a crash or a kill right after it still shows where it came
    from."""
    x, y = real_models.digits(6 * BATCH, np.random.default_rng(0))
    x = x.copy()
    x[2 * BATCH + 1] = -5.0
    disk = _OnDisk(str(tmp_path))
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=100, compare_every=0)
    models = []
    for callbacks in ([], [callback, disk]):
        model = real_models.log_input_mlp("mixed_bfloat16")
        model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
        models.append(model)
    assert (metadata.OPTIMIZER_STEP, 2) in disk.seen[2] and (metadata.NONFINITE_REPLAY, 2) in disk.seen[2]
    assert (metadata.NONFINITE_REPLAY, 2) not in disk.seen[1]
    # The replay ran after the step on the weights kept before its update, and put the weights back.
    for a, b in zip(*(model_state(m) for m in models)):
        np.testing.assert_array_equal(a, b)


class _OnDiskAtEpochEnd(_OnDisk):
    def on_train_batch_end(self, batch, logs=None):
        pass

    def on_epoch_end(self, epoch, logs=None):
        _OnDisk.on_train_batch_end(self, epoch, logs)


def test_healthy_logged_steps_are_on_disk_at_the_end_of_their_epoch(tmp_path):
    """Healthy logged steps may wait up to about a second for their flush
    (one flush per logged call was most of a small model's logged step),
    never past the end of their epoch."""
    x, y = real_models.digits(6 * BATCH, np.random.default_rng(0))
    disk = _OnDiskAtEpochEnd(str(tmp_path))
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, compare_every=0)
    model = real_models.log_input_mlp("mixed_bfloat16")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=[callback, disk])
    for epoch in (0, 1):
        steps = {step for kind, step in disk.seen[epoch] if kind == metadata.GRAD_STATS}
        assert steps == set(range(6 * (epoch + 1)))


class UnclampedVarianceNorm(keras.layers.Layer):
    """A normalization computing the variance as E[x^2] - E[x]^2 in its
    compute dtype, not clamped at 0: its square root is NaN when rounding
    makes the difference negative."""

    def call(self, x):
        mean = keras.ops.mean(x, axis=-1, keepdims=True)
        variance = keras.ops.mean(x * x, axis=-1, keepdims=True) - mean * mean
        return (x - mean) / keras.ops.sqrt(variance + keras.ops.cast(1e-3, x.dtype))


def _naive_norm_model(policy, features=32, seed=0):
    keras.utils.set_random_seed(seed)
    with real_models.global_policy(policy):
        inputs = keras.Input((features,))
        x = UnclampedVarianceNorm(name="naive_norm")(inputs)
        x = keras.layers.Dense(16, activation="relu", name="hidden")(x)
        x = keras.layers.Dense(10, name="logits")(x)
        return keras.Model(inputs, real_models._softmax_float32(x), name="naive_norm_mlp")


def test_nan_from_a_naive_variance_in_bfloat16_is_replayed_as_precision(tmp_path):
    """Inputs with a large mean against a unit spread: E[x^2] - E[x]^2 is
    negative in bfloat16 (spacing 32 near 4096), fine in float32."""
    x, y = real_models.offset_vectors(32, offset=64.0)(4 * BATCH, np.random.default_rng(0))
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, compare_every=0)
    model = _naive_norm_model("mixed_bfloat16")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    found, alerts, headline = _replay_of(tmp_path)
    (replay,) = found
    assert replay["step"] == 0 and replay["verdict"] == replays.PRECISION
    assert replay["candidate"]["row"] == "naive_norm"
    bf16 = np.asarray(x[:BATCH], np.float32)  # independent: the variance in bfloat16 by NumPy is negative somewhere
    b = bf16.astype("bfloat16")
    mean = (b.astype(np.float32).mean(axis=-1)).astype("bfloat16")
    square = (b.astype(np.float32) ** 2).astype("bfloat16").astype(np.float32).mean(axis=-1).astype("bfloat16")
    assert ((square.astype(np.float32) - (mean.astype(np.float32) ** 2)) < -1e-3).any()
    # gradient_every=1: the gradients' record holds the step too; one alert says both.
    (nonfinite,) = [a for a in alerts if a.code == analysis.NONFINITE]
    assert "naive_norm" in nonfinite.explanation and nonfinite.view["name"] == metadata.NONFINITE_REPLAY
    assert [o["view"]["name"] for o in nonfinite.also] == [metadata.GRAD_STATS]


def test_a_float64_replay_on_request_in_a_custom_loop(tmp_path):
    """reference="float64": the naive variance is finite in float64 too; the
    verdict names the reference it used."""
    x, y = real_models.offset_vectors(32, offset=64.0)(BATCH, np.random.default_rng(0))
    model = _naive_norm_model("mixed_bfloat16")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    lens = GradLens(str(tmp_path / "run"))
    found = lens.replay_nonfinite(model, tf.constant(x), tf.constant(y), 0, reference="float64")
    lens.flush()
    assert found["verdict"] == replays.PRECISION and found["text"] == "16-bit precision: float64 is finite here"
    assert found["candidate"]["row"] == "naive_norm"
    (_, record, _), = _by_kind(read_records(str(tmp_path)))[metadata.NONFINITE_REPLAY]
    assert record.extras["reference"]["compute_dtype"] == "float64"


def test_training_with_the_watch_armed_and_not_triggered_is_bit_identical(tmp_path):
    """Every step checked (the default) on healthy bfloat16 models, a logged
    step every 3: losses, weights and optimizer state as without the lens."""
    for name in ("mlp", "transformer"):
        x, y = real_models.ZOO[name].data(6 * BATCH, np.random.default_rng(1))
        callback = GradLensCallback(str(tmp_path / name), gradient_every=3, compare_every=0)
        plain, lensed, (want, got) = _fit_twice(
            lambda: real_models.ZOO[name].build("mixed_bfloat16"), x, y, callback)
        assert got == want, name
        for a, b in zip(model_state(plain), model_state(lensed)):
            np.testing.assert_array_equal(a, b)
        assert not any(r.kind == metadata.NONFINITE_REPLAY for r, _ in read_records(str(tmp_path))[name].values())


def test_stop_on_nonfinite_stops_before_the_update_is_applied(tmp_path):
    """With stop_on_nonfinite=True the NaN step's update is not applied:
    the weights are those after the steps before it, and fit stops."""
    x, y = real_models.digits(6 * BATCH, np.random.default_rng(0))
    x = x.copy()
    x[2 * BATCH + 1] = -5.0
    lensed = real_models.log_input_mlp("mixed_bfloat16")
    lensed.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    with pytest.warns(safety.GradLensWarning, match="stop_on_nonfinite"):
        lensed.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
                   callbacks=[GradLensCallback(str(tmp_path / "run"), gradient_every=0, compare_every=0,
                                               stop_on_nonfinite=True)])
    plain = real_models.log_input_mlp("mixed_bfloat16")
    plain.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    plain.fit(x[:2 * BATCH], y[:2 * BATCH], batch_size=BATCH, epochs=1, verbose=0, shuffle=False)
    for a, b in zip(plain.trainable_variables, lensed.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert all(np.isfinite(v.numpy()).all() for v in lensed.trainable_variables)
    assert int(lensed.optimizer.iterations.numpy()) == 2
    found, _, _ = _replay_of(tmp_path)
    assert [f["step"] for f in found] == [2]


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_custom_loop_checks_and_replays_before_applying(tmp_path, mode):
    """The custom-loop helpers: all_finite on every step, replay_nonfinite
    on the first that is not, before the update."""
    x, y = real_models.digits(4 * BATCH, np.random.default_rng(0))
    x = x.copy()
    x[BATCH + 2] = -5.0
    model = real_models.log_input_mlp("mixed_bfloat16")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    optimizer = keras.optimizers.Adam()
    lens = GradLens(str(tmp_path / "run"), gradient_every=1)

    def step(xb, yb, s):
        seeds = lens.seed_states(model)
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=xb, y=yb, y_pred=model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        finite = lens.all_finite(grads, loss)
        if mode == "eager":
            if not bool(finite):
                return lens.replay_nonfinite(model, xb, yb, s, seeds=seeds)
            optimizer.apply(grads, model.trainable_variables)
            return None

        def replay():
            lens.replay_nonfinite(model, xb, yb, s, seeds=seeds)
            return tf.constant(True)

        def update():
            optimizer.apply(grads, model.trainable_variables)
            return tf.constant(False)

        return tf.cond(finite, update, replay)

    run = step if mode == "eager" else tf.function(step)
    verdicts = []
    for s in range(4):
        out = run(tf.constant(x[s * BATCH:(s + 1) * BATCH]), tf.constant(y[s * BATCH:(s + 1) * BATCH]),
                  s if mode == "eager" else tf.constant(s, tf.int64))
        verdicts.append(out)
        if (mode == "eager" and out is not None) or (mode == "graph" and bool(out)):
            break
    lens.flush()
    assert len(verdicts) == 2
    if mode == "eager":
        assert verdicts[1]["verdict"] == replays.NOT_PRECISION and verdicts[1]["candidate"]["row"] == "log_inputs"
    found, _, _ = _replay_of(tmp_path)
    assert [(f["step"], f["verdict"]) for f in found] == [(1, replays.NOT_PRECISION)]


def _checked_tensors():
    """Tensors for the per-step check: every dtype, a NaN, an infinity, the
    largest finite value, a subnormal or -0 at a tensor's first, middle or
    last element, empty tensors."""
    rng = np.random.default_rng(7)
    out = []
    largest = {"float32": np.float32(3.4028235e38), "bfloat16": ml_dtypes.bfloat16(3.3895e38),
               "float16": np.float16(65504), "float64": np.float64(1.7976931348623157e308)}
    for dtype in ("float32", "bfloat16", "float16", "float64"):
        np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
        for n in (0, 1, 9, 65536, 65537, 200_003):
            for spoiler in (None, np.nan, np.inf, -np.inf, "largest", "subnormal", "-0"):
                a = rng.normal(size=n).astype(np_dtype)
                for at in ((0, n - 1, n // 2) if n else ()):
                    b = a.copy()
                    if spoiler == "largest":
                        b[at] = -largest[dtype]
                    elif spoiler == "subnormal":
                        b[at] = np.finfo(np.float16).smallest_subnormal if dtype == "float16" else 1e-40
                    elif spoiler == "-0":
                        b[at] = -0.0
                    elif spoiler is not None:
                        b[at] = spoiler
                    out.append(b)
                if not n:
                    out.append(a)
    return out


def test_the_step_check_marks_exactly_the_tensors_that_hold_a_nan_or_an_infinity():
    """The check of every train step (``forensics.sums``): not finite for a
    tensor with a NaN or an infinity anywhere, finite otherwise (the
    largest finite values of every dtype, float64's too, and subnormals
    are finite), None left out, an IndexedSlices judged by its values."""
    arrays = _checked_tensors()
    tensors = [tf.constant(a) for a in arrays]
    slices = tf.IndexedSlices(tf.constant([[1.0, np.inf]], tf.float32), tf.constant([3]), tf.constant([5, 2]))
    got = tf.function(forensics.sums, autograph=False)(tensors + [None, slices]).numpy()
    expected = [not np.all(np.isfinite(np.asarray(a, np.float64))) for a in arrays] + [True]
    assert got.shape == (len(arrays) + 1,)
    assert (~np.isfinite(got)).tolist() == expected
    assert sum(expected) > len(expected) // 3  # the case list holds both answers

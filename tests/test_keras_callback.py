"""GradLensCallback under model.fit: logged steps, values, restoration."""

import numpy as np
import pytest
import tensorflow as tf

from divergence_reference import records_of_kind
from readback import read_records
from tb_gradlens import compare
from tb_gradlens import demo
from tb_gradlens import metadata
from tb_gradlens.keras import GradLensCallback
from tb_gradlens.keras import Schedule

STEPS_PER_EPOCH = 5
BATCH = 16


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
        variables=r"kernel$",
    )
    model.fit(x, y, batch_size=BATCH, epochs=2, verbose=0, shuffle=False, callbacks=[callback])
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
    assert update_steps == grad_steps
    for datum in update_data:
        assert (datum.numpy[:, 0] > 0).all() and ((0 <= datum.numpy[:, 2]) & (datum.numpy[:, 2] <= 1)).all()

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
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=100, compare_every=0, histogram=False)
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
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, compare_every=1)
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

"""Shadow-step comparisons: Keras models and custom loss functions."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from tests.support.divergence_reference import np_divergence, records_of_kind
from tests.support.readback import read_records
from tb_gradlens import compare
from tb_gradlens import demo
from tb_gradlens import metadata
from tb_gradlens.keras import GradLens

pytestmark = [pytest.mark.slow]  # trains Keras models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
METRICS = len(metadata.DIVERGENCE_METRICS)  # the columns before the stable-rounding one


@pytest.fixture(scope="module")
def batch():
    x, y = demo.load_digits_784()
    return tf.constant(x[:32]), tf.constant(y[:32])


def _mlp(policy):
    model = demo.build_mlp(policy, seed=3)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


def _grads(model, x, y):
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True))
    return loss, tape.gradient(loss, model.trainable_variables)


def _policies(model):
    return [(layer, layer.dtype_policy) for layer in compare.model_layers(model)]


def test_float32_vs_float32_is_exactly_zero(batch):
    model = _mlp("float32")
    result = compare.compare_keras(model, *batch, reference="float32", candidate="float32")
    # float32 against float32: nothing rounds more, so the stable column is the reference computed
    # twice (its repeat, issue 39): 0 too, float32 repeats itself on this CPU; no half batch (NaN).
    expected = np.tile([0, 1, 1, 0, 0, 0, 0, 0, 0, 0, np.nan], (6, 1))
    np.testing.assert_array_equal(result.gradient_divergence.numpy(), expected)
    np.testing.assert_array_equal(result.activation_divergence.numpy(), np.tile(expected[0], (4, 1)))
    assert result.loss.numpy()[0, 2] == 0


def test_cancellation_flagged_by_float32_vs_float64():
    def loss_fn(weights, dtype):
        x = tf.cast(weights[0], dtype)
        return tf.square(x * tf.constant(1e10, dtype) + tf.constant(1.0, dtype) - tf.constant(1e10, dtype))

    result = compare.compare_fn(loss_fn, [tf.Variable(1.0)], reference="float64", candidate="float32")
    assert result.reference_gradients[0].dtype == tf.float64
    assert float(result.reference_gradients[0]) == 2e10  # analytic: 2 (x*1e10 + 1 - 1e10) 1e10
    assert float(result.candidate_gradients[0]) == 0.0  # float32: 1e10 + 1 == 1e10
    got = result.gradient_divergence.numpy()[0, :METRICS]
    np.testing.assert_allclose(got, np_divergence([0.0], [2e10], "float32"), rtol=1e-6)
    assert got[0] == 1.0 and got[7] == 1.0  # rel_l2 = 1, flush_to_zero = 1


def test_compare_fn_requires_using_weights():
    v = tf.Variable([1.0, 2.0])
    with pytest.raises(ValueError, match="compute with `weights`"):
        compare.compare_fn(lambda w, dt: tf.reduce_sum(tf.cast(v, dt)), [v])


def test_mlp_bf16_vs_f32_logged_divergence_equals_recomputation(batch, tmp_path):
    x, y = batch
    model = _mlp("mixed_bfloat16")
    reference_model = _mlp("float32")  # an independent float32 twin, same weights
    reference_model.set_weights(model.get_weights())
    lens = GradLens(str(tmp_path / "run"), compare_every=5)
    assert lens.compare_keras(model, x, y, step=3) is False  # not a logged step: no work
    assert lens.compare_keras(model, x, y, step=5)
    lens.log_dtypes(model, x, step=5)
    lens.flush()

    cand_loss, cand = _grads(model, x, y)
    ref_loss, ref = _grads(reference_model, x, y)
    records = read_records(str(tmp_path))
    (record, data), = records_of_kind(records, "run", metadata.DIVERGENCE).values()
    assert [d.step for d in data] == [5]
    assert record.rows == tuple(v.path for v in model.trainable_variables)
    assert record.extras["candidate"] == {
        "label": "mixed_bfloat16", "policy": "mixed_bfloat16", "compute_dtype": "bfloat16",
        "variable_dtype": "float32", "device": "default", "jit_compile": False,
        "execution": "eager", "gradients": "recomputed"}  # an eager call: recomputed eagerly
    assert record.extras["reference"]["policy"] == "float32"
    assert record.extras["reference"]["compute_dtype"] == "float32"
    assert record.extras["row_dtypes"] == ["bfloat16"] * len(record.rows)
    want = np.stack([np_divergence(c.numpy(), r.numpy(), "bfloat16") for c, r in zip(cand, ref)])
    np.testing.assert_allclose(data[0].numpy[:, :METRICS], want.astype(np.float32), rtol=1e-5)
    assert (want[:, 0] > 1e-3).all()  # a real bf16 divergence, not noise

    (loss_record, loss_data), = records_of_kind(records, "run", metadata.LOSS_COMPARISON).values()
    np.testing.assert_allclose(loss_data[0].numpy[0, :2], [float(ref_loss), float(cand_loss)], rtol=1e-6)

    (act_record, act_data), = records_of_kind(records, "run", metadata.ACTIVATION_DIVERGENCE).values()
    assert act_record.rows == ("mlp/dense_1", "mlp/dense_2", "mlp/logits", "predictions")
    h_c, h_r = x, x
    for layer, layer_r, row in zip(model.layers, reference_model.layers, act_data[0].numpy[:, :METRICS]):
        h_c, h_r = layer(h_c), layer_r(h_r)
        np.testing.assert_allclose(row, np_divergence(h_c.numpy(), h_r.numpy(), h_c.dtype.name), rtol=1e-5)

    (dt_record, dt_data), = records_of_kind(records, "run", metadata.DTYPES).values()
    import json
    dmap = json.loads(dt_data[0].numpy.item().decode())
    by_path = {entry["path"]: entry for entry in dmap["layers"]}
    assert by_path["mlp/dense_1"]["output_dtype"] == "bfloat16"
    assert by_path["mlp/dense_1"]["variable_dtype"] == "float32"
    assert by_path["predictions"]["output_dtype"] == "float32"
    assert dmap["model_output_dtype"] == "float32"


def test_policies_restored_after_comparison_and_after_error(batch):
    model = _mlp("mixed_bfloat16")
    before = _policies(model)
    compare.compare_keras(model, *batch, reference="float64")
    assert _policies(model) == before
    assert all(p[1] is q[1] for p, q in zip(before, _policies(model)))
    bad_y = tf.zeros([3], tf.int32)  # wrong batch size: the loss raises
    with pytest.raises(Exception):
        compare.compare_keras(model, batch[0], bad_y, reference="float32", candidate="bfloat16")
    assert all(p[1] is q[1] for p, q in zip(before, _policies(model)))
    assert not any("call" in layer.__dict__ for layer in compare.model_layers(model))
    weights = [w.numpy().copy() for w in model.weights]
    compare.compare_keras(model, *batch)  # stateless: weights untouched
    for w, v in zip(weights, model.weights):
        np.testing.assert_array_equal(w, v.numpy())


def test_xla_vs_not_is_compared_and_recorded(batch, tmp_path):
    x, y = batch
    model = _mlp("float32")
    xla = compare.Variant(None, jit_compile=True)
    result = compare.compare_keras(model, x, y, reference=compare.Variant(None), candidate=xla)
    assert result.candidate_extras["jit_compile"] is True
    assert result.reference_extras["jit_compile"] is False
    _, ref = _grads(model, x, y)
    xla_grads = tf.function(lambda a, b: _grads(model, a, b)[1], jit_compile=True)(x, y)
    want = np.stack([np_divergence(c.numpy(), r.numpy(), "float32") for c, r in zip(xla_grads, ref)])
    np.testing.assert_allclose(result.gradient_divergence.numpy()[:, :METRICS], want.astype(np.float32),
                               rtol=1e-4, atol=1e-12)
    assert (want[:, 0] < 1e-5).all()
    with tf.summary.create_file_writer(str(tmp_path / "xla")).as_default():
        result.write(step=0)
    (record, _), = records_of_kind(read_records(str(tmp_path)), "xla", metadata.DIVERGENCE).values()
    assert record.extras["candidate"]["jit_compile"] is True


def test_two_logical_cpus_compare_to_exactly_zero():
    script = textwrap.dedent(
        """
        import json, numpy as np, tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from tb_gradlens import compare, demo
        x, y = demo.load_digits_784()
        model = demo.build_mlp("mixed_bfloat16", seed=1)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        result = compare.compare_keras(
            model, tf.constant(x[:16]), tf.constant(y[:16]),
            reference=compare.Variant(None, device="/CPU:0"),
            candidate=compare.Variant(None, device="/CPU:1"))
        print(json.dumps({
            "devices": [d.name for d in tf.config.list_logical_devices("CPU")],
            "grads": result.gradient_divergence.numpy().tolist(),
            "acts": result.activation_divergence.numpy().tolist(),
            "candidate": result.candidate_extras,
            "placed": result.candidate_gradients[0].device}))
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(out["devices"]) == 2
    assert out["placed"].endswith("CPU:1")
    assert out["candidate"]["device"] == "/CPU:1"
    # Both sides round alike (another device): the stable column is the reference's repeat (issue
    # 39), 0 here as every other metric of the difference.
    zero = [0, 1, 1, 0, 0, 0, 0, 0, 0]
    assert [row[:METRICS] for row in out["grads"]] == [zero] * 6
    assert [row[:METRICS] for row in out["acts"]] == [zero] * 4
    assert all(row[METRICS] == 0 for row in out["grads"] + out["acts"])


# ---------------------------------------------------------------------------
# Issue 13: one random draw for both sides; recurrent models.
# ---------------------------------------------------------------------------

from evaluation import real_models
from tests.support import twin_step  # noqa: E402


def _zoo(name, policy, batch=8):
    x, y = real_models.ZOO[name].data(batch, np.random.default_rng(0))
    return real_models.build_compiled(name, policy), x, y


def _twin_divergence(name, model, x, y, mode):
    """Candidate (the model's policy) and float32 reference twins sharing
    their random draws: float64 NumPy metrics per variable, and the losses."""
    workload = real_models.ZOO[name]
    weights = twin_step.weights_of(model)
    policy = model.dtype_policy.name
    candidate = twin_step.build_twin(workload.build, policy, weights, workload.loss)
    reference = twin_step.build_twin(workload.build, "float32", weights, workload.loss)
    draws = twin_step.SharedDraws()
    cand_loss, cand = twin_step.twin_step(candidate, x, y, mode, draws=draws)
    ref_loss, ref = twin_step.twin_step(reference, x, y, mode, draws=draws)
    dtype = {"mixed_bfloat16": "bfloat16", "float32": "float32"}[policy]
    return np.stack([np_divergence(c, r, dtype) for c, r in zip(cand, ref)]), (ref_loss, cand_loss)


@pytest.mark.parametrize("name", ["lstm", "gru", "bilstm", "random_layers"])
def test_compare_keras_inside_tf_function_shares_random_draws(name):
    """Recurrent models (input and recurrent dropout) and every random layer:
    compare_keras inside tf.function works and equals twins that share
    their dropout masks and noise."""
    model, x, y = _zoo(name, "mixed_bfloat16")

    @tf.function
    def compare_step(x, y):
        result = compare.compare_keras(model, x, y, reference="float32", activations=True)
        return result.gradient_divergence, result.loss, result.activation_divergence

    got, loss, acts = compare_step(tf.constant(x), tf.constant(y))
    want, (ref_loss, cand_loss) = _twin_divergence(name, model, x, y, "graph")
    np.testing.assert_allclose(got.numpy()[:, :METRICS], want.astype(np.float32), rtol=2e-4, atol=1e-12)
    np.testing.assert_allclose(loss.numpy()[0, :2], [ref_loss, cand_loss], rtol=1e-6)
    assert acts.shape[0] > 0


@pytest.mark.parametrize("jit", [(None, None), (None, True), (True, None)])
def test_float32_vs_float32_draws_one_mask_also_across_xla(jit):
    """Every random layer, float32 model against float32: with one draw for
    both sides the passes compute the same thing (exactly, or to XLA's
    rounding when one side is compiled); with two draws rel_l2 would be ~1."""
    model, x, y = _zoo("random_layers", "float32")
    reference = compare.Variant("float32", jit_compile=jit[0])
    candidate = compare.Variant(None, jit_compile=jit[1])
    result = compare.compare_keras(model, tf.constant(x), tf.constant(y), reference=reference, candidate=candidate)
    rel_l2 = result.gradient_divergence.numpy()[:, 0]
    if jit == (None, None):
        assert (rel_l2 == 0).all(), rel_l2
    else:
        # The attention key bias's true gradient is zero (softmax ignores
        # it): XLA's rounding noise over float32's is not a mask question.
        signal = [i for i, p in enumerate(result.variable_rows) if not p.endswith("key/bias")]
        assert (rel_l2[signal] < 1e-4).all(), dict(zip(result.variable_rows, rel_l2))


def test_a_custom_loop_compares_an_unbuilt_model_from_its_first_built_step(tmp_path):
    """A subclassed model is built by its first step: compared before it, the passes built it
    inside their traces and every later comparison failed (candidate and reference gradients of
    other sizes, a GradLensWarning each run).  Before it is built there is nothing to compare."""
    import warnings

    from tb_gradlens import safety

    model = real_models.subclassed("mixed_bfloat16")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    x, y = real_models.ZOO["subclassed"].data(16, np.random.default_rng(0))
    lens = GradLens(str(tmp_path / "run"), compare_every=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert lens.compare_keras(model, tf.constant(x), tf.constant(y), step=0) is False
        model.train_on_batch(x, y)
        for step in (1, 2):
            assert lens.compare_keras(model, tf.constant(x), tf.constant(y), step=step)
        lens.flush()
    assert not [w for w in caught if issubclass(w.category, safety.GradLensWarning)], [str(w.message) for w in caught]
    (_, data), = records_of_kind(read_records(str(tmp_path)), "run", metadata.DIVERGENCE).values()
    assert [d.step for d in data] == [1, 2]


def test_an_eager_comparison_of_a_recurrent_model_pairs_its_layers(tmp_path):
    """A GRU computes one cell call per time step eagerly but one traced: the
    comparison's later traces must not replace the rows its reference ran
    with (it failed with 'pair ... has 32 candidate and 256 reference
    elements' and logged nothing)."""
    import warnings
    import keras
    keras.utils.set_random_seed(0)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        inputs = keras.Input((8,), dtype="int32")
        h = keras.layers.Embedding(50, 8, mask_zero=True, name="embedding")(inputs)
        h = keras.layers.GRU(8, name="gru")(h)
        outputs = keras.layers.Dense(2, name="logits", dtype="float32")(h)
        model = keras.Model(inputs, outputs)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    model.compile(optimizer="adam",
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = rng.integers(1, 50, size=(4, 8)).astype("int32")
    x[:, 6:] = 0  # padding, masked
    y = rng.integers(0, 2, size=(4,)).astype("int32")
    lens = GradLens(str(tmp_path / "run"), compare_every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert lens.compare_keras(model, tf.constant(x), tf.constant(y), step=0)
    lens.flush()
    records = read_records(str(tmp_path))
    (act_record, act_data), = records_of_kind(records, "run", metadata.ACTIVATION_DIVERGENCE).values()
    assert {"embedding", "gru", "logits"} <= set(act_record.rows)
    assert np.isfinite(act_data[0].numpy[:, 0]).all()
    (grad_record, _), = records_of_kind(records, "run", metadata.DIVERGENCE).values()
    assert len(grad_record.rows) == len(model.trainable_variables)


@pytest.mark.parametrize("eager", [True, False])
def test_an_unbuilt_subclassed_model_is_built_as_keras_builds_it_then_compared(eager):
    """compare_keras on a model never called: built on the batch first, its
    initializers drawing as Keras draws them (a pass that built it compared
    no gradient eagerly, and traced replayed an initializer's draw made in
    Keras' scratch graph: InaccessibleTensorError)."""
    workload = real_models.ZOO["subclassed"]  # unbuilt before its first batch

    def build():
        model = workload.build("mixed_bfloat16", seed=5)
        model.compile(optimizer="adam", loss=workload.loss)
        return model

    x, y = (tf.constant(a) for a in workload.data(8, np.random.default_rng(0)))
    compared, plain = build(), build()
    comparison = compare.compare_keras(compared, x, y, eager=eager)
    plain(x)
    assert len(comparison.candidate_gradients) == len(compared.trainable_variables) == 4
    for a, b in zip(compared.weights, plain.weights):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.isfinite(comparison.gradient_divergence.numpy()[:, 0]).all()

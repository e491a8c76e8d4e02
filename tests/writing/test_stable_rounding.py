"""The stable-rounding pass (tb_gradlens.compare.stable): the float32 reference
rounded to bfloat16 exactly where a mixed_bfloat16 step rounds between layers.

Its divergence, written in the ``stable_rel_l2`` / ``stable_rel_error``
columns, is what the analysis judges every compared row by, so it must be what
its definition says: checked against an independent NumPy recomputation of the
README MLP (round-to-nearest-even to bfloat16 at every Dense layer's inputs,
weights and outputs, and at the gradients at those points), on real models it
must track a healthy candidate and stay far below a faulty one, and it must
leave the model as it found it.
"""

import numpy as np
import pytest
import tensorflow as tf

from tests.support.divergence_reference import records_of_kind
from tests.support.readback import read_records
from tb_gradlens import compare
from tb_gradlens import demo
from tb_gradlens import metadata
from tb_gradlens.keras import GradLens

from evaluation import real_models

pytestmark = [pytest.mark.slow]  # trains Keras models

METRICS = len(metadata.DIVERGENCE_METRICS)
STABLE = metadata.DIVERGENCE_COLUMNS.index(metadata.STABLE_REL_L2)
HALF = metadata.DIVERGENCE_COLUMNS.index(metadata.HALF_BATCH_REL_L2)
LOSS_STABLE = metadata.LOSS_COMPARISON_COLUMNS.index(metadata.STABLE_REL_ERROR)
LOSS_HALF = metadata.LOSS_COMPARISON_COLUMNS.index(metadata.HALF_BATCH_REL_ERROR)


def round_bf16(x):
    """float64 values rounded to float32, then to bfloat16 (nearest, ties to even)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32).astype(np.float64)


def mlp_step(weights, x, y, rounded):
    """(loss, [dW1, db1, dW2, db2, dW3, db3], [outputs of dense_1, dense_2, logits,
    predictions]) of the README MLP in float64; with ``rounded`` the three bfloat16
    Dense layers round their inputs, weights, outputs and the gradients there."""
    r = round_bf16 if rounded else (lambda a: a)
    w = [np.asarray(v, np.float64) for v in weights]
    kernels, biases = [r(k) for k in w[0::2]], [r(b) for b in w[1::2]]
    inputs, pre, outs = [], [], []
    h = np.asarray(x, np.float64)
    for i in range(3):
        inputs.append(r(h))
        z = inputs[-1] @ kernels[i] + biases[i]
        pre.append(z)
        h = r(np.maximum(z, 0.0) if i < 2 else z)
        outs.append(h)
    p = np.exp(h - h.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    n = len(y)
    loss = -np.mean(np.log(p[np.arange(n), y]))
    g = p.copy()
    g[np.arange(n), y] -= 1.0
    g /= n
    grads = [None] * 6
    for i in (2, 1, 0):
        g = r(g)  # the gradient at the layer's (rounded) output
        if i < 2:
            g = g * (pre[i] > 0)
        grads[2 * i] = r(inputs[i].T @ g)
        grads[2 * i + 1] = r(g.sum(axis=0))
        g = r(g @ kernels[i].T)  # at the layer's (rounded) input
    return loss, grads, outs + [p]


def rel_l2(c, r):
    return float(np.linalg.norm(np.ravel(c - r)) / np.linalg.norm(np.ravel(r)))


@pytest.fixture(scope="module")
def batch():
    x, y = demo.load_digits_784()
    return x[:64], y[:64]


def test_the_stable_column_equals_a_numpy_recomputation_of_its_definition(batch, tmp_path):
    x, y = batch
    model = demo.build_mlp("mixed_bfloat16", seed=3)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    lens = GradLens(str(tmp_path / "run"), compare_every=1)
    assert lens.compare_keras(model, tf.constant(x), tf.constant(y), step=0)
    lens.flush()
    weights = [v.numpy() for v in model.trainable_variables]
    ref_loss, ref_grads, ref_outs = mlp_step(weights, x, y, rounded=False)
    st_loss, st_grads, st_outs = mlp_step(weights, x, y, rounded=True)

    found = read_records(str(tmp_path))
    (_, grads), = records_of_kind(found, "run", metadata.DIVERGENCE).values()
    (_, acts), = records_of_kind(found, "run", metadata.ACTIVATION_DIVERGENCE).values()
    (_, loss), = records_of_kind(found, "run", metadata.LOSS_COMPARISON).values()
    want = [rel_l2(s, r) for s, r in zip(st_grads, ref_grads)]
    np.testing.assert_allclose(grads[0].numpy[:, STABLE], want, rtol=2e-3)
    want = [rel_l2(s, r) for s, r in zip(st_outs, ref_outs)]
    np.testing.assert_allclose(acts[0].numpy[:, STABLE], want, rtol=2e-3)
    np.testing.assert_allclose(loss[0].numpy[0, LOSS_STABLE], abs(st_loss - ref_loss) / ref_loss, rtol=2e-2, atol=1e-7)
    # The half batch: the float32 gradient of the first 32 examples' mean loss against the batch's.
    half_loss, half_grads, _ = mlp_step(weights, x[:32], y[:32], rounded=False)
    np.testing.assert_allclose(grads[0].numpy[:, HALF], [rel_l2(h, r) for h, r in zip(half_grads, ref_grads)],
                               rtol=1e-4)
    np.testing.assert_allclose(loss[0].numpy[0, LOSS_HALF], abs(half_loss - ref_loss) / ref_loss, rtol=1e-4)
    assert np.isnan(acts[0].numpy[:, HALF]).all()  # layer outputs have no sampling noise of their own
    # A healthy model rounds as stably as the pass: the candidate's divergence is close to it.
    ratio = grads[0].numpy[:, 0] / grads[0].numpy[:, STABLE]
    assert (ratio > 0.3).all() and (ratio < 3).all(), ratio


@pytest.mark.parametrize("eager", [True, False])
def test_the_half_batch_of_an_image_to_image_loss_equals_numpy(tmp_path, eager):
    # A per-pixel MSE (a denoiser's, a U-Net's): the loss has one value per pixel,
    # so the half batch's weights must broadcast over them (they were dropped,
    # and the gradients' sampling noise with them).
    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4, 4, 3)).astype(np.float32)
    y = rng.normal(size=(8, 4, 4, 2)).astype(np.float32)
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4, 4, 3)), keras.layers.Dense(2, dtype="mixed_bfloat16")])
    model.compile(optimizer="sgd", loss="mse")
    lens = GradLens(str(tmp_path / "run"), compare_every=1)
    step = (lambda f: f) if eager else tf.function
    assert step(lambda: lens.compare_keras(model, tf.constant(x), tf.constant(y), step=0))()
    lens.flush()
    (_, grads), = records_of_kind(read_records(str(tmp_path)), "run", metadata.DIVERGENCE).values()

    kernel, bias = (v.numpy().astype(np.float64) for v in model.trainable_variables)

    def gradients(xs, ys):  # of mean((x W + b - y)^2) over every element
        g = 2.0 * (xs.astype(np.float64) @ kernel + bias - ys) / ys.size
        return [np.einsum("nhwi,nhwo->io", xs, g), g.sum(axis=(0, 1, 2))]

    full, half = gradients(x, y), gradients(x[:4], y[:4])
    np.testing.assert_allclose(grads[0].numpy[:, HALF], [rel_l2(h, f) for h, f in zip(half, full)], rtol=1e-4)


def _stable_of(model, x, y, **kwargs):
    result = compare.compare_keras(model, tf.constant(x), tf.constant(y), **kwargs)
    rows = dict(zip(result.activation_rows, result.activation_divergence.numpy()))
    return result, rows


def test_a_faulty_layer_diverges_far_beyond_stable_rounding_a_healthy_one_does_not():
    """A variance as E[x^2] - E[x]^2 in bfloat16 on inputs of mean 16 loses every
    digit; a stable normalization would not: the candidate is hundreds of times
    the stable pass at that layer.  The healthy layers around it stay close."""
    rng = np.random.default_rng(0)
    x, y = real_models.FAULT_ZOO["naive_norm_mlp"].data(64, rng)
    faulty = real_models.naive_norm_mlp("mixed_bfloat16")
    faulty.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    _, rows = _stable_of(faulty, x, y)
    norm = rows["naive_norm"]
    assert norm[0] > 100 * norm[STABLE], norm
    healthy = real_models.mlp("mixed_bfloat16")
    healthy.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    x, y = real_models.digits(64, rng)
    _, rows = _stable_of(healthy, x, y)
    for name, row in rows.items():
        assert row[0] <= 3 * row[STABLE] + 1e-7, (name, row)


@pytest.mark.parametrize("jit", [False, True])
def test_the_pass_runs_traced_and_under_xla_and_leaves_the_model_as_it_was(jit):
    model, x, y = real_models.build_compiled("lstm", "mixed_bfloat16"), *real_models.ZOO["lstm"].data(
        8, np.random.default_rng(1))
    policies = [(layer, layer.dtype_policy) for layer in compare.model_layers(model)]
    weights = [w.numpy().copy() for w in model.weights]
    reference = compare.Variant("float32", jit_compile=jit or None)

    @tf.function(jit_compile=jit)
    def step(x, y):
        result = compare.compare_keras(model, x, y, reference=reference, surrounding_jit=jit)
        return result.gradient_divergence, result.activation_divergence, result.loss

    grads, acts, loss = step(tf.constant(x), tf.constant(y))
    for table, column in ((grads.numpy(), STABLE), (acts.numpy(), STABLE), (loss.numpy(), LOSS_STABLE),
                          (grads.numpy(), HALF), (loss.numpy(), LOSS_HALF)):
        assert np.isfinite(table[:, column]).all() and (table[:, column] >= 0).all()
    assert (grads.numpy()[:, STABLE] > 0).any() and (grads.numpy()[:, HALF] > 0).all()
    assert all(layer.dtype_policy is policy for layer, policy in policies)
    assert not any("call" in layer.__dict__ for layer in compare.model_layers(model))
    for w, v in zip(weights, model.weights):
        np.testing.assert_array_equal(w, v.numpy())


def test_where_both_sides_round_alike_the_stable_pass_is_the_reference_again():
    """Nothing to round between two sides that round alike: the stable
    pass is the reference computed a second time (its repeat, issue 39)."""
    model = real_models.build_compiled("mlp", "mixed_bfloat16")
    repeat = compare.stable_pass_for(model, compare.Variant(None), compare.Variant(None, jit_compile=True))
    assert isinstance(repeat, compare.RepeatPass) and repeat.variant == compare.Variant(None)
    assert isinstance(compare.stable_pass_for(model, "float32", None), compare.StableRoundingPass)
    assert isinstance(compare.stable_pass_for(model, "float64", "float32"), compare.StableRoundingPass)
    f32 = real_models.build_compiled("mlp", "float32")
    assert isinstance(compare.stable_pass_for(f32, "float32", None), compare.RepeatPass)


def test_a_layer_hard_coded_in_bfloat16_is_named_it_cannot_be_measured(tmp_path):
    """A layer that casts to tf.bfloat16 itself computes in bfloat16 in the float32 reference too:
    no comparison measures its error.  The comparison finds it in the traced reference and the
    alerts name it (hardcoded_16_bit), with no divergence alert pretending to judge it."""
    import keras

    from tests.support.readback import alerts_of_two_comparisons

    class RawBfloat16(keras.layers.Layer):
        def build(self, shape):
            self.w = self.add_weight(shape=(shape[-1], 8), initializer="glorot_uniform", name="w")

        def call(self, x):
            y = tf.matmul(tf.cast(x, tf.bfloat16), tf.cast(self.w, tf.bfloat16))
            return tf.cast(y, self.compute_dtype)

    with real_models.global_policy("mixed_bfloat16"):
        inputs = keras.Input((6,))
        h = keras.layers.Dense(8, name="dense")(inputs)
        h = RawBfloat16(name="raw")(h)
        out = keras.layers.Activation("softmax", dtype="float32")(keras.layers.Dense(3, name="logits")(h))
    model = keras.Model(inputs, out)
    model.compile("sgd", "sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 6)).astype("float32"), rng.integers(0, 3, 16)
    found = alerts_of_two_comparisons(model, x, y, tmp_path)
    (alert,) = [a for a in found if a.code == "hardcoded_16_bit"]
    assert alert.variables == ["raw"] and "whatever their dtype policy" in alert.explanation
    assert alert.severity == "info"  # what no comparison can judge is said, not a verdict


def test_random_draws_in_a_float32_reference_are_no_layer_hard_coded_in_16_bits(tmp_path):
    """The reference of the callback's comparison draws the step's random numbers again, in the
    dtype each layer computes in as configured (bfloat16): an LSTM's recurrent dropout and
    Dropout's mask ops are no layer computing in 16 bits (they were named hardcoded_16_bit)."""
    from tb_gradlens import analysis
    from tb_gradlens.keras import GradLensCallback
    from tests.support.readback import source_of

    model = real_models.build_compiled("random_layers", "mixed_bfloat16")
    x, y = real_models.ZOO["random_layers"].data(32, np.random.default_rng(0))
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False,
              callbacks=[GradLensCallback(str(tmp_path / "run"), gradient_every=2, compare_every=2)])
    found, problems = analysis.run_alerts(source_of(str(tmp_path)))
    assert problems == [] and not [a for a in found if a.code == "hardcoded_16_bit"], found

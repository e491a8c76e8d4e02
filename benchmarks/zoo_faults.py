"""Real models with one injected numerical fault each: the zoo's faults.

``FAULTS[name]`` is a ``Fault(workload, code, row, policy, note)``: the
``real_models.Workload`` of the faulty model (conventions of
``zoo_models``), the tb_gradlens alert code the fault must raise, a regex
that the faulty layer's or variable's path matches (Keras 3 ``layer.path``
/ ``variable.path``), and the policy it is trained under.  Each fault is a
custom layer (or Keras ops where noted) with an obvious name, in a model of
``zoo_models`` or a small variant of one, and its data make it bite from
the first step.
"""

import collections

import numpy as np

import _paths  # noqa: E402,F401 - the repository root and benchmarks/ on sys.path

import zoo_models  # noqa: E402
from zoo_models import SPARSE_CE, Workload, real_models  # noqa: E402

Fault = collections.namedtuple("Fault", ("workload", "code", "row", "policy", "note"))

BF16, F16 = "mixed_bfloat16", "mixed_float16"

_LAYER_CLASSES = {}


def layer_classes():
    """{name: class} of the faulty layers (Keras imported at first use)."""
    if _LAYER_CLASSES:
        return _LAYER_CLASSES
    import keras
    from keras import ops

    class CumsumMean(keras.layers.Layer):
        """The running mean over time as cumsum(x) / t, in the compute dtype: in
        bfloat16 the running sum stops growing once it is 256x the increments."""

        def call(self, x):
            steps = ops.cast(ops.arange(1, ops.shape(x)[1] + 1), x.dtype)
            return ops.cumsum(x, axis=1) / steps[None, :, None]

    class UnscaledAttention(keras.layers.Layer):
        """Pointer attention of item 0 over items 1..n, softmax(gain * q k^T)
        with no 1/sqrt(d), in the compute dtype: on items sharing a large common
        component the logits are ~200 but only ~10 apart from each other, and
        bfloat16 rounds them to 1."""

        def __init__(self, units, gain=64.0, **kwargs):
            super().__init__(**kwargs)
            self.gain = gain
            self.query = keras.layers.Dense(units, dtype=self.dtype_policy, name="query")
            self.key = keras.layers.Dense(units, dtype=self.dtype_policy, name="key")

        def call(self, items):
            q = self.query(items[:, :1])
            q = q * ops.cast(self.gain, q.dtype)
            logits = ops.matmul(q, ops.transpose(self.key(items[:, 1:]), (0, 2, 1)))
            return ops.softmax(logits[:, 0], axis=-1)

    class SumSquares(keras.layers.Layer):
        """Log frame energy, log(1 + sum(x^2) / n) over the last axis, summing
        first: in float16 the sum overflows 65504 once |x| ~ 50 over 256 values."""

        def call(self, x):
            energy = ops.sum(ops.square(x), axis=-1, keepdims=True)
            return ops.log(1.0 + energy / ops.cast(ops.shape(x)[-1], x.dtype))

    class HardcodedBfloat16(keras.layers.Layer):
        """Centres each sequence over time, x - mean_t(x), on tf.cast(x,
        tf.bfloat16) whatever the policy: readings of mean ~300 lose their
        deviations (bfloat16 spacing 2 there), and no policy switch helps."""

        cast_to = "bfloat16"  # the hard-coded dtype (a verification may patch it)

        def call(self, x):
            import tensorflow as tf

            y = tf.cast(x, tf.as_dtype(self.cast_to))
            return tf.cast(y - tf.reduce_mean(y, axis=1, keepdims=True), x.dtype)

    class NaiveLogSumExp(keras.layers.Layer):
        """Softmax as exp(x - log(sum(exp(x)))), the max not subtracted first: on
        logits ~40 the normalizer (~50) is rounded to 0.25 in bfloat16, and every
        probability with it (exp(x - max) / sum is right)."""

        def call(self, x):
            return ops.exp(x - ops.log(ops.sum(ops.exp(x), axis=-1, keepdims=True)))

    class NaiveLog1mSigmoid(keras.layers.Layer):
        """[log(1 - sigmoid(s)), log(sigmoid(s))] by hand: in bfloat16
        sigmoid(s) rounds to 1 for s > ~6, so log(1 - 1) = -inf (log_sigmoid(-s) is right)."""

        def call(self, s):
            p = ops.sigmoid(s)
            return ops.concatenate([ops.log(1.0 - p), ops.log(p)], axis=-1)

    _LAYER_CLASSES.update(
        CumsumMean=CumsumMean, UnscaledAttention=UnscaledAttention, SumSquares=SumSquares,
        HardcodedBfloat16=HardcodedBfloat16, NaiveLogSumExp=NaiveLogSumExp, NaiveLog1mSigmoid=NaiveLog1mSigmoid,
    )
    return _LAYER_CLASSES


def _functional(policy, seed, name, input_shape, body, input_dtype="float32", output="softmax"):
    """A functional model: ``body(x, keras)`` after the Input, then a float32
    output activation "predictions" (``output``)."""
    with zoo_models.building(policy, seed) as keras:
        inputs = keras.Input(input_shape, dtype=input_dtype)
        out = keras.layers.Activation(output, dtype="float32", name="predictions")(body(inputs, keras))
        return keras.Model(inputs, out, name=name)


def naive_std_bilstm(policy, seed=0):
    """Dense (bias 30) -> E[x^2]-E[x]^2 normalization "naive_std" -> Bidirectional LSTM."""

    def body(x, keras):
        x = keras.layers.Dense(32, bias_initializer=keras.initializers.Constant(30.0), name="dense_in")(x)
        x = real_models.layer_classes()["NaiveVarianceNorm"](name="naive_std")(x)
        x = keras.layers.Bidirectional(keras.layers.LSTM(16), name="bilstm")(x)
        return keras.layers.Dense(3, name="logits")(x)

    return _functional(policy, seed, "naive_std_bilstm", (8, 4), body)


def cumsum_mean_conv1d(policy, seed=0, seq=4096):
    """Conv1D (ReLU) -> running mean by cumsum "cumsum_mean" -> strided Conv1D -> pooling."""

    def body(x, keras):
        x = keras.layers.Conv1D(8, 5, padding="causal", activation="relu", name="conv_in")(x)
        x = layer_classes()["CumsumMean"](name="cumsum_mean")(x)
        x = keras.layers.Conv1D(8, 5, strides=4, activation="relu", name="conv_out")(x)
        return keras.layers.Dense(3, name="logits")(keras.layers.GlobalAveragePooling1D(name="pool")(x))

    return _functional(policy, seed, "cumsum_mean_conv1d", (seq, 2), body)


def swamped_efficientnet_v2(policy, seed=0, size=32):
    """EfficientNetV2B0 (no top, average pooling), then (x + 300) - 300 as
    Keras ops (swamping: bfloat16 keeps multiples of 2 there), "head_dense"."""

    def body(x, keras):
        base = keras.applications.EfficientNetV2B0(include_top=False, weights=None, input_tensor=x,
                                                   pooling="avg")
        pooled = keras.ops.subtract(keras.ops.add(base.output, 300.0), 300.0)
        return keras.layers.Dense(10, name="head_dense")(pooled)

    return _functional(policy, seed, "swamped_efficientnet_v2", (size, size, 3), body)


def naive_norm_efficientnet_v2(policy, seed=0, size=32):
    """EfficientNetV2B0 (no top, average pooling), a Dense with bias 30, then
    E[x^2]-E[x]^2 normalization "naive_head_norm" in the head: a deep model
    (~270 layers, grouped by the advisor) with one bad layer near its end."""

    def body(x, keras):
        base = keras.applications.EfficientNetV2B0(include_top=False, weights=None, input_tensor=x,
                                                   pooling="avg")
        h = keras.layers.Dense(64, bias_initializer=keras.initializers.Constant(30.0), name="head_in")(base.output)
        h = real_models.layer_classes()["NaiveVarianceNorm"](name="naive_head_norm")(h)
        return keras.layers.Dense(10, name="head_dense")(h)

    return _functional(policy, seed, "naive_norm_efficientnet_v2", (size, size, 3), body)


def pointer_retrieval(policy, seed=0, candidates=16, features=16):
    """Which of ``candidates`` items matches item 0: "unscaled_attention" -> float32 (linear)."""

    def body(x, keras):
        return layer_classes()["UnscaledAttention"](32, name="unscaled_attention")(x)

    return _functional(policy, seed, "pointer_retrieval", (candidates + 1, features), body, output="linear")


def frame_energy_cnn(policy, seed=0, seq=16, width=256):
    """Audio-like frames: [Dense projection, log energy "sum_squares"] -> Conv1D -> pooling."""

    def body(x, keras):
        projected = keras.layers.Dense(16, name="frame_proj")(x)
        energy = layer_classes()["SumSquares"](name="sum_squares")(x)
        x = keras.layers.Concatenate(name="features")([projected, energy])
        x = keras.layers.Conv1D(8, 3, activation="relu", name="conv")(x)
        return keras.layers.Dense(3, name="logits")(keras.layers.GlobalAveragePooling1D(name="pool")(x))

    return _functional(policy, seed, "frame_energy_cnn", (seq, width), body)


def hardcoded_bf16_cnn(policy, seed=0, seq=64, features=4):
    """Sensor readings -> "hardcoded_bf16" centering -> temporal CNN blocks."""

    def body(x, keras):
        x = layer_classes()["HardcodedBfloat16"](name="hardcoded_bf16")(x)
        x = keras.layers.Conv1D(16, 3, padding="causal", name="tconv")(x)
        x = keras.layers.ReLU(name="relu")(keras.layers.LayerNormalization(name="ln")(x))
        return keras.layers.Dense(4, name="logits")(keras.layers.GlobalAveragePooling1D(name="pool")(x))

    return _functional(policy, seed, "hardcoded_bf16_cnn", (seq, features), body)


def naive_softmax_classifier(policy, seed=0, features=32, classes=1000):
    """1000 logits of magnitude ~40 -> softmax as exp(x - "naive_logsumexp"(x)) -> float32 (linear)."""

    def body(x, keras):
        x = keras.layers.Dense(classes, kernel_initializer=keras.initializers.RandomNormal(stddev=4.0),
                               name="logits")(x)
        return layer_classes()["NaiveLogSumExp"](name="naive_logsumexp")(x)

    return _functional(policy, seed, "naive_softmax_classifier", (features,), body, output="linear")


def naive_log1m_sigmoid_classifier(policy, seed=0, features=16):
    """Dense -> a score ~10 (bias 10) -> "naive_log1m_sigmoid" log-probabilities -> exp (float32)."""

    def body(x, keras):
        x = keras.layers.Dense(16, activation="relu", name="hidden")(x)
        x = keras.layers.Dense(1, bias_initializer=keras.initializers.Constant(10.0), name="score")(x)
        return layer_classes()["NaiveLog1mSigmoid"](name="naive_log1m_sigmoid")(x)

    return _functional(policy, seed, "naive_log1m_sigmoid_classifier", (features,), body, output="exponential")


def unused_scale_net(policy, seed=0):
    """``zoo_models.rmsnorm_swiglu`` whose build also creates "unused_scale", which call never reads."""

    class UnusedScaleNet(zoo_models.layer_classes()["RMSNormSwiGLUNet"]):
        def build(self, input_shape):
            self.unused_scale = self.add_weight(shape=(), initializer="ones", name="unused_scale")
            super().build(input_shape)

    with zoo_models.building(policy, seed):
        return UnusedScaleNet(name="unused_scale_net")


# ---------------------------------------------------------------------------
# Data.
# ---------------------------------------------------------------------------


def offset_sequences(seq, features, offset, scale=1.0, classes=3):
    """offset + scale * N(0, 1) sequences: large-mean readings and frames."""

    def data(batch, rng):
        return ((offset + scale * rng.normal(size=(batch, seq, features))).astype(np.float32),
                rng.integers(0, classes, batch).astype(np.int32))

    return data


def anisotropic_items(candidates=16, features=16, offset=1.0, spread=0.05):
    """Item 0 and ``candidates`` items sharing a large common component
    (anisotropic embeddings); y: the candidate item 0 is a noisy copy of."""

    def data(batch, rng):
        x = offset + spread * rng.normal(size=(batch, candidates + 1, features))
        y = rng.integers(0, candidates, batch)
        x[:, 0] = x[np.arange(batch), 1 + y] + 0.3 * spread * rng.normal(size=(batch, features))
        return x.astype(np.float32), y.astype(np.int32)

    return data


FAULTS = {
    "naive_std_bilstm": Fault(
        Workload(naive_std_bilstm, real_models.sequences(8, 4, 3), SPARSE_CE,
                 "E[x^2]-E[x]^2 in bfloat16 after a Dense with bias 30, before a Bidirectional LSTM"),
        "bf16_divergence", r"naive_std", BF16, "the variance cancels: features of mean 30, spread ~1"),
    "cumsum_mean_conv1d": Fault(
        Workload(cumsum_mean_conv1d, offset_sequences(4096, 2, 1.0, 0.5), SPARSE_CE,
                 "running mean by cumsum over 4096 steps in bfloat16"),
        "bf16_divergence", r"cumsum_mean", BF16, "the running sum stalls at 256x its increments"),
    "swamped_efficientnet_v2": Fault(
        Workload(swamped_efficientnet_v2, zoo_models.pixels(32), SPARSE_CE,
                 "(x + 300) - 300 as Keras ops on EfficientNetV2B0's pooled features"),
        "bf16_divergence", r"head_dense", BF16,
        "the ops are no layer: the Dense after them (~275 layers deep) shows it; its kernel gradient is 0"),
    "naive_norm_efficientnet_v2": Fault(
        Workload(naive_norm_efficientnet_v2, zoo_models.pixels(32), SPARSE_CE,
                 "E[x^2]-E[x]^2 in bfloat16 in the head of EfficientNetV2B0, after a Dense with bias 30"),
        "bf16_divergence", r"naive_head_norm", BF16, "a deep model: the advisor must narrow its group to the layer"),
    "unscaled_attention": Fault(
        Workload(pointer_retrieval, anisotropic_items(), SPARSE_CE,
                 "queries x 64, no 1/sqrt(d), softmax in bfloat16, over items of mean 1 and spread 0.05"),
        "bf16_divergence", r"unscaled_attention", BF16, "logits of hundreds: bfloat16 rounds them by units"),
    "sum_squares_f16": Fault(
        Workload(frame_energy_cnn, offset_sequences(16, 256, 0.0, 50.0), SPARSE_CE,
                 "sum(x^2) over 256 values of ~50 in float16"),
        "nonfinite", r"sum_squares", F16, "mixed_float16: the sum overflows 65504 to inf, NaN after it"),
    "hardcoded_bf16": Fault(
        Workload(hardcoded_bf16_cnn, offset_sequences(64, 4, 300.0, 1.0, 4), SPARSE_CE,
                 "x - mean_t(x) on tf.cast(x, tf.bfloat16), readings of mean 300"),
        "hardcoded_16_bit", r"hardcoded_bf16", BF16,
        "hard-coded bfloat16: its policy switch cannot fix it, and a float32 pass of the model keeps the cast"),
    "naive_logsumexp": Fault(
        Workload(naive_softmax_classifier, real_models.vectors(32, 1000), SPARSE_CE,
                 "exp(x - log(sum(exp(x)))) without the max, 1000 logits of magnitude ~40"),
        "bf16_divergence", r"naive_logsumexp|^logits/", BF16,
        "the normalizer ~50 is rounded to 0.25; the layer has no weights and its output is ~3x its stable rounding "
        "(under the limit): the damage is beyond it in the gradients of the logits layer feeding it, and the "
        "advisor names naive_logsumexp"),
    "vit_bf16_output": Fault(
        Workload(lambda policy, seed=0: zoo_models.vit(policy, seed, float32_output=False),
                 real_models.images(32), SPARSE_CE, "the ViT with its softmax left in bfloat16"),
        "bf16_model_output", r"predictions", BF16, "a bfloat16 model output fed to the loss"),
    "gru_text_dead_relu": Fault(
        Workload(lambda policy, seed=0: zoo_models.gru_text(policy, seed, dead_head=True),
                 zoo_models.padded_tokens(), SPARSE_CE, "the GRU text model's head Dense with bias -100"),
        "zero_gradient", r"dead_dense/kernel$", BF16, "its ReLUs never fire: the kernel's gradient is 0"),
    "unused_scale": Fault(
        Workload(unused_scale_net, real_models.vectors(24), SPARSE_CE,
                 "a weight created in build that call never reads"),
        "none_gradient", r"unused_scale$", BF16, "subclassed, unbuilt before fit"),
    "naive_log1m_sigmoid": Fault(
        Workload(naive_log1m_sigmoid_classifier, real_models.vectors(16, 2), SPARSE_CE,
                 "log(1 - sigmoid(s)) by hand in bfloat16, s ~ 10"),
        "nonfinite", r"naive_log1m_sigmoid", BF16, "sigmoid(s) rounds to 1: log(0) = -inf, NaN gradients"),
}

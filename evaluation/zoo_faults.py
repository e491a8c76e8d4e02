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

from evaluation import zoo_models
from evaluation.zoo_models import SPARSE_CE, Workload, real_models

Fault = collections.namedtuple("Fault", ("workload", "code", "row", "policy", "note", "edit_batch", "advise"),
                               defaults=(None, None))


def advised_layers(fault):
    """The regex of the layers the advisor must name for ``fault``: its
    ``advise``, else its ``row`` (a row naming a variable names its layer)."""
    return fault.advise or fault.row

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

    class NaiveSquaredDistance(keras.layers.Layer):
        """|a - b|^2 of two embeddings as |a|^2 + |b|^2 - 2 a.b, in the compute
        dtype: for nearby embeddings of norm ~30 the three terms are ~900 and
        cancel to ~1 (bfloat16 spacing 4 there); |a - b|^2 itself is right."""

        def call(self, pair):
            a, b = pair
            return (ops.sum(a * a, axis=-1, keepdims=True) + ops.sum(b * b, axis=-1, keepdims=True)
                    - 2.0 * ops.sum(a * b, axis=-1, keepdims=True))

    class PairDistance(keras.layers.Layer):
        """|a - b|^2 of two embeddings computed stably (build it with dtype="float32")."""

        def call(self, pair):
            a, b = pair
            return ops.sum(ops.square(a - b), axis=-1, keepdims=True)

    _LAYER_CLASSES.update(
        CumsumMean=CumsumMean, UnscaledAttention=UnscaledAttention, SumSquares=SumSquares,
        HardcodedBfloat16=HardcodedBfloat16, NaiveLogSumExp=NaiveLogSumExp, NaiveLog1mSigmoid=NaiveLog1mSigmoid,
        NaiveSquaredDistance=NaiveSquaredDistance, PairDistance=PairDistance,
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
# Issue 38: damage born between layers (inputs that need float32, large
# residual streams), damage that fades, distance losses, sub-model steps.
# ---------------------------------------------------------------------------


def timestamp_normalization(policy, seed=0, classes=4):
    """Timestamps (~5000, a span of 50: ``zoo_models.timestamps``) standardized by a
    Normalization "input_norm" adapted on them: under mixed_bfloat16 Keras casts its
    input to bfloat16 (spacing 32 at 5000) before it subtracts the mean."""
    with zoo_models.building(policy, seed) as keras:
        inputs = keras.Input((8,))
        norm = keras.layers.Normalization(name="input_norm")
        norm.adapt(zoo_models.timestamps()(512, np.random.default_rng(99))[0])
        x = keras.layers.Dense(32, activation="relu", name="dense_1")(norm(inputs))
        x = keras.layers.Dense(32, activation="relu", name="dense_2")(x)
        x = keras.layers.Dense(classes, name="logits")(x)
        return keras.Model(inputs, real_models._softmax_float32(x), name="timestamp_normalization")


def offset_coordinates(policy, seed=0, origin=3000.0, classes=4):
    """Map coordinates (metres, ~3000 from the origin, a spread of 3) moved to the
    site by a Rescaling "to_site" (x - 3000) / 3, then a ReLU MLP: Keras casts the
    Rescaling's input to bfloat16 (spacing 16 at 3000)."""
    with zoo_models.building(policy, seed) as keras:
        inputs = keras.Input((6,))
        x = keras.layers.Rescaling(1.0 / 3.0, offset=-origin / 3.0, name="to_site")(inputs)
        x = keras.layers.Dense(32, activation="relu", name="dense_1")(x)
        x = keras.layers.Dense(32, activation="relu", name="dense_2")(x)
        x = keras.layers.Dense(classes, name="logits")(x)
        return keras.Model(inputs, real_models._softmax_float32(x), name="offset_coordinates")


def large_stream_mlp(policy, seed=0, offset=1000.0, blocks=4, classes=4):
    """A residual MLP whose stream carries a large common component: "embed" (bias
    1000) then blocks adding Dense(ReLU(Dense(LayerNorm(h)))) of size ~1 with Add
    "residual_i", LayerNorm, logits.  In bfloat16 (spacing 8 at 1000) the stream
    cannot hold what the blocks add, nor the embedding's own variation."""
    with zoo_models.building(policy, seed) as keras:
        layers = keras.layers
        inputs = keras.Input((16,))
        h = layers.Dense(32, bias_initializer=keras.initializers.Constant(offset), name="embed")(inputs)
        for i in range(blocks):
            u = layers.LayerNormalization(name="ln_%d" % i)(h)
            u = layers.Dense(64, activation="relu", name="up_%d" % i)(u)
            h = layers.Add(name="residual_%d" % i)([h, layers.Dense(32, name="down_%d" % i)(u)])
        h = layers.LayerNormalization(name="final_norm")(h)
        x = layers.Dense(classes, name="logits")(h)
        return keras.Model(inputs, real_models._softmax_float32(x), name="large_stream_mlp")


def large_stream_transformer(policy, seed=0, vocab=64, seq=16, width=32, heads=2, blocks=2, offset=512.0):
    """A pre-norm Transformer encoder whose stream enters through "stream_in", a
    Dense with bias 512 on token embeddings plus positions: blocks add attention
    and feed-forward outputs (size ~1) with Add layers; a final LayerNorm, mean
    pooling, logits.  bfloat16 spacing at 512 is 4."""
    with zoo_models.building(policy, seed) as keras:
        layers = keras.layers
        inputs = keras.Input((seq,), dtype="int32", name="tokens")
        x = layers.Embedding(vocab, width, name="token_embedding")(inputs)
        x = zoo_models.layer_classes()["PositionEmbedding"](name="positions")(x)
        x = layers.Dense(width, use_bias=True, bias_initializer=keras.initializers.Constant(offset),
                         name="stream_in")(x)
        for b in range(blocks):
            h = layers.LayerNormalization(epsilon=1e-6, name="ln1_%d" % b)(x)
            h = layers.MultiHeadAttention(heads, width // heads, name="mha_%d" % b)(h, h)
            x = layers.Add(name="attn_residual_%d" % b)([x, h])
            h = layers.LayerNormalization(epsilon=1e-6, name="ln2_%d" % b)(x)
            h = layers.Dense(width, name="ff2_%d" % b)(layers.Dense(2 * width, activation="gelu", name="ff1_%d" % b)(h))
            x = layers.Add(name="ff_residual_%d" % b)([x, h])
        x = layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
        x = layers.Dense(4, name="logits")(layers.GlobalAveragePooling1D(name="pool")(x))
        return keras.Model(inputs, real_models._softmax_float32(x), name="large_stream_transformer")


def fading_naive_norm(policy, seed=0, features=32, classes=10):
    """E[x^2]-E[x]^2 normalization "naive_norm" of the inputs, then a ReLU MLP: its
    damage follows the inputs' offset, which ``fading_offset`` shrinks as training
    goes on (a data pipeline whose running normalization settles)."""
    with zoo_models.building(policy, seed) as keras:
        inputs = keras.Input((features,))
        x = real_models.layer_classes()["NaiveVarianceNorm"](name="naive_norm")(inputs)
        x = keras.layers.Dense(32, activation="relu", name="dense_1")(x)
        x = keras.layers.Dense(classes, name="logits")(x)
        return keras.Model(inputs, real_models._softmax_float32(x), name="fading_naive_norm")


def naive_pair_distance(policy, seed=0, features=16, width=16, scale=30.0):
    """A siamese net: one Dense tower (embeddings of norm ~30, "tower_out" with
    bias 30/sqrt(width)) on both items, then "naive_sq_distance"
    (|a|^2 + |b|^2 - 2a.b in bfloat16), a float32 linear output: the squared
    distance a contrastive (MSE) loss fits."""
    with zoo_models.building(policy, seed) as keras:
        layers = keras.layers
        inputs = keras.Input((2, features))
        hidden = layers.Dense(32, activation="relu", name="tower_hidden")
        out = layers.Dense(width, bias_initializer=keras.initializers.Constant(scale / np.sqrt(width)),
                           name="tower_out")
        a = out(hidden(inputs[:, 0]))
        b = out(hidden(inputs[:, 1]))
        d = layer_classes()["NaiveSquaredDistance"](name="naive_sq_distance")([a, b])
        y = layers.Activation("linear", dtype="float32", name="distance")(d)
        return keras.Model(inputs, y, name="naive_pair_distance")


def bf16_embedding_distance(policy, seed=0, features=16, width=16, offset=60.0):
    """A siamese net trained with the contrastive loss (``contrastive_distance_loss``):
    one Dense tower on both items, whose embeddings carry a common offset of 60
    per component ("tower_out", bias 60), their squared distance computed stably
    in float32 ("pair_distance", dtype float32).  bfloat16 holds the tower's
    output to 0.25 there: the ~0.01-0.1 by which a same pair's embeddings
    differ is lost before the float32 distance sees it."""
    with zoo_models.building(policy, seed) as keras:
        layers = keras.layers
        inputs = keras.Input((2, features))
        hidden = layers.Dense(32, activation="relu", name="tower_hidden")
        out = layers.Dense(width, bias_initializer=keras.initializers.Constant(offset), name="tower_out")
        a = out(hidden(inputs[:, 0]))
        b = out(hidden(inputs[:, 1]))
        d = layer_classes()["PairDistance"](dtype="float32", name="pair_distance")([a, b])
        return keras.Model(inputs, d, name="bf16_embedding_distance")


def decoder_bf16_output(policy, seed=0):
    """``zoo_models.encoder_decoder_step`` with the decoder's softmax left in the
    policy's dtype (bfloat16): a custom train_step that never calls the model."""
    with zoo_models.building(policy, seed) as keras:
        layers = keras.layers
        decoder = keras.Sequential([keras.Input((16,)), layers.Dense(32, activation="relu", name="dec_hidden"),
                                    layers.Dense(10, name="dec_logits"),
                                    layers.Activation("softmax", name="predictions")], name="decoder")
        encoder = keras.Sequential([keras.Input((24,)), layers.Dense(32, activation="relu", name="enc_hidden"),
                                    layers.Dense(16, name="enc_code")], name="encoder")
        return zoo_models.layer_classes()["EncoderDecoderStep"](decoder, encoder, name="decoder_bf16_output")


# ---------------------------------------------------------------------------
# Data.
# ---------------------------------------------------------------------------


def _projection(features, classes, seed=7):
    """A fixed [features, classes] projection: the labels a model can learn."""
    return np.random.default_rng(seed).normal(size=(features, classes))


def offset_sequences(seq, features, offset, scale=1.0, classes=3):
    """offset + scale * N(0, 1) sequences: large-mean readings and frames; the
    class is the argmax of a fixed projection of the time-mean of the N(0, 1)
    part (learnable, so a fault that stops learning shows in the loss)."""
    w = _projection(features, classes)

    def data(batch, rng):
        z = rng.normal(size=(batch, seq, features))
        return (offset + scale * z).astype(np.float32), np.argmax(z.mean(axis=1) @ w, axis=1).astype(np.int32)

    return data


def labelled_vectors(features, classes):
    """Uniform [0, 1) features; the class is the argmax of a fixed projection (learnable)."""
    w = _projection(features, classes)

    def data(batch, rng):
        x = rng.random((batch, features))
        return x.astype(np.float32), np.argmax((x - 0.5) @ w, axis=1).astype(np.int32)

    return data


def labelled_pixels(size, classes=10):
    """Images in [0, 255] (``zoo_models.pixels``) whose class is the decile of their red
    channel's mean brightness among images like them (learnable by pooling)."""

    def data(batch, rng):
        x = rng.random((batch, size, size, 3)) * rng.uniform(0.2, 1.0, (batch, 1, 1, 1))
        bright = x[..., 0].mean(axis=(1, 2))
        return (255.0 * x).astype(np.float32), np.minimum((bright / 0.6 * classes).astype(np.int32), classes - 1)

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


def coordinates(origin=3000.0, spread=3.0, classes=4):
    """6 coordinates ``origin + spread * N(0, 1)``; the class is the quadrant of
    the first two around the origin."""

    def data(batch, rng):
        z = rng.normal(size=(batch, 6))
        return (origin + spread * z).astype(np.float32), ((z[:, 0] > 0) * 2 + (z[:, 1] > 0)).astype(np.int32)

    return data


def contrastive_distance_loss(y_true, distance, margin=1.0):
    """The contrastive loss of squared distances d (Hadsell et al. 2006), in float32:
    ``mean(y d + (1 - y) max(0, margin - sqrt(d))^2)``, y = 1 for a same pair."""
    from keras import ops

    d = ops.cast(distance, "float32")
    y = ops.cast(ops.reshape(y_true, ops.shape(d)), "float32")
    apart = ops.maximum(margin - ops.sqrt(d + 1e-12), 0.0)
    return ops.mean(y * d + (1.0 - y) * ops.square(apart))


def verification_pairs(features=16, same=0.05, different=0.5):
    """(a, b) pairs [batch, 2, features] and y = 1 for a "same" pair (b = a + 0.05 N(0, 1)),
    0 for a "different" one (b = a + 0.5 N(0, 1)), half and half."""

    def data(batch, rng):
        a = rng.normal(size=(batch, features))
        y = (np.arange(batch) % 2 == 0).astype(np.float32)
        b = a + np.where(y[:, None] > 0, same, different) * rng.normal(size=a.shape)
        return np.stack([a, b], axis=1).astype(np.float32), y[:, None]

    return data


def close_pairs(features=16, noise=0.1):
    """(a, b) pairs [batch, 2, features], b = a + noise * N(0, 1); y = |a - b|^2 / features."""

    def data(batch, rng):
        a = rng.normal(size=(batch, features))
        b = a + noise * rng.normal(size=a.shape)
        y = np.sum((a - b) ** 2, axis=1, keepdims=True) / features
        return np.stack([a, b], axis=1).astype(np.float32), y.astype(np.float32)

    return data


def fading_offset(offset=7.0, half_life=2.0):
    """An ``edit_batch(step, x, y)`` that adds an offset halving every ``half_life``
    steps to the features: 7 at step 0, 1.75 at step 4, 0.44 at step 8 (a data
    pipeline whose running normalization settles)."""

    def edit(step, x, y):
        return x + np.float32(offset * 0.5 ** (step / half_life)), y

    return edit


FAULTS = {
    "naive_std_bilstm": Fault(
        Workload(naive_std_bilstm, offset_sequences(8, 4, 0.0), SPARSE_CE,
                 "E[x^2]-E[x]^2 in bfloat16 after a Dense with bias 30, before a Bidirectional LSTM"),
        "bf16_divergence", r"naive_std", BF16, "the variance cancels: features of mean 30, spread ~1"),
    "cumsum_mean_conv1d": Fault(
        Workload(cumsum_mean_conv1d, offset_sequences(4096, 2, 1.0, 0.5), SPARSE_CE,
                 "running mean by cumsum over 4096 steps in bfloat16"),
        "bf16_divergence", r"cumsum_mean", BF16, "the running sum stalls at 256x its increments"),
    "swamped_efficientnet_v2": Fault(
        Workload(swamped_efficientnet_v2, labelled_pixels(32), SPARSE_CE,
                 "(x + 300) - 300 as Keras ops on EfficientNetV2B0's pooled features"),
        "bf16_divergence", r"^loss$|head_dense", BF16,
        "the ops are no layer (no layer output shows them, ~275 layers deep): the loss, beyond its sampling noise"),
    "naive_norm_efficientnet_v2": Fault(
        Workload(naive_norm_efficientnet_v2, labelled_pixels(32), SPARSE_CE,
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
        Workload(naive_softmax_classifier, labelled_vectors(32, 1000), SPARSE_CE,
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
    # Issue 38.
    "timestamp_normalization": Fault(
        Workload(timestamp_normalization, zoo_models.timestamps(), SPARSE_CE,
                 "timestamps ~5000 standardized by a Normalization computing in bfloat16"),
        "bf16_divergence", r"input_norm", BF16, "born at the boundary: Keras casts the input to bfloat16"),
    "offset_coordinates": Fault(
        Workload(offset_coordinates, coordinates(), SPARSE_CE,
                 "coordinates ~3000 moved to the site by a Rescaling computing in bfloat16"),
        "bf16_divergence", r"to_site", BF16, "born at the boundary: Keras casts the input to bfloat16"),
    "large_stream_mlp": Fault(
        Workload(large_stream_mlp, zoo_models.labelled_vectors(16, 4), SPARSE_CE,
                 "a residual stream of ~1000 to which blocks add ~1"),
        "bf16_divergence", r"^(embed|residual_\d|ln_0)", BF16, "swamping at each Add, and at the embedding"),
    "large_stream_transformer": Fault(
        Workload(large_stream_transformer, zoo_models.progressions(), SPARSE_CE,
                 "a Transformer stream of ~512 to which attention and feed-forward add ~1"),
        "bf16_divergence", r"^(stream_in|\w+_residual_\d|ln1_0)", BF16, "swamping at each Add"),
    "fading_naive_norm": Fault(
        Workload(fading_naive_norm, real_models.offset_vectors(32, 0.0), SPARSE_CE,
                 "E[x^2]-E[x]^2 on inputs whose offset halves every 2 steps (7 at first)"),
        "transient", r"naive_norm", BF16, "above its limit at the first comparisons only", fading_offset()),
    "naive_pair_distance": Fault(
        Workload(naive_pair_distance, close_pairs(), "mse",
                 "|a|^2 + |b|^2 - 2a.b in bfloat16 for embeddings of norm ~30, ~0.4 apart"),
        "bf16_divergence", r"naive_sq_distance|^tower_out/", BF16, "the three terms cancel"),
    "bf16_embedding_distance": Fault(
        Workload(bf16_embedding_distance, verification_pairs(), contrastive_distance_loss,
                 "contrastive loss on a float32 distance of bfloat16 embeddings offset by 60"),
        "bf16_divergence", r"tower_out|pair_distance", BF16,
        "born at the boundary: the tower's output is rounded before the float32 distance"),
    "decoder_bf16_output": Fault(
        Workload(decoder_bf16_output, zoo_models.labelled_vectors(24, 10), SPARSE_CE,
                 "a custom train_step calling an encoder and a decoder whose softmax stays in bfloat16"),
        "bf16_model_output", r"predictions", BF16, "the model itself is never called"),
}

# Which faults may calibrate a rule and which only check it (issue 38's classes; the faults
# before it were all checked once against rules chosen on the healthy calibration half).
FAULT_CALIBRATION = ("timestamp_normalization", "large_stream_mlp", "fading_naive_norm", "naive_pair_distance")
FAULT_SPLIT = {name: "calibration" if name in FAULT_CALIBRATION else "held_out" for name in FAULTS}

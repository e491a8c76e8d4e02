"""More real models, healthy, at tiny sizes: the zoo beyond ``evaluation/real_models.py``.

Same conventions as ``real_models``: Keras is imported inside the builders;
``build(policy, seed=0)`` sets the seed, builds under ``policy`` (set as the
global policy, then restored) and returns an uncompiled model whose output
activation is float32; ``data(batch, rng)`` returns one ``(x, y)`` batch;
``HEALTHY[name]`` is a ``real_models.Workload(build, data, loss, note)``.
``SPLIT[name]`` says whether a model may be used to calibrate a rule
("calibration") or only to check it ("held_out").  The injected faults are
in ``zoo_faults``.  Weights are random (``weights=None``), inputs 32x32 (the
least keras.applications accepts).
"""

import contextlib

import numpy as np

from evaluation import real_models
from evaluation.real_models import SPARSE_CE, Workload, global_policy

_LAYER_CLASSES = {}


@contextlib.contextmanager
def building(policy, seed):
    """Yields keras (imported here) with the seed set (keras.utils.set_random_seed)
    and ``policy`` the global policy (real_models.global_policy) until the block ends."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        yield keras


def layer_classes():
    """{name: class} of this zoo's custom layers (Keras imported at first use)."""
    if _LAYER_CLASSES:
        return _LAYER_CLASSES
    import keras
    from keras import ops

    class PositionEmbedding(keras.layers.Layer):
        """Adds a learned embedding of each position (ViT, GPT)."""

        def build(self, input_shape):
            self.positions = self.add_weight(shape=tuple(input_shape[-2:]), name="positions",
                                             initializer=keras.initializers.RandomNormal(stddev=0.02))

        def call(self, x):
            return x + ops.cast(self.positions, x.dtype)

    class SqueezeExcite(keras.layers.Layer):
        """Channel gates from the pooled feature map: x * sigmoid(W2 relu(W1 mean(x)))."""

        def __init__(self, ratio=4, **kwargs):
            super().__init__(**kwargs)
            self.ratio = ratio

        def build(self, input_shape):
            channels, squeezed = input_shape[-1], max(1, input_shape[-1] // self.ratio)
            self.reduce = keras.layers.Dense(squeezed, activation="relu", dtype=self.dtype_policy, name="reduce")
            self.expand = keras.layers.Dense(channels, activation="sigmoid", dtype=self.dtype_policy, name="expand")

        def call(self, x):
            pooled = ops.mean(x, axis=(1, 2), keepdims=True)
            return x * self.expand(self.reduce(pooled))

    class AttentionPooling(keras.layers.Layer):
        """Additive attention over time: a = softmax_t(v . tanh(W h_t + b)), out = sum_t a_t h_t."""

        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units

        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1], self.units), name="w")
            self.b = self.add_weight(shape=(self.units,), initializer="zeros", name="b")
            self.v = self.add_weight(shape=(self.units, 1), name="v")

        def call(self, h):
            w, b, v = (ops.cast(t, h.dtype) for t in (self.w, self.b, self.v))
            scores = ops.matmul(ops.tanh(ops.matmul(h, w) + b), v)
            return ops.sum(ops.softmax(scores, axis=1) * h, axis=1)

    class RMSNorm(keras.layers.Layer):
        """x * rsqrt(mean(x^2) + eps) * scale, the statistic in float32 (as LLaMA does)."""

        def __init__(self, epsilon=1e-6, **kwargs):
            super().__init__(**kwargs)
            self.epsilon = epsilon

        def build(self, input_shape):
            self.scale = self.add_weight(shape=(input_shape[-1],), initializer="ones", name="scale")

        def call(self, x):
            x32 = ops.cast(x, "float32")
            inverse = ops.rsqrt(ops.mean(ops.square(x32), axis=-1, keepdims=True) + self.epsilon)
            return ops.cast(x32 * inverse, x.dtype) * ops.cast(self.scale, x.dtype)

    class SwiGLU(keras.layers.Layer):
        """The gated MLP of LLaMA: down(silu(gate(x)) * up(x))."""

        def __init__(self, hidden, **kwargs):
            super().__init__(**kwargs)
            self.gate = keras.layers.Dense(hidden, use_bias=False, dtype=self.dtype_policy, name="gate")
            self.up = keras.layers.Dense(hidden, use_bias=False, dtype=self.dtype_policy, name="up")

        def build(self, input_shape):
            self.down = keras.layers.Dense(input_shape[-1], use_bias=False, dtype=self.dtype_policy, name="down")

        def call(self, x):
            return self.down(ops.silu(self.gate(x)) * self.up(x))

    class RMSNormSwiGLUNet(keras.Model):
        """A subclassed pre-norm residual MLP: embed, blocks of h + SwiGLU(RMSNorm(h)),
        RMSNorm, logits, float32 softmax.  Built lazily at its first batch."""

        def __init__(self, width=32, hidden=64, blocks=2, classes=10, **kwargs):
            super().__init__(**kwargs)
            self.embed = keras.layers.Dense(width, name="embed")
            self.norms = [RMSNorm(name="rms_norm_%d" % i) for i in range(blocks)]
            self.mlps = [SwiGLU(hidden, name="swiglu_%d" % i) for i in range(blocks)]
            self.final_norm = RMSNorm(name="final_norm")
            self.logits = keras.layers.Dense(classes, name="logits")
            self.softmax = keras.layers.Activation("softmax", dtype="float32", name="predictions")

        def call(self, x):
            h = self.embed(x)
            for norm, mlp in zip(self.norms, self.mlps):
                h = h + mlp(norm(h))
            return self.softmax(self.logits(self.final_norm(h)))

    class L2Normalize(keras.layers.Layer):
        """x / |x| over the last axis (build it with dtype="float32": the embedding a distance loss reads)."""

        def call(self, x):
            return x * ops.rsqrt(ops.sum(ops.square(x), axis=-1, keepdims=True) + 1e-12)

    class EncoderDecoderStep(keras.Model):
        """Two sub-models and a custom ``train_step`` that calls them and never the
        model itself (as a VAE or seq2seq step does).  The decoder is made first,
        so Keras lists its layers before the encoder's: the forward order is not
        the listing order."""

        def __init__(self, decoder, encoder, **kwargs):
            super().__init__(**kwargs)
            self.decoder = decoder
            self.encoder = encoder

        def call(self, x, training=False):
            return self.decoder(self.encoder(x, training=training), training=training)

        def train_step(self, data):
            import tensorflow as tf

            x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
            with tf.GradientTape() as tape:
                y_pred = self.decoder(self.encoder(x, training=True), training=True)
                loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply(grads, self.trainable_variables)
            for metric in self.metrics:
                metric.update_state(loss) if metric.name == "loss" else metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    class TwoTowers(keras.Model):
        """A retrieval model: a query tower and an item tower (sub-models), their
        embeddings compared by a float32 "similarity" layer (in-batch logits
        q k^T / temperature, the label of row i is i).  Its custom ``train_step``
        calls the towers and the similarity layer, never the model itself."""

        def __init__(self, query_tower, item_tower, temperature=0.1, **kwargs):
            super().__init__(**kwargs)
            self.item_tower = item_tower  # listed before the query tower on purpose
            self.query_tower = query_tower
            self.similarity = InBatchSimilarity(temperature, dtype="float32", name="similarity")

        def call(self, pair, training=False):
            return self.similarity([self.query_tower(pair[:, 0], training=training),
                                    self.item_tower(pair[:, 1], training=training)])

        def train_step(self, data):
            import tensorflow as tf

            pair, y, _ = keras.utils.unpack_x_y_sample_weight(data)
            with tf.GradientTape() as tape:
                q = self.query_tower(pair[:, 0], training=True)
                k = self.item_tower(pair[:, 1], training=True)
                logits = self.similarity([q, k])
                loss = self.compute_loss(x=pair, y=y, y_pred=logits)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply(grads, self.trainable_variables)
            for metric in self.metrics:
                metric.update_state(loss) if metric.name == "loss" else metric.update_state(y, logits)
            return {m.name: m.result() for m in self.metrics}

    class InBatchSimilarity(keras.layers.Layer):
        """Logits of every query against every item of the batch: q k^T / temperature."""

        def __init__(self, temperature, **kwargs):
            super().__init__(**kwargs)
            self.temperature = temperature

        def call(self, pair):
            q, k = pair
            return ops.matmul(q, ops.transpose(k)) / self.temperature

    _LAYER_CLASSES.update(
        PositionEmbedding=PositionEmbedding, SqueezeExcite=SqueezeExcite, AttentionPooling=AttentionPooling,
        RMSNorm=RMSNorm, SwiGLU=SwiGLU, RMSNormSwiGLUNet=RMSNormSwiGLUNet, L2Normalize=L2Normalize,
        EncoderDecoderStep=EncoderDecoderStep, TwoTowers=TwoTowers, InBatchSimilarity=InBatchSimilarity,
    )
    return _LAYER_CLASSES


# ---------------------------------------------------------------------------
# keras.applications (weights=None, 32x32, float32 softmax).
# ---------------------------------------------------------------------------


def _keras_application(name):
    def build(policy, seed=0, size=32):
        import keras

        return real_models._application(getattr(keras.applications, name), policy, size, seed)

    build.__name__ = build.__qualname__ = name.lower()
    build.__doc__ = "keras.applications.%s (weights=None, size x size inputs, float32 softmax)." % name
    return build


densenet121 = _keras_application("DenseNet121")
mobilenet_v3_small = _keras_application("MobileNetV3Small")  # with its Rescaling (include_preprocessing)
vgg16 = _keras_application("VGG16")
convnext_tiny = _keras_application("ConvNeXtTiny")  # with its Normalization (include_preprocessing)
efficientnet_v2_b0 = _keras_application("EfficientNetV2B0")  # with its Rescaling (include_preprocessing)
resnet50_v2 = _keras_application("ResNet50V2")


# ---------------------------------------------------------------------------
# Builders.
# ---------------------------------------------------------------------------


def gru_text(policy, seed=0, vocab=200, seq=16, classes=2, dead_head=False):
    """A GRU text classifier: Embedding(mask_zero=True) over padded tokens,
    GRU, a ReLU Dense head, float32 softmax.  ``dead_head`` (a fault): the
    head is "dead_dense" with its bias at -100, so its ReLUs never fire."""
    head_name, head_bias = ("dead_dense", -100.0) if dead_head else ("head", 0.0)
    with building(policy, seed) as keras:
        inputs = keras.Input((seq,), dtype="int32", name="tokens")
        x = keras.layers.Embedding(vocab, 16, mask_zero=True, name="embedding")(inputs)
        x = keras.layers.GRU(16, name="gru")(x)
        x = keras.layers.Dense(16, activation="relu", name=head_name,
                               bias_initializer=keras.initializers.Constant(head_bias))(x)
        x = keras.layers.Dense(classes, name="logits")(x)
        return keras.Model(inputs, real_models._softmax_float32(x), name="gru_text")


def vit(policy, seed=0, size=32, patch=8, width=32, heads=2, blocks=2, dropout=0.1, classes=10,
        float32_output=True):
    """A small Vision Transformer: patch Conv2D, learned positions, pre-norm
    blocks (LayerNorm, MultiHeadAttention, Dropout; LayerNorm, GELU MLP,
    Dropout), global average pooling, softmax "predictions" (float32 unless
    ``float32_output=False``, a fault)."""
    with building(policy, seed) as keras:
        layers = keras.layers
        inputs = keras.Input((size, size, 3))
        x = layers.Conv2D(width, patch, strides=patch, name="patch_embed")(inputs)
        x = layers.Reshape(((size // patch) ** 2, width), name="patches")(x)
        x = layer_classes()["PositionEmbedding"](name="position_embedding")(x)
        for b in range(blocks):
            h = layers.LayerNormalization(epsilon=1e-6, name="ln1_%d" % b)(x)
            h = layers.MultiHeadAttention(heads, width // heads, name="mha_%d" % b)(h, h)
            h = layers.Dropout(dropout, name="attn_dropout_%d" % b)(h)
            x = layers.Add(name="attn_residual_%d" % b)([x, h])
            h = layers.LayerNormalization(epsilon=1e-6, name="ln2_%d" % b)(x)
            h = layers.Dense(2 * width, activation="gelu", name="mlp1_%d" % b)(h)
            h = layers.Dropout(dropout, name="mlp_dropout_%d" % b)(layers.Dense(width, name="mlp2_%d" % b)(h))
            x = layers.Add(name="mlp_residual_%d" % b)([x, h])
        x = layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
        x = layers.Dense(classes, name="logits")(layers.GlobalAveragePooling1D(name="pool")(x))
        out = layers.Activation("softmax", dtype="float32" if float32_output else None, name="predictions")(x)
        return keras.Model(inputs, out, name="vit")


def groupnorm_se_cnn(policy, seed=0, size=32, classes=10):
    """A CNN of Conv2D + GroupNormalization + swish blocks with a custom
    squeeze-excitation layer, global average pooling, float32 softmax."""
    with building(policy, seed) as keras:
        layers = keras.layers
        inputs = keras.Input((size, size, 3))
        x = inputs
        for i, filters in enumerate((16, 32)):
            x = layers.Conv2D(filters, 3, padding="same", name="conv_%d" % i)(x)
            x = layers.GroupNormalization(groups=4, name="group_norm_%d" % i)(x)
            x = layers.Activation("swish", name="swish_%d" % i)(x)
            x = layer_classes()["SqueezeExcite"](name="squeeze_excite_%d" % i)(x)
            x = layers.MaxPooling2D(name="pool_%d" % i)(x)
        x = layers.Dense(classes, name="logits")(layers.GlobalAveragePooling2D(name="global_pool")(x))
        return keras.Model(inputs, real_models._softmax_float32(x), name="groupnorm_se_cnn")


def causal_lm(policy, seed=0, vocab=64, seq=16, width=32, heads=2, blocks=2, dropout=0.1):
    """A Transformer decoder language model: token Embedding, learned
    positions, blocks of causal MultiHeadAttention (use_causal_mask=True),
    Dropout, LayerNorm, GELU feed-forward; per-token float32 softmax."""
    with building(policy, seed) as keras:
        layers = keras.layers
        inputs = keras.Input((seq,), dtype="int32", name="tokens")
        x = layers.Embedding(vocab, width, name="token_embedding")(inputs)
        x = layer_classes()["PositionEmbedding"](name="position_embedding")(x)
        for b in range(blocks):
            attention = layers.MultiHeadAttention(heads, width // heads, name="causal_mha_%d" % b)
            h = layers.Dropout(dropout, name="attn_dropout_%d" % b)(attention(x, x, use_causal_mask=True))
            x = layers.Add(name="attn_residual_%d" % b)([x, h])
            x = layers.LayerNormalization(epsilon=1e-6, name="ln1_%d" % b)(x)
            h = layers.Dense(2 * width, activation="gelu", name="ff1_%d" % b)(x)
            h = layers.Dropout(dropout, name="ff_dropout_%d" % b)(layers.Dense(width, name="ff2_%d" % b)(h))
            x = layers.Add(name="ff_residual_%d" % b)([x, h])
            x = layers.LayerNormalization(epsilon=1e-6, name="ln2_%d" % b)(x)
        x = layers.Dense(vocab, name="logits")(x)
        return keras.Model(inputs, real_models._softmax_float32(x), name="causal_lm")


def bigru_attention(policy, seed=0, seq=12, features=6, classes=3):
    """A Bidirectional GRU over the sequence, pooled by additive attention
    (a custom layer), float32 softmax."""
    with building(policy, seed) as keras:
        inputs = keras.Input((seq, features))
        x = keras.layers.Bidirectional(keras.layers.GRU(16, return_sequences=True), name="bigru")(inputs)
        x = layer_classes()["AttentionPooling"](16, name="attention_pool")(x)
        x = keras.layers.Dense(classes, name="logits")(x)
        return keras.Model(inputs, real_models._softmax_float32(x), name="bigru_attention")


def temporal_cnn(policy, seed=0, seq=32, features=6, classes=4):
    """A temporal CNN: dilated causal Conv1D + LayerNormalization + ReLU +
    SpatialDropout1D blocks, global average pooling, float32 softmax."""
    with building(policy, seed) as keras:
        layers = keras.layers
        inputs = keras.Input((seq, features))
        x = inputs
        for i, dilation in enumerate((1, 2, 4)):
            x = layers.Conv1D(16, 3, padding="causal", dilation_rate=dilation, name="tconv_%d" % i)(x)
            x = layers.LayerNormalization(name="ln_%d" % i)(x)
            x = layers.ReLU(name="relu_%d" % i)(x)
            x = layers.SpatialDropout1D(0.1, name="spatial_dropout_%d" % i)(x)
        x = layers.Dense(classes, name="logits")(layers.GlobalAveragePooling1D(name="pool")(x))
        return keras.Model(inputs, real_models._softmax_float32(x), name="temporal_cnn")


def unet_autoencoder(policy, seed=0, size=32):
    """A small U-Net-like denoising autoencoder: two Conv2D levels, a
    Conv2DTranspose up, a Concatenate skip, a linear float32 output (MSE)."""
    with building(policy, seed) as keras:
        layers = keras.layers
        inputs = keras.Input((size, size, 3))
        skip = layers.Conv2D(8, 3, padding="same", activation="relu", name="enc_conv_0")(inputs)
        skip = layers.Conv2D(8, 3, padding="same", activation="relu", name="enc_conv_1")(skip)
        x = layers.MaxPooling2D(name="down")(skip)
        x = layers.Conv2D(16, 3, padding="same", activation="relu", name="mid_conv_0")(x)
        x = layers.Conv2D(16, 3, padding="same", activation="relu", name="mid_conv_1")(x)
        x = layers.Conv2DTranspose(8, 2, strides=2, name="up")(x)
        x = layers.Concatenate(name="skip_concat")([x, skip])
        x = layers.Conv2D(8, 3, padding="same", activation="relu", name="dec_conv")(x)
        x = layers.Conv2D(3, 1, name="dec_out")(x)
        out = layers.Activation("linear", dtype="float32", name="reconstruction")(x)
        return keras.Model(inputs, out, name="unet_autoencoder")


def rmsnorm_swiglu(policy, seed=0):
    """A subclassed keras.Model with RMSNorm and SwiGLU layers, unbuilt before fit."""
    with building(policy, seed):
        return layer_classes()["RMSNormSwiGLUNet"](name="rmsnorm_swiglu")


def tabular_normalization(policy, seed=0, features=8, classes=4):
    """Tabular features of moderate range (means 5-50, spreads 2-10) standardized by
    a Normalization layer adapted on them, two ReLU Dense layers, float32 softmax."""
    with building(policy, seed) as keras:
        inputs = keras.Input((features,))
        norm = keras.layers.Normalization(name="input_norm")
        norm.adapt(tabular(features, classes)(512, np.random.default_rng(99))[0])
        x = keras.layers.Dense(32, activation="relu", name="dense_1")(norm(inputs))
        x = keras.layers.Dense(32, activation="relu", name="dense_2")(x)
        x = keras.layers.Dense(classes, name="logits")(x)
        return keras.Model(inputs, real_models._softmax_float32(x), name="tabular_normalization")


def encoder_decoder_step(policy, seed=0, features=24, classes=10):
    """``EncoderDecoderStep``: an encoder (Dense-ReLU-Dense) and a decoder (Dense,
    float32 softmax) called by a custom train_step; the decoder listed first."""
    with building(policy, seed) as keras:
        layers = keras.layers
        decoder = keras.Sequential([keras.Input((16,)), layers.Dense(32, activation="relu", name="dec_hidden"),
                                    layers.Dense(classes, name="dec_logits"),
                                    layers.Activation("softmax", dtype="float32", name="predictions")],
                                   name="decoder")
        encoder = keras.Sequential([keras.Input((features,)), layers.Dense(32, activation="relu", name="enc_hidden"),
                                    layers.Dense(16, name="enc_code")], name="encoder")
        return layer_classes()["EncoderDecoderStep"](decoder, encoder, name="encoder_decoder_step")


def supervised_contrastive(policy, seed=0, features=16, width=16):
    """An embedding net (Dense-ReLU-Dense) whose output is L2-normalized in
    float32, trained with a supervised contrastive loss (``contrastive_loss``:
    cosine similarities over the batch, computed in float32)."""
    with building(policy, seed) as keras:
        inputs = keras.Input((features,))
        x = keras.layers.Dense(32, activation="relu", name="hidden")(inputs)
        x = keras.layers.Dense(width, name="embedding")(x)
        out = layer_classes()["L2Normalize"](dtype="float32", name="unit_embedding")(x)
        return keras.Model(inputs, out, name="supervised_contrastive")


def deep_residual_mlp(policy, seed=0, features=24, width=32, blocks=12, classes=10):
    """A deep pre-norm residual MLP: embed, 12 blocks of h + Dense(GELU(Dense(LayerNorm(h)))),
    LayerNorm, logits, float32 softmax: bfloat16 rounding that grows with depth."""
    with building(policy, seed) as keras:
        layers = keras.layers
        inputs = keras.Input((features,))
        h = layers.Dense(width, name="embed")(inputs)
        for i in range(blocks):
            u = layers.LayerNormalization(name="ln_%d" % i)(h)
            u = layers.Dense(2 * width, activation="gelu", name="up_%d" % i)(u)
            h = layers.Add(name="residual_%d" % i)([h, layers.Dense(width, name="down_%d" % i)(u)])
        h = layers.LayerNormalization(name="final_norm")(h)
        x = layers.Dense(classes, name="logits")(h)
        return keras.Model(inputs, real_models._softmax_float32(x), name="deep_residual_mlp")


def two_towers(policy, seed=0, features=16, width=16):
    """``TwoTowers``: query and item towers (Dense-ReLU-Dense, L2-normalized in
    float32), in-batch float32 similarity logits, a custom train_step that calls
    the towers (the item tower listed first); labels: row i matches item i."""
    with building(policy, seed) as keras:
        layers = keras.layers

        def tower(name):
            return keras.Sequential([keras.Input((features,)), layers.Dense(32, activation="relu", name=name + "_hidden"),
                                     layers.Dense(width, name=name + "_embedding"),
                                     layer_classes()["L2Normalize"](dtype="float32", name=name + "_unit")],
                                    name=name + "_tower")

        return layer_classes()["TwoTowers"](tower("query"), tower("item"), name="two_towers")


def float32_input_norm(policy, seed=0, classes=4):
    """Timestamps (``timestamps``: ~5000 with a spread of ~15) standardized by a
    Normalization layer kept in float32, as the fix for a 16-bit one: the
    layers after it read values of unit scale."""
    with building(policy, seed) as keras:
        inputs = keras.Input((8,))
        norm = keras.layers.Normalization(dtype="float32", name="input_norm")
        norm.adapt(timestamps()(512, np.random.default_rng(99))[0])
        x = keras.layers.Dense(32, activation="relu", name="dense_1")(norm(inputs))
        x = keras.layers.Dense(32, activation="relu", name="dense_2")(x)
        x = keras.layers.Dense(classes, name="logits")(x)
        return keras.Model(inputs, real_models._softmax_float32(x), name="float32_input_norm")


# ---------------------------------------------------------------------------
# Data.
# ---------------------------------------------------------------------------


def pixels(size, classes=10):
    """Images in [0, 255]: for models that rescale their own inputs."""

    def data(batch, rng):
        return ((255.0 * rng.random((batch, size, size, 3))).astype(np.float32),
                rng.integers(0, classes, batch).astype(np.int32))

    return data


def padded_tokens(vocab=200, seq=16, classes=2):
    """Token ids in [1, vocab) of random lengths, padded with zeros at the end."""

    def data(batch, rng):
        x = rng.integers(1, vocab, (batch, seq)).astype(np.int32)
        lengths = rng.integers(seq // 4, seq + 1, batch)
        x[np.arange(seq)[None, :] >= lengths[:, None]] = 0
        return x, rng.integers(0, classes, batch).astype(np.int32)

    return data


def next_tokens(vocab=64, seq=16):
    """Arithmetic progressions mod vocab: x = tokens[:-1], y = tokens[1:] (per token)."""

    def data(batch, rng):
        start, step = rng.integers(0, vocab, (batch, 1)), rng.integers(1, 8, (batch, 1))
        tokens = ((start + step * np.arange(seq + 1)[None, :]) % vocab).astype(np.int32)
        return tokens[:, :-1], tokens[:, 1:]

    return data


def progressions(vocab=64, seq=16, classes=4):
    """Arithmetic progressions mod vocab; the class is the progression's step (1-4)."""

    def data(batch, rng):
        start, step = rng.integers(0, vocab, (batch, 1)), rng.integers(1, classes + 1, (batch, 1))
        tokens = ((start + step * np.arange(seq)[None, :]) % vocab).astype(np.int32)
        return tokens, (step[:, 0] - 1).astype(np.int32)

    return data


def noisy_images(size):
    """(noisy, clean): clean images smooth at 4x4 pixels, plus Gaussian noise."""

    def data(batch, rng):
        clean = rng.random((batch, size // 4, size // 4, 3)).repeat(4, axis=1).repeat(4, axis=2)
        noisy = clean + 0.1 * rng.normal(size=clean.shape)
        return noisy.astype(np.float32), clean.astype(np.float32)

    return data


def tabular(features=8, classes=4):
    """Features of means 5-50 and spreads 2-10; the class is the sign pattern of
    two fixed projections of the standardized features."""
    means = np.linspace(5.0, 50.0, features)
    spreads = np.linspace(2.0, 10.0, features)
    w = np.random.default_rng(11).normal(size=(features, 2))

    def data(batch, rng):
        z = rng.normal(size=(batch, features))
        bits = (z @ w > 0).astype(np.int64)
        return (means + spreads * z).astype(np.float32), (bits[:, 0] * 2 + bits[:, 1]).astype(np.int32) % classes

    return data


def timestamps(origin=5000.0, span=50.0, classes=4):
    """8 features: a timestamp ``origin + span * U(0, 1)`` (hours, say) and 7 unit
    normals; the class is which quarter of the span the timestamp falls in.
    Float32 holds the timestamp to 1e-3 h; bfloat16 only to 32 h around 5000."""

    def data(batch, rng):
        t = origin + span * rng.random(batch)
        x = np.concatenate([t[:, None], rng.normal(size=(batch, 7))], axis=1)
        return x.astype(np.float32), np.minimum((t - origin) / span * classes, classes - 1).astype(np.int32)

    return data


def labelled_vectors(features=16, classes=4):
    """Unit normals whose class is the argmax of a fixed projection (learnable)."""
    w = np.random.default_rng(7).normal(size=(features, classes))

    def data(batch, rng):
        x = rng.normal(size=(batch, features))
        return x.astype(np.float32), np.argmax(x @ w, axis=1).astype(np.int32)

    return data


def pairs(features=16, noise=0.3):
    """(query, item) pairs [batch, 2, features], the item a noisy copy of the
    query; y = arange(batch): query i matches item i (in-batch negatives)."""

    def data(batch, rng):
        q = rng.normal(size=(batch, features))
        k = q + noise * rng.normal(size=q.shape)
        return np.stack([q, k], axis=1).astype(np.float32), np.arange(batch, dtype=np.int32)

    return data


def contrastive_loss(y_true, y_pred, temperature=0.1):
    """Supervised contrastive loss on unit embeddings, in float32: for each
    example, -mean over its positives p of log softmax_{j != i}(z_i . z_j / t)_p."""
    from keras import ops

    z = ops.cast(y_pred, "float32")
    labels = ops.reshape(ops.cast(y_true, "int32"), (-1,))
    n = ops.shape(z)[0]
    eye = ops.eye(n, dtype="float32")
    logits = ops.matmul(z, ops.transpose(z)) / temperature - 1e9 * eye
    log_p = logits - ops.logsumexp(logits, axis=1, keepdims=True)
    positive = ops.cast(ops.equal(labels[:, None], labels[None, :]), "float32") * (1.0 - eye)
    count = ops.maximum(ops.sum(positive, axis=1), 1.0)
    return -ops.mean(ops.sum(positive * log_p, axis=1) / count)


HEALTHY = {
    "densenet121": Workload(densenet121, real_models.images(32), SPARSE_CE, "keras.applications"),
    "mobilenet_v3_small": Workload(mobilenet_v3_small, pixels(32), SPARSE_CE, "keras.applications, Rescaling"),
    "vgg16": Workload(vgg16, real_models.images(32), SPARSE_CE, "keras.applications"),
    "gru_text": Workload(gru_text, padded_tokens(), SPARSE_CE, "GRU, Embedding(mask_zero=True), padded tokens"),
    "vit": Workload(vit, real_models.images(32), SPARSE_CE, "small ViT, 8x8 patches, 2 pre-norm blocks"),
    "groupnorm_se_cnn": Workload(groupnorm_se_cnn, real_models.images(32), SPARSE_CE,
                                 "GroupNormalization CNN, custom squeeze-excitation"),
    "causal_lm": Workload(causal_lm, next_tokens(), SPARSE_CE, "Transformer decoder LM, causal mask"),
    "convnext_tiny": Workload(convnext_tiny, pixels(32), SPARSE_CE, "keras.applications, Normalization"),
    "efficientnet_v2_b0": Workload(efficientnet_v2_b0, pixels(32), SPARSE_CE, "keras.applications, Rescaling"),
    "resnet50_v2": Workload(resnet50_v2, real_models.images(32), SPARSE_CE, "keras.applications"),
    "bigru_attention": Workload(bigru_attention, real_models.sequences(12, 6, 3), SPARSE_CE,
                                "Bidirectional GRU, custom additive attention pooling"),
    "temporal_cnn": Workload(temporal_cnn, real_models.sequences(32, 6, 4), SPARSE_CE,
                             "dilated causal Conv1D, LayerNormalization, SpatialDropout1D"),
    "unet_autoencoder": Workload(unet_autoencoder, noisy_images(32), "mse",
                                 "U-Net-like denoiser, Conv2DTranspose, Concatenate skip, MSE"),
    "rmsnorm_swiglu": Workload(rmsnorm_swiglu, real_models.vectors(24), SPARSE_CE,
                               "subclassed, custom RMSNorm and SwiGLU, unbuilt before fit"),
    # Issue 38's classes: input features, deep residual streams, sub-model train steps, distance losses.
    "tabular_normalization": Workload(tabular_normalization, tabular(), SPARSE_CE,
                                      "Normalization adapted on features of moderate range"),
    "encoder_decoder_step": Workload(encoder_decoder_step, labelled_vectors(24, 10), SPARSE_CE,
                                     "custom train_step calling an encoder and a decoder, never the model"),
    "supervised_contrastive": Workload(supervised_contrastive, labelled_vectors(16, 4), contrastive_loss,
                                       "float32 unit embeddings, supervised contrastive loss (cosine similarity)"),
    "deep_residual_mlp": Workload(deep_residual_mlp, labelled_vectors(24, 10), SPARSE_CE,
                                  "12 pre-norm residual blocks: rounding that grows with depth"),
    "two_towers": Workload(two_towers, pairs(), SPARSE_CE,
                           "query and item towers, in-batch float32 similarity, custom train_step"),
    "float32_input_norm": Workload(float32_input_norm, timestamps(), SPARSE_CE,
                                   "timestamps standardized by a float32 Normalization (the fix of a fault)"),
}

CALIBRATION = ("densenet121", "mobilenet_v3_small", "vgg16", "gru_text", "vit", "groupnorm_se_cnn", "causal_lm",
               "tabular_normalization", "encoder_decoder_step", "supervised_contrastive")
SPLIT = {name: "calibration" if name in CALIBRATION else "held_out" for name in HEALTHY}

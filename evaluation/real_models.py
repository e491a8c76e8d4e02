"""Real models people train, at tiny sizes: the shared zoo of tests and benchmarks.

Every builder takes a Keras dtype policy name and builds the model the way
users do under mixed precision: the global policy is set while the model is
built (``keras.mixed_precision.set_global_policy``) and restored after; the
output activation is float32, as the mixed-precision guides advise.  Built
from random weights (``weights=None``), seeded; data is random or scikit-learn's
bundled digits.

``ZOO[name]`` is a ``Workload(build, data, loss, note)``: ``build(policy)``
returns an uncompiled model, ``data(batch, rng)`` one ``(x, y)`` batch, and
``loss`` the Keras loss to compile with.  ``tiny=False`` sizes are for
benchmarks.  ``FAULT_ZOO`` holds models with an injected fault (the alert
zoo); ``layer_classes()`` the layers they and the zoo's measurements use
(float32-mask Dropout, a naive variance norm, a drifting offset, log of the
inputs).

Imported as ``evaluation.real_models`` by tests and by ``benchmarks/``
(the repository root on sys.path: see tests/support/__init__.py).
"""

import collections
import contextlib

import numpy as np

Workload = collections.namedtuple("Workload", ("build", "data", "loss", "note"))

SPARSE_CE = "sparse_categorical_crossentropy"


@contextlib.contextmanager
def global_policy(policy):
    """Build under ``policy`` as users do (set_global_policy), then restore."""
    import keras

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)


def _softmax_float32(x, name="predictions"):
    import keras

    return keras.layers.Activation("softmax", dtype="float32", name=name)(x)


# ---------------------------------------------------------------------------
# Builders.
# ---------------------------------------------------------------------------


def mlp(policy, seed=0, float32_output=True, hidden_bias=0.0):
    """The 784-64-64-10 MLP of the bfloat16 Keras guides (the README demo).

    Faults: ``float32_output=False`` keeps the softmax in the policy's
    compute dtype (a bfloat16 model output fed to the loss);
    ``hidden_bias=-100.0`` initializes ``dense_2``'s bias so far below zero
    that its ReLU units are dead from the first step.
    """
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        return keras.Sequential(
            [
                keras.Input((784,)),
                keras.layers.Dense(64, activation="relu", name="dense_1"),
                keras.layers.Dense(64, activation="relu", name="dense_2",
                                   bias_initializer=keras.initializers.Constant(hidden_bias)),
                keras.layers.Dense(10, name="logits"),
                keras.layers.Activation("softmax", dtype="float32" if float32_output else None,
                                        name="predictions"),
            ],
            name="mlp",
        )


def _application(factory, policy, size, seed, **kwargs):
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        base = factory(
            weights=None, input_shape=(size, size, 3), classes=10, classifier_activation=None,
            **kwargs,
        )
        return keras.Model(base.input, _softmax_float32(base.output, "softmax_float32"), name=base.name)


def mobilenet_v2(policy, size=32, alpha=0.35, seed=0):
    """keras.applications.MobileNetV2 (BatchNorm, ReLU6, depthwise convs)."""
    import keras

    return _application(keras.applications.MobileNetV2, policy, size, seed, alpha=alpha)


def resnet50(policy, size=32, seed=0):
    """keras.applications.ResNet50 (25M parameters; BatchNorm, conv biases)."""
    import keras

    return _application(keras.applications.ResNet50, policy, size, seed)


def efficientnet_b0(policy, size=32, seed=0):
    """keras.applications.EfficientNetB0 (BatchNorm, Dropout, swish, SE blocks)."""
    import keras

    return _application(keras.applications.EfficientNetB0, policy, size, seed)


def _token_and_position_embedding_class():
    import keras

    class TokenAndPositionEmbedding(keras.layers.Layer):
        """The keras-io text classifier's embedding: tokens plus positions."""

        def __init__(self, maxlen, vocab_size, embed_dim, **kwargs):
            super().__init__(**kwargs)
            self.token_emb = keras.layers.Embedding(vocab_size, embed_dim, name="token_emb")
            self.pos_emb = keras.layers.Embedding(maxlen, embed_dim, name="pos_emb")

        def call(self, x):
            positions = self.pos_emb(keras.ops.arange(0, keras.ops.shape(x)[-1], 1))
            return self.token_emb(x) + positions

    return TokenAndPositionEmbedding


def transformer_classifier(policy, vocab=200, seq=16, d_model=32, heads=2, ff=64, blocks=1,
                           dropout=0.1, seed=0, dropout_class=None, input_dtype="int32"):
    """The keras-io text classifier: token + position embedding, Transformer
    blocks (MultiHeadAttention, Dropout, LayerNormalization, feed-forward),
    pooling, Dropout, Dense, float32 softmax.  ``input_dtype="float32"`` is
    keras-io's own ``layers.Input(shape=(maxlen,))``: under a 16-bit policy
    Keras casts the ids to 16 bits, and ids above 256 (bfloat16) round."""
    import keras

    keras.utils.set_random_seed(seed)
    Dropout = dropout_class or keras.layers.Dropout  # noqa: N806
    with global_policy(policy):
        inputs = keras.Input((seq,), dtype=input_dtype, name="tokens")
        x = _token_and_position_embedding_class()(seq, vocab, d_model, name="embedding")(inputs)
        for b in range(blocks):
            attn = keras.layers.MultiHeadAttention(heads, d_model // heads, name="mha_%d" % b)(x, x)
            attn = Dropout(dropout, name="attn_dropout_%d" % b)(attn)
            x = keras.layers.LayerNormalization(epsilon=1e-6, name="ln1_%d" % b)(x + attn)
            f = keras.layers.Dense(ff, activation="relu", name="ff1_%d" % b)(x)
            f = keras.layers.Dense(d_model, name="ff2_%d" % b)(f)
            f = Dropout(dropout, name="ff_dropout_%d" % b)(f)
            x = keras.layers.LayerNormalization(epsilon=1e-6, name="ln2_%d" % b)(x + f)
        x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
        x = Dropout(dropout, name="head_dropout")(x)
        x = keras.layers.Dense(20, activation="relu", name="head")(x)
        x = keras.layers.Dense(2, name="logits")(x)
        return keras.Model(inputs, _softmax_float32(x), name="transformer")


def vit(policy, size=16, patch=4, d_model=32, heads=2, seed=0):
    """A small Vision Transformer: patch convolution, MultiHeadAttention,
    LayerNormalization, a GELU MLP, pooling, float32 softmax."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        inputs = keras.Input((size, size, 3))
        x = keras.layers.Conv2D(d_model, patch, strides=patch, name="patches")(inputs)
        x = keras.layers.Reshape(((size // patch) ** 2, d_model), name="tokens")(x)
        a = keras.layers.MultiHeadAttention(heads, d_model // heads, name="mha")(x, x)
        x = keras.layers.LayerNormalization(name="ln1")(x + a)
        f = keras.layers.Dense(2 * d_model, activation="gelu", name="mlp1")(x)
        f = keras.layers.Dense(d_model, name="mlp2")(f)
        x = keras.layers.LayerNormalization(name="ln2")(x + f)
        x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
        x = keras.layers.Dense(10, name="logits")(x)
        return keras.Model(inputs, _softmax_float32(x), name="vit")


def recurrent(policy, cell="lstm", bidirectional=False, seq=8, features=4, units=8, dropout=0.2,
              recurrent_dropout=0.2, seed=0):
    """An LSTM/GRU (optionally Bidirectional) sequence classifier, with input
    and recurrent dropout."""
    import keras

    keras.utils.set_random_seed(seed)
    layer_class = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU}[cell]
    with global_policy(policy):
        inputs = keras.Input((seq, features))
        rnn = layer_class(units, dropout=dropout, recurrent_dropout=recurrent_dropout, name=cell)
        if bidirectional:
            rnn = keras.layers.Bidirectional(rnn, name="bidirectional")
        x = rnn(inputs)
        x = keras.layers.Dense(3, name="logits")(x)
        return keras.Model(inputs, _softmax_float32(x), name="%s%s" % ("bi" if bidirectional else "", cell))


def random_layers(policy, seq=8, features=8, seed=0):
    """Every random layer Keras has, in one sequence model: Dropout with a
    noise_shape, SpatialDropout1D, GaussianNoise, GaussianDropout,
    MultiHeadAttention's attention dropout, LSTM input and recurrent dropout,
    AlphaDropout."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        inputs = keras.Input((seq, features))
        x = keras.layers.Dense(16, name="embed")(inputs)
        x = keras.layers.Dropout(0.3, noise_shape=(None, 1, 16), name="dropout_shared")(x)
        x = keras.layers.SpatialDropout1D(0.2, name="spatial_dropout")(x)
        x = keras.layers.GaussianNoise(0.1, name="gaussian_noise")(x)
        x = keras.layers.GaussianDropout(0.2, name="gaussian_dropout")(x)
        x = keras.layers.MultiHeadAttention(2, 8, dropout=0.2, name="mha")(x, x)
        x = keras.layers.LSTM(8, dropout=0.2, recurrent_dropout=0.2, name="lstm")(x)
        x = keras.layers.AlphaDropout(0.1, name="alpha_dropout")(x)
        x = keras.layers.Dense(3, name="logits")(x)
        return keras.Model(inputs, _softmax_float32(x), name="random_layers")


def bn_dropout_cnn(policy, size=16, seed=0, dropout_class=None):
    """A small CNN with Conv2D + BatchNormalization + ReLU + Dropout blocks."""
    import keras

    keras.utils.set_random_seed(seed)
    Dropout = dropout_class or keras.layers.Dropout  # noqa: N806
    with global_policy(policy):
        inputs = keras.Input((size, size, 3))
        x = inputs
        for i, filters in enumerate((8, 16)):
            x = keras.layers.Conv2D(filters, 3, padding="same", name="conv_%d" % i)(x)
            x = keras.layers.BatchNormalization(name="bn_%d" % i)(x)
            x = keras.layers.ReLU(name="relu_%d" % i)(x)
            x = keras.layers.MaxPooling2D(name="pool_%d" % i)(x)
        x = keras.layers.Flatten(name="flatten")(x)
        x = Dropout(0.3, name="dropout")(x)
        x = keras.layers.Dense(10, name="logits")(x)
        return keras.Model(inputs, _softmax_float32(x), name="bn_dropout_cnn")


def _subclassed_class():
    import keras

    class Subclassed(keras.Model):
        """A subclassed model, built lazily at its first batch."""

        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.hidden = keras.layers.Dense(32, activation="relu", name="hidden")
            self.dropout = keras.layers.Dropout(0.2, name="dropout")
            self.out = keras.layers.Dense(10, name="logits")
            self.softmax = keras.layers.Activation("softmax", dtype="float32", name="predictions")

        def call(self, x, training=False):
            return self.softmax(self.out(self.dropout(self.hidden(x), training=training)))

    return Subclassed


def subclassed(policy, seed=0):
    """A subclassed keras.Model, not built before fit."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        return _subclassed_class()(name="subclassed")


def sequential_unbuilt(policy, seed=0):
    """A Sequential model without an Input: built lazily at the first batch."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        return keras.Sequential(
            [
                keras.layers.Dense(32, activation="relu", name="hidden"),
                keras.layers.Dense(10, name="logits"),
                keras.layers.Activation("softmax", dtype="float32", name="predictions"),
            ],
            name="sequential_unbuilt",
        )


def _custom_step_class():
    import keras
    import tensorflow as tf

    class CustomStep(keras.Model):
        """The custom train_step of Keras 3's guide: ``optimizer.apply``."""

        def train_step(self, data):
            x, y = data
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            grads = tape.gradient(loss, self.trainable_variables)
            self.optimizer.apply(grads, self.trainable_variables)
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    return CustomStep


def custom_train_step(policy, seed=0):
    """A functional model whose class overrides ``train_step`` (Keras 3 guide)."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        inputs = keras.Input((784,))
        x = keras.layers.Dense(32, activation="relu", name="hidden")(inputs)
        x = keras.layers.Dense(10, name="logits")(x)
        return _custom_step_class()(inputs, _softmax_float32(x), name="custom_step")


def multi_io(policy, seed=0):
    """Two inputs through a shared Dense layer, two outputs (two losses)."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        a, b = keras.Input((12,), name="a"), keras.Input((12,), name="b")
        shared = keras.layers.Dense(16, activation="relu", name="shared")
        x = keras.layers.Concatenate(name="concat")([shared(a), shared(b)])
        cls = keras.layers.Dense(3, name="cls_logits")(x)
        reg = keras.layers.Dense(1, name="reg")(x)
        return keras.Model(
            [a, b],
            {"cls": _softmax_float32(cls, "cls"),
             "reg": keras.layers.Activation("linear", dtype="float32", name="reg_out")(reg)},
            name="multi_io",
        )


def nested_shared(policy, seed=0):
    """A Sequential block nested in a functional model and applied to two
    inputs (shared weights), next to a nested functional sub-model."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        block = keras.Sequential([keras.layers.Dense(16, activation="relu", name="block_dense"),
                                  keras.layers.Dropout(0.2, name="block_dropout")], name="shared_block")
        inner_in = keras.Input((32,), name="inner_in")
        inner = keras.Model(inner_in, keras.layers.Dense(8, activation="tanh", name="inner_dense")(inner_in),
                            name="inner")
        a, b = keras.Input((12,), name="a"), keras.Input((12,), name="b")
        x = keras.layers.Concatenate(name="concat")([block(a), block(b)])
        x = keras.layers.Dense(3, name="logits")(inner(x))
        return keras.Model([a, b], _softmax_float32(x), name="nested_shared")


# ---------------------------------------------------------------------------
# Layers for measurements and injected faults (the alert zoo).
# ---------------------------------------------------------------------------

_LAYER_CLASSES = {}


def layer_classes():
    """{name: class} of the zoo's custom layers (defined at first use: Keras
    is imported lazily)."""
    if _LAYER_CLASSES:
        return _LAYER_CLASSES
    import keras
    from keras import ops

    class Float32MaskDropout(keras.layers.Layer):
        """Dropout whose mask is drawn in float32 whatever the compute dtype,
        so a bfloat16 pass and its float32 reference drop the same units
        (keras.layers.Dropout draws in the compute dtype: tb_gradlens/compare/randomness.py)."""

        def __init__(self, rate, seed=None, **kwargs):
            super().__init__(**kwargs)
            self.rate = rate
            self.seed_generator = keras.random.SeedGenerator(seed)

        def call(self, x, training=False):
            if not training or self.rate == 0:
                return x
            draw = keras.random.uniform(ops.shape(x), dtype="float32", seed=self.seed_generator)
            keep = ops.cast(draw >= self.rate, x.dtype)
            return x * keep / ops.cast(1.0 - self.rate, x.dtype)

    class NaiveVarianceNorm(keras.layers.Layer):
        """A fault: normalization over the last axis with the variance computed
        as E[x^2] - E[x]^2 in the compute dtype (catastrophic cancellation when
        the mean is large against the spread; Welford or x - mean first is right)."""

        def call(self, x):
            mean = ops.mean(x, axis=-1, keepdims=True)
            variance = ops.maximum(ops.mean(x * x, axis=-1, keepdims=True) - mean * mean, 0.0)
            return (x - mean) / ops.sqrt(variance + ops.cast(1e-3, x.dtype))

    class DriftingOffset(keras.layers.Layer):
        """A fault: adds and subtracts a learned offset, (x + s*b) - s*b.  Exact
        in real arithmetic; in bfloat16, x is swamped once |s*b| grows past |x|."""

        def __init__(self, scale=100.0, **kwargs):
            super().__init__(**kwargs)
            self.scale = scale

        def build(self, input_shape):
            self.offset = self.add_weight(shape=(input_shape[-1],), initializer="zeros", name="offset")

        def call(self, x):
            shift = ops.cast(self.scale * self.offset, x.dtype)
            return (x + shift) - shift

    class LogInputs(keras.layers.Layer):
        """log(x + 1): NaN as soon as an input is below -1."""

        def call(self, x):
            return ops.log(x + ops.cast(1.0, x.dtype))

    class AttentionLogits(keras.layers.Layer):
        """q . k^T without the 1/sqrt(d) scaling attention layers apply."""

        def call(self, q, k):
            return keras.ops.matmul(q, keras.ops.transpose(k, (0, 2, 1)))

    _LAYER_CLASSES.update(
        Float32MaskDropout=Float32MaskDropout, NaiveVarianceNorm=NaiveVarianceNorm,
        DriftingOffset=DriftingOffset, LogInputs=LogInputs, AttentionLogits=AttentionLogits,
    )
    return _LAYER_CLASSES


def float32_mask_dropout(rate, name=None):
    """A Dropout layer drawing its mask in float32 (``layer_classes``)."""
    return layer_classes()["Float32MaskDropout"](rate, name=name)


def naive_norm_mlp(policy, features=32, seed=0):
    """Fault model: NaiveVarianceNorm ("naive_norm") on inputs with a large
    mean, then Dense-ReLU and a float32 softmax."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        inputs = keras.Input((features,))
        x = layer_classes()["NaiveVarianceNorm"](name="naive_norm")(inputs)
        x = keras.layers.Dense(32, activation="relu", name="dense_1")(x)
        x = keras.layers.Dense(10, name="logits")(x)
        return keras.Model(inputs, _softmax_float32(x), name="naive_norm_mlp")


def advisor_mlp(policy, features=32, dropout=0.0, seed=0):
    """Fault model of the precision advisor: healthy Dense layers around one
    bad layer, NaiveVarianceNorm ("naive_norm"), fed a large mean by the
    Dense before it (bias 30); optional Dropout after "dense_mid"."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        inputs = keras.Input((features,))
        x = keras.layers.Dense(64, bias_initializer=keras.initializers.Constant(30.0), name="dense_in")(inputs)
        x = layer_classes()["NaiveVarianceNorm"](name="naive_norm")(x)
        x = keras.layers.Dense(64, activation="relu", name="dense_mid")(x)
        if dropout:
            x = keras.layers.Dropout(dropout, name="dropout")(x)
        x = keras.layers.Dense(10, name="logits")(x)
        return keras.Model(inputs, _softmax_float32(x), name="advisor_mlp")


def drift_mlp(policy, features=32, scale=100.0, seed=0):
    """Fault model: Dense-ReLU, DriftingOffset ("drift"), Dense, float32 softmax."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        inputs = keras.Input((features,))
        x = keras.layers.Dense(32, activation="relu", name="dense_1")(inputs)
        x = layer_classes()["DriftingOffset"](scale, name="drift")(x)
        x = keras.layers.Dense(10, name="logits")(x)
        return keras.Model(inputs, _softmax_float32(x), name="drift_mlp")


def log_input_mlp(policy, seed=0):
    """Fault model: log(x + 1) of the inputs ("log_inputs") before the MLP."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        inputs = keras.Input((784,))
        x = layer_classes()["LogInputs"](name="log_inputs")(inputs)
        x = keras.layers.Dense(64, activation="relu", name="dense_1")(x)
        x = keras.layers.Dense(10, name="logits")(x)
        return keras.Model(inputs, _softmax_float32(x), name="log_input_mlp")


def unscaled_attention_logits(policy, seq=4, d=16, seed=0):
    """Fault model of the non-finite steps: attention logits q . k^T without the
    1/sqrt(d) scaling (AttentionLogits), which overflow float16 on large inputs."""
    import keras

    keras.utils.set_random_seed(seed)
    with global_policy(policy):
        inputs = keras.Input((seq, d))
        q = keras.layers.Dense(d, use_bias=False, name="query")(inputs)
        k = keras.layers.Dense(d, use_bias=False, name="key")(inputs)
        v = keras.layers.Dense(d, use_bias=False, name="value")(inputs)
        logits = layer_classes()["AttentionLogits"](name="attention_logits")(q, k)
        weights = keras.layers.Softmax(name="attention_weights")(logits)
        x = keras.layers.Dot(axes=(2, 1), name="attend")([weights, v])
        x = keras.layers.GlobalAveragePooling1D(name="pool")(x)
        x = keras.layers.Dense(3, name="logits")(x)
        return keras.Model(inputs, _softmax_float32(x), name="unscaled_attention")


# ---------------------------------------------------------------------------
# Data.
# ---------------------------------------------------------------------------


def images(size, classes=10):
    def data(batch, rng):
        return (rng.random((batch, size, size, 3), dtype=np.float32),
                rng.integers(0, classes, batch).astype(np.int32))

    return data


def vectors(features, classes=10):
    def data(batch, rng):
        return (rng.random((batch, features), dtype=np.float32),
                rng.integers(0, classes, batch).astype(np.int32))

    return data


def tokens(vocab=200, seq=16, classes=2):
    def data(batch, rng):
        return (rng.integers(0, vocab, (batch, seq)).astype(np.int32),
                rng.integers(0, classes, batch).astype(np.int32))

    return data


def sequences(seq=8, features=4, classes=3):
    def data(batch, rng):
        return (rng.normal(size=(batch, seq, features)).astype(np.float32),
                rng.integers(0, classes, batch).astype(np.int32))

    return data


def offset_vectors(features, offset=16.0, classes=10):
    """Features with a large common mean against a unit spread."""

    def data(batch, rng):
        return (offset + rng.normal(size=(batch, features)).astype(np.float32),
                rng.integers(0, classes, batch).astype(np.int32))

    return data


def unnormalized_images(n, seed=0, size=16):
    """``n`` unnormalized pixels (0-255), as many pipelines feed them, and their
    labels: float16's scaled gradients overflow at the start until the loss scale drops."""
    rng = np.random.default_rng(seed)
    return 255 * rng.random((n, size, size, 3), dtype=np.float32), rng.integers(0, 10, n).astype(np.int32)


def multi_io_data(batch, rng):
    x = {"a": rng.random((batch, 12), dtype=np.float32), "b": rng.random((batch, 12), dtype=np.float32)}
    y = {"cls": rng.integers(0, 3, batch).astype(np.int32),
         "reg": rng.normal(size=(batch, 1)).astype(np.float32)}
    return x, y


def pair_data(batch, rng):
    x = {"a": rng.random((batch, 12), dtype=np.float32), "b": rng.random((batch, 12), dtype=np.float32)}
    return x, rng.integers(0, 3, batch).astype(np.int32)


def digits(batch, rng):
    """Real handwritten digits (scikit-learn's bundled set, upsampled to 784)."""
    from tb_gradlens import demo

    x, y = demo.load_digits_784()
    index = rng.integers(0, len(x), batch)
    return x[index], y[index]


ZOO = {
    "mlp": Workload(mlp, digits, SPARSE_CE, "the README demo's MLP on real digits"),
    "mobilenet_v2": Workload(mobilenet_v2, images(32), SPARSE_CE, "keras.applications, 32x32"),
    "resnet50": Workload(resnet50, images(32), SPARSE_CE, "keras.applications, 32x32, 25M parameters"),
    "efficientnet_b0": Workload(efficientnet_b0, images(32), SPARSE_CE, "keras.applications, 32x32"),
    "transformer": Workload(transformer_classifier, tokens(), SPARSE_CE, "keras-io text classifier"),
    "lstm": Workload(lambda p, **k: recurrent(p, "lstm", **k), sequences(), SPARSE_CE, "LSTM"),
    "gru": Workload(lambda p, **k: recurrent(p, "gru", **k), sequences(), SPARSE_CE, "GRU"),
    "bilstm": Workload(lambda p, **k: recurrent(p, "lstm", True, **k), sequences(), SPARSE_CE,
                       "Bidirectional LSTM"),
    "random_layers": Workload(random_layers, sequences(8, 8), SPARSE_CE, "every Keras random layer"),
    "bn_dropout_cnn": Workload(bn_dropout_cnn, images(16), SPARSE_CE, "Conv+BatchNorm+Dropout"),
    "subclassed": Workload(subclassed, vectors(784), SPARSE_CE, "subclassed, unbuilt before fit"),
    "sequential_unbuilt": Workload(sequential_unbuilt, vectors(784), SPARSE_CE,
                                   "Sequential without Input, unbuilt before fit"),
    "custom_train_step": Workload(custom_train_step, vectors(784), SPARSE_CE,
                                  "train_step overridden with optimizer.apply"),
    "multi_io": Workload(multi_io, multi_io_data, {"cls": SPARSE_CE, "reg": "mse"},
                         "two inputs, shared layer, two outputs"),
    "nested_shared": Workload(nested_shared, pair_data, SPARSE_CE,
                              "a shared Sequential block and a nested functional model"),
}

# Models with an injected fault (the alert zoo, evaluation/alert_zoo.py): not
# healthy, so apart from ZOO.
FAULT_ZOO = {
    "naive_norm_mlp": Workload(naive_norm_mlp, offset_vectors(32), SPARSE_CE,
                               "fault: E[x^2]-E[x]^2 variance in the compute dtype"),
    "advisor_mlp": Workload(advisor_mlp, vectors(32), SPARSE_CE,
                            "fault: E[x^2]-E[x]^2 variance after a Dense with a large bias"),
    "drift_mlp": Workload(drift_mlp, vectors(32), SPARSE_CE, "fault: (x + s*b) - s*b with growing b"),
    "log_input_mlp": Workload(log_input_mlp, digits, SPARSE_CE, "fault: log(x + 1) of the inputs"),
}


def build_compiled(name, policy, optimizer="adam", seed=0, **compile_kwargs):
    """``ZOO[name]`` built under ``policy`` and compiled with its loss."""
    workload = ZOO[name]
    model = workload.build(policy, seed=seed)
    model.compile(optimizer=optimizer, loss=workload.loss, **compile_kwargs)
    return model

"""The benchmark models, all built under a given dtype policy (float32 softmax/output).

``mlp``, ``convnet`` and ``transformer`` are defined here; ``resnet50`` and
``mobilenet_v2`` are keras.applications (weights=None, 32x32 inputs) from the
shared zoo of the tests (``evaluation/real_models.py``).
"""


import numpy as np

from evaluation import real_models

NAMES = ("mlp", "convnet", "transformer", "resnet50", "mobilenet_v2")
ZOO_MODELS = ("resnet50", "mobilenet_v2")

# Batch sizes of the full-size runs: bfloat16 convolutions are slow on CPU,
# so the conv net runs at 4; the keras.applications at 32 (a step long
# enough that reading the 23.5M ResNet50 gradients is not most of it).
DEFAULT_BATCH = {"mlp": 64, "convnet": 4, "transformer": 8, "resnet50": 32, "mobilenet_v2": 32}
# Steps per timed round: a round of a few seconds, so that rounds interleave
# finely enough for the load of a shared machine to hit both sides alike.
DEFAULT_STEPS = {"mlp": 30, "convnet": 4, "transformer": 10, "resnet50": 4, "mobilenet_v2": 20}


def mlp(policy):
    """The 784-64-64-10 MLP of the bfloat16 Keras guides (55k parameters)."""
    import keras

    return keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(64, activation="relu", dtype=policy),
            keras.layers.Dense(64, activation="relu", dtype=policy),
            keras.layers.Dense(10, dtype=policy),
            keras.layers.Activation("softmax", dtype="float32"),
        ],
        name="mlp",
    )


def convnet(policy, width=1.0):
    """A CIFAR-style conv net, ~0.8M parameters at width 1."""
    import keras

    c = lambda n: max(4, int(n * width))  # noqa: E731
    layers = [keras.Input((32, 32, 3))]
    for i, n in enumerate((64, 128, 256)):
        layers += [
            keras.layers.Conv2D(c(n), 3, padding="same", activation="relu", dtype=policy),
            keras.layers.Conv2D(c(n), 3, padding="same", activation="relu", dtype=policy)
            if i < 2
            else keras.layers.Identity(),
            keras.layers.MaxPooling2D(dtype=policy),
        ]
    layers += [
        keras.layers.GlobalAveragePooling2D(dtype=policy),
        keras.layers.Dense(c(256), activation="relu", dtype=policy),
        keras.layers.Dense(10, dtype=policy),
        keras.layers.Activation("softmax", dtype="float32"),
    ]
    return keras.Sequential(layers, name="convnet")


def transformer(policy, layers=4, d_model=256, heads=4, seq=64, vocab=8000):
    """A small transformer encoder classifier (~5M parameters by default)."""
    import keras

    inputs = keras.Input((seq,), dtype="int32")
    x = keras.layers.Embedding(vocab, d_model, dtype=policy)(inputs)
    for _ in range(layers):
        a = keras.layers.MultiHeadAttention(heads, d_model // heads, dtype=policy)(x, x)
        x = keras.layers.LayerNormalization(dtype=policy)(x + a)
        f = keras.layers.Dense(4 * d_model, activation="gelu", dtype=policy)(x)
        f = keras.layers.Dense(d_model, dtype=policy)(f)
        x = keras.layers.LayerNormalization(dtype=policy)(x + f)
    x = keras.layers.GlobalAveragePooling1D(dtype=policy)(x)
    x = keras.layers.Dense(10, dtype=policy)(x)
    outputs = keras.layers.Activation("softmax", dtype="float32")(x)
    return keras.Model(inputs, outputs, name="transformer")


def batch(model_name, batch_size, rng, tiny=False):
    """A random (x, y) batch for the model."""
    if model_name in ZOO_MODELS:
        return real_models.ZOO[model_name].data(batch_size, rng)
    if model_name == "mlp":
        x = rng.random((batch_size, 784), dtype=np.float32)
    elif model_name == "convnet":
        x = rng.random((batch_size, 32, 32, 3), dtype=np.float32)
    else:
        seq = 16 if tiny else 64
        x = rng.integers(0, 1000 if tiny else 8000, (batch_size, seq)).astype(np.int32)
    y = rng.integers(0, 10, batch_size).astype(np.int32)
    return x, y


def build(model_name, policy, tiny=False):
    if model_name in ZOO_MODELS:
        return real_models.ZOO[model_name].build(policy)
    if model_name == "mlp":
        return mlp(policy)
    if model_name == "convnet":
        return convnet(policy, width=0.125 if tiny else 1.0)
    if tiny:
        return transformer(policy, layers=1, d_model=32, heads=2, seq=16, vocab=1000)
    return transformer(policy)

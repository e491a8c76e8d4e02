"""Independent recomputation of one training step, for checking what the lens records.

A *twin* is a fresh model built by the same builder under a given policy,
given the weights (and the seed-generator states) of the model that
trained.  ``twin_step`` computes its loss and gradients the way Keras'
``train_step`` does (forward with ``training=True``, ``compute_loss``, the
optimizer's loss scaling undone), eagerly, in a ``tf.function`` or under XLA.

Randomness is shared by the test itself, not by tb_gradlens: ``SharedDraws``
patches TensorFlow's ``stateless_dropout`` and ``stateless_normal`` while a
twin runs.  The first twin (the candidate, in its own dtype) records each
dropout keep-mask and each normal sample; the second twin replays them, so
both drop the same units and add the same noise, whatever dtype each
computes in.  The metrics are then computed by
``divergence_reference.np_divergence`` in float64 NumPy.
"""

import contextlib

import numpy as np


class SharedDraws:
    """Record random draws in one twin, replay them in another.

    Pass it to ``twin_step(..., draws=shared)``: the first twin records
    (the draws come back as outputs of its function), the second replays
    (they go in as arguments of its function).
    """

    def __init__(self):
        self.draws = []
        self._replay = None
        self._next = 0

    @contextlib.contextmanager
    def recording(self, into):
        with self._patched("record", into):
            yield

    @contextlib.contextmanager
    def replaying(self, draws):
        self._replay, self._next = list(draws), 0
        with self._patched("replay", None):
            yield
        assert self._next == len(self._replay), "the twins drew a different number of times"

    @contextlib.contextmanager
    def _patched(self, mode, into):
        import tensorflow as tf

        original_dropout = tf.nn.experimental.stateless_dropout
        original_normal = tf.random.stateless_normal

        def dropout(x, rate, seed, rng_alg=None, noise_shape=None, name=None):
            x = tf.convert_to_tensor(x)
            if mode == "record":
                shape = tf.shape(x) if noise_shape is None else noise_shape
                into.append(original_dropout(tf.ones(shape, x.dtype), rate, seed, rng_alg=rng_alg) != 0)
                return original_dropout(x, rate, seed, rng_alg=rng_alg, noise_shape=noise_shape)
            keep = self._take()
            return tf.where(keep, x * tf.constant(1.0 / (1.0 - rate), x.dtype), tf.zeros([], x.dtype))

        def normal(shape, seed, mean=0.0, stddev=1.0, dtype=tf.float32, name=None, alg="auto_select"):
            if mode == "record":
                sample = original_normal(shape, seed, mean=mean, stddev=stddev, dtype=dtype, alg=alg)
                into.append(sample)
                return sample
            return tf.cast(self._take(), dtype)

        tf.nn.experimental.stateless_dropout = dropout
        tf.random.stateless_normal = normal
        try:
            yield
        finally:
            tf.nn.experimental.stateless_dropout = original_dropout
            tf.random.stateless_normal = original_normal

    def _take(self):
        draw = self._replay[self._next]
        self._next += 1
        return draw


def _is_seed_state(variable):
    return "seed_generator_state" in variable.path


def weights_of(model):
    """Every variable's value: weights by path, seed-generator states in
    order (their paths carry a process-wide counter, not the layer's name)."""
    weights = {v.path: np.array(v.numpy()) for v in model.variables if not _is_seed_state(v)}
    weights["seed states"] = [np.array(v.numpy()) for v in model.variables if _is_seed_state(v)]
    return weights


def model_state(model):
    """Every variable of ``model`` and its optimizer, as NumPy arrays (bit-identity checks)."""
    return [np.array(v.numpy()) for v in model.variables + model.optimizer.variables]


def build_twin(build, policy, weights, loss, optimizer=None, x=None):
    """A fresh model from ``build(policy)`` carrying ``weights`` (``weights_of``)."""
    model = build(policy)
    model.compile(optimizer=optimizer or "sgd", loss=loss)
    if not model.built and x is not None:
        model(x)
    by_path = {v.path: v for v in model.variables if not _is_seed_state(v)}
    for path, value in weights.items():
        if path in by_path:
            by_path[path].assign(value.astype(by_path[path].dtype))
    seeds = [v for v in model.variables if _is_seed_state(v)]
    assert len(seeds) == len(weights["seed states"]), "the twin has other random layers"
    for variable, value in zip(seeds, weights["seed states"]):
        variable.assign(value)
    return model


def twin_step(model, x, y, mode="graph", scale=None, sample_weight=None, draws=None):
    """(loss, [gradient per trainable variable]) of one training step.

    ``mode``: "eager", "graph" (tf.function) or "xla" (jit_compile=True).
    ``scale``: multiply the loss by it before differentiating and divide the
    gradients after (a loss-scale optimizer's arithmetic).  ``draws``: a
    ``SharedDraws``; the first twin given it records its random draws, the
    next replays them.  Runs in a ``keras.StatelessScope`` so the twin's own
    state is not advanced.
    """
    import keras
    import tensorflow as tf

    replay = draws is not None and bool(draws.draws)

    def step(x, y, replayed):
        recorded = []
        if draws is None:
            scope = contextlib.nullcontext()
        elif replay:
            scope = draws.replaying(replayed)
        else:
            scope = draws.recording(recorded)
        with keras.StatelessScope(), scope:
            with tf.GradientTape() as tape:
                y_pred = model(x, training=True)
                loss = model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
                scaled = loss * scale if scale is not None else loss
            grads = tape.gradient(scaled, model.trainable_variables)
        if scale is not None:
            grads = [None if g is None else g / scale for g in grads]
        return loss, grads, recorded

    if mode == "graph":
        step = tf.function(step)
    elif mode == "xla":
        step = tf.function(step, jit_compile=True)
    loss, grads, recorded = step(tf.nest.map_structure(tf.convert_to_tensor, x),
                                 tf.nest.map_structure(tf.convert_to_tensor, y),
                                 list(draws.draws) if replay else [])
    if draws is not None and not replay:
        draws.draws = list(recorded)
    return float(loss), [None if g is None else tf.convert_to_tensor(g).numpy() for g in grads]

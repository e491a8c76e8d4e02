"""One random draw for both sides of a comparison.

A bfloat16 step and its float32 reference must drop the same units and add
the same noise, or the comparison measures two different random networks
(rel L2 ~ 1).  Two facts make "same seed" not enough:
TensorFlow draws a dropout mask in the dtype of the tensor dropped, so a
float32 and a bfloat16 draw with one seed keep different units; and XLA
draws other numbers than TensorFlow's kernels from the same seed, in any
dtype.

``SharedDraws`` is active while a shadow pass runs.  Every Keras random
draw of the pass (``keras_private.random_module``: Dropout and its
noise_shape, SpatialDropout, GaussianNoise, GaussianDropout, AlphaDropout,
attention dropout, RNN input and recurrent dropout, the random
preprocessing layers) then either

* **draws** it as the training step draws it: the same function, seed and
  shape, in the dtype the calling layer computes in *as configured* (not
  the dtype the pass switched it to), and records it; the pass then applies
  the draw to its own values (dropout: the keep mask, scaled in the pass's
  dtype; other draws: the sample cast to the dtype asked for); or
* **replays** the draws another pass recorded, in order.

A pass that runs where the training step runs (the same compilation)
draws the step's own numbers; a pass compiled otherwise replays them
(``compare_keras`` decides).
"""

import inspect
import sys
import threading

import keras
import tensorflow as tf

from tb_gradlens.compare import instruments
from tb_gradlens.writing import keras_private

_local = threading.local()
_lock = threading.Lock()
_installed = {"users": 0, "originals": {}}


def _install():
    with _lock:
        _installed["users"] += 1
        if _installed["users"] > 1:
            return
        module = keras_private.random_module()
        for name in keras_private.RANDOM_FUNCTIONS:
            original = getattr(module, name)
            _installed["originals"][name] = original
            setattr(module, name, _wrapper(name, original))


def _uninstall():
    with _lock:
        _installed["users"] -= 1
        if _installed["users"] > 0:
            return
        module = keras_private.random_module()
        for name, original in _installed["originals"].items():
            setattr(module, name, original)
        _installed["originals"].clear()


def _wrapper(name, original):
    signature = inspect.signature(original)

    def shared_draw(*args, **kwargs):
        draws = getattr(_local, "draws", None)
        if draws is None or keras_private.drawn_by_initializer(sys._getframe(1)):
            # (a weight initialized as the pass builds a layer: Keras' draw, in
            # whatever graph Keras builds in, not one the passes share)
            return original(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return draws.handle(name, original, bound.arguments)

    shared_draw.__wrapped__ = original
    return shared_draw


# The name scope of the ops a pass draws its random numbers with: they run in
# the dtype the layer computes in as configured (16 bits in a float32 pass),
# which is no layer computing in 16 bits (``graph_dtypes``).
DRAW_SCOPE = "tb_gradlens_draw"


def _float_dtype_name(dtype):
    if dtype is None:
        return None
    name = keras.backend.standardize_dtype(dtype)
    return name if tf.as_dtype(name).is_floating else None


class SharedDraws:
    """The random draws of one shadow pass (a context manager).

    Args:
      configured: ``{id(layer): compute dtype name}`` of the model's layers
        as configured (before a pass switches their policies).
      replay: None to draw (and record in ``recorded``), or the list of
        draws another pass recorded, to use in order.
    """

    def __init__(self, configured, replay=None):
        self.configured = dict(configured)
        self.replay = None if replay is None else list(replay)
        self.recorded = []
        self._next = 0
        self._previous = None

    def __enter__(self):
        _install()
        self._previous = getattr(_local, "draws", None)
        _local.draws = self
        return self

    def __exit__(self, *exc):
        _local.draws = self._previous
        _uninstall()
        if exc[0] is None and self.replay is not None and self._next != len(self.replay):
            raise ValueError(
                "tb_gradlens: the passes of a comparison drew randomness %d and %d times"
                % (len(self.replay), self._next)
            )
        return False

    @property
    def draws(self):
        """What the pass drew (or replayed), in order."""
        return self.recorded if self.replay is None else self.replay

    def draw_dtype(self, requested):
        """The dtype the training step draws in where the pass asks for
        ``requested``: the calling layer's configured compute dtype when the
        pass asks for the layer's (switched) compute dtype (a layer drawing
        in ``self.compute_dtype``, or dropping its inputs, which Keras casts
        to it).  A layer asking for that dtype by name is taken the same
        way."""
        name = _float_dtype_name(requested)
        layer = instruments.current_layer()
        if name is None or layer is None or id(layer) not in self.configured:
            return requested
        if name == layer.compute_dtype:
            return self.configured[id(layer)]
        return requested

    def _take(self):
        if self._next >= len(self.replay):
            raise ValueError("tb_gradlens: a pass drew randomness more often than the pass it replays")
        draw = self.replay[self._next]
        self._next += 1
        return draw

    def _keep(self, draw):
        if self.replay is None:
            self.recorded.append(draw)
            return draw
        return self._take()

    def handle(self, name, original, arguments):
        if name == "dropout":
            return self._dropout(original, **arguments)
        if name == "shuffle":
            return self._shuffle(original, **arguments)
        asked = arguments.get("dtype")
        requested = asked or keras.config.floatx()
        if self.replay is not None:
            return tf.cast(self._take(), requested)
        # dtype None is floatx in the step too (AlphaDropout's uniform draw).
        with tf.name_scope(DRAW_SCOPE):
            drawn = original(**dict(arguments, dtype=requested if asked is None else self.draw_dtype(asked)))
        self.recorded.append(drawn)
        return tf.cast(drawn, requested)

    def _dropout(self, original, inputs, rate, noise_shape=None, seed=None):
        if not isinstance(rate, (int, float)) or rate <= 0.0 or rate >= 1.0:
            return original(inputs, rate, noise_shape=noise_shape, seed=seed)
        inputs = tf.convert_to_tensor(inputs)
        if self.replay is None:
            with tf.name_scope(DRAW_SCOPE):
                shape = keras_private.concrete_noise_shape(inputs, noise_shape)
                ones = tf.ones(shape, self.draw_dtype(inputs.dtype))
                keep = tf.not_equal(original(ones, rate, noise_shape=None, seed=seed), 0)
        else:
            keep = None
        keep = self._keep(keep) if keep is not None else self._take()
        # As tf.nn.experimental.stateless_dropout applies a mask: x * (1 / (1 - rate))
        # in the dtype of x where kept, else 0.
        scale = tf.constant(1.0 / (1.0 - rate), inputs.dtype)
        return tf.where(keep, inputs * scale, tf.zeros([], inputs.dtype))

    def _shuffle(self, original, x, axis=0, seed=None):
        x = tf.convert_to_tensor(x)
        if self.replay is None:
            order = self._keep(original(tf.range(tf.shape(x)[axis]), axis=0, seed=seed))
        else:
            order = self._take()
        return tf.gather(x, order, axis=axis)

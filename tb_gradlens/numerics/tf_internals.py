"""The TensorFlow internals the writing side reads, in one place.

Each is private TensorFlow state with no public getter; each reader
degrades to a safe answer when an internal moves.  What is where:

* here: the TensorFlow internals of writing and of the numerics backend
  choice (whether ops are being built for XLA, the default summary
  writer), and the settings that change what float32 computes which have
  no public reader (op determinism, oneDNN; ``compare.environment``); no
  Keras;
* ``tb_gradlens/writing/keras_private.py``: every private Keras API the lens
  touches (and the TensorFlow graph internals only the Keras lens and the
  precision comparison use: keeping a ``tf.cond`` functional, the graph
  being built).
"""


def in_xla_context():
    """Whether ops built now are compiled by XLA (a ``jit_compile=True``
    function being traced): TensorFlow marks it with a control-flow context."""
    try:
        import tensorflow as tf
        from tensorflow.python.ops import control_flow_util  # noqa: PLC0415
    except ImportError:
        return False
    try:
        return bool(control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()))
    except Exception:  # noqa: BLE001 - an internal that changed: assume no XLA
        return False


def default_summary_writer():
    """The summary writer ``tf.summary`` writes to now (``as_default``), or None."""
    try:
        from tensorflow.python.ops import summary_ops_v2  # noqa: PLC0415
    except ImportError:
        return None
    state = getattr(summary_ops_v2, "_summary_state", None)
    return getattr(state, "writer", None)


def op_determinism_enabled():
    """Whether ``tf.config.experimental.enable_op_determinism()`` is on
    (``tensorflow.python.framework.config.is_op_determinism_enabled``, what
    Keras' ``jit_compile="auto"`` reads), None when it cannot tell.  The
    lens reads it, never sets it (it would switch Keras' automatic XLA off)."""
    try:
        from tensorflow.python.framework import config  # noqa: PLC0415

        return bool(config.is_op_determinism_enabled())
    except Exception:  # noqa: BLE001 - an internal that changed: unknown
        return None


def onednn_enabled():
    """Whether this TensorFlow runs oneDNN kernels on the CPU
    (``_pywrap_util_port.IsMklEnabled``), None when it cannot tell."""
    try:
        from tensorflow.python.util import _pywrap_util_port  # noqa: PLC0415

        return bool(_pywrap_util_port.IsMklEnabled())
    except Exception:  # noqa: BLE001 - an internal that changed: unknown
        return None

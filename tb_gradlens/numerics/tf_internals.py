"""The TensorFlow internals the writing side reads, in one place.

Each is private TensorFlow state with no public getter; each reader
degrades to a safe answer when an internal moves.  What is where:

* here: the TensorFlow internals of writing and of the numerics backend
  choice (whether ops are being built for XLA, the default summary
  writer); no Keras;
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

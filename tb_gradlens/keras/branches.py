"""The train function's optional parts and the guarded branch each runs in.

A step not logged takes none of the parts; ``when`` builds each part's
``tf.cond`` so that a failure to build one is reported, never raised.
"""

import tensorflow as tf

from tb_gradlens import metadata
from tb_gradlens.writing import distribute
from tb_gradlens.writing import keras_private

GRADIENT_KINDS = (metadata.GRAD_STATS, metadata.GRAD_HISTOGRAM)
COMPARISON_KINDS = (metadata.DIVERGENCE, metadata.LOSS_COMPARISON, metadata.ACTIVATION_DIVERGENCE)
# The parts of a logged step that a trace of it may leave out (``Tap.parts``).
GRADIENTS = "gradients"
UPDATES = "updates"
COMPARISONS = "comparisons"


def when(status, what, kinds, pred, fn, name=None):
    """``tf.cond(pred, fn, no-op)``, the branch kept out of steps not taken;
    a failure to build it is reported once per model and recorded
    (``LensStatus.failed``).  True if built."""
    try:
        out = tf.cond(pred, fn, lambda: tf.constant(False))
        if distribute.replica_context() is None:
            # (A functional If of one replica cannot take another replica's
            # variables: with several replicas TensorFlow must lower it.)
            keras_private.keep_branches_unlowered(out)
        return True
    except Exception as error:  # noqa: BLE001 - the lens never stops training
        status.failed(what, kinds, error, name=name)
        return False


def built(status, what, kinds, fn, name=None):
    """``fn()``, ops the step builds outside a conditional; None when
    building them fails, which is reported as ``when`` reports it, never
    raised."""
    try:
        return fn()
    except Exception as error:  # noqa: BLE001 - the lens never stops training
        status.failed(what, kinds, error, name=name)
        return None

"""Failures found while a traced step runs, reported through the failure policy.

A check the lens makes inside a training step (a comparison pair whose
element counts differ only when the step runs, a compiled kernel out of
memory) must not raise there: that would stop the training it observes.
Each such check instead leaves its rows NaN and calls ``report_if``: the
failure goes to ``tb_gradlens.safety`` like any other (a
``GradLensWarning`` once per cause; raised in strict mode, where stopping
is what was asked for).  Findings about the user's model (an embedding id
past its table) are not failures: they are recorded and alerted on
(``numerics.sparse``).

In a graph, ``report_if`` is a ``tf.cond`` whose taken branch calls Python
(``tf.py_function``): a healthy step runs only the predicate.  Inside an
XLA-compiled function nothing can call Python; the NaN rows stay the only
trace of the failure there.
"""

import tensorflow as tf

from tb_gradlens import safety
from tb_gradlens.numerics import tf_internals


class StepFailure(RuntimeError):
    """A check inside a training step failed (the message says which)."""


def report_if(cause, failed, message, *details):
    """Report ``message % details`` (``details``: tensors, read when it is
    reported) to ``safety`` under ``cause`` when ``failed`` (a boolean
    scalar) is true.  Returns nothing useful; never raises but in strict
    mode."""
    if isinstance(failed, bool) or tf.executing_eagerly():
        if bool(failed):
            _report(cause, message, *[_numpy(d) for d in details])
        return None
    if tf_internals.in_xla_context():
        return None

    def report():
        tf.py_function(lambda *values: _report(cause, message, *[_numpy(v) for v in values]) or True,
                       list(details), tf.bool)
        return tf.constant(True)

    return tf.cond(failed, report, lambda: tf.constant(False))


def _numpy(value):
    value = value.numpy() if hasattr(value, "numpy") else value
    return value.tolist() if hasattr(value, "tolist") else value


def _report(cause, message, *values):
    safety.report(cause, StepFailure(message % tuple(values) if values else message))

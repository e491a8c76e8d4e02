"""The weights before an optimizer update, kept for its update statistics.

A logged step's update statistics compare the weights before and after the
optimizer's update.  Where the compiled kernel's ops run (on CPU, one
replica, without XLA) the weights read before the update are passed on by
one op that takes the condition as an input (``numerics.keep_if``): their
buffers are shared, and TensorFlow copies a buffer the update writes while
a read still holds it, so a logged step pays for one copy and a step not
logged for none; the update waits for that op.  No conditional captures
every weight (each captured value is an input of both branches, traced at
the first call).  Elsewhere the weights are copied into buffers under a
conditional of their own.
"""

import tensorflow as tf

from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens.keras.branches import built
from tb_gradlens.keras.branches import when
from tb_gradlens.writing import distribute
from tb_gradlens.writing import step_records
from tb_gradlens.writing import summary_inputs

KINDS = (metadata.UPDATE_STATS,)


def buffer_like(variable):
    """A variable (one per replica where several run) shaped like ``variable``."""
    return distribute.buffer(tf.zeros(variable.shape, variable.dtype))


class UpdateWatch:
    """The update statistics of one model's selected variables.

    Args:
      status: the ``LensStatus`` a failure to build a part goes to.
      variables: the selected variables; ``rows``: their paths.
      ring: the ``StepRing`` the statistics wait in (``update``);
        ``sink``: the ``writing.RecordSink`` they are put into.
      logs: whether update statistics are logged at all.
      by_op: the step allows keeping by op (one replica, no XLA); the
        kernel's ops decide the rest (``numerics.kept_by_op_possible``).
    """

    def __init__(self, status, variables, rows, ring, sink, logs, by_op):
        self.status = status
        self.variables = variables
        self.rows = rows
        self.ring = ring
        self.sink = sink
        self.by_op = logs and by_op and numerics.kept_by_op_possible(variables)
        self.buffers = [buffer_like(v) for v in variables] if logs and not self.by_op else []
        self.kept = None  # while traced, by op: (the kept weights, when they are kept)

    def _reads(self):
        return [tf.convert_to_tensor(v.value) for v in self.variables]

    def keep_when_due(self, due):
        """Before the update: keep the weights when ``due``; returns what
        the update must wait for (see the module)."""
        self.kept = None
        if not self.by_op:
            self.copy_when_due(due)
            return []
        kept = built(self.status, "update statistics", KINDS, lambda: numerics.keep_if(due, self._reads()),
                     name=self.status.name)
        self.kept = (kept, due)  # (kept None: nothing described)
        return kept or []

    def copy_when_due(self, due):
        """Before the update: copy the weights into buffers when ``due``,
        under a conditional of its own (inside the gradient pass's, the
        update would wait for the whole pass: ResNet50 +4% per logged step)."""
        when(self.status, "update statistics", KINDS, due, self._copy, name=self.status.name)

    def _copy(self):
        for buf, value in zip(self.buffers, self._reads()):
            buf.assign(value)
        return tf.constant(True)

    def describe_when_due(self, step, due, chosen):
        """After the update: the statistics of ``step`` when ``due``."""
        if self.kept is None:
            when(self.status, "update statistics", KINDS, due, lambda: self.describe(step, chosen),
                 name=self.status.name)
            return
        before, kept_when = self.kept
        if before is None:  # (keeping them failed: reported)
            return
        rows = built(self.status, "update statistics", KINDS, lambda: numerics.update_statistics(
            before, self._reads(), chosen, when=kept_when), name=self.status.name)
        if rows is None:
            return
        shape = [len(self.variables), len(metadata.UPDATE_STATS_COLUMNS)]

        when(self.status, "update statistics", KINDS, kept_when, lambda: self._put(step, tf.reshape(rows, shape)),
             name=self.status.name)

    def describe(self, step, chosen):
        """The statistics of ``step`` from the copies (``copy_when_due``)."""
        before = [b.read_value() for b in self.buffers]
        return self._put(step, numerics.update_statistics(before, self._reads(), chosen))

    def _put(self, step, update):
        self.sink.put(self.ring, step, {"update": update}, step_records.update_records(
            self.status.name, self.rows, [summary_inputs.dtype_name(v) for v in self.variables]))
        return tf.constant(True)

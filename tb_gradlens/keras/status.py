"""What the lens was asked to log for a model, what it cannot log, and why.

The ``lens_status`` record (``records.lens_status``; contract 3) is written
when logging starts and whenever it changes.  A feature the lens cannot
deliver for a model (a comparison that cannot be traced, gradients XLA
hides) is said loudly once per model (a ``GradLensWarning``, also for the
next model of the same process), its expectations are set to ``every=0``
and an ``unsupported`` entry names the kinds and the reason, so ``report``
and ``--fail-on`` never take a run the lens did not see for a healthy one.
"""

import itertools
import warnings
import weakref

from tb_gradlens import records
from tb_gradlens import safety
from tb_gradlens.writing import summary_ops

_serial = itertools.count(1)
_labels = weakref.WeakKeyDictionary()


def model_label(model):
    """'name #k': k numbers the models this process has logged."""
    try:
        label = _labels.get(model)
        if label is None:
            label = _labels[model] = "%s #%d" % (model.name, next(_serial))
        return label
    except TypeError:  # not weak-referenceable
        return "%s #%x" % (getattr(model, "name", "model"), id(model))


class LensStatus:
    """The lens status of one model's training (``writer`` names the API)."""

    def __init__(self, writer, model, name):
        self.writer = writer
        self.label = model_label(model)
        self.name = name
        self.expected = []
        self.unsupported = []
        self.step_offset = 0
        self.environment = None  # records.environment, read when logging starts
        self.float32 = None  # records.float32_precision where the references run, when measured
        self._written = None

    def expect(self, kind, name, schedule, offset=0):
        """Records of ``kind`` under tag prefix ``name`` on ``schedule``
        (optimizer steps; records are at optimizer step + ``offset``)."""
        stop = None if schedule.stop is None else schedule.stop + offset
        self.expected.append(records.expectation(kind, name, schedule.every, schedule.start + offset, stop))

    def cannot(self, what, kinds, reason, name=None, step=None, warn=True):
        """``what`` (kinds ``kinds``, tag prefix ``name``) cannot be logged for
        this model: record why, and warn (once for this model) unless the
        caller reported it already."""
        entry = records.unsupported(what, kinds, reason, step)
        if any(u["what"] == entry["what"] and u["reason"] == entry["reason"] for u in self.unsupported):
            return
        self.unsupported.append(entry)
        for e in self.expected:
            if e["kind"] in kinds and (name is None or e["name"] == name):
                e["every"] = 0
        if not warn:
            return
        warnings.warn(
            "tb_gradlens: %s cannot log %s for model %s: %s. The run's lens_status record says so."
            % (self.writer, what, self.label, reason),
            safety.GradLensWarning,
            stacklevel=3,
        )

    def failure_cause(self, what):
        """The ``safety`` cause of a failure of ``what`` for this model (a
        failure is then reported once per model, not once per process)."""
        return "%s (%s) on model %s" % (self.writer, what, self.label)

    def failed(self, what, kinds, error, name=None):
        """``what`` failed to build for this model: ``safety.report`` it
        (once per model; raised in strict mode) and record it unsupported."""
        safety.report(self.failure_cause(what), error)
        reason = "%s: %s" % (type(error).__name__, (str(error).strip().splitlines() or [""])[0][:300])
        self.cannot(what, kinds, reason, name=name, warn=False)

    def payload(self):
        return records.lens_status(self.writer, self.expected, self.unsupported, self.step_offset,
                                   self.environment, self.float32)

    @property
    def changed(self):
        return self.payload() != self._written

    def write(self, step):
        """Write the status at ``step`` (default writer) if it changed."""
        payload = self.payload()
        if payload == self._written:
            return False
        summary_ops.lens_status(payload, step=step, name=self.name)
        self._written = payload
        return True


class _Named:
    """What ``LensStatus`` needs of a model: a name (``GradLens`` logs no model)."""

    def __init__(self, name):
        self.name = name


class AskedAsCalled:
    """The lens status of ``GradLens``, which learns what it is asked to log
    when its methods are first called: each new (kind, tag prefix) is added
    then, and the record is written eagerly (also from inside a
    ``tf.function``), at most once per step (several methods called at one
    step make one record)."""

    def __init__(self, writer_name, name, writer):
        self.status = LensStatus(writer_name, _Named(name), name)
        self.writer = writer
        self.asked = set()
        self.pending = False
        self.written_at = None

    def expect(self, step, schedule, name, *kinds):
        for kind in kinds:
            if (kind, name) not in self.asked:
                self.asked.add((kind, name))
                self.status.expect(kind, name, schedule)
                self.pending = True
        at = step if isinstance(step, int) and not isinstance(step, bool) else schedule.start
        if self.pending and at != self.written_at:
            self._write(at)

    def flush(self):
        if self.pending:
            self._write(self.written_at if self.written_at is not None else 0)

    def _write(self, at):
        import tensorflow as tf

        with tf.init_scope(), safety.guard(self.status.writer + ".lens_status"):
            with self.writer.as_default():
                self.status.write(at)
                self.written_at = at
                self.pending = False

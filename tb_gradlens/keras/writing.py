"""Where a logged step's values go: written inside the step, or buffered
and written right after each train-function call.

Every part of the lens that fills a record (``Tap``, ``UpdateWatch``,
``ComparisonSlot``, ``StepWatch``, ``ReplaySlot``) hands a logged step's
values to ``RecordSink.put`` with the records they make
(``writing.step_records``).  Where the lens's ops run outside XLA and one
replica writes (``RecordSink.write_in_step``), ``put`` writes them at once,
to the writer's handle (``record_writing.RecordWriter.write_in_step``), and
the call's wrapper only flushes: no host read, no graph call per record
set.  Otherwise ``put`` keeps them in the part's ``StepRing`` and
``write_pending`` writes every logged step of the call, in step order.

Buffered writes happen in the train function's wrapper (``session``), not
in ``on_train_batch_end``: a callback listed before the lens that raises or
stops training at a NaN step cannot keep that step from the disk, and when
the step itself raises (or Ctrl-C arrives) the steps buffered so far are
written before the exception goes on; the summary writer flushes when its
``as_default()`` block exits.

Steps: records are written at *record step* = optimizer step + offset.
The offset is 0 unless the optimizer restarted below a step this process
already wrote into the same log_dir (``model.compile`` again with the same
variables: the optimizer restarts at 0); then the new training continues
the run's steps after the last one written, so one tag never holds two
trainings' values at one step (TensorBoard would drop or mix them).  Only
while the directory holds those records: once every event file they were
written to is gone (the directory deleted, as notebooks and sweeps do
between trainings), a new training starts at its own steps again.
"""

import os

import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens.writing import record_writing
from tb_gradlens.writing import summary_ops

class _Written:
    """What this process wrote into one log_dir: the highest record step,
    and the event files that hold the records (None: not known, e.g. a
    remote log_dir or a writer that does not say)."""

    __slots__ = ("last", "files")

    def __init__(self, last):
        self.last = last
        self.files = set()

    def gone(self):
        """Whether none of the files that held the records exists any more."""
        return self.files is not None and not any(os.path.exists(path) for path in self.files)


_written = {}  # _key(log_dir) -> _Written


def _key(log_dir):
    text = os.fspath(log_dir)
    return text if "://" in text else os.path.realpath(text)


def step_offset(log_dir, first_step, previous_offset=0):
    """The offset of a training starting at optimizer step ``first_step``:
    past the last record step this process wrote into ``log_dir`` while
    the directory still holds those records, else ``previous_offset``
    (0 once they are gone)."""
    key = _key(log_dir)
    written = _written.get(key)
    if written is not None and written.gone():
        del _written[key]  # a deleted or emptied directory: nothing to continue
        return 0
    if written is not None and first_step + previous_offset <= written.last:
        return written.last + 1 - first_step
    return previous_offset


def note_written(log_dir, record_step, key=None, files=None):
    """Record step ``record_step`` was written into ``log_dir``, to the
    event ``files`` (None: not known; empty: none new).  ``key``:
    ``_key(log_dir)`` when the caller has it (not a realpath per logged
    step)."""
    key = _key(log_dir) if key is None else key
    written = _written.get(key)
    if written is None:
        written = _written[key] = _Written(record_step)
    written.last = max(written.last, record_step)
    if files is None:
        written.files = None
    elif written.files is not None:
        written.files.update(files)


class RecordSink:
    """Where a logged step's values go: every part of the lens that fills
    a record puts it here (``put``), with its records
    (``step_records``); they are written inside the step or buffered in
    the part's ``StepRing`` and written after the call
    (``write_pending``).

    ``tap``: the ``Tap`` whose rings, status and dtype map it writes (set
    by the session once the tap, which puts into this sink, exists).
    """

    def __init__(self, writer, log_dir):
        self.writer = writer
        self.log_dir = log_dir
        self.tap = None
        self._offset = 0
        self._offset_variable = None  # the offset read inside the step (write_in_step)
        self.in_step = False
        self.events_per_call = 0  # events a call writes inside the step, at most (write_in_step)
        self._key = _key(log_dir)
        self._last_path = self._last_real = None  # the event file path, and its realpath
        self._records = {}  # StepRing -> its records, as the step last put them
        self._writers = {}  # StepRing -> (rows and extras it was built for, RecordWriter)
        self._written_map = None

    @property
    def offset(self):
        return self._offset

    @offset.setter
    def offset(self, value):
        self._offset = int(value)
        if self._offset_variable is not None:
            self._offset_variable.assign(self._offset)

    def write_in_step(self):
        """From now on the step writes its records itself (see the module),
        if the writer has a handle to write to and one replica writes."""
        tap = self.tap
        if getattr(self.writer, "handle", None) is None or tap.replicas > 1:
            return False
        # events per step: gradient and update statistics, histogram, indices, loss, optimizer step,
        # replay; 3 per comparison
        per_call = tap.steps_per_call * (7 + 3 * len(tap.slots))
        self.events_per_call = per_call
        if per_call > getattr(self.writer, "max_queue", 0) // 2:
            # More events per call than the writer queues: TensorFlow would
            # flush inside the step, where a full disk raises.
            return False
        self._offset_variable = tf.Variable(self._offset, trainable=False, dtype=tf.int64)
        self.in_step = True
        return True

    # -- inside the step ------------------------------------------------------------

    def put(self, ring, step, values, step_records):
        """Inside the step: the ``values`` (``{field: tensor}``) of logged
        train step ``step`` and the records they make (``step_records``):
        written now to the writer's handle where the step writes its
        records itself, else kept in ``ring`` until the call returns."""
        self._records[ring] = step_records
        if not self.in_step:
            ring.put(step, values)
            return
        record_step = tf.cast(step, tf.int64) + self._offset_variable.read_value()
        self._writer_for(ring).write_in_step(self.writer.handle, record_step, values)

    def _writer_for(self, ring):
        """The RecordWriter of ``ring``'s records, rebuilt when their rows or
        extras change (a retrace of the step)."""
        step_records = self._records[ring]
        described = [(r.record.rows, r.record.extras) if r.record is not None else None for r in step_records]
        built = self._writers.get(ring)
        if built is None or built[0] != described:
            built = self._writers[ring] = (described, record_writing.RecordWriter(step_records, self.writer, ring.read))
        return built[1]

    # -- after the call -----------------------------------------------------------------

    def note_steps(self, first, last):
        """Steps ``[first, last)`` were written inside the step (record step bookkeeping)."""
        note_written(self.log_dir, last - 1 + self._offset, self._key, self._event_file())

    def _event_file(self):
        """``note_written``'s files: the event file the writer writes now
        (``event_writer.ResilientFileWriter.path`` on a local log_dir; none
        while writing fails), None when the writer does not say."""
        if not hasattr(self.writer, "path") or "://" in os.fspath(self.log_dir):
            return None
        path = self.writer.path
        if path is None:
            return ()
        if path != self._last_path:
            self._last_path, self._last_real = path, (os.path.realpath(path),)
        return self._last_real

    def write_pending(self, first_step=None):
        """Write every buffered step not written yet, ring by ring in the
        tap's order (and the status and dtype map when they changed)."""
        with self.writer.as_default():
            if first_step is not None:
                self._write_status_and_map(first_step)
            if not self.in_step:
                for ring in self.tap.rings():
                    if ring in self._records:
                        self._write_ring(ring)

    def write_status(self, step):
        with self.writer.as_default():
            self.tap.status.write(step + self.offset)

    def _write_status_and_map(self, first_step):
        step = first_step + self.offset
        self.tap.status.write(step)
        if self.tap.observed_dtypes is not None:
            current = compare.dtype_map(self.tap.model, self.tap.observed_dtypes, self.tap.observed_output_layer)
            if current != self._written_map:
                summary_ops.dtypes(current, step=step, name=self.tap.status.name)
                self._written_map = current

    def _write_ring(self, ring):
        pending = ring.pending()
        if not pending:
            return
        writer = self._writer_for(ring)
        for step, slot in pending:
            ring.select(slot)
            record_step = step + self.offset
            writer(record_step)
            ring.written = step
            note_written(self.log_dir, record_step, self._key, self._event_file())

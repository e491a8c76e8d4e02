"""Writing what the tap buffered, right after each train-function call.

Writes happen in the train function's wrapper (``session``), not in
``on_train_batch_end``: a callback listed before the lens that raises or
stops training at a NaN step cannot keep that step from the disk, and when
the step itself raises (or Ctrl-C arrives) the steps buffered so far are
written before the exception goes on.  Each call writes every logged step
of the call (``StepRing``), in step order, and the summary writer flushes
when its ``as_default()`` block exits.  Where the lens's ops run outside
XLA and one replica writes (``RecordSink.write_in_step``), the step writes
its records itself, to the writer's handle, and the call's wrapper only
flushes: the same records, without a host read or a graph call per
record set.

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
from tb_gradlens import records
from tb_gradlens.writing import keras_private
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
    """Writes one tap's buffers to ``writer`` (outside the step)."""

    def __init__(self, writer, log_dir, tap, replicas=None):
        self.writer = writer
        self.log_dir = log_dir
        self.tap = tap
        self.replicas = replicas
        self._offset = 0
        self._offset_variable = None  # the offset read inside the step (write_in_step)
        self.in_step = False
        self.events_per_call = 0  # events a call writes inside the step, at most (write_in_step)
        self._key = _key(log_dir)
        self._last_path = self._last_real = None  # the event file path, and its realpath
        self._writers = {}  # key -> (rows and extras it was built for, RecordWriter)
        self._written_map = None
        self._loss_writer = keras_private.function_per_instance(self._write_loss, autograph=False)

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
        handle = getattr(self.writer, "handle", None)
        if handle is None or self.replicas is not None:
            return False
        tap = self.tap
        # events per step: gradient and update statistics, histogram, indices, loss, optimizer step,
        # replay; 3 per comparison
        per_call = tap.steps_per_call * (7 + 3 * len(tap.slots))
        self.events_per_call = per_call
        if per_call > getattr(self.writer, "max_queue", 0) // 2:
            # More events per call than the writer queues: TensorFlow would
            # flush inside the step, where a full disk raises.
            return False
        self._offset_variable = tf.Variable(self._offset, trainable=False, dtype=tf.int64)
        tap.gradients.write_now = self._writing_now("gradients", handle, self._gradient_records)
        tap.updates.write_now = self._writing_now("updates", handle, self._update_records)
        tap.losses.write_now = self._writing_now("loss", handle, lambda: [], [("loss", tap.losses.reader("loss"))])
        tap.watch.ring.write_now = self._writing_now("optimizer", handle, self._optimizer_records)
        if tap.watch.replay is not None:
            tap.watch.replay.ring.write_now = self._writing_now("replay", handle, self._replay_records)
        for slot in tap.slots:
            slot.ring.write_now = self._writing_now("comparison " + slot.name, handle, slot.records)
        self.in_step = True
        return True

    def _writing_now(self, key, handle, make_records, scalars=()):
        flag = [tf.Variable(False, trainable=False)]  # the first writer's, made before any trace

        def write(step):  # at trace time, inside the step
            records_ = make_records()
            described = [(r.rows, r.extras) for _, r, _ in records_]
            built = self._writers.get(key)
            if built is None or built[0] != described:
                built = (described, summary_ops.InStepRecordWriter(handle, records_, scalars,
                                                                    flag.pop() if flag else None))
                self._writers[key] = built
            return built[1](tf.cast(step, tf.int64) + self._offset_variable.read_value())

        return write

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
        """Write every buffered step not written yet (and the status and
        dtype map when they changed)."""
        tap = self.tap
        with self.writer.as_default():
            if first_step is not None:
                self._write_status_and_map(first_step)
            if tap.gradient_extras is not None:
                self._write_ring(tap.gradients, "gradients", self._gradient_records)
            if tap.log_updates:
                self._write_ring(tap.updates, "updates", self._update_records)
            self._write_ring(tap.losses, None, None)
            if tap.watch.armed:
                self._write_ring(tap.watch.ring, "optimizer", self._optimizer_records)
            if tap.watch.replay is not None and tap.watch.replay.extras is not None:
                self._write_ring(tap.watch.replay.ring, "replay", self._replay_records)
            for slot in tap.slots:
                if slot.extras is not None:
                    self._write_ring(slot.ring, "comparison " + slot.name, slot.records)

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

    def _write_ring(self, ring, key, make_records):
        pending = ring.pending()
        if not pending:
            return
        writer = None
        if make_records is not None:
            writer = self._record_writer(key, make_records)
        for step, slot in pending:
            ring.select(slot)
            record_step = step + self.offset
            if writer is None:
                self._loss_writer(tf.constant(record_step, tf.int64))
            else:
                writer(record_step)
            ring.written = step
            note_written(self.log_dir, record_step, self._key, self._event_file())

    def _record_writer(self, key, make_records):
        """The RecordWriter of ``key``'s records, rebuilt when their rows or
        extras change (a retrace of the step)."""
        records_ = make_records()
        described = [(r.rows, r.extras) for _, r, _ in records_]
        built = self._writers.get(key)
        if built is None or built[0] != described:
            built = (described, summary_ops.RecordWriter(self.writer, records_))
            self._writers[key] = built
        return built[1]

    def _write_loss(self, step):
        tf.summary.scalar("loss", self.tap.losses.reader("loss")(), step=step)
        return tf.constant(True)

    # -- the records of a gradient step ----------------------------------------

    def _gradient_records(self):
        tap = self.tap
        name = tap.status.name
        pending = [(name, records.grad_stats_record(tap.rows, tap.gradient_extras), tap.gradients.reader("stats"))]
        if tap.histogram:
            pending.append((name, records.grad_histogram_record(tap.rows), tap.gradients.reader("histogram")))
        if tap.sparse_rows:
            pending.append((name, summary_ops.gradient_indices_record(
                [tap.rows[k] for k in tap.sparse_rows], [tap.selected_vars[k] for k in tap.sparse_rows],
            ), tap.gradients.reader("indices", rows=len(tap.sparse_rows))))
        if self.replicas is not None:
            pending.extend(self.replicas.records(name))
        return pending

    def _optimizer_records(self):
        tap = self.tap
        return [(tap.status.name, records.optimizer_step_record(tap.watch.loss_scaling),
                 tap.watch.ring.reader("optimizer"))]

    def _replay_records(self):
        return self.tap.watch.replay.records(self.tap.status.name)

    def _update_records(self):
        tap = self.tap
        extras = records.update_extras([summary_ops.dtype_name(v) for v in tap.selected_vars])
        return [(tap.status.name, records.update_stats_record(tap.rows, extras), tap.updates.reader("update"))]

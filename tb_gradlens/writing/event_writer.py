"""A ``tf.summary`` file writer that survives write failures (a disk that fills and frees).

What TensorFlow 2.21's own writer does on ENOSPC (measured on a full tmpfs,
tests/writing/test_event_writer.py): a record is written in part, the rest of the
write fails, and later records are appended behind the torn one once space
frees, where no reader reaches them (TensorBoard stops at the tear).
Whether anything is raised depends on the record size: small records make
the step's flush raise ``ResourceExhaustedError`` (a ``tf.function``
training step that holds ``writer.as_default()`` then stops training),
records larger than ~4 KB fail with no error at all.

``ResilientFileWriter`` is a drop-in ``tf.summary.SummaryWriter``:

* Every flush (the end of each ``as_default()`` block, ``flush()``,
  ``close()``) is checked: TensorFlow's error, and for a local logdir the
  new bytes of the event file, frame by frame (a torn record is a failure
  even when TensorFlow said nothing).  Inside a ``tf.function`` the flush is
  a ``tf.py_function`` call into the same check, so a failure
  never raises in the training step.
* On a failure it warns (``safety.report``, again for every new failure),
  closes the file and cuts it back to its last whole record (everything
  written before the failure stays readable), and keeps what is written
  next in memory (``event_sink.MemorySink``, at most ``memory_bytes``; past
  that the oldest is dropped).  At the next flush, and then every
  ``retry_seconds`` or as soon as the file system has more free space than
  at the last try, it opens a new event file (a later timestamp, so
  TensorBoard reads it after the old one) and writes the kept records into
  it (with the wall time of that moment).  Only when all of them are whole
  on disk does it warn that writing resumed; a disk that takes part of them
  keeps those in the new file and the rest in memory for the next try.
* Every kept record that is lost is counted (``dropped``, and
  ``safety.reported()["tb_gradlens kept records"]``) and warned: at the first
  drop past ``memory_bytes`` of a failure episode, and for what is still kept
  when the writer is closed (also at interpreter exit, where a writer still
  open gets a last try) or collected.  What is lost: the records of the
  flush that failed (torn, or not written), anything past ``memory_bytes``
  while the disk stays full, and what is still kept when the writer closes
  on a full disk (or the process is killed).
* The resource handle never changes (the new file is opened under the same
  handle), so ``tf.function``s traced with the writer keep writing to the
  current file.

Records are queued in memory until the next flush (up to ``max_queue``
events, then TensorFlow flushes inside the write op, where a failure is
TensorFlow's error): keep ``as_default()`` blocks around each step's
summaries, or call ``flush()``.
"""

import atexit
import os
import threading
import time
import uuid
import weakref
from typing import Union

import tensorflow as tf

from tb_gradlens import safety
from tb_gradlens.writing import cluster
from tb_gradlens.writing.disk_full import DROP_CAUSE
from tb_gradlens.writing.disk_full import DiskFullRecovery
from tb_gradlens.writing.event_file import EventFile
from tb_gradlens.writing.event_file import WriteFailure
from tb_gradlens.writing.event_file import reason

DEFAULT_MEMORY_BYTES = 64 * 1024 * 1024


def create_file_writer(logdir: Union[str, "os.PathLike[str]"], max_queue: int = 1000, retry_seconds: float = 1.0,
                       filename_suffix: str = ".v2", memory_bytes: int = DEFAULT_MEMORY_BYTES,
                       ) -> "ResilientFileWriter":
    """A ``ResilientFileWriter`` on ``logdir`` (``tf.summary.create_file_writer``'s arguments)."""
    return ResilientFileWriter(logdir, max_queue=max_queue, retry_seconds=retry_seconds,
                               filename_suffix=filename_suffix, memory_bytes=memory_bytes)


class ResilientFileWriter(tf.summary.SummaryWriter):
    """See the module docstring.  Attributes: ``logdir``, ``path`` (the event
    file written now, None while failing or for a non-local logdir),
    ``failures`` (failure episodes so far), ``dropped`` (kept records lost so
    far: past ``memory_bytes``, or still kept at ``close``).  The file is an
    ``event_file.EventFile``, its failures a ``disk_full.DiskFullRecovery``."""

    def __init__(self, logdir, max_queue=1000, retry_seconds=1.0, filename_suffix=".v2",
                 memory_bytes=DEFAULT_MEMORY_BYTES):
        self.logdir = str(logdir)
        self.max_queue = int(max_queue)
        self.retry_seconds = float(retry_seconds)
        self.memory_bytes = int(memory_bytes)
        self._lock = threading.RLock()
        self._closed = False
        with tf.init_scope():  # (a writer made while a tf.function is traced)
            self._resource = tf.raw_ops.SummaryWriter(shared_name="gradlens_%s" % uuid.uuid4().hex, container="")
        suffix = ".%s%s" % (uuid.uuid4().hex[:8], filename_suffix)  # finds our files
        self._file = EventFile(self._resource, self.logdir, self.max_queue, suffix)
        self._recovery = DiskFullRecovery(self._file, self.memory_bytes, self.retry_seconds)
        self._finalizer = weakref.finalize(self, _delete_resource, self._resource, self._file.reader,
                                           self._recovery.sink, self.logdir)
        atexit.register(_close_at_exit, weakref.ref(self))  # a last try to write what is kept
        if self._file.local:
            os.makedirs(self.logdir, exist_ok=True)
        with self._lock, tf.init_scope():
            if not self._file.open():
                self._recovery.fail(WriteFailure("cannot create an event file in %s" % self.logdir))

    @property
    def handle(self):
        """The writer's resource, for ``WriteSummary`` ops inside a traced step
        (the same handle for the writer's life; see the module)."""
        return self._resource

    @property
    def path(self):
        return self._file.path

    @property
    def failures(self):
        return self._recovery.failures

    @property
    def dropped(self):
        return self._recovery.dropped

    # -- tf.summary.SummaryWriter ------------------------------------------------

    def init(self):
        return None

    def flush(self):
        """Flush and check; in a ``tf.function``, a ``tf.py_function`` doing the same."""
        if tf.executing_eagerly():
            self._flush_now()
            return None
        if self._closed:
            return None
        def flush_from_graph(_handle):
            self._flush_now()
            return True

        def call():
            # The handle as input orders the call after this step's writes
            # (automatic control dependencies follow resource inputs).
            return tf.py_function(flush_from_graph, [self._resource], tf.bool)

        if cluster.replica_context() is not None:  # replica 0 writes; one flush per step
            return tf.cond(cluster.is_first_replica(), call, lambda: tf.constant(False))
        return call()

    def close(self):
        """Flush, check and close; later ``as_default()`` raises, as TensorFlow's writer does."""
        with self._lock, tf.init_scope():
            if self._closed:
                return
            self._flush_now()
            recovery = self._recovery  # (it warns from here: the warnings point at the caller of close)
            if not self._file.healthy and len(recovery.sink):  # a last try, now
                if not recovery.resume() and recovery.out_of_order:
                    time.sleep(max(0.0, int(time.time()) + 1.01 - time.time()))  # a later second sorts after
                    recovery.resume()
            if not self._file.healthy and len(recovery.sink):
                recovery.drop(len(recovery.sink), "the writer was closed while the disk was still full; they "
                              "are lost (free space before closing to keep them)", warn_again=True)
            self._closed = True
            self._file.release()
            self._recovery.sink.clear()
            self._file.reader.close()
            self._finalizer.detach()

    def as_default(self, step=None):
        if self._closed:
            raise RuntimeError("SummaryWriter %r is already closed" % self)
        return super().as_default(step)

    def _flush_now(self):
        """Flush and check the file; while failing, ``DiskFullRecovery.flush``."""
        with self._lock:
            if self._closed:
                return
            if not self._file.healthy:
                self._recovery.flush()
                return
            error = None
            try:
                tf.raw_ops.FlushSummaryWriter(writer=self._resource)
            except (tf.errors.OpError, OSError) as e:
                error = WriteFailure("writing %s failed (%s)" % (self._file.name(), reason(e)))
            if error is None:
                error = self._file.check()
            if error is not None:
                self._recovery.fail(error)


def _close_at_exit(ref):
    """``close`` a writer still open when Python exits (the Keras callback keeps
    its writer for the next ``fit``): kept records get a last try and, if the
    disk is still full, a warning that they are lost."""
    writer = ref()
    if writer is not None:
        try:
            writer.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _delete_resource(handle, reader=None, sink=None, logdir=None):
    """Close the handle's writer (and the reader) when the Python object is
    collected (which may happen while a tf.function is traced: init_scope
    runs it eagerly); records still kept in memory are counted and warned."""
    if reader is not None:
        reader.close()
    if sink is not None and len(sink):
        safety.report(DROP_CAUSE, WriteFailure(
            "%d kept record(s) of %s could not be written: the writer was collected while the disk was "
            "still full" % (len(sink), logdir)), again=True)
    try:
        with tf.init_scope():
            tf.raw_ops.CloseSummaryWriter(writer=handle)
    except Exception:  # noqa: BLE001 - interpreter shutdown, already closed
        pass

"""A ``tf.summary`` file writer that survives write failures (a disk that fills and frees).

What TensorFlow 2.21's own writer does on ENOSPC (measured on a full tmpfs,
tests/test_event_writer.py): a record is written in part, the rest of the
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
  a ``tf.py_function`` call into the same check (~0.1 ms), so a failure
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
import functools
import glob
import os
import threading
import time
import uuid
import weakref
from typing import Union

import tensorflow as tf

from tb_gradlens import crc32c
from tb_gradlens import event_files
from tb_gradlens import safety
from tb_gradlens.writing import cluster
from tb_gradlens.writing import event_sink

_CAUSE = "tb_gradlens event file writer"
_DROP_CAUSE = "tb_gradlens kept records"  # kept records lost: past the memory bound, or at close
_HEADER = 12
_HEAD = _HEADER + 24  # a frame's header and the start of its event: wall time and step
_WINDOW = 1 << 20  # bytes read at a time when checking what a flush wrote
_NEVER_MS = event_sink._NEVER_MS
DEFAULT_MEMORY_BYTES = 64 * 1024 * 1024


@functools.lru_cache(maxsize=4096)
def _length_crc(length_bytes):
    """The masked CRC of a frame's length field (a step's records repeat their lengths)."""
    return crc32c.masked_crc32c(length_bytes)


class WriteFailure(OSError):
    """Writing an event file failed (the message says where and how)."""


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
    far: past ``memory_bytes``, or still kept at ``close``)."""

    def __init__(self, logdir, max_queue=1000, retry_seconds=1.0, filename_suffix=".v2",
                 memory_bytes=DEFAULT_MEMORY_BYTES):
        self.logdir = str(logdir)
        self.max_queue = int(max_queue)
        self.retry_seconds = float(retry_seconds)
        self.memory_bytes = int(memory_bytes)
        self.failures = 0
        self.dropped = 0
        self.path = None
        self._suffix = ".%s%s" % (uuid.uuid4().hex[:8], filename_suffix)  # finds our files
        self._local = "://" not in self.logdir
        self._lock = threading.RLock()
        self._healthy = False
        self._closed = False
        self._verified = 0
        self._last_step = None
        self._summaries = 0  # whole summary records checked in the current file
        self._last_name = ""  # the event file that holds data last: a new one must sort after it
        self._next_attempt = 0.0
        self._free_at_attempt = None  # free bytes when the last try to resume failed
        self._dropping = False  # a drop was warned in this failure episode
        self._out_of_order = False  # the last try made a file that would sort first
        self._sink = event_sink.MemorySink(self._suffix, self.max_queue, self.memory_bytes)
        with tf.init_scope():  # (a writer made while a tf.function is traced)
            self._resource = tf.raw_ops.SummaryWriter(shared_name="gradlens_%s" % uuid.uuid4().hex, container="")
        self._reader = _KeptReader()  # the event file, open for checking between flushes
        self._finalizer = weakref.finalize(self, _delete_resource, self._resource, self._reader, self._sink,
                                           self.logdir)
        atexit.register(_close_at_exit, weakref.ref(self))  # a last try to write what is kept
        if self._local:
            os.makedirs(self.logdir, exist_ok=True)
        with self._lock, tf.init_scope():
            if not self._open_file():
                self._fail(WriteFailure("cannot create an event file in %s" % self.logdir), opened=False)

    @property
    def handle(self):
        """The writer's resource, for ``WriteSummary`` ops inside a traced step
        (the same handle for the writer's life; see the module)."""
        return self._resource

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
            if not self._healthy and len(self._sink):  # a last try, now
                if not self._resume() and self._out_of_order:
                    time.sleep(max(0.0, int(time.time()) + 1.01 - time.time()))  # a later second sorts after
                    self._resume()
            if not self._healthy and len(self._sink):
                self._drop(len(self._sink), "the writer was closed while the disk was still full; they are "
                           "lost (free space before closing to keep them)", warn_again=True)
            self._closed = True
            self._release()
            self._sink.clear()
            self._reader.close()
            self._finalizer.detach()

    def as_default(self, step=None):
        if self._closed:
            raise RuntimeError("SummaryWriter %r is already closed" % self)
        return super().as_default(step)

    # -- flushing and checking ---------------------------------------------------

    def _flush_now(self):
        with self._lock:
            if self._closed:
                return
            if not self._healthy:
                self._release()  # what was written since: into the memory sink's files
                dropped = self._sink.collect()
                if dropped:
                    self._drop(dropped, "more than %d MB were kept while the disk stays full; the oldest are "
                               "dropped" % (self.memory_bytes >> 20))
                if len(self._sink) and (time.monotonic() >= self._next_attempt or self._space_freed()):
                    self._resume()
                if not self._healthy:
                    self._sink.open(self._resource)
                return
            error = None
            try:
                tf.raw_ops.FlushSummaryWriter(writer=self._resource)
            except (tf.errors.OpError, OSError) as e:
                error = WriteFailure("writing %s failed (%s)" % (self._name(), _reason(e)))
            if error is None:
                error = self._check_file()
            if error is not None:
                self._fail(error)

    def _check_file(self):
        """A WriteFailure if the bytes written since the last check are not whole records."""
        if not self._local or self.path is None:
            return None
        try:
            size = os.path.getsize(self.path)
            if size == self._verified:
                return None
            return self._check_records(self._reader.file(self.path), size)
        except OSError as e:
            return WriteFailure("checking %s failed (%s)" % (self._name(), e.strerror or e))

    def _check_records(self, f, size):
        """Walk the frames from the last checked offset; the whole ones are
        checked in (``_verified``, ``_last_step``), a torn one is a failure.
        The frames' heads are read in windows of at most ``_WINDOW`` bytes
        (one read per flush for a step's records, not one per record)."""
        offset = self._verified
        window, window_start = b"", offset
        while offset < size:
            at = offset - window_start
            if at + _HEAD > len(window) and window_start + len(window) < size:
                f.seek(offset)
                window, window_start, at = f.read(min(size - offset, _WINDOW)), offset, 0
            end_of_head = min(len(window), at + _HEAD)
            if end_of_head - at < _HEADER:
                break
            length = int.from_bytes(window[at:at + 8], "little")
            end = offset + _HEADER + length + 4
            if _length_crc(window[at:at + 8]) != int.from_bytes(window[at + 8:at + 12], "little") or end > size:
                break
            step, is_summary = event_files.event_step(window, at + _HEADER, min(end_of_head, at + _HEADER + length))
            if is_summary:
                self._last_step = step
                self._summaries += 1
            offset = end
            self._verified = offset
        if offset == size:
            return None
        return WriteFailure("writing %s failed (a torn record at byte %d: the disk is full, or the file "
                            "system failed)" % (self._name(), offset))

    # -- failing and resuming ----------------------------------------------------

    def _fail(self, error, opened=True):
        self.failures += 1
        self._healthy = False
        where = self.path
        self._release()
        kept = ""
        if opened and where and self._local:
            try:
                if os.path.getsize(where) > self._verified:
                    os.truncate(where, self._verified)  # the torn tail: no reader gets past it
            except OSError:
                pass
            kept = " %s are kept in it." % (
                "Steps up to %d" % self._last_step if self._last_step is not None else "Its whole records")
        self.path = None
        self._dropping = False
        self._next_attempt = time.monotonic()
        safety.report(_CAUSE, WriteFailure(
            "%s.%s What is written next is kept in memory (up to %d MB) until a new event file can "
            "be written (tried every %g s)." % (error, kept, self.memory_bytes >> 20, self.retry_seconds)),
            again=True)
        self._sink.open(self._resource)  # the next flush tries a new file with what was kept

    def _space_freed(self):
        """Whether the logdir's file system has more free space than when the
        last try to resume failed: try again now, not a retry period later
        (a process killed meanwhile loses what is kept in memory)."""
        if not self._local or self._free_at_attempt is None:
            return False
        return _free_bytes(self.logdir) > self._free_at_attempt

    def _resume(self):
        """Try a new event file and write the kept records into it; True when
        writing resumed.  Writing resumes (and says so) only once every kept
        record is whole on disk; a disk that takes part of them keeps those in
        the new file, and the rest stay kept for the next try."""
        self._next_attempt = time.monotonic() + self.retry_seconds
        self._free_at_attempt = _free_bytes(self.logdir) if self._local else None
        self._out_of_order = False
        self._release()
        last_name = self._last_name
        if not self._open_file():
            return False
        if self._local and os.path.basename(self.path) <= last_name:
            # TensorBoard reads a run's files in name order: one created in the same second
            # with a counter of more digits ("...10" < "...9") would be read first.
            self._out_of_order = True
            self._keep_whole(last_name, written=0)
            return False
        kept = len(self._sink)
        error = None
        try:
            self._sink.replay(self._resource)
            tf.raw_ops.FlushSummaryWriter(writer=self._resource)
        except (tf.errors.OpError, OSError) as e:
            error = WriteFailure(_reason(e))
        error = error or self._check_file()
        if error is not None:
            self._keep_whole(last_name)
            return False
        self._sink.forget(kept)
        self._free_at_attempt = None
        safety.notify(
            "writing resumed in a new event file %s after %d failure(s); %d record(s) written while "
            "writing failed were kept in memory and written to it%s; the records of the flush that "
            "failed are lost" % (self._name(), self.failures, kept,
                                 "" if not self.dropped else " (%d kept record(s) were dropped so far)"
                                 % self.dropped))
        return True

    def _keep_whole(self, last_name, written=None):
        """After a replay the disk took only in part: cut the new file back to
        its whole records (the kept records among them are forgotten), or
        remove it if it holds none."""
        self._healthy = False
        self._release()
        written = self._summaries if written is None else written
        where, self.path = self.path, None
        try:
            if written == 0:
                os.remove(where)
                self._last_name = last_name
            elif os.path.getsize(where) > self._verified:
                os.truncate(where, self._verified)
        except OSError:
            pass
        self._sink.forget(written)
        self._free_at_attempt = _free_bytes(self.logdir)

    def _drop(self, count, why, warn_again=False):
        """Kept records lost: counted (``dropped``, ``safety.reported()``), warned
        at the first drop of a failure episode and at ``close``."""
        self.dropped += count
        safety.report(_DROP_CAUSE, WriteFailure(
            "%d kept record%s of %s could not be written: %s (%d dropped in all)"
            % (count, "" if count == 1 else "s", self.logdir, why, self.dropped)),
            again=warn_again or not self._dropping)
        self._dropping = True

    def _open_file(self):
        """Open a new event file under the handle; True if it is written and whole."""
        before = set(self._our_files())
        try:
            tf.raw_ops.CreateSummaryFileWriter(
                writer=self._resource, logdir=self.logdir, max_queue=self.max_queue,
                flush_millis=_NEVER_MS, filename_suffix=self._suffix)
            tf.raw_ops.FlushSummaryWriter(writer=self._resource)
        except (tf.errors.OpError, OSError):
            self._release()
            self._remove(set(self._our_files()) - before)
            return False
        created = sorted(set(self._our_files()) - before)
        self.path = created[-1] if created else None
        self._verified = 0
        self._summaries = 0
        if self._local and (self.path is None or self._check_file() is not None):
            self._release()
            self._remove(created)
            self.path = None
            return False
        if self.path is not None:
            self._last_name = os.path.basename(self.path)
        self._healthy = True
        return True

    def _name(self):
        return os.path.basename(self.path) if self.path else self.logdir

    def _our_files(self):
        if not self._local:
            return []
        return glob.glob(os.path.join(glob.escape(self.logdir), "*tfevents*" + glob.escape(self._suffix)))

    def _remove(self, paths):
        for path in paths:
            try:
                os.remove(path)
            except OSError:
                pass

    def _release(self):
        """Close whatever the handle holds (its errors are the old file's)."""
        try:
            tf.raw_ops.CloseSummaryWriter(writer=self._resource)
        except (tf.errors.OpError, OSError):
            pass


class _KeptReader:
    """One event file kept open for reading between checks (opening it for
    each flush's check cost ~10 us of a 0.9 ms step)."""

    def __init__(self):
        self.path = None
        self._file = None

    def file(self, path):
        """The open file of ``path`` (reopened when the writer moved to another file)."""
        if path != self.path:
            self.close()
            self._file = open(path, "rb", buffering=0)
            self.path = path
        return self._file

    def close(self):
        if self._file is not None:
            self._file.close()
        self._file = self.path = None


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
        safety.report(_DROP_CAUSE, WriteFailure(
            "%d kept record(s) of %s could not be written: the writer was collected while the disk was "
            "still full" % (len(sink), logdir)), again=True)
    try:
        with tf.init_scope():
            tf.raw_ops.CloseSummaryWriter(writer=handle)
    except Exception:  # noqa: BLE001 - interpreter shutdown, already closed
        pass


def _free_bytes(directory):
    """Bytes free to this user on the file system of ``directory`` (0 if unknown)."""
    try:
        st = os.statvfs(directory)
        return st.f_bavail * st.f_frsize
    except (OSError, AttributeError):
        return 0


def _reason(error):
    """The operating system's words in a TensorFlow error ("No space left on device")."""
    text = str(getattr(error, "message", None) or error).strip().splitlines()
    line = text[0] if text else type(error).__name__
    if "}}" in line:
        line = line.split("}}", 1)[1]
    return line.rsplit(";", 1)[-1].strip()[:200] or type(error).__name__

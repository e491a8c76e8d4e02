"""The event file a ``ResilientFileWriter`` writes now: opened under the
writer's handle, checked frame by frame after each flush, cut back to its
whole records when a write fails (see ``event_writer``)."""

import functools
import glob
import os

import tensorflow as tf

from tb_gradlens import crc32c
from tb_gradlens import event_files
from tb_gradlens.writing import event_sink

_HEADER = 12
_HEAD = _HEADER + 24  # a frame's header and the start of its event: wall time and step
_WINDOW = 1 << 20  # bytes read at a time when checking what a flush wrote
_NEVER_MS = event_sink._NEVER_MS


@functools.lru_cache(maxsize=4096)
def _length_crc(length_bytes):
    """The masked CRC of a frame's length field (a step's records repeat their lengths)."""
    return crc32c.masked_crc32c(length_bytes)


class WriteFailure(OSError):
    """Writing an event file failed (the message says where and how)."""


class EventFile:
    """The event file under a writer's handle.

    Attributes: ``path`` (None while none is open, or for a non-local
    logdir), ``healthy`` (the handle writes into a file found whole),
    ``verified`` (its bytes checked whole), ``last_step`` (the step of its
    last whole summary), ``summaries`` (its whole summary records),
    ``last_name`` (the event file that holds data last: a new one must
    sort after it).
    """

    def __init__(self, resource, logdir, max_queue, suffix):
        self.resource = resource
        self.logdir = logdir
        self.max_queue = max_queue
        self.suffix = suffix  # finds our files
        self.local = "://" not in logdir
        self.path = None
        self.healthy = False
        self.verified = 0
        self.last_step = None
        self.summaries = 0
        self.last_name = ""
        self.reader = _KeptReader()  # the event file, open for checking between flushes

    def open(self):
        """Open a new event file under the handle; True if it is written and whole."""
        before = set(self._our_files())
        try:
            tf.raw_ops.CreateSummaryFileWriter(
                writer=self.resource, logdir=self.logdir, max_queue=self.max_queue,
                flush_millis=_NEVER_MS, filename_suffix=self.suffix)
            tf.raw_ops.FlushSummaryWriter(writer=self.resource)
        except (tf.errors.OpError, OSError):
            self.release()
            _remove(set(self._our_files()) - before)
            return False
        created = sorted(set(self._our_files()) - before)
        self.path = created[-1] if created else None
        self.verified = 0
        self.summaries = 0
        if self.local and (self.path is None or self.check() is not None):
            self.release()
            _remove(created)
            self.path = None
            return False
        if self.path is not None:
            self.last_name = os.path.basename(self.path)
        self.healthy = True
        return True

    def check(self):
        """A WriteFailure if the bytes written since the last check are not whole records."""
        if not self.local or self.path is None:
            return None
        try:
            size = os.path.getsize(self.path)
            if size == self.verified:
                return None
            return self._check_frames(self.reader.file(self.path), size)
        except OSError as e:
            return WriteFailure("checking %s failed (%s)" % (self.name(), e.strerror or e))

    def _check_frames(self, f, size):
        """Walk the frames from the last checked offset; the whole ones are
        checked in (``verified``, ``last_step``), a torn one is a failure.
        The frames' heads are read in windows of at most ``_WINDOW`` bytes
        (one read per flush for a step's records, not one per record)."""
        offset = self.verified
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
                self.last_step = step
                self.summaries += 1
            offset = end
            self.verified = offset
        if offset == size:
            return None
        return WriteFailure("writing %s failed (a torn record at byte %d: the disk is full, or the file "
                            "system failed)" % (self.name(), offset))

    def cut_back(self):
        """After a failed write: close the file and cut it back to its last
        whole record (no reader gets past a torn tail).  Returns its path."""
        self.healthy = False
        where = self.path
        self.release()
        if where and self.local:
            try:
                if os.path.getsize(where) > self.verified:
                    os.truncate(where, self.verified)
            except OSError:
                pass
        self.path = None
        return where

    def keep_whole(self, last_name, written):
        """After a replay the disk took only in part: cut the file back to its
        whole records, or remove it if it holds none of them (``written``
        0; the file before it, ``last_name``, holds data last again)."""
        self.healthy = False
        self.release()
        where, self.path = self.path, None
        try:
            if written == 0:
                os.remove(where)
                self.last_name = last_name
            elif os.path.getsize(where) > self.verified:
                os.truncate(where, self.verified)
        except OSError:
            pass

    def name(self):
        return os.path.basename(self.path) if self.path else self.logdir

    def _our_files(self):
        if not self.local:
            return []
        return glob.glob(os.path.join(glob.escape(self.logdir), "*tfevents*" + glob.escape(self.suffix)))

    def release(self):
        """Close whatever the handle holds (its errors are the old file's)."""
        try:
            tf.raw_ops.CloseSummaryWriter(writer=self.resource)
        except (tf.errors.OpError, OSError):
            pass


class _KeptReader:
    """One event file kept open for reading between checks (not opened
    again for each flush's check)."""

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


def _remove(paths):
    for path in paths:
        try:
            os.remove(path)
        except OSError:
            pass


def free_bytes(directory):
    """Bytes free to this user on the file system of ``directory`` (0 if unknown)."""
    try:
        st = os.statvfs(directory)
        return st.f_bavail * st.f_frsize
    except (OSError, AttributeError):
        return 0


def reason(error):
    """The operating system's words in a TensorFlow error ("No space left on device")."""
    text = str(getattr(error, "message", None) or error).strip().splitlines()
    line = text[0] if text else type(error).__name__
    if "}}" in line:
        line = line.split("}}", 1)[1]
    return line.rsplit(";", 1)[-1].strip()[:200] or type(error).__name__

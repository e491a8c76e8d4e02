"""The command line's event-record reader: only what the checks passed, fast.

TensorFlow-free.  The command line reads a logdir with TensorBoard's own
loader on its TensorFlow stub (``cli.common.no_tensorflow_for_reading``),
whose record reader checks each record's CRC-32C one byte at a time in
Python (~8 MB/s: 14 s for one 112 MB step of a 10^5-variable histogram)
and reads a record's whole claimed length into memory before checking
it (a crafted header claiming 2 GB costs gigabytes and minutes).  The
command line checks every event file first anyway (``event_files.FileScan``,
linear-time CRC, a block at a time), so ``install`` points the stub at
``CheckedRecordReader``, which reads the frames of a file up to where that
check says TensorBoard's Python loader stops (the first damaged record, or
the end of the last whole one) without checking them again.  A file the
check has not seen, or that changed since, is checked when it is opened.
"""

import os
import struct
import threading

from tb_gradlens import event_files
from tb_gradlens import file_system

_HEADER = struct.Struct("<QI")
_CHECKED = {}  # normalized path -> (size, mtime_ns, readable end)
_LOCK = threading.Lock()


def _key(path):
    return path if file_system.is_remote(path) else os.path.normpath(os.path.abspath(path))


def _identity(path):
    return file_system.stat(path)


def remember(scans):
    """Remember where each checked file's readable records end (``scans``: FileScans)."""
    with _LOCK:
        for scan in scans:
            try:
                _CHECKED[_key(scan.path)] = _identity(scan.path) + (scan.readable_end,)
            except OSError:
                pass


def readable_end(path):
    """Where the records TensorBoard's Python loader reads end in ``path``
    (checked now if not checked before or changed since)."""
    key = _key(path)
    with _LOCK:
        found = _CHECKED.get(key)
    try:
        if found is not None and found[:2] == _identity(path):
            return found[2]
    except OSError:
        return 0
    scan = event_files.FileScan(path)
    scan.advance()
    remember([scan])
    return scan.readable_end


def install():
    """Make TensorBoard's TensorFlow stub read event files with CheckedRecordReader."""
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

    pywrap_tensorflow.PyRecordReader_New = CheckedRecordReader


class CheckedRecordReader:
    """The interface of the stub's ``PyRecordReader_New`` (``GetNext``,
    ``record``), over the checked records of one file."""

    def __init__(self, filename=None, start_offset=0, compression_type=None, status=None):
        from tensorboard.compat.tensorflow_stub import errors

        if filename is None:
            raise errors.NotFoundError(None, None, "No filename provided, cannot read Events")
        path = os.fsdecode(filename)
        if start_offset or compression_type:
            raise errors.UnimplementedError(None, None, "start offset and compression are not supported")
        try:
            self._file = file_system.open_file(path)
        except OSError as e:
            raise errors.NotFoundError(None, None, "%s: %s" % (path, e.strerror or e)) from None
        self._errors = errors
        self._end = readable_end(path)
        self._offset = 0
        self.curr_event = None

    def GetNext(self):  # noqa: N802 - the stub's interface
        self.curr_event = None
        if self._offset + _HEADER.size > self._end:
            raise self._errors.OutOfRangeError(None, None, "No more events to read")
        self._file.seek(self._offset)
        length, _ = _HEADER.unpack(self._file.read(_HEADER.size))
        data = self._file.read(length)
        if len(data) < length:  # the file was cut since it was checked
            self._end = self._offset
            raise self._errors.OutOfRangeError(None, None, "No more events to read")
        self._offset += _HEADER.size + length + 4
        self.curr_event = data

    def record(self):
        return self.curr_event

    def close(self):
        self._file.close()

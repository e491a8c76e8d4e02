"""TensorBoard's TF-free loader reading event files that ``FileScan`` checked.

The command line loads a logdir with TensorBoard's own reading stack, which
without TensorFlow reads records with ``PyRecordReader_New`` of its
TensorFlow stub: that checks both CRC-32C of every record one byte at a time
in Python (about 1 MB/s; two minutes for a 459 MB logdir).  The command
line has checked every record already (``event_files.FileScan``, batched
CRCs, ~150 MB/s).  ``CheckedRecordReader`` reads the records the scan found
good without checking them again, and stops where TensorBoard's reader
stops: at the first damaged record it raises ``DataLossError`` (TensorBoard
then reads nothing after it in that file), at the end ``OutOfRangeError``.
Files the scan did not check go to TensorBoard's reader.  TensorFlow-free.
"""

import contextlib
import io
import os
import struct

_HEADER = struct.Struct("<QI")
_FOOTER_SIZE = 4


class CheckedRecordReader:
    """The reader API of the stub's ``PyRecordReader_New`` (``GetNext``,
    ``record``) over the records before ``end`` (the first damaged record,
    or the end of the last whole one); ``damaged``: whether ``end`` is a
    damaged record (DataLossError there) rather than the end (OutOfRange)."""

    def __init__(self, path, end, damaged, errors):
        self._file = io.open(path, "rb", buffering=1 << 20)
        self._end = end
        self._damaged = damaged
        self._errors = errors
        self._pos = 0
        self._record = None

    def GetNext(self):  # noqa: N802 - TensorBoard's reader API
        self._record = None
        if self._pos >= self._end:
            self._file.close()
            if self._damaged:
                raise self._errors.DataLossError(None, None, "%s: damaged record" % self._file.name)
            raise self._errors.OutOfRangeError(None, None, "No more events to read")
        length, _ = _HEADER.unpack(self._file.read(_HEADER.size))
        self._record = self._file.read(length)
        self._file.read(_FOOTER_SIZE)
        self._pos += _HEADER.size + length + _FOOTER_SIZE

    def record(self):
        return self._record


@contextlib.contextmanager
def checked_reading(scans):
    """While inside, TensorBoard's TF-free loader reads the files of
    ``scans`` ([(run, FileScan)]) with ``CheckedRecordReader``.  Nothing
    changes where TensorBoard reads with TensorFlow (it is not the stub)."""
    from tensorboard.compat import tf

    if getattr(tf, "__version__", None) != "stub":
        yield
        return
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

    extents = {os.path.abspath(scan.path): scan.readable_end for _, scan in scans}
    original = pywrap_tensorflow.PyRecordReader_New

    def reader(filename=None, start_offset=0, compression_type=None, status=None):
        path = os.path.abspath(filename.decode() if isinstance(filename, bytes) else str(filename or ""))
        if path in extents and not start_offset and not compression_type:
            try:
                return CheckedRecordReader(path, *extents[path], errors)
            except OSError:
                pass  # TensorBoard's reader says what it says about a file it cannot open
        return original(filename, start_offset, compression_type, status)

    pywrap_tensorflow.PyRecordReader_New = reader
    try:
        yield
    finally:
        pywrap_tensorflow.PyRecordReader_New = original

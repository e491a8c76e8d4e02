"""Whether an event file is still the one read: the same file grown, or another one.

TensorFlow-free.  The plugin's readers (``live_tail``, ``logdir_monitor``)
resume a file where they stopped; that is right only while the file is the
one they read, grown at its end.  An ``Identity`` is what a reader saw of a
file: its size, mtime_ns, inode (and device), a CRC of its first bytes and
of the last bytes before where it stopped reading (the seam).  ``change``
says what happened to a file since:

* ``None``: the same file, grown or not;
* ``"truncated"``: it is shorter than what was read (cut mid-record, or
  emptied; a torn last record cut off, as the resilient writer does on a
  full disk, is no change);
* ``"replaced"``: another file under the name (another inode: ``rm -rf r &&
  mv staging/r r``, an atomic rename);
* ``"rewritten"``: the same inode, but its first bytes or those before the
  seam differ (overwritten in place with other values);
* ``"removed"``: gone.

A file whose size and mtime_ns are both unchanged is taken as unchanged
without reading it (a rewrite that keeps both, e.g. ``cp -p`` over it with
the same size, is not noticed).  Otherwise at most 2 x 4 KiB are read.
"""

import collections
import os
import zlib

HEAD_BYTES = 4096
SEAM_BYTES = 4096

Identity = collections.namedtuple("Identity", ("size", "mtime_ns", "ino", "dev", "head", "seam_at", "seam_end",
                                               "seam"))


def _crc(f, start, end):
    f.seek(start)
    return zlib.crc32(f.read(max(0, end - start)))


def identify(path, read_to=None):
    """The Identity of ``path`` as read up to ``read_to`` bytes (default: its
    size; a reader passes the end of the whole records it read, so a torn
    record cut off later is no change): the CRCs of its first bytes and of the
    last bytes before ``read_to``.  Raises OSError."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        end = st.st_size if read_to is None else min(read_to, st.st_size)
        head = _crc(f, 0, min(HEAD_BYTES, end))
        seam_at = max(0, end - SEAM_BYTES)
        return Identity(st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev, head, seam_at, end, _crc(f, seam_at, end))


def change(old, path):
    """What happened to the file ``old`` identified (module doc): None, or a word."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "removed"
    except OSError:
        return None  # unreadable now: the readers say so themselves
    if (st.st_ino, st.st_dev) != (old.ino, old.dev):
        return "replaced"
    if st.st_size < old.seam_end:
        return "truncated"
    if (st.st_size, st.st_mtime_ns) == (old.size, old.mtime_ns):
        return None
    try:
        with open(path, "rb") as f:
            same = (_crc(f, 0, min(HEAD_BYTES, old.seam_end)) == old.head
                    and _crc(f, old.seam_at, old.seam_end) == old.seam)
    except OSError:
        return None
    return None if same else "rewritten"

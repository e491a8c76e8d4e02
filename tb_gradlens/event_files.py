"""Event files under a logdir: finding them safely, checking them, comparing them.

TensorFlow-free; shared by the command line (``tb_gradlens.serving.logdir``) and
the plugin (``logdir_monitor.LogdirMonitor``).  TensorBoard's readers stop silently at a
damaged record, and two writers in one run make its two loaders show
different data; this module says so, naming the file:

* ``walk``: every run directory holding event files, following symlinks
  but never one that leads back to a directory already on the way (a loop
  like ``up -> ..``), and skipping unreadable directories; each skip is a
  note.
* ``FileScan``: one pass over a file's TFRecord frames (``uint64 length,
  masked_crc32c(length), data, masked_crc32c(data)``), incremental (it
  resumes where it stopped when the file grows).  Both CRCs are checked
  (``tb_gradlens.crc32c``: google-crc32c); a record longer than
  a block is checked a block at a time, within the same budget; the steps of the summary events are
  read from each record's first bytes.
* ``overlaps``: files of one run whose summary steps overlap: two writers
  at once, or a restarted run that wrote the same steps again.
"""

import os
import struct

import numpy as np

from tb_gradlens import crc32c
from tb_gradlens import file_system

_HEADER = struct.Struct("<QI")  # length, masked crc32c of the length
_HEADER_SIZE = 12
_FOOTER_SIZE = 4
_BLOCK = 4 * 1024 * 1024  # bytes read and checked at a time
_PIECE = 1024 * 1024  # bytes of a record longer than a block read at a time
_HEAD_BYTES = 64  # a record's first bytes: where its step is
_MIN_PIECE = 64 * 1024  # the least of a long record checked per call
_SUMMARY_FIELD = 0x2A  # Event.summary: field 5, length-delimited
_MAX_DEPTH = 64


def is_event_file(name):
    """TensorBoard's rule (io_wrapper.IsSummaryEventsFile): 'tfevents' in the name."""
    return "tfevents" in name


def walk(logdir):
    """(files, notes): sorted [(run, path)] of every event file under ``logdir``
    (run "." for files directly in it) and [message] for what was skipped.
    A URL (``s3://``, ...) is listed by its ``file_system`` (``CannotRead``
    when it cannot be)."""
    if file_system.is_remote(logdir):
        return file_system.for_path(logdir).walk(logdir), []
    files, notes = [], []
    root = os.path.abspath(logdir)

    def visit(directory, ancestors, depth):
        try:
            with os.scandir(directory) as entries:
                entries = sorted(entries, key=lambda e: e.name)
        except OSError as e:
            notes.append("skipped directory %s: %s" % (directory, e.strerror or e))
            return
        run = os.path.relpath(directory, root)
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # follows symlinks
            except OSError:
                is_dir = False
            if is_dir:
                try:
                    st = os.stat(entry.path)
                except OSError as e:
                    notes.append("skipped directory %s: %s" % (entry.path, e.strerror or e))
                    continue
                identity = (st.st_dev, st.st_ino)
                if identity in ancestors:
                    notes.append("skipped %s: a symbolic link loop back to %s"
                                 % (entry.path, os.path.realpath(entry.path)))
                elif depth >= _MAX_DEPTH:
                    notes.append("skipped %s: more than %d directories deep" % (entry.path, _MAX_DEPTH))
                else:
                    visit(entry.path, ancestors | {identity}, depth + 1)
            elif is_event_file(entry.name):
                files.append(("." if run == os.curdir else run, entry.path))

    st = os.stat(root)
    visit(root, frozenset([(st.st_dev, st.st_ino)]), 0)
    return sorted(files), notes


def event_step(data, start, end):
    """(step, is_summary) of a serialized Event in data[start:end] (first bytes only)."""
    pos = start
    if pos < end and data[pos] == 0x09:  # wall_time: fixed64
        pos += 9
    step = 0
    if pos < end and data[pos] == 0x10:  # step: varint
        pos += 1
        shift = 0
        while pos < end:
            byte = data[pos]
            pos += 1
            step |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if step >= 1 << 63:
            step -= 1 << 64
    return step, pos < end and data[pos] == _SUMMARY_FIELD


class FileScan:
    """What one pass over an event file found; call ``advance`` as it grows.

    Attributes:
      path: the file.
      offset: where the next unchecked record starts.
      records: whole records checked so far.
      readable: records TensorBoard reads (those before the first damaged one).
      step_min, step_max: summary steps of the readable records (None if none).
      damage: None, or a message: where the file is damaged and what
        TensorBoard does not show because of it.
      truncated: the file ends inside a record (being written, or cut).
    """

    def __init__(self, path):
        self.path = path
        self.offset = 0
        self.records = 0
        self.readable = 0
        self.step_min = self.step_max = None
        self.damage = None
        self.truncated = False
        self._damaged_at = None
        self._what = None
        self._final = False  # nothing after the damage can be framed
        self._unread = [0, None, None]  # records after the damage, their step range
        self._size = -1
        self._long = None  # the _LongRecord being checked

    @property
    def readable_end(self):
        """Where the records TensorBoard's Python loader reads end: the first
        damaged record, else the end of the last whole record checked."""
        return self._damaged_at if self._damaged_at is not None else self.offset

    @property
    def checked_to(self):
        """Bytes checked so far: ``offset`` and what is checked of a long
        record there (a call to ``advance`` that moves neither made no progress)."""
        return self.offset + (self._long.checked if self._long is not None else 0)

    def advance(self, budget=None):
        """Check the bytes added since the last call (about ``budget`` at
        most); returns the bytes read.  A file that shrank is checked again."""
        try:
            size = file_system.size(self.path)
            if size < self._size:
                self.__init__(self.path)
            self._size = size
            if self.offset >= size or self._final:
                return 0
            with file_system.open_file(self.path) as f:
                return self._advance(f, size, budget)
        except OSError as e:
            self._mark_damage(self.offset, "cannot be read (%s)" % (e.strerror or e), final=True)
            return 0

    def _advance(self, f, size, budget):
        done = 0
        while self.offset < size and not self._final and (budget is None or done < budget):
            if self._long is not None:  # a record longer than a block, checked a block at a time
                done += self._continue_long(f, size, None if budget is None else budget - done)
                if self._long is not None:
                    break  # out of budget, or the file ends inside it
                continue
            f.seek(self.offset)
            block = f.read(min(_BLOCK, size - self.offset, _BLOCK if budget is None else max(budget - done, _MIN_PIECE)))
            done += len(block)
            consumed = self._check_block(block, size)
            self.offset += consumed
            if consumed == 0:
                if self._final or self.truncated:
                    break
                self._long = _LongRecord(block[:_HEADER_SIZE + _HEAD_BYTES])
        return done

    def _frames(self, block):
        """[(pos, length)] of the whole records at the start of ``block``."""
        frames, pos, n = [], 0, len(block)
        while pos + _HEADER_SIZE <= n:
            length, _ = _HEADER.unpack_from(block, pos)
            end = pos + _HEADER_SIZE + length + _FOOTER_SIZE
            if end > n:
                break
            frames.append((pos, length))
            pos = end
        return frames

    def _check_block(self, block, size):
        """Check the whole records at the start of ``block``; returns the bytes consumed."""
        frames = self._frames(block)
        data = np.frombuffer(block, np.uint8)
        if frames:
            offsets = np.array([p for p, _ in frames], np.int64)
            stored = np.frombuffer(b"".join(block[p + 8:p + 12] for p, _ in frames), "<u4")
            header_ok = crc32c.masked(crc32c.crc32c_many(data, offsets, np.full(len(frames), 8))) == stored
            if not header_ok.all():
                frames = frames[:int(np.argmin(header_ok))]
        consumed = frames[-1][0] + _HEADER_SIZE + frames[-1][1] + _FOOTER_SIZE if frames else 0
        if frames:
            offsets = np.array([p for p, _ in frames], np.int64)
            lengths = np.array([l for _, l in frames], np.int64)
            stored = np.array([struct.unpack_from("<I", block, p + _HEADER_SIZE + l)[0] for p, l in frames],
                              np.uint32)
            data_ok = crc32c.masked(crc32c.crc32c_many(data, offsets + _HEADER_SIZE, lengths)) == stored
            for (p, l), ok in zip(frames, data_ok.tolist()):
                self._record(block, p, l, ok)
        rest = len(block) - consumed
        self.truncated = False
        if rest >= _HEADER_SIZE:
            header = block[consumed:consumed + _HEADER_SIZE]
            if crc32c.masked_crc32c(header[:8]) != _HEADER.unpack(header)[1]:
                self._mark_damage(self.offset + consumed, "corrupted record header", final=True)
            elif self.offset + consumed + _HEADER.unpack(header)[0] + _HEADER_SIZE + _FOOTER_SIZE > size:
                self.truncated = True
        elif rest > 0 and self.offset + len(block) >= size:
            self.truncated = True
        return consumed

    def _continue_long(self, f, size, budget):
        """Check more of the long record at ``offset`` (at most about ``budget``
        bytes, a block at a time: never the whole claimed record at once);
        returns the bytes read."""
        long = self._long
        total = _HEADER_SIZE + long.length + _FOOTER_SIZE
        if self.offset + total > size:
            self.truncated = True
            return 0
        done = 0
        while long.checked < long.length and (budget is None or done < budget):
            f.seek(self.offset + _HEADER_SIZE + long.checked)
            size_left = _PIECE if budget is None else max(budget - done, _MIN_PIECE)
            piece = f.read(min(_PIECE, size_left, long.length - long.checked))
            if not piece:
                self.truncated = True
                return done
            long.crc.update(piece)
            long.checked += len(piece)
            done += len(piece)
        if long.checked < long.length:
            return done
        f.seek(self.offset + _HEADER_SIZE + long.length)
        footer = f.read(_FOOTER_SIZE)
        ok = len(footer) == _FOOTER_SIZE and long.crc.masked() == struct.unpack("<I", footer)[0]
        self._record(long.head, 0, min(long.length, len(long.head) - _HEADER_SIZE), ok)
        self.offset += total
        self._long = None
        return done + len(footer)

    def _record(self, block, pos, length, ok):
        step, is_summary = event_step(block, pos + _HEADER_SIZE, pos + _HEADER_SIZE + length) if ok else (None, False)
        self.records += 1
        if not ok and self._damaged_at is None:
            self._mark_damage(self.offset + pos, "corrupted record (data checksum mismatch)")
            self._unread[0] -= 1  # the damaged record itself is counted below
        if self._damaged_at is None:
            self.readable += 1
            if is_summary:
                self.step_min = step if self.step_min is None else min(self.step_min, step)
                self.step_max = step if self.step_max is None else max(self.step_max, step)
            return
        count, low, high = self._unread
        if is_summary:
            low, high = (step, step) if low is None else (min(low, step), max(high, step))
        self._unread = [count + 1, low, high]
        self._update_damage()

    def _mark_damage(self, at, what, final=False):
        if self._damaged_at is None:
            self._damaged_at, self._what = at, what
        self._final = self._final or final
        self._update_damage()

    def _update_damage(self):
        if self._what.startswith("cannot be read"):
            self.damage = "%s; TensorBoard reads nothing of it" % self._what
            return
        if self._final:  # nothing after it can be framed, by any reader
            self.damage = "%s at byte %d: TensorBoard reads nothing after it in this file (it reads the " \
                "%d record(s) before it)" % (self._what, self._damaged_at, self.readable)
            return
        count, low, high = self._unread
        steps = "" if low is None else ", steps %d-%d" % (low, high)
        self.damage = (
            "%s at byte %d: TensorBoard's Python loader reads nothing after it in this file (it reads the %d "
            "record(s) before it, not the %d after it%s); the Rust data server reads the damaged record as it is"
            % (self._what, self._damaged_at, self.readable, count, steps))


class _LongRecord:
    """A record longer than a block, being checked: its frame's first bytes,
    its length, the CRC of the data checked so far."""

    __slots__ = ("head", "length", "checked", "crc")

    def __init__(self, head):
        self.head = head
        self.length = _HEADER.unpack_from(head)[0]
        self.checked = 0
        self.crc = crc32c.Crc32c()


def overlaps(scans):
    """Messages for event files of one run whose summary steps overlap.

    ``scans`` is [(run, FileScan)].  Two files overlap when one holds a step
    strictly inside the other's range (sharing only the boundary step is
    how one writer continues in a new file).
    """
    by_run = {}
    for run, scan in scans:
        if scan.step_min is not None:
            by_run.setdefault(run, []).append(scan)
    out = []
    for run, files in sorted(by_run.items()):
        files.sort(key=lambda s: (s.step_min, s.path))
        for i, a in enumerate(files):
            for b in files[i + 1:]:
                if b.step_min >= a.step_max:
                    break
                low, high = b.step_min, min(a.step_max, b.step_max)
                out.append((run, a.path, b.path, (
                    "event files %s and %s both hold steps %d-%d: two writers wrote this run at the same "
                    "time, or a restarted run wrote these steps again. TensorBoard's two loaders show such "
                    "a run differently (the Python loader keeps both copies of a step, or drops the older "
                    "file once a newer one appears; the Rust data server keeps one); give each writer its "
                    "own run directory" % (os.path.basename(a.path), os.path.basename(b.path), low, high))))
    return out

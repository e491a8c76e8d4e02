"""Live runs read incrementally: the new records of a growing run, not all of it again.

TensorFlow-free.  TensorBoard's data provider has no "steps since": a tag
that grows is read in full on every request (a run appended at 500 logged
steps/s made 8 clients wait 25 s on median).  For a local logdir, a
``RunTail`` reads the run's event files from where it stopped (frames and
both CRCs checked, as ``event_files``), decodes the gradlens tensors of
each tag into a buffer that grows by doubling, and gives a Series of a tag
*exactly at the version the provider lists* (its last step and wall time):
what the provider would return, read in O(new bytes).

It answers only when it can say the same as the provider, else None (the
caller reads through the provider as before): a run whose steps go back (a
restart: TensorBoard drops or keeps the older copies by loader), a damaged
or out-of-order event file, a tensor of another shape, a tail behind the
provider's listing.  ``LiveTails`` keeps the tails of runs seen growing
only, as many as fit in its byte budget (the data pool's,
$TB_GRADLENS_CACHE_MB: a Series cached from a tail is a view of its
buffers), the least recently asked dropped first.  A tail whose files are no longer the ones it
read (``file_identity``: truncated, rewritten in place, replaced, removed)
starts again from their first byte, never mixing what it read with them.
"""

import collections
import os
import struct
import threading

import numpy as np
from tensorboard.compat.proto import event_pb2
from tensorboard.util import tensor_util

from tb_gradlens import crc32c
from tb_gradlens import event_files
from tb_gradlens import metadata
from tb_gradlens.serving import file_identity
from tb_gradlens.serving import read_cache

MAX_NEW_BYTES = 64 * 1024 * 1024  # read per call once caught up
MAX_FIRST_BYTES = 512 * 1024 * 1024  # the first read of a run (once)
_TAIL_OVERHEAD = 16 * 1024  # bytes counted per tail beside its buffers
_HEADER = struct.Struct("<QI")


class _TagBuffer:
    """The points of one tag, in a buffer that doubles when full."""

    __slots__ = ("steps", "wall_times", "values", "n")

    def __init__(self, shape):
        self.steps = np.empty(64, np.int64)
        self.wall_times = np.empty(64, np.float64)
        self.values = np.empty((64,) + shape, np.float32)
        self.n = 0

    def append(self, step, wall_time, array):
        """False when the point cannot follow (an earlier or equal step, another shape)."""
        if array.shape != self.values.shape[1:] or (self.n and step <= self.steps[self.n - 1]):
            return False
        if self.n == len(self.steps):
            grown = 2 * self.n
            self.steps = np.resize(self.steps, grown)
            self.wall_times = np.resize(self.wall_times, grown)
            values = np.empty((grown,) + self.values.shape[1:], np.float32)
            values[:self.n] = self.values[:self.n]
            self.values = values
        self.steps[self.n], self.wall_times[self.n], self.values[self.n] = step, wall_time, array
        self.n += 1
        return True


class RunTail:
    """What one run's event files hold so far, read a budget at a time."""

    def __init__(self, directory):
        self.directory = directory
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        """Forget what was read (the files changed): the next read starts at their first byte."""
        self.offsets = {}  # event file -> bytes read
        self.identities = {}  # event file -> file_identity.Identity as read
        self.buffers = {}  # tag -> _TagBuffer; None: that tag cannot be followed
        self.gradlens_tags = set()
        self.broken = False  # the run cannot be followed (the provider reads it)

    @property
    def nbytes(self):
        """What the tail holds: its buffers (at their capacity) and a fixed overhead."""
        return _TAIL_OVERHEAD + sum(b.steps.nbytes + b.wall_times.nbytes + b.values.nbytes
                                    for b in list(self.buffers.values()) if b)

    def changed(self):
        """Whether a file read is no longer the one read (grown is the same file)."""
        return any(file_identity.change(old, path) for path, old in self.identities.items())

    def advance(self, budget):
        """Read up to about ``budget`` new bytes; True when every file was read to its end."""
        try:
            names = sorted(n for n in os.listdir(self.directory) if event_files.is_event_file(n))
        except OSError:
            self.broken = True
            return False
        paths = [os.path.join(self.directory, n) for n in names]
        read_before = [p for p in self.offsets if self.offsets[p]]
        if read_before and any(p not in self.offsets and p < max(read_before) for p in paths):
            self.broken = True  # a new file that sorts before one already read
            return False
        for path in paths:
            if self.broken or budget <= 0:
                return False
            done, complete = self._read_file(path, budget)
            budget -= done
            if not complete:
                return False
        return not self.broken

    def _read_file(self, path, budget):
        offset = self.offsets.get(path, 0)
        try:
            size = os.path.getsize(path)
            if size < offset:
                self.broken = True
                return 0, False
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(min(size - offset, budget))
        except OSError:
            self.broken = True
            return 0, False
        frames, pos = [], 0
        while pos + 12 <= len(data):
            length, _ = _HEADER.unpack_from(data, pos)
            if pos + 16 + length > len(data):
                break
            frames.append((pos, length))
            pos += 16 + length
        if frames:
            buffer = np.frombuffer(data, np.uint8)
            starts = np.array([p for p, _ in frames], np.int64)
            lengths = np.array([n for _, n in frames], np.int64)
            header_ok = crc32c.masked(crc32c.crc32c_many(buffer, starts, np.full(len(frames), 8))) == \
                np.array([_HEADER.unpack_from(data, p)[1] for p, _ in frames], np.uint32)
            data_ok = crc32c.masked(crc32c.crc32c_many(buffer, starts + 12, lengths)) == \
                np.array([struct.unpack_from("<I", data, p + 12 + n)[0] for p, n in frames], np.uint32)
            if not (header_ok.all() and data_ok.all()):
                self.broken = True  # damage: the two loaders differ there
                return len(data), False
            for p, n in frames:
                self._event(data[p + 12:p + 12 + n])
        self.offsets[path] = offset + pos
        try:
            self.identities[path] = file_identity.identify(path, offset + pos)
        except OSError:
            self.broken = True
            return len(data), False
        return len(data), offset + pos >= size  # else a record being written, or out of budget

    def _event(self, raw):
        event = event_pb2.Event.FromString(raw)
        if not event.HasField("summary"):
            return
        for value in event.summary.value:
            if value.metadata.plugin_data.plugin_name:
                if value.metadata.plugin_data.plugin_name == metadata.PLUGIN_NAME:
                    self.gradlens_tags.add(value.tag)
            if value.tag not in self.gradlens_tags or not value.HasField("tensor"):
                continue
            buffer = self.buffers.get(value.tag, False)
            if buffer is None:
                continue
            array = tensor_util.make_ndarray(value.tensor)
            if array.dtype.kind not in "fiub" or array.ndim != 2:
                self.buffers[value.tag] = None
                continue
            if buffer is False:
                buffer = self.buffers[value.tag] = _TagBuffer(array.shape)
            if not buffer.append(event.step, event.wall_time, array):
                self.buffers[value.tag] = None

    def series(self, entry, series_type):
        """The Series of ``entry`` at its listed version, or None."""
        buffer = self.buffers.get(entry.tag)
        if self.broken or not buffer or entry.max_step is None:
            return None
        shape = (len(entry.record.rows), len(entry.record.columns))
        if buffer.values.shape[1:] != shape:
            return None
        n = int(np.searchsorted(buffer.steps[:buffer.n], entry.max_step, side="right"))
        if n == 0 or buffer.steps[n - 1] != entry.max_step or buffer.wall_times[n - 1] != entry.last_wall_time:
            return None
        return series_type(entry.run, entry.tag, entry.record, buffer.steps[:n], buffer.wall_times[:n],
                           buffer.values[:n], False)


class LiveTails:
    """The RunTails of a local logdir's runs seen growing, within ``max_bytes`` in all
    (default: the data pool's budget, $TB_GRADLENS_CACHE_MB or 2 GiB)."""

    def __init__(self, logdir, max_bytes=None):
        self.logdir = logdir
        self.max_bytes = read_cache.env_cache_bytes() if max_bytes is None else max_bytes
        self._tails = collections.OrderedDict()
        self._lock = threading.Lock()
        self.bytes_read = 0  # all new bytes read (for tests and benchmarks)

    def series(self, entry, series_type):
        """The Series of a growing tag read incrementally, or None (read it through the provider)."""
        with self._lock:
            tail = self._tails.get(entry.run)
            first = tail is None
            if first:
                tail = self._tails[entry.run] = RunTail(os.path.join(self.logdir, entry.run))
            self._tails.move_to_end(entry.run)
        with tail.lock:
            if tail.changed():
                tail.reset()
                first = True
            found = tail.series(entry, series_type)
            if found is None and not tail.broken:
                before = sum(tail.offsets.values())
                tail.advance(MAX_FIRST_BYTES if first else MAX_NEW_BYTES)
                self.bytes_read += sum(tail.offsets.values()) - before
                found = tail.series(entry, series_type)
        self._evict()
        return found

    def _evict(self):
        """Drop the least recently asked tails while all hold more than ``max_bytes`` (never the last asked)."""
        with self._lock:
            total = sum(t.nbytes for t in self._tails.values())
            while total > self.max_bytes and len(self._tails) > 1:
                _, dropped = self._tails.popitem(last=False)
                total -= dropped.nbytes

    def forget(self, run):
        """Drop the tail of ``run`` (its files changed): a growing run makes a new one."""
        with self._lock:
            self._tails.pop(run, None)

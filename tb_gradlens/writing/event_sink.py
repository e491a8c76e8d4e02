"""Where ``event_writer.ResilientFileWriter`` keeps records while writing fails.

The writer's resource handle points at ``ram://`` event files while the disk
is full (a traced step keeps writing through the same handle); at each flush
``collect`` moves what they hold into a queue of summaries bounded in bytes
(the oldest dropped past ``max_bytes``, counted).  ``replay`` writes the
queue through the handle once a new event file opens; the writer ``forget``s
only the records it then finds whole on disk, so a disk that takes part of
them keeps the rest for the next try.
"""

import collections
import os
import uuid

import tensorflow as tf

_HEADER = 12
_NEVER_MS = 10 * 24 * 3600 * 1000  # TensorFlow's time-based flush, out of the way


class MemorySink:
    """Records kept in memory: ``records`` [(step, serialized Summary)], ``nbytes``."""

    def __init__(self, suffix, max_queue, max_bytes):
        self.root = "ram://gradlens_sink_%s" % uuid.uuid4().hex
        self.suffix = suffix
        self.max_queue = max_queue
        self.max_bytes = max_bytes
        self.records = collections.deque()
        self.nbytes = 0

    def __len__(self):
        return len(self.records)

    def open(self, handle):
        """Point ``handle`` at a new memory file (the caller released it)."""
        tf.raw_ops.CreateSummaryFileWriter(writer=handle, logdir=self.root, max_queue=self.max_queue,
                                           flush_millis=_NEVER_MS, filename_suffix=self.suffix)

    def files(self):
        return sorted(tf.io.gfile.glob(self.root + "/*"), key=self._order)

    def _order(self, path):
        """(second, TensorFlow's writer counter) of one of our event files."""
        name = os.path.basename(path)
        parts = name[:len(name) - len(self.suffix)].split("tfevents.", 1)[-1].split(".")
        try:
            return int(parts[0]), int(parts[-1])
        except ValueError:
            return 0, 0

    def collect(self):
        """Move the summaries of the memory files (closed by the caller) into
        ``records``; drop the oldest past ``max_bytes``.  Returns how many were dropped."""
        from tensorboard.compat.proto import event_pb2

        for path in self.files():
            for data in records_of(tf.io.gfile.GFile(path, "rb").read()):
                event = event_pb2.Event.FromString(data)
                if event.HasField("summary"):
                    summary = event.summary.SerializeToString()
                    self.records.append((event.step, summary))
                    self.nbytes += len(summary)
            tf.io.gfile.remove(path)
        dropped = 0
        while self.records and self.nbytes > self.max_bytes:
            self.nbytes -= len(self.records.popleft()[1])
            dropped += 1
        return dropped

    def replay(self, handle):
        """Write the kept summaries through ``handle`` (they stay kept); their number."""
        for step, summary in self.records:
            tf.raw_ops.WriteRawProtoSummary(writer=handle, step=step, tensor=summary)
        return len(self.records)

    def forget(self, count):
        """Drop the first ``count`` kept records (written whole)."""
        for _ in range(min(count, len(self.records))):
            self.nbytes -= len(self.records.popleft()[1])

    def clear(self):
        for path in tf.io.gfile.glob(self.root + "/*"):
            tf.io.gfile.remove(path)
        self.records.clear()
        self.nbytes = 0


def records_of(data):
    """The record payloads of TFRecord bytes (frames as written; no checks: our own memory)."""
    out, pos = [], 0
    while pos + _HEADER <= len(data):
        length = int.from_bytes(data[pos:pos + 8], "little")
        if pos + _HEADER + length + 4 > len(data):
            break
        out.append(data[pos + _HEADER:pos + _HEADER + length])
        pos += _HEADER + length + 4
    return out

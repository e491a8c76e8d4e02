"""How a ``ResilientFileWriter`` gets through a full disk: the records it
holds in memory meanwhile, its tries to resume in a new event file, and
the warnings and counts of what is lost (see ``event_writer``)."""

import os
import time

import tensorflow as tf

from tb_gradlens import safety
from tb_gradlens.writing import event_sink
from tb_gradlens.writing.event_file import WriteFailure
from tb_gradlens.writing.event_file import free_bytes
from tb_gradlens.writing.event_file import reason

CAUSE = "tb_gradlens event file writer"
DROP_CAUSE = "tb_gradlens kept records"  # kept records lost: past the memory bound, or at close


class DiskFullRecovery:
    """The failure episodes of one writer's ``EventFile``.

    Attributes: ``sink`` (the ``event_sink.MemorySink`` of the records
    written while failing, at most ``memory_bytes``), ``failures`` (failure
    episodes so far), ``dropped`` (kept records lost so far: past
    ``memory_bytes``, or still kept at the last try).  A try to resume
    comes every ``retry_seconds``, or as soon as the file system has more
    free space than at the last try.
    """

    def __init__(self, file, memory_bytes, retry_seconds):
        self.file = file
        self.memory_bytes = memory_bytes
        self.retry_seconds = retry_seconds
        self.sink = event_sink.MemorySink(file.suffix, file.max_queue, memory_bytes)
        self.failures = 0
        self.dropped = 0
        self._next_attempt = 0.0
        self._free_at_attempt = None  # free bytes when the last try to resume failed
        self._dropping = False  # a drop was warned in this failure episode
        self.out_of_order = False  # the last try made a file that would sort first

    def fail(self, error):
        """A write failed: warn, cut the file back to its whole records and
        keep what is written next in memory."""
        self.failures += 1
        where = self.file.cut_back()
        kept = ""
        if where and self.file.local:
            kept = " %s are kept in it." % (
                "Steps up to %d" % self.file.last_step if self.file.last_step is not None else "Its whole records")
        self._dropping = False
        self._next_attempt = time.monotonic()
        safety.report(CAUSE, WriteFailure(
            "%s.%s What is written next is kept in memory (up to %d MB) until a new event file can "
            "be written (tried every %g s)." % (error, kept, self.memory_bytes >> 20, self.retry_seconds)),
            again=True)
        self.sink.open(self.file.resource)  # the next flush tries a new file with what was kept

    def flush(self):
        """A flush while failing: take in what was written since (dropping
        the oldest past ``memory_bytes``) and try to resume when it is time."""
        self.file.release()  # what was written since: into the memory sink's files
        dropped = self.sink.collect()
        if dropped:
            self.drop(dropped, "more than %d MB were kept while the disk stays full; the oldest are "
                       "dropped" % (self.memory_bytes >> 20))
        if len(self.sink) and (time.monotonic() >= self._next_attempt or self._space_freed()):
            self.resume()
        if not self.file.healthy:
            self.sink.open(self.file.resource)

    def _space_freed(self):
        """Whether the logdir's file system has more free space than when the
        last try to resume failed: try again now, not a retry period later
        (a process killed meanwhile loses what is kept in memory)."""
        if not self.file.local or self._free_at_attempt is None:
            return False
        return free_bytes(self.file.logdir) > self._free_at_attempt

    def resume(self):
        """Try a new event file and write the kept records into it; True when
        writing resumed.  Writing resumes (and says so) only once every kept
        record is whole on disk; a disk that takes part of them keeps those in
        the new file, and the rest stay kept for the next try."""
        file = self.file
        self._next_attempt = time.monotonic() + self.retry_seconds
        self._free_at_attempt = free_bytes(file.logdir) if file.local else None
        self.out_of_order = False
        file.release()
        last_name = file.last_name
        if not file.open():
            return False
        if file.local and os.path.basename(file.path) <= last_name:
            # TensorBoard reads a run's files in name order: one created in the same second
            # with a counter of more digits ("...10" < "...9") would be read first.
            self.out_of_order = True
            self._keep_whole(last_name, written=0)
            return False
        kept = len(self.sink)
        error = None
        try:
            self.sink.replay(file.resource)
            tf.raw_ops.FlushSummaryWriter(writer=file.resource)
        except (tf.errors.OpError, OSError) as e:
            error = WriteFailure(reason(e))
        error = error or file.check()
        if error is not None:
            self._keep_whole(last_name)
            return False
        self.sink.forget(kept)
        self._free_at_attempt = None
        safety.notify(
            "writing resumed in a new event file %s after %d failure(s); %d record(s) written while "
            "writing failed were kept in memory and written to it%s; the records of the flush that "
            "failed are lost" % (file.name(), self.failures, kept,
                                 "" if not self.dropped else " (%d kept record(s) were dropped so far)"
                                 % self.dropped))
        return True

    def _keep_whole(self, last_name, written=None):
        """After a replay the disk took only in part: the kept records the
        new file holds whole are forgotten (``EventFile.keep_whole``)."""
        written = self.file.summaries if written is None else written
        self.file.keep_whole(last_name, written)
        self.sink.forget(written)
        self._free_at_attempt = free_bytes(self.file.logdir)

    def drop(self, count, why, warn_again=False):
        """Kept records lost: counted (``dropped``, ``safety.reported()``), warned
        at the first drop of a failure episode and at ``close``."""
        self.dropped += count
        safety.report(DROP_CAUSE, WriteFailure(
            "%d kept record%s of %s could not be written: %s (%d dropped in all)"
            % (count, "" if count == 1 else "s", self.file.logdir, why, self.dropped)),
            again=warn_again or not self._dropping)
        self._dropping = True

"""When a session's records reach the event file: ``FlushPacing``.

A call with a non-finite step is flushed when it returns.  Healthy logged
steps that the step wrote itself (``RecordSink.write_in_step``) may wait in
the writer's queue and are flushed together, at most ``flush_seconds``
apart (a flush per logged call was most of the cost of a logged step on
small models, docs/benchmarks-history.md); epoch end, train end, a raising call and the
writer's close at exit flush as well.
"""

import time

from tb_gradlens import safety


class FlushPacing:
    """Writes and flushes one session's records (see the module).

    Args:
      writer: the summary writer (its ``max_queue``, when it says).
      sink: the session's ``RecordSink``; ``tap``: its ``Tap``;
      status: its ``LensStatus``.
      flush_seconds: the most seconds a healthy logged step waits.
      cause: what a write failure is reported as (``safety``).
    """

    def __init__(self, writer, sink, tap, status, flush_seconds, cause):
        self.writer = writer
        self.sink = sink
        self.tap = tap
        self.status = status
        self.flush_seconds = flush_seconds
        self.cause = cause
        self.pending = True  # the status or dtype map may have changed
        self._traces_written = 0  # tap.traces when they were last written
        self._flushed_at = 0.0  # time.monotonic() of the last flush
        self._unflushed = 0  # events written inside the step since (at most)

    def may_wait(self):
        """Whether the records a healthy logged call wrote inside the step
        may stay in the writer's queue: the step's check would have said
        if a step was not finite (``StepWatch`` armed), nothing else is to
        be written, the last flush is less than ``flush_seconds`` old and
        the queue stays below half its size (a full queue would flush
        inside the step, where a full disk raises)."""
        return (self.sink.in_step and self.tap.watch.armed and not self.pending
                and self.tap.traces == self._traces_written
                and time.monotonic() - self._flushed_at < self.flush_seconds
                and self._unflushed + self.sink.events_per_call <= getattr(self.writer, "max_queue", 0) // 2)

    def due_after_call(self, first, last, alarmed):
        """Whether to flush after the call of train steps ``[first, last)``
        returned (``alarmed``: a step in it was not finite): when it logged
        a step and its records may not wait (``may_wait``), or when the
        status or dtype map may have changed."""
        if alarmed or self.tap.any_due_in(first, last):
            if self.sink.in_step:
                self.sink.note_steps(first, last)
            if alarmed or not self.may_wait():
                return True
            self._unflushed += self.sink.events_per_call
            return False
        return self.pending

    def flush(self, step):
        """Write every buffered step (and the status and dtype map at
        ``step`` if they may have changed) and flush the event file (never
        raises but in strict mode).  When the step wrote its records itself
        and was not traced again, the flush is all there is to do.  False
        when the train step needs no re-reading after it (one step per
        call: the session's count is exact, no host read needed)."""
        self._flushed_at, self._unflushed = time.monotonic(), 0
        with safety.guard(self.cause):
            traces = self.tap.traces
            if self.sink.in_step and not self.pending and traces == self._traces_written:
                self.writer.flush()
                if self.tap.steps_per_call == 1:
                    return False
            else:
                self.sink.write_pending(step)
                self._traces_written = traces
                self.pending = self.status.changed
        return True

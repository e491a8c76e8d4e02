"""A tag as read: its listing entry (``TagEntry``) and a float record's steps (``Series``).

Plain typed data on the contract floor, TensorFlow-free and TensorBoard-free:
the serving side hands them out (``serving.entries``), the analysis and the
advisor read them (the advisor builds a ``Series`` of its own measurement).
"""


class TagEntry:
    """One gradlens tag of a run: its parsed metadata or its error."""

    __slots__ = ("run", "tag", "record", "error", "max_step", "last_wall_time")

    def __init__(self, run, tag, record=None, error=None, max_step=None, last_wall_time=None):
        self.run = run
        self.tag = tag
        self.record = record
        self.error = error
        self.max_step = max_step
        self.last_wall_time = last_wall_time

    @property
    def kind(self):
        return self.record.kind if self.record is not None else None

    @property
    def version(self):
        """What changes when the tag gets new data (the cache key's version)."""
        return (self.max_step, self.last_wall_time)

    def to_json(self):
        out = {"tag": self.tag, "max_step": self.max_step}
        if self.record is not None:
            out.update(
                kind=self.record.kind,
                rows=list(self.record.rows),
                columns=list(self.record.columns),
                extras=self.record.extras,
                error=None,
            )
        else:
            out.update(kind=None, rows=[], columns=[], extras={}, error=self.error)
        return out


class Series:
    """All logged steps of one float record.

    Attributes:
      run, tag: where it comes from.
      record: its RecordMetadata.
      steps: int64 ``[S]``, ascending.
      wall_times: float64 ``[S]``.
      values: float32 ``[S, rows, columns]``.
      sampled: True if the provider returned only a sample of the steps.
    """

    __slots__ = ("run", "tag", "record", "steps", "wall_times", "values", "sampled")

    def __init__(self, run, tag, record, steps, wall_times, values, sampled=False):
        self.run = run
        self.tag = tag
        self.record = record
        self.steps = steps
        self.wall_times = wall_times
        self.values = values
        self.sampled = sampled

    @property
    def nbytes(self):
        return self.steps.nbytes + self.wall_times.nbytes + self.values.nbytes

    def column(self, name):
        """values[:, :, column] as a float32 ``[S, rows]`` view."""
        return self.values[:, :, self.record.columns.index(name)]

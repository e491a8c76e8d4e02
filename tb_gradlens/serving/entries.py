"""What a ``reading.Source`` hands out: a tag's listing entry and its data.

TensorFlow-free.  ``list_records`` lists every gradlens tag of an experiment
as ``TagEntry``s (bad metadata becomes an error entry); a float record's
steps are a ``Series``.
"""

from tensorboard import context as tb_context
from tensorboard import errors
from tensorboard import plugin_util

from tb_gradlens import metadata
from tb_gradlens import records


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


def request_context(request):
    """(RequestContext, experiment_id) of a Werkzeug request."""
    ctx = tb_context.from_environ(request.environ)
    return ctx, plugin_util.experiment_id(request.environ)


def list_records(data_provider, ctx, experiment_id):
    """{run: [TagEntry]} for every gradlens tag; bad metadata -> error entry."""
    mapping = data_provider.list_tensors(
        ctx, experiment_id=experiment_id, plugin_name=metadata.PLUGIN_NAME
    )
    result = {}
    for run, tags in mapping.items():
        entries = []
        for tag, ts in sorted(tags.items()):
            try:
                record = metadata.parse_plugin_content(ts.plugin_content, tag)
                records.validate(record, tag)
                error = None
            except metadata.FormatError as e:
                record, error = None, str(e)
            except Exception as e:  # noqa: BLE001 - one bad record is an error entry, never a 500
                record, error = None, "gradlens record %r: unreadable metadata (%s)" % (tag, type(e).__name__)
            entries.append(
                TagEntry(run, tag, record, error, ts.max_step, ts.max_wall_time)
            )
        result[run] = entries
    return result


def require_readable(entry):
    """InvalidArgumentError for an entry whose metadata could not be read."""
    if entry.record is None:
        raise errors.InvalidArgumentError(entry.error or "unreadable gradlens record")

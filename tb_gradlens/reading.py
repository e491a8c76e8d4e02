"""Reading gradlens records through a TensorBoard data provider.

TensorFlow-free and shared by the plugin and the command line: both build a
``tensorboard.data.provider.DataProvider`` (the plugin gets TensorBoard's,
the CLI builds one over an ``EventMultiplexer``) and read through here.
"""

from tensorboard import context as tb_context
from tensorboard import plugin_util

from tb_gradlens import metadata


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
                error = None
            except metadata.FormatError as e:
                record, error = None, str(e)
            entries.append(
                TagEntry(run, tag, record, error, ts.max_step, ts.max_wall_time)
            )
        result[run] = entries
    return result

"""What a ``reading.Source`` hands out: a tag's listing entry and its data.

TensorFlow-free.  ``list_records`` lists every gradlens tag of an experiment
as ``TagEntry``s (bad metadata becomes an error entry); a float record's
steps are a ``Series`` (both plain data on the contract floor,
``records.tag_data``).
"""

from tensorboard import context as tb_context
from tensorboard import errors
from tensorboard import plugin_util

from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.records.tag_data import Series  # noqa: F401 (entries.Series, reading.Series)
from tb_gradlens.records.tag_data import TagEntry


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

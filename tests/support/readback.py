"""Read gradlens records back through TensorBoard's own data provider."""

from tensorboard import context
from tensorboard.backend.event_processing import data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer

from tb_gradlens import metadata


def multiplexer_provider(logdir, samples=0):
    """A MultiplexerDataProvider over ``logdir`` with gradlens kept in full."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        size_guidance={"tensors": 10},
        tensor_size_guidance={metadata.PLUGIN_NAME: samples},
    )
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    return data_provider.MultiplexerDataProvider(multiplexer, logdir)


def read_records(logdir):
    """{run: {tag: (RecordMetadata, [TensorDatum...])}} of every gradlens tag."""
    provider = multiplexer_provider(logdir)
    ctx = context.RequestContext()
    listing = provider.list_tensors(ctx, experiment_id="", plugin_name=metadata.PLUGIN_NAME)
    data = provider.read_tensors(
        ctx,
        experiment_id="",
        plugin_name=metadata.PLUGIN_NAME,
        downsample=10**9,
    )
    out = {}
    for run, tags in listing.items():
        for tag, ts in tags.items():
            record = metadata.parse_plugin_content(ts.plugin_content, tag)
            out.setdefault(run, {})[tag] = (record, data[run][tag])
    return out


def only_tag(records, run, kind):
    """The single (record, data) of ``kind`` in ``run``."""
    found = [v for t, v in records[run].items() if v[0].kind == kind]
    assert len(found) == 1, "expected one %s tag in %s, got %d" % (kind, run, len(found))
    return found[0]

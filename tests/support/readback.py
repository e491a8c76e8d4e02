"""Read gradlens records back through TensorBoard's own data provider, and the
analysis's inputs built the same way (``source_of`` a logdir, ``make_series`` of a
table, ``alerts_of_two_comparisons`` of a model)."""

import os

import numpy as np
from tensorboard import context
from tensorboard.backend.event_processing import data_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer

from tb_gradlens import metadata
from tb_gradlens.serving import reading


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


def source_of(logdir):
    """The analysis's reading.Source over ``logdir`` (every gradlens sample kept)."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={metadata.PLUGIN_NAME: 0}
    )
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    return reading.Source(data_provider.MultiplexerDataProvider(multiplexer, logdir))


def alerts_of_two_comparisons(model, x, y, logdir):
    """The alerts of a run (``logdir``/run) that compared one batch twice with the custom loop's
    ``compare_keras`` (an alert needs two comparisons in a row); the analysis reads it without
    a problem."""
    import tensorflow as tf

    from tb_gradlens import analysis
    from tb_gradlens.keras import GradLens

    lens = GradLens(os.path.join(str(logdir), "run"), compare_every=1)
    for step in range(2):
        lens.compare_keras(model, tf.constant(x), tf.constant(y), step=step)
    lens.flush()
    found, problems = analysis.run_alerts(source_of(str(logdir)))
    assert problems == []
    return found


def make_series(kind, table, extras=None, steps=None, rows=None):
    """A reading.Series of ``table`` float32 [S, R, C] with the kind's columns
    (a table with the columns of format version 1, without the stable-rounding
    column, is a version 1 record: judged by the depth formula)."""
    table = np.asarray(table, np.float32)
    rows = rows or ["v%d" % i for i in range(table.shape[1])]
    version = 1 if table.shape[-1] == len(metadata.kind_columns(kind, 1)) != len(metadata.KIND_COLUMNS[kind]) else 2
    record = metadata.RecordMetadata(kind, rows, metadata.kind_columns(kind, version), extras, version)
    steps = np.arange(len(table), dtype=np.int64) * 10 if steps is None else np.asarray(steps)
    return reading.Series("run", "tag/" + kind, record, steps, steps.astype(np.float64), table)

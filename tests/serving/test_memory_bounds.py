"""The plugin's memory is bounded by its configuration, whatever the requests (issue 43).

Requests go through TensorBoard's own WSGI application over a real data
provider; the cache's pools are read for what they hold.
"""

import json

from benchmarks import bench_memory
import numpy as np
import tensorflow as tf
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.serving import gradlens_plugin
from tb_gradlens.serving import read_cache
from tb_gradlens.writing import summary_ops
from tests.support.plugin_client import RereadProvider
from tests.support.plugin_client import make_provider
from tests.support.plugin_client import plugin_over

PREFIX = "/data/plugin/gradlens/"
ROWS = ["dense/kernel", "dense/bias"]


def _write_run(run_dir, steps=5):
    record = metadata.RecordMetadata(metadata.GRAD_STATS, ROWS, metadata.GRAD_STATS_COLUMNS,
                                      records.gradient_extras(["float32"] * 2, ["float32"] * 2))
    writer = tf.summary.create_file_writer(run_dir)
    with writer.as_default():
        for step in range(steps):
            values = np.full((2, len(metadata.GRAD_STATS_COLUMNS)), step + 1, np.float32)
            tag = summary_ops.write_record("model", record, tf.constant(values), step)
    writer.close()
    return tag


def _plugin(logdir):
    context = base_plugin.TBContext(data_provider=make_provider(logdir)[1], logdir=logdir)
    plugin = gradlens_plugin.GradLensPlugin(context)
    return plugin, werkzeug_test.Client(application.TensorBoardWSGI([plugin]))


def test_unknown_query_parameters_key_no_cached_answer(tmp_path):
    """2,000 series requests, each with its own unknown 40 KB parameter (a cache buster), are
    one answer: the pool holds the same entries after them as after the first."""
    tag = _write_run(str(tmp_path / "run"))
    plugin, client = _plugin(str(tmp_path))
    for route in ("series", "health", "histograms"):
        client.get(PREFIX + route, query_string={"run": "run", "tag": tag})
    entries = plugin._cache.sizes()["answers"][0]
    junk = "x" * 40_000
    for i in range(2000):
        route = ("series", "health", "series")[i % 3]
        response = client.get(PREFIX + route, query_string={"run": "run", "tag": tag, "junk%d" % i: junk})
        assert response.status_code == 200 or route != "series"
    held, counted, _ = plugin._cache.sizes()["answers"]
    assert held == entries and counted < 200_000


def test_a_pool_counts_its_keys_so_long_distinct_keys_stay_within_its_bytes():
    """Keys a request decides (a 1,000-character row pattern, a zero-padded step) take memory
    as their answers do: 2,000 distinct 40 KB keys of 1 KB values stay within a 1 MB pool."""
    cache = read_cache.Cache(max_bytes=1 << 20, derived_max_bytes=1 << 20, answer_max_bytes=1 << 20)

    class Answer(bytes):
        nbytes = 1024

    for i in range(2000):
        cache.get(("answer", "%05d" % i + "r" * 40_000), (7, 1.5), lambda: Answer(b"{}"), "answers")
    held, counted, max_bytes = cache.sizes()["answers"]
    assert counted <= max_bytes and held * 41_000 <= max_bytes


def test_distinct_spellings_of_one_step_bound_are_one_answer(tmp_path):
    """``step_min=1`` spelled with 2,000 to 3,999 leading zeros (Python reads at most 4,300 digits):
    2,000 spellings, one number, one answer: the route keys what it reads, parsed."""
    tag = _write_run(str(tmp_path / "run"))
    plugin, client = _plugin(str(tmp_path))
    for i in range(2000):
        response = client.get(PREFIX + "series", query_string={"run": "run", "tag": tag,
                                                                "step_min": "0" * (2000 + i) + "1"})
        assert response.status_code == 200
    held, counted, _ = plugin._cache.sizes()["answers"]
    assert held == 1 and counted < 100_000



def test_twenty_growing_runs_are_each_read_from_their_new_bytes_only(tmp_path):
    """20 runs growing at once, each asked for at every version (the tab's Overview of a sweep): once
    followed, a request reads the bytes a run gained, whatever the number of runs (16 were followed)."""
    runs = ["run%02d" % i for i in range(20)]
    provider = RereadProvider(str(tmp_path))
    client = None
    sizes = {}
    for steps in (5, 8, 11, 14):
        for i, run in enumerate(runs):
            bench_memory.write_run(str(tmp_path / run), steps, 3, False, seed=i)  # the same bytes, 3 steps more
        provider.reread()
        client = client or plugin_over(provider, str(tmp_path))
        tails = client.plugin._tails
        listing = json.loads(client.get(PREFIX + "runs").get_data())["runs"]
        tags = {r["run"]: next(t["tag"] for t in r["tags"] if t["kind"] == "grad_stats") for r in listing}
        grown = {run: sum(p.stat().st_size for p in (tmp_path / run).iterdir()) for run in runs}
        read_before = tails.bytes_read
        for run in runs:
            assert client.get(PREFIX + "series", query_string={"run": run, "tag": tags[run]}).status_code == 200
        if steps == 14:  # every run followed since its 8-step version: its new bytes only
            assert tails.bytes_read - read_before == sum(grown[r] - sizes[r] for r in runs)
        sizes = grown
    held = [t.nbytes for t in tails._tails.values()]
    assert len(held) == 20 and sum(held) <= tails.max_bytes
    tails.max_bytes = sum(held) - 1  # bounded by bytes: the least recently asked tail goes
    tails._evict()
    assert sorted(tails._tails) == runs[1:]

"""What one request may cost (issue 31): the pattern budget of a request,
crafted event files, many runs.

Routes run over a Werkzeug client on TensorBoardWSGI with TensorBoard's own
data provider over a real logdir (written with TensorBoard's TF-free writer).
"""

import json
import os

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tests.support import hostile_logs
from tests.support.plugin_client import make_provider
from tb_gradlens import metadata
from tb_gradlens import patterns
from tb_gradlens.patterns import matching
from tb_gradlens.serving import gradlens_plugin
from tb_gradlens.serving import judgment_json

PREFIX = "/data/plugin/gradlens/"


def client_of(logdir):
    context = base_plugin.TBContext(data_provider=make_provider(logdir)[1], logdir=logdir)
    return werkzeug_test.Client(application.TensorBoardWSGI([gradlens_plugin.GradLensPlugin(context)]))


def get(client, route, **params):
    response = client.get(PREFIX + route, query_string=params)
    return response.status_code, response.get_data(as_text=True)


def names_run(logdir, run, count=40, prefix=None):
    """A run whose grad_stats tag has ``count`` distinct 60-character variable
    names (starting with ``prefix``, default the run's name)."""
    rows = ["%s/layer_%03d/" % (prefix or run, i) + "k" * 40 for i in range(count)]
    rows = [r[:60] for r in rows]
    hostile_logs.write_records(os.path.join(logdir, run), [
        ("gradients/grad_stats/%s" % run, hostile_logs.content(metadata.GRAD_STATS, rows),
         hostile_logs.stats(len(rows), 1.0))])
    return rows


def matching_steps(pattern, names):
    """The fewest matching steps ``patterns`` needs for ``names`` (bisected)."""
    low, high = 1, 10**7
    while low < high:
        middle = (low + high) // 2
        try:
            patterns.filter_names(pattern, names, middle)
            high = middle
        except patterns.PatternTooComplex:
            low = middle + 1
    return low


def test_rows_pattern_budget_is_one_per_request_not_one_per_tag(tmp_path, monkeypatch):
    """README: at most one budget of matching steps per request.  Six runs whose
    rows each cost well under the budget, together twice over it: /overview and
    /alerts refuse the pattern (400, naming the budget) instead of spending the
    budget six times; the same pattern on one run is answered, and so it is on
    six runs of the same variables (each distinct name is matched once)."""
    logdir = str(tmp_path / "logs")
    all_rows = [names_run(logdir, "run_%d" % i) for i in range(6)]
    pattern = "(?:[a-z_0-9/]?){30}!"
    per_tag = matching_steps(pattern, all_rows[0])
    monkeypatch.setattr(matching, "DEFAULT_BUDGET", int(per_tag * 3))
    client = client_of(logdir)
    for route in ("overview", "alerts"):
        status, body = get(client, route, rows=pattern)
        assert status == 400, (route, body[:300])
        assert "matching steps" in body and str(int(per_tag * 3)) in body
    status, body = get(client, "alerts", rows=pattern, run="run_0")
    assert status == 200, body[:300]
    same = str(tmp_path / "same")
    for i in range(6):
        names_run(same, "seed_%d" % i, prefix="model")
    status, body = get(client_of(same), "overview", rows=pattern)
    assert status == 200 and len(json.loads(body)["runs"]) == 6, body[:300]


# ---------------------------------------------------------------------------
# Item 1: a crafted event file claiming a huge record.
# ---------------------------------------------------------------------------


def crafted_file(run_dir, claimed):
    """A sparse event file whose first record header is valid and claims
    ``claimed`` bytes of zeros (their data checksum is wrong)."""
    import struct

    from tb_gradlens import crc32c

    os.makedirs(run_dir, exist_ok=True)
    path = os.path.join(run_dir, "events.out.tfevents.1000000000.crafted")
    length = struct.pack("<Q", claimed)
    with open(path, "wb") as f:
        f.write(length + struct.pack("<I", crc32c.masked_crc32c(length)))
        f.truncate(12 + claimed + 4)
    return path


def test_a_crafted_huge_record_is_checked_a_budget_at_a_time(tmp_path):
    """The plugin's check of event files reads at most about its budget per
    request, also inside one record that claims far more (it read the whole
    claimed record in one request, under the logdir lock), and finds the
    damage once it has read it all."""
    import tracemalloc

    from tb_gradlens.serving import logdir_monitor

    claimed = 24 * 1024 * 1024
    crafted_file(str(tmp_path / "logs" / "crafted"), claimed)
    monitor = logdir_monitor.LogdirMonitor(str(tmp_path / "logs"), budget=1024 * 1024, interval=3600)
    tracemalloc.start()
    try:
        first = monitor.problems()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert first == {} and peak < 8 * 1024 * 1024, peak
    calls = 1
    while not monitor.problems() and calls < 64:
        calls += 1
    (problem,) = monitor.problems()["crafted"]
    assert "data checksum mismatch" in problem["error"] and calls >= 20


@pytest.mark.slow
def test_report_reads_a_crafted_huge_record_in_bounded_memory(tmp_path):
    """``tb-gradlens report`` on a logdir whose event file claims a 64 MB
    record of zeros: the damage is named, and nothing reads the whole claimed
    record into memory (TensorBoard's own TF-free reader read it, and its
    byte-by-byte checksum took minutes at 1 GB)."""
    import subprocess
    import sys

    logdir = tmp_path / "logs"
    hostile_logs.stats_run(str(logdir / "good"), range(3))
    crafted_file(str(logdir / "crafted"), 64 * 1024 * 1024)
    code = ("import sys, tracemalloc; tracemalloc.start(); from tb_gradlens import cli; "
            "rc = cli.main(['report', %r, '-q']); sys.stderr.write('PEAK %%d\\n' %% tracemalloc.get_traced_memory()[1]); "
            "sys.exit(rc)" % str(logdir))
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=root)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "data checksum mismatch" in result.stderr and "crafted" in result.stderr
    peak = int(result.stderr.split("PEAK ")[1].split()[0])
    assert peak < 40 * 1024 * 1024, peak


@pytest.mark.slow
def test_crc32c_of_long_and_pieced_data_equals_tensorboards():
    """The CRC-32C (batched, and continued over pieces as a long record
    is checked) equals TensorBoard's byte-by-byte reference."""
    import numpy as np
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as reference

    from tb_gradlens import crc32c

    rng = np.random.default_rng(3)
    data = rng.bytes(300_001)
    expected = reference.masked_crc32c(data)
    assert crc32c.masked_crc32c(data) == expected
    for cuts in ([0, 300_001], [0, 3, 5, 70_000, 300_001], [0, 1, 2, 255, 256, 257, 299_999, 300_001]):
        running = crc32c.Crc32c()
        for a, b in zip(cuts, cuts[1:]):
            running.update(data[a:b])
        assert running.masked() == expected, cuts
    starts = rng.integers(0, 200_000, 300)
    lengths = rng.integers(0, 90_000, 300)
    got = crc32c.masked(crc32c.crc32c_many(data, starts, lengths))
    assert got.tolist() == [reference.masked_crc32c(data[a:a + n]) for a, n in zip(starts, lengths)]


def test_tensorboards_stub_still_reads_records_through_the_hook_the_cli_replaces():
    """The command line replaces the TF-free stub's ``PyRecordReader_New``
    (tb_gradlens.serving.checked_reader): a TensorBoard upgrade that stops reading
    through it would bring back the byte-by-byte checksum; this names it."""
    import inspect

    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

    assert hasattr(pywrap_tensorflow, "PyRecordReader_New")
    assert "pywrap_tensorflow.PyRecordReader_New" in inspect.getsource(event_file_loader._make_tf_record_iterator)


# ---------------------------------------------------------------------------
# Item 4: many runs.
# ---------------------------------------------------------------------------


def test_overview_of_a_sweep_reads_each_tag_of_all_runs_in_one_provider_call(tmp_path):
    """30 runs of one sweep (same tags): a cold /overview asks the data provider
    for their tensors in one call per tag name, not one per run (with the Rust
    data server each call is a gRPC round trip: 2,000 runs took 180 s), and
    answers exactly what each run read alone answers."""
    from tb_gradlens import analysis
    from tb_gradlens.serving import reading
    from tests.support.plugin_client import CountingProvider

    logdir = str(tmp_path / "sweep")
    rows = ["dense_%d/kernel" % i for i in range(4)]
    for i in range(30):
        hostile_logs.write_records(os.path.join(logdir, "seed_%02d" % i), [
            ("gradients/grad_stats/g", hostile_logs.content(metadata.GRAD_STATS, rows),
             lambda step, i=i: hostile_logs.stats(4, float("nan") if step == i % 3 else 1.0 + i))],
            scalars=["loss"])
    provider = CountingProvider(make_provider(logdir)[1])
    client = werkzeug_test.Client(application.TensorBoardWSGI([gradlens_plugin.GradLensPlugin(
        base_plugin.TBContext(data_provider=provider, logdir=logdir))]))
    status, body = get(client, "overview")
    assert status == 200 and provider.reads <= 2, provider.reads
    batched = json.loads(body)["runs"]
    source = reading.Source(make_provider(logdir)[1])
    alone = [judgment_json.overview_json(analysis.overview(source.restricted([run])))[0] for run in source.runs()]
    assert json.loads(gradlens_plugin.encode_json(alone)) == batched
    assert [r["first_nonfinite_step"] for r in batched] == [i % 3 for i in range(30)]


# ---------------------------------------------------------------------------
# Item 3: live runs.
# ---------------------------------------------------------------------------


def _append_steps(writer, tag, rows, steps):
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.proto import summary_pb2
    from tensorboard.util import tensor_util

    for step in steps:
        value = hostile_logs.stats(len(rows), float(step))
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(
            tag=tag, metadata=hostile_logs.plugin_metadata(hostile_logs.content(metadata.GRAD_STATS, rows)),
            tensor=tensor_util.make_tensor_proto(value))])
        writer.add_event(event_pb2.Event(step=step, wall_time=1.0e9 + step, summary=summary))
    writer.flush()


def test_a_growing_run_is_read_incrementally(tmp_path):
    """A run appended to between requests: its series is read from the new
    records only (no second read of the whole tag through the provider, the
    bytes read are those appended), and equals what the provider reads."""
    import numpy as np
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    from tb_gradlens.serving import reading
    from tests.support.plugin_client import CountingProvider

    logdir = str(tmp_path / "logs")
    run_dir = os.path.join(logdir, "live")
    os.makedirs(run_dir)
    tag, rows = "gradients/grad_stats/live", ["a/kernel", "b/kernel", "c/bias"]
    writer = EventFileWriter(run_dir)
    _append_steps(writer, tag, rows, range(0, 50))
    multiplexer, inner = make_provider(logdir)
    provider = CountingProvider(inner)
    plugin = gradlens_plugin.GradLensPlugin(base_plugin.TBContext(data_provider=provider, logdir=logdir))
    client = werkzeug_test.Client(application.TensorBoardWSGI([plugin]))
    status, body = get(client, "series", run="live", tag=tag, columns="mean")
    assert status == 200 and len(json.loads(body)["steps"]) == 50
    reads = provider.reads
    for more in (range(50, 120), range(120, 121), range(121, 400)):
        size = sum(os.path.getsize(os.path.join(run_dir, n)) for n in os.listdir(run_dir))
        tails = getattr(plugin, "_tails", None)
        read_before = tails.bytes_read if tails else 0
        _append_steps(writer, tag, rows, more)
        multiplexer.Reload()
        status, body = get(client, "series", run="live", tag=tag, columns="mean")
        answer = json.loads(body)
        assert status == 200 and answer["steps"] == list(range(more[-1] + 1))
        assert answer["values"][0][0] == [float(s) for s in range(more[-1] + 1)]
        assert provider.reads == reads, "the whole tag was read again"
        appended = sum(os.path.getsize(os.path.join(run_dir, n)) for n in os.listdir(run_dir)) - size
        if read_before:  # after the tail's first read: only what was appended
            assert tails.bytes_read - read_before == appended
    writer.close()
    full = reading.Source(make_provider(logdir)[1]).series("live", tag)
    mine = reading.Source(provider, cache=plugin._cache, tails=plugin._tails)
    mine._location = reading.Source(provider, cache=plugin._cache).location
    served = mine.series("live", tag)
    assert np.array_equal(served.steps, full.steps) and np.array_equal(served.values, full.values)
    assert np.array_equal(served.wall_times, full.wall_times)


def _live_plugin(tmp_path, tag, rows, steps):
    """(writer, multiplexer, test client, plugin) of a logdir whose run "live" has ``steps``."""
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    logdir = str(tmp_path / "logs")
    os.makedirs(os.path.join(logdir, "live"))
    writer = EventFileWriter(os.path.join(logdir, "live"))
    _append_steps(writer, tag, rows, steps)
    multiplexer, provider = make_provider(logdir)
    plugin = gradlens_plugin.GradLensPlugin(base_plugin.TBContext(data_provider=provider, logdir=logdir))
    return writer, multiplexer, werkzeug_test.Client(application.TensorBoardWSGI([plugin])), plugin


def test_the_health_of_a_growing_run_costs_its_new_steps_only(tmp_path, monkeypatch):
    """The health of a live run is extended with the steps it gained, not
    computed over all of them again on every request, and says the same as
    the health of the whole run read afresh (the first NaN, None and
    all-zero step of a variable, the largest finite max |g|)."""
    from tb_gradlens.serving import health

    tag, rows = "gradients/grad_stats/live", ["a/kernel", "b/kernel", "c/bias"]
    writer, multiplexer, client, _ = _live_plugin(tmp_path, tag, rows, range(0, 50))
    status_codes, computed = health.status_codes, []

    def counting(zero_fraction, nonfinite, is_none):
        computed.append(len(zero_fraction))
        return status_codes(zero_fraction, nonfinite, is_none)

    monkeypatch.setattr(health, "status_codes", counting)
    answers = [json.loads(get(client, "health", run="live", tag=tag)[1])]
    for more in (range(50, 120), range(120, 121), range(121, 300)):
        _append_steps(writer, tag, rows, more)
        multiplexer.Reload()
        status, body = get(client, "health", run="live", tag=tag)
        assert status == 200
        answers.append(json.loads(body))
    writer.close()
    assert sum(computed) == 300, computed  # each step once: 50 + 70 + 1 + 179
    fresh = werkzeug_test.Client(application.TensorBoardWSGI([gradlens_plugin.GradLensPlugin(
        base_plugin.TBContext(data_provider=make_provider(str(tmp_path / "logs"))[1]))]))
    assert answers[-1] == json.loads(get(fresh, "health", run="live", tag=tag)[1])
    assert answers[-1]["last_steps"][-1] == 299 and answers[1]["last_steps"][-1] == 119


def test_a_status_table_extended_in_pieces_says_what_the_whole_run_says():
    """``health.StatusTable`` extended a few steps at a time gives the health
    answer of all the steps at once: NaN, +Inf, None and all-zero gradients
    at random steps and variables, a max |g| that is +Inf, bucket edges."""
    import numpy as np

    from tb_gradlens.serving import health

    rng = np.random.default_rng(7)
    n_steps, n_rows = 600, 9
    columns = {c: rng.uniform(0.0, 0.5, (n_steps, n_rows)).astype(np.float32) for c in health.COLUMNS}
    for c in ("nan_count", "posinf_count", "neginf_count", "is_none"):
        columns[c][:] = 0
    for c, value in (("nan_count", 3), ("posinf_count", 1), ("is_none", 1), ("zero_fraction", 1), ("max_abs", np.inf)):
        columns[c][rng.integers(0, n_steps, 12), rng.integers(0, n_rows, 12)] = value
    steps, wall_times = np.arange(n_steps, dtype=np.int64) * 5 + 2, np.arange(n_steps, dtype=np.float64)
    table, end = health.StatusTable(n_rows), 0
    for end in (0, 1, 2, 64, 65, 300, 599, 600):
        assert table.follows(steps[:end], wall_times[:end])
        table.extend(steps[:end], wall_times[:end], {c: v[:end] for c, v in columns.items()})
        for buckets in (1, 7, 1000):
            want = health.gradient_health(steps[:end], {c: v[:end] for c, v in columns.items()}, buckets)
            assert gradlens_plugin.encode_json(table.answer(buckets)) == gradlens_plugin.encode_json(want)
    assert table.computed == n_steps
    assert table.follows(np.append(steps, 10**6), np.append(wall_times, 1e9))
    assert not table.follows(np.append(steps + 1, 10**6), np.append(wall_times, 1e9))  # other steps: a new table


def test_clients_of_one_version_share_one_answer(tmp_path, monkeypatch):
    """Several clients asking for the same series or health of a live run at
    the same version get one computed answer (computed again when the run
    grows), byte for byte what a plugin that never answered before says;
    a browser's gzip answer is compressed once per version too."""
    import gzip
    from tb_gradlens.serving import routes_impl

    tag, rows = "gradients/grad_stats/live", ["a/kernel", "b/kernel", "c/bias"]
    writer, multiplexer, client, plugin = _live_plugin(tmp_path, tag, rows, range(0, 40))
    calls = {"series": 0, "health": 0}
    for name in calls:
        original = getattr(routes_impl, name + "_impl")

        def counting(*args, _name=name, _original=original):
            calls[_name] += 1
            return _original(*args)
        monkeypatch.setattr(routes_impl, name + "_impl", counting)
    compressions, compress = {"n": 0}, gradlens_plugin._gzip

    def counting_gzip(data):
        compressions["n"] += 1
        return compress(data)
    monkeypatch.setattr(gradlens_plugin, "_gzip", counting_gzip)
    queries = {"series": dict(run="live", tag=tag, columns="mean,max_abs", max_steps=30),
               "health": dict(run="live", tag=tag, buckets=10)}
    for grown in (False, True):
        if grown:
            _append_steps(writer, tag, rows, range(40, 90))
            multiplexer.Reload()
        before = dict(calls)
        bodies = {route: {get(client, route, **query)[1] for _ in range(4)} for route, query in queries.items()}
        assert {k: calls[k] - before[k] for k in calls} == {"series": 1, "health": 1}
        fresh = werkzeug_test.Client(application.TensorBoardWSGI([gradlens_plugin.GradLensPlugin(
            base_plugin.TBContext(data_provider=make_provider(str(tmp_path / "logs"))[1]))]))
        for route, query in queries.items():
            assert bodies[route] == {get(fresh, route, **query)[1]}
        packed = set()  # a browser's requests (gzip): compressed once per version, the same answer
        for _ in range(3):
            response = client.get(PREFIX + "health", query_string=queries["health"],
                                  headers={"Accept-Encoding": "gzip, deflate"})
            assert response.headers.get("Content-Encoding") == "gzip"
            packed.add(response.get_data())
        assert len(packed) == 1 and {gzip.decompress(packed.pop()).decode("utf-8")} == bodies["health"]
        assert compressions["n"] == 1 + grown
    writer.close()
    cache = plugin._cache
    for k in range(50):  # refused requests: none kept, nothing left behind per query
        status, body = get(client, "series", run="live", tag=tag, columns="nope_%d" % k)
        assert status == 400
    assert not cache._computing
    assert len(cache._pools["answers"]._entries) == 3  # series, health and its gzip form


def test_number_parameters_take_plain_ascii_integers_only(tmp_path):
    """As the command line's options: "1_000", " 5", full-width or Arabic-Indic
    digits are a 400, not a number."""
    logdir = str(tmp_path / "logs")
    names_run(logdir, "run_0", count=2)
    client = client_of(logdir)
    for number in ("1_000", " 5", "5 ", "\uff15", "\u0665", "+5", "9" * 5000):
        status, body = get(client, "series", run="run_0", tag="gradients/grad_stats/run_0", max_steps=number)
        assert status == 400 and "plain integer" in body, (number, status, body[:200])
    status, _ = get(client, "series", run="run_0", tag="gradients/grad_stats/run_0", max_steps="2")
    assert status == 200

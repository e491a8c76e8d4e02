"""What the plugin keeps between requests answers as a fresh reader would (issue 43).

Each test reads through one long-lived ``Cache`` while the logdir changes
under it, and compares the answer with that of a reader built afresh on the
same logdir.
"""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from benchmarks import bench_memory

from tb_gradlens import analysis
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.serving import file_identity
from tb_gradlens.serving import reading
from tb_gradlens.serving import routes_impl
from tb_gradlens.writing import summary_ops
from tests.support.plugin_client import RereadProvider
from tests.support.plugin_client import make_provider
from tests.support.plugin_client import plugin_over

REFERENCE = records.variant("float32", "float32", "float32", "float32")
CANDIDATE = records.variant("mixed_bfloat16", "mixed_bfloat16", "bfloat16", "float32")
LAYERS = ["dense", "dense_1", "softmax"]


def _loss_row():
    # reference, candidate, abs_error, rel_error, stable_rel_error, half_batch_rel_error (not measured:
    # the loss is then judged by the rounding scale the model output gives it)
    return np.array([[2.0, 2.0 * (1 + 3e-3), 6e-3, 3e-3, 1e-5, np.nan]], np.float32)


def _activation_rows():
    rows = np.zeros((len(LAYERS), len(metadata.DIVERGENCE_COLUMNS)), np.float32)
    rows[:, 0] = [2e-2, 3e-2, 4e-2]  # rel_l2
    rows[:, metadata.DIVERGENCE_COLUMNS.index(metadata.STABLE_REL_L2)] = [1e-2, 1.5e-2, 2e-2]  # the output's: 2e-2, above a rounding
    rows[:, metadata.DIVERGENCE_COLUMNS.index(metadata.HALF_BATCH_REL_L2)] = np.nan
    return rows


def test_a_loss_limit_read_before_its_steps_activation_record_is_judged_again_after_it(tmp_path):
    """The callback writes a comparison step's loss record, then its layer outputs'.  A loss limit
    read in between (measured without the model output's stable divergence) must not be kept
    once the activation record of the same step arrives: it is keyed by both records' versions."""
    logdir = str(tmp_path)
    extras = records.comparison_extras(REFERENCE, CANDIDATE)
    loss_record = metadata.RecordMetadata(metadata.LOSS_COMPARISON, ["loss"], metadata.LOSS_COMPARISON_COLUMNS,
                                          extras)
    act_record = metadata.RecordMetadata(metadata.ACTIVATION_DIVERGENCE, LAYERS, metadata.DIVERGENCE_COLUMNS,
                                         extras)
    writer = tf.summary.create_file_writer(str(tmp_path / "bf16"))
    with writer.as_default():
        loss_tag = summary_ops.write_record("model_vs_float32", loss_record, tf.constant(_loss_row()), 100)
    writer.flush()
    multiplexer, provider = make_provider(logdir)
    cache = reading.Cache()
    before = routes_impl.limits_impl(reading.Source(provider, cache=cache), "bf16", loss_tag)
    worst_before = analysis.worst_divergence(reading.Source(provider, cache=cache), "bf16")
    with writer.as_default():
        summary_ops.write_record("model_vs_float32", act_record, tf.constant(_activation_rows()), 100)
    writer.close()
    multiplexer.Reload()

    kept = routes_impl.limits_impl(reading.Source(provider, cache=cache), "bf16", loss_tag)
    fresh = routes_impl.limits_impl(reading.Source(make_provider(logdir)[1]), "bf16", loss_tag)
    assert fresh["limits"] != before["limits"]  # the activation record changes the loss's limit
    assert kept == fresh
    worst = analysis.worst_divergence(reading.Source(provider, cache=cache), "bf16")
    assert worst == analysis.worst_divergence(reading.Source(make_provider(logdir)[1]), "bf16") != worst_before
    alerts = analysis.run_alerts(reading.Source(provider, cache=cache))
    assert alerts == analysis.run_alerts(reading.Source(make_provider(logdir)[1]))


def _answers(client, tag):
    """Every route's answer on the run, the lines about changed files left out of ``runs`` and ``alerts``."""
    def get(route, **params):
        response = client.get("/data/plugin/gradlens/" + route, query_string=params)
        assert response.status_code == 200, response.get_data(as_text=True)
        return json.loads(response.get_data(as_text=True))

    runs = get("runs")
    for run in runs["runs"]:
        run["problems"] = [p for p in run["problems"] if "restart TensorBoard" not in p["error"]]
    alerts = get("alerts")
    alerts["errors"] = [e for e in alerts["errors"] if "restart TensorBoard" not in e["error"]]
    return {"runs": runs, "alerts": alerts, "overview": get("overview"),
            "series": get("series", run=RUN, tag=tag), "health": get("health", run=RUN, tag=tag),
            "histograms": get("histograms", run=RUN, tag=next(
                t["tag"] for r in runs["runs"] for t in r["tags"] if t["kind"] == metadata.GRAD_HISTOGRAM)),
            "answers": get("answers")}


RUN = "long"


def _truncate(run_dir):
    path = os.path.join(run_dir, os.listdir(run_dir)[0])
    os.truncate(path, os.path.getsize(path) - 100)  # inside the last record


def _rewrite(run_dir):
    bench_memory.write_run(run_dir, 8, 3, True, seed=1)  # the same steps, wall times and bytes: other values


def _replace(run_dir):
    staging = os.path.join(os.path.dirname(run_dir), "staging", RUN)
    bench_memory.write_run(staging, 10, 3, True, seed=2)
    shutil.rmtree(run_dir)
    os.rename(staging, run_dir)


@pytest.mark.parametrize("change", [_truncate, _rewrite, _replace], ids=["truncated", "rewritten", "replaced"])
def test_a_changed_event_file_is_read_afresh_route_by_route(tmp_path, change):
    """A run read while it grew (so its live tail follows it), then changed on disk: every route
    answers what a plugin built afresh on the logdir answers, and ``runs`` says in one line that
    TensorBoard's own loader may keep what it read, and what to do."""
    logdir, run_dir = str(tmp_path / "logs"), str(tmp_path / "logs" / RUN)
    bench_memory.write_run(run_dir, 5, 3, True)
    provider = RereadProvider(logdir)
    client = plugin_over(provider, logdir)
    tag = next(t["tag"] for r in json.loads(client.get("/data/plugin/gradlens/runs").get_data())["runs"]
               for t in r["tags"] if t["kind"] == metadata.GRAD_STATS)
    _answers(client, tag)
    bench_memory.write_run(run_dir, 8, 3, True)  # grown: the same bytes and three steps more
    provider.reread()
    assert _answers(client, tag) == _answers(plugin_over(RereadProvider(logdir), logdir), tag)

    change(run_dir)
    provider.reread()
    assert _answers(client, tag) == _answers(plugin_over(RereadProvider(logdir), logdir), tag)
    problems = json.loads(client.get("/data/plugin/gradlens/runs").get_data())["runs"][0]["problems"]
    said = [p["error"] for p in problems if "restart TensorBoard" in p["error"]]
    assert len(said) == 1 and said[0].startswith(change.__name__.strip("_").replace("rewrite", "rewritten")
                                                 .replace("replace", "replaced").replace("truncate", "truncated")
                                                 .capitalize())


def test_file_identity_tells_a_grown_file_from_another_one(tmp_path):
    """Grown, and a torn last record cut off (the resilient writer on a full disk), are the file read;
    cut into what was read, rewritten in place, replaced and removed are not."""
    run_dir = str(tmp_path / RUN)
    bench_memory.write_run(run_dir, 8, 3, False)
    path = os.path.join(run_dir, os.listdir(run_dir)[0])
    whole = os.path.getsize(path)
    with open(path, "ab") as f:
        f.write(b"\x10" * 30)  # a torn record being written
    seen = file_identity.identify(path, whole)
    os.truncate(path, whole)
    assert file_identity.change(seen, path) is None
    bench_memory.write_run(run_dir, 12, 3, False)
    assert file_identity.change(seen, path) is None  # grown: the same bytes first
    os.truncate(path, whole - 1)
    assert file_identity.change(seen, path) == "truncated"
    bench_memory.write_run(run_dir, 8, 3, False, seed=1)
    os.utime(path, ns=(seen.mtime_ns + 10**9, seen.mtime_ns + 10**9))  # (a later write; same size)
    assert file_identity.change(seen, path) == "rewritten"
    seen = file_identity.identify(path)
    shutil.copy(path, path + ".new")
    os.replace(path + ".new", path)
    assert file_identity.change(seen, path) == "replaced"
    os.remove(path)
    assert file_identity.change(seen, path) == "removed"

"""The routes the GradLens tab added: the tab's filters on overview/alerts/compare
(filtered_source.py) and the sampled log2 histograms (histograms route).

Same setup as test_plugin_routes.py (tests/support/plugin_client.py): a Werkzeug client on TensorBoardWSGI
with a real data provider over the logdir of gradlens_logs.py, whose answers
are known (a NaN in dense/bias at step 3, frozen's None gradient, rel_l2
0.04 * step on dense/kernel, lost updates on dense/kernel from step 2).
"""

import numpy as np
import pytest

from tests.support import gradlens_logs as logs
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.serving import filtered_source
from tests.support.plugin_client import client, get, get_json, logdir, number, provider, tag_of  # noqa: F401


def test_overview_honours_the_row_regex(client):  # noqa: F811
    everything = {r["run"]: r for r in get_json(client, "overview")["runs"]}["f32"]
    assert everything["first_nonfinite_step"] == logs.NAN_STEP
    frozen = {r["run"]: r for r in get_json(client, "overview", rows="^frozen$")["runs"]}["f32"]
    assert frozen["disconnected_variables"] == ["frozen"]
    assert frozen["first_nonfinite_step"] is None  # the NaN is dense/bias's
    assert frozen["worst_divergence"] is None  # no divergence row matches
    kernel = {r["run"]: r for r in get_json(client, "overview", rows="kernel")["runs"]}["f32"]
    assert kernel["disconnected_variables"] == [] and kernel["first_nonfinite_step"] is None
    worst = kernel["worst_divergence"]
    assert worst["row"] == "dense/kernel" and worst["step"] == logs.F32_STEPS[-1]


def test_overview_and_alerts_honour_the_step_range(client):  # noqa: F811
    before = {r["run"]: r for r in get_json(client, "overview", step_max=logs.NAN_STEP - 1)["runs"]}["f32"]
    assert before["first_nonfinite_step"] is None
    worst = before["worst_divergence"]
    table = np.array([logs.divergence_at(s)[:, 0] for s in range(logs.NAN_STEP)], np.float32)
    assert worst["value"] == pytest.approx(float(table.max()), rel=1e-7) and worst["step"] == logs.NAN_STEP - 1
    # rel_l2 of dense/kernel is 0.04 * step > 0.1 from step 3: from step 4 on, the alert starts at 4.
    alerts = get_json(client, "alerts", run="f32", step_min=4)["alerts"]
    div = next(a for a in alerts if a["code"] == "bf16_divergence")
    assert div["step_first"] == 4 and div["variables"] == ["dense/kernel"]
    assert not [a for a in alerts if a["code"] == "nonfinite"]
    lost = next(a for a in get_json(client, "alerts", run="f32", step_min=3, step_max=4)["alerts"]
                if a["code"] == "lost_update")
    assert (lost["step_first"], lost["step_last"]) == (3, 4)
    # Unfiltered answers are unchanged.
    div_all = next(a for a in get_json(client, "alerts", run="f32")["alerts"] if a["code"] == "bf16_divergence")
    assert div_all["step_first"] == 3


def test_filters_give_400_for_a_bad_regex_or_step(client):  # noqa: F811
    for route, params in (("overview", {"rows": "("}), ("alerts", {"rows": "(["}), ("overview", {"step_min": "x"})):
        status, ctype, body = get(client, route, **params)
        assert status == 400 and ctype.startswith("text/plain"), body


def test_compare_honours_the_step_range(client):  # noqa: F811
    data = get_json(client, "compare", run_a="f32", run_b="bf16", noise_run="noise", kind="scalar", tag="loss",
                    step_min=2, step_max=4)
    assert data["steps"] == [2, 3, 4]
    a = np.array([np.float32(logs.loss_at("f32", s)) for s in (2, 3, 4)], np.float64)
    b = np.array([np.float32(logs.loss_at("bf16", s)) for s in (2, 3, 4)], np.float64)
    np.testing.assert_allclose(data["rel_difference"], (b - a) / np.abs(a), rtol=1e-9)
    assert data["noise"]["steps"] == [2, 3, 4]
    assert data["only_in_b"] == []  # bf16's steps 6 and 7 are outside the range


def test_histograms_route_reads_a_sample_of_steps(client):  # noqa: F811
    tag = tag_of(client, "f32", "grad_histogram")
    full = get_json(client, "series", run="f32", tag=tag, row="dense/bias")
    data = get_json(client, "histograms", run="f32", tag=tag, row="dense/bias", max_steps=3)
    assert data["kind"] == "grad_histogram" and data["rows"] == ["dense/bias"]
    assert data["columns"] == list(metadata.HISTOGRAM_COLUMNS)
    assert len(data["steps"]) == 3 and data["steps"][-1] == logs.F32_STEPS[-1] and data["sampled"] is True
    # Every sampled step holds exactly the logged histogram of that step.
    for s, step in enumerate(data["steps"]):
        i = full["steps"].index(step)
        got = [number(data["values"][c][0][s]) for c in range(len(data["columns"]))]
        want = [number(full["values"][c][0][i]) for c in range(len(full["columns"]))]
        np.testing.assert_array_equal(got, want)
    # dense/bias at the NaN step: one NaN element in the NaN bin.
    everything = get_json(client, "histograms", run="f32", tag=tag, row="dense/bias", max_steps=100)
    assert everything["steps"] == logs.F32_STEPS and everything["sampled"] is False
    nan = data["columns"].index("nan")
    assert number(everything["values"][nan][0][logs.NAN_STEP]) == 1
    ranged = get_json(client, "histograms", run="f32", tag=tag, row="dense/bias", max_steps=100, step_min=2)
    assert ranged["steps"] == logs.F32_STEPS[2:]


def test_histograms_route_errors(client):  # noqa: F811
    stats = tag_of(client, "f32", "grad_stats")
    hist = tag_of(client, "f32", "grad_histogram")
    assert get(client, "histograms", run="f32", tag=stats)[0] == 400
    assert get(client, "histograms", run="nope", tag=hist)[0] == 404
    assert get(client, "histograms", run="f32", tag=hist, row="nope")[0] == 404
    assert get(client, "histograms", run="f32", tag=hist, max_steps=0)[0] == 400
    assert get(client, "histograms", run="f32")[0] == 400


def test_restrict_record_slices_per_row_extras():
    f32 = records.variant("float32", "float32", "float32")
    bf16 = records.variant("mixed_bfloat16", "mixed_bfloat16", "bfloat16")
    record = metadata.RecordMetadata(
        metadata.DIVERGENCE, ["a", "b", "c"], metadata.DIVERGENCE_COLUMNS,
        records.comparison_extras(f32, bf16, row_dtypes=["bfloat16", "float32", "bfloat16"]),
    )
    sliced = filtered_source.restrict_record(record, [1])
    assert sliced.rows == ("b",) and sliced.extras["row_dtypes"] == ["float32"]
    assert records.read_comparison(sliced).row_dtypes == ("float32",)
    assert record.extras["row_dtypes"] == ["bfloat16", "float32", "bfloat16"]  # the original is untouched


def test_health_route_keeps_the_worst_of_each_bucket(client):  # noqa: F811
    tag = tag_of(client, "f32", "grad_stats")
    data = get_json(client, "health", run="f32", tag=tag)
    assert data["rows"] == list(logs.VARIABLES) and data["steps"] == logs.F32_STEPS
    assert data["last_steps"] == logs.F32_STEPS
    kernel, bias, frozen = range(3)
    # dense/bias has a NaN at step 3 only; frozen is None at every step; dense/kernel is never all zero.
    assert data["status"][bias] == [4 if s == logs.NAN_STEP else 1 for s in logs.F32_STEPS]
    assert data["status"][frozen] == [3] * len(logs.F32_STEPS)
    assert data["status"][kernel] == [1] * len(logs.F32_STEPS)
    assert [number(v) for v in data["nonfinite"][bias]] == [1 if s == logs.NAN_STEP else 0 for s in logs.F32_STEPS]
    assert data["first_nonfinite"] == [None, logs.NAN_STEP, None]
    assert data["first_none"] == [None, None, 0] and data["first_dead"] == [None, None, None]
    want = max(np.abs(logs.gradients_at("f32", s)[0]).max() for s in logs.F32_STEPS)
    assert data["max_abs"][kernel] == pytest.approx(float(want), rel=1e-6) and data["max_abs"][frozen] is None
    # Two buckets of three steps: the NaN at step 3 is kept in the second, never thinned away.
    two = get_json(client, "health", run="f32", tag=tag, buckets=2)
    assert two["steps"] == [0, 3] and two["last_steps"] == [2, 5]
    assert two["status"][bias] == [1, 4] and [number(v) for v in two["nonfinite"][bias]] == [0, 1]
    ranged = get_json(client, "health", run="f32", tag=tag, rows="bias", step_min=4)
    assert ranged["rows"] == ["dense/bias"] and ranged["steps"] == [4, 5] and ranged["first_nonfinite"] == [None]


def test_health_route_errors(client):  # noqa: F811
    stats = tag_of(client, "f32", "grad_stats")
    assert get(client, "health", run="f32", tag=tag_of(client, "f32", "divergence"))[0] == 400
    assert get(client, "health", run="f32", tag=stats, buckets=0)[0] == 400
    assert get(client, "health", run="f32", tag=stats, rows="(")[0] == 400
    assert get(client, "health", run="nope", tag=stats)[0] == 404
    assert get(client, "health", run="f32", tag=stats, row="nope")[0] == 404


def test_concurrent_cache_misses_compute_once():
    """The tab asks for overview and alerts at once: a cold record is read once, not per request."""
    import threading
    import time

    from tb_gradlens.serving import reading

    cache = reading.Cache()
    calls = []

    def compute():
        calls.append(1)
        time.sleep(0.2)
        return np.zeros(3)

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("k", 1, compute))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(results) == 4
    assert cache.get("k", 2, compute) is not results[0] and len(calls) == 2  # a new version is computed again

"""Bad logs beside good runs: the routes and the command line keep serving
everything readable and report each bad record as an error entry, never a 500.

The logdir (tests/bad_logs.py) holds a good run, a run with one tag of each
kind of bad record, a run that is NaN/Inf everywhere, a file of garbage bytes
and an event file cut in the middle of a record (being written).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

import bad_logs
from tb_server import TensorBoardProcess
from test_gradient_stats import assert_stats_match
from test_gradient_stats import reference_statistics
from test_plugin_routes import PREFIX
from test_plugin_routes import make_provider
from test_plugin_routes import number
from tb_gradlens import gradlens_plugin
from tb_gradlens import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUTES = ("runs", "alerts", "overview")


@pytest.fixture(scope="module")
def bad_logdir(tmp_path_factory):
    logdir, truncated_path, full_bytes = bad_logs.write_logdir(str(tmp_path_factory.mktemp("bad") / "logs"))
    return logdir, truncated_path, full_bytes


def client_for(logdir):
    multiplexer, provider = make_provider(logdir)
    context = base_plugin.TBContext(data_provider=provider, logdir=logdir)
    return multiplexer, werkzeug_test.Client(application.TensorBoardWSGI([gradlens_plugin.GradLensPlugin(context)]))


def get(client, route, **params):
    r = client.get(PREFIX + route, query_string=params)
    return r.status_code, r.headers.get("Content-Type", ""), r.get_data(as_text=True)


def get_json(client, route, **params):
    status, ctype, body = get(client, route, **params)
    assert status == 200, body
    assert ctype.startswith("application/json")
    return json.loads(body)


def by_run(runs_json):
    return {r["run"]: {t["tag"]: t for t in r["tags"]} for r in runs_json["runs"]}


def stats_tag(tags):
    return next(t for t, v in tags.items() if v["kind"] == metadata.GRAD_STATS and t.startswith("gradients/"))


def test_every_bad_record_is_an_error_entry_and_the_rest_is_served(bad_logdir):
    logdir, _, _ = bad_logdir
    _, client = client_for(logdir)
    runs = by_run(get_json(client, "runs"))
    assert sorted(runs) == ["bad", "good", "nonfinite", "truncated"]  # garbage holds nothing
    bad = runs["bad"]
    # Metadata errors are listed by `runs`; tensor errors by the routes that read them.
    for tag, why in bad_logs.BAD_TAGS.items():
        status, ctype, body = get(client, "series", run="bad", tag=tag)
        assert status == 400 and ctype.startswith("text/plain") and why in body, (tag, body)
        if bad[tag]["kind"] is None:
            assert why in bad[tag]["error"]
    errors = get_json(client, "alerts")["errors"]
    assert sorted(e["tag"] for e in errors) == sorted(bad_logs.BAD_TAGS)
    for e in errors:
        assert e["run"] == "bad" and bad_logs.BAD_TAGS[e["tag"]] in e["error"]
    # The healthy tag beside them is read in full.
    healthy = get_json(client, "series", run="bad", tag=stats_tag(bad))
    assert healthy["rows"] == ["healthy"] and healthy["steps"] == list(range(bad_logs.STEPS))
    # The good run: every value equals float64 NumPy.
    good = get_json(client, "series", run="good", tag=stats_tag(runs["good"]))
    for s, step in enumerate(good["steps"]):
        for r, grad in enumerate(bad_logs.good_grads(step)):
            got = [number(good["values"][c][r][s]) for c in range(len(good["columns"]))]
            assert_stats_match(got, reference_statistics(grad))
    # A dtype map that is not JSON is an error entry among the readable maps.
    maps = get_json(client, "dtypes", run="bad")["maps"]
    assert [m["step"] for m in maps] == list(range(bad_logs.STEPS))
    assert "unreadable dtype map at step 1" in maps[1]["error"] and maps[1]["map"] is None
    assert maps[0]["map"] == {"layers": [], "variables": [], "model_output_dtype": "float32"}
    headlines = {h["run"]: h for h in get_json(client, "overview")["runs"]}
    assert headlines["bad"]["alert_counts"] == {"error": 0, "warning": 0, "info": 0}


def test_nan_and_inf_everywhere_travel_as_strings_and_are_analysed(bad_logdir):
    logdir, _, _ = bad_logdir
    _, client = client_for(logdir)
    runs = by_run(get_json(client, "runs"))
    data = get_json(client, "series", run="nonfinite", tag=stats_tag(runs["nonfinite"]))
    cols = data["columns"]
    specials = [np.nan, np.inf, -np.inf]
    for s in range(bad_logs.STEPS):
        kernel = np.full((3, 2), specials[s % 3])
        got = [number(data["values"][c][0][s]) for c in range(len(cols))]
        assert_stats_match(got, reference_statistics(kernel))
    div_tag = next(t for t, v in runs["nonfinite"].items() if v["kind"] == metadata.DIVERGENCE)
    div = get_json(client, "series", run="nonfinite", tag=div_tag, columns="rel_l2")
    assert div["values"][0][0] == ["NaN", "Infinity", "-Infinity", "NaN", "Infinity"]
    scalars = get_json(client, "scalars", run="nonfinite", tag="loss")
    assert scalars["values"] == ["NaN", "Infinity", "-Infinity", "NaN", "Infinity"]
    alerts = get_json(client, "alerts", run="nonfinite")["alerts"]
    nonfinite = [a for a in alerts if a["code"] == "nonfinite" and a["view"]["name"] == "grad_stats"]
    assert nonfinite and nonfinite[0]["step_first"] == 0
    compared = get_json(client, "compare", run_a="good", run_b="nonfinite", tag="loss")
    # NaN and Inf win the run comparison (issue 14): B is NaN from its first step.
    assert compared["b"] == scalars["values"] and compared["summary"]["max_abs_rel_difference"] == "NaN"
    assert compared["summary"]["verdict"] == "run B is NaN from step 0"
    headline = {h["run"]: h for h in get_json(client, "overview")["runs"]}["nonfinite"]
    assert headline["first_nonfinite_step"] == 0


def test_a_file_being_written_is_served_up_to_its_last_whole_record(bad_logdir, tmp_path):
    logdir, truncated_path, full_bytes = bad_logdir
    multiplexer, client = client_for(logdir)
    cut = get_json(client, "scalars", run="truncated", tag="loss")
    assert cut["steps"] == [0, 1, 2, 3]  # the cut record (loss at step 4) is not read
    # The writer finishes the record: the next reload serves it, nothing was lost.
    with open(truncated_path, "wb") as f:
        f.write(full_bytes)
    multiplexer.Reload()
    whole = get_json(client, "scalars", run="truncated", tag="loss")
    assert whole["steps"] == [0, 1, 2, 3, 4]
    np.testing.assert_allclose(whole["values"], [1.0 / (s + 1) for s in range(5)], rtol=1e-7)
    # (restore the cut for the other tests of this module)
    with open(truncated_path, "wb") as f:
        f.write(full_bytes[: len(full_bytes) - 37])


def test_rust_data_server_serves_the_bad_logdir_without_500(bad_logdir):
    logdir, _, _ = bad_logdir
    with TensorBoardProcess(logdir, load_fast=True) as tb:
        data = tb.wait_for(lambda d: {"good", "bad", "nonfinite"} <= {r["run"] for r in d.get("runs", [])},
                           PREFIX + "runs", timeout=90)
        bad = by_run(data)["bad"]
        assert {t for t, v in bad.items() if v["kind"] is None} == {
            t for t in bad_logs.BAD_TAGS if t != "bad/shape_mismatch/0" and t != "bad/string_tensor/0"
        }
        for route in ROUTES:
            status, _, body = tb.get(PREFIX + route)
            assert status == 200, (route, body[:300])
        errors = json.loads(tb.get(PREFIX + "alerts")[2])["errors"]
        assert sorted(e["tag"] for e in errors) == sorted(bad_logs.BAD_TAGS)
        for tag in bad_logs.BAD_TAGS:
            status, _, _ = tb.get(PREFIX + "series?run=bad&tag=" + tag)
            assert status == 400


def test_cli_report_lists_bad_records_and_damaged_files(bad_logdir):
    logdir, truncated_path, _ = bad_logdir
    result = subprocess.run(
        [sys.executable, "-m", "tb_gradlens", "report", logdir, "--json"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert result.returncode in (0, 1), result.stderr  # 1: the nonfinite run has error alerts
    report = json.loads(result.stdout)
    assert sorted(e["tag"] for e in report["errors"]) == sorted(bad_logs.BAD_TAGS)
    assert {r["run"] for r in report["runs"]} == {"bad", "good", "nonfinite", "truncated"}
    assert "garbage" in result.stderr and truncated_path in result.stderr
    text = subprocess.run(
        [sys.executable, "-m", "tb_gradlens", "report", logdir],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    for tag in bad_logs.BAD_TAGS:
        assert "tag %s:" % tag in text.stdout

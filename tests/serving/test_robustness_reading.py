"""Bad logs beside good runs: the routes and the command line keep serving
everything readable and report each bad record as an error entry, never a 500.

The logdir (tests/support/bad_logs.py) holds a good run, a run with one tag of each
kind of bad record, a run that is NaN/Inf everywhere, a file of garbage bytes
and an event file cut in the middle of a record (being written).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.support import bad_logs
from tests.support.tb_server import TensorBoardProcess
from tests.support.gradient_reference import assert_stats_match
from tests.support.gradient_reference import reference_statistics
from tests.support.plugin_client import PREFIX
from tests.support.plugin_client import client_for
from tests.support.plugin_client import get
from tests.support.plugin_client import get_json
from tests.support.plugin_client import number
from tb_gradlens import metadata

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUTES = ("runs", "alerts", "overview")


@pytest.fixture(scope="module")
def bad_logdir(tmp_path_factory):
    logdir, truncated_path, full_bytes = bad_logs.write_logdir(str(tmp_path_factory.mktemp("bad") / "logs"))
    return logdir, truncated_path, full_bytes


def by_run(runs_json):
    return {r["run"]: {t["tag"]: t for t in r["tags"]} for r in runs_json["runs"]}


def tag_of_kind(tags, kind):
    return next(t for t, v in tags.items() if v["kind"] == kind)


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
    record_errors = [e for e in errors if e["tag"] is not None]
    dtypes_tag = tag_of_kind(runs["bad"], metadata.DTYPES)
    assert sorted(e["tag"] for e in record_errors) == sorted(list(bad_logs.BAD_TAGS) + [dtypes_tag])
    for e in record_errors:
        assert e["run"] == "bad"
        assert (bad_logs.BAD_TAGS[e["tag"]] if e["tag"] != dtypes_tag else "unreadable dtype map at step 1") in e["error"]
    # The damaged files are named (the garbage file, the file cut in the middle of a record).
    assert {e["run"] for e in errors if e["tag"] is None} <= {"garbage", "truncated"}
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


@pytest.mark.slow
@pytest.mark.tensorboard
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
        record_errors = sorted(e["tag"] for e in errors if e["tag"] is not None)
        assert record_errors == sorted(list(bad_logs.BAD_TAGS) + [tag_of_kind(bad, metadata.DTYPES)])
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
    record_errors = sorted(e["tag"] for e in report["errors"] if e["tag"] is not None)
    assert [t for t in record_errors if t in bad_logs.BAD_TAGS] == sorted(bad_logs.BAD_TAGS)
    assert [t for t in record_errors if t not in bad_logs.BAD_TAGS] == ["model/dtypes/" + t.split("/")[-1]
                                                                         for t in record_errors
                                                                         if t.startswith("model/dtypes/")]
    assert {e["file"] for e in report["errors"] if e["tag"] is None} == {
        os.path.join(logdir, "garbage", "events.out.tfevents.1.garbage"), truncated_path}
    assert {r["run"] for r in report["runs"]} == {"bad", "good", "nonfinite", "truncated"}
    assert "garbage" in result.stderr and truncated_path in result.stderr
    text = subprocess.run(
        [sys.executable, "-m", "tb_gradlens", "report", logdir],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    for tag in bad_logs.BAD_TAGS:
        assert "tag %s:" % tag in text.stdout


# ---------------------------------------------------------------------------
# Faults of the adversarial pass (issue 16): malformed records, damaged files,
# two writers, symlink loops, unreadable directories, crashes vs findings.
# ---------------------------------------------------------------------------


def cli(*args, timeout=300, **kwargs):
    return subprocess.run([sys.executable, "-m", "tb_gradlens"] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, **kwargs)


@pytest.fixture(scope="module")
def hostile_logdir(tmp_path_factory):
    """MALFORMED runs beside a good one, a file with one flipped byte and a run of two writers."""
    from tests.support import hostile_logs

    logdir = str(tmp_path_factory.mktemp("hostile") / "logs")
    hostile_logs.write_malformed(logdir)
    flipped, _ = hostile_logs.flipped_run(os.path.join(logdir, "flipped"))
    first, second = hostile_logs.two_writers_run(os.path.join(logdir, "two_writers"))
    return logdir, flipped, (first, second)


def test_one_malformed_record_is_an_error_entry_and_the_logdir_is_served(hostile_logdir):
    from tests.support import hostile_logs

    logdir, _, _ = hostile_logdir
    _, client = client_for(logdir)
    runs = by_run(get_json(client, "runs"))
    assert set(hostile_logs.MALFORMED) | {"good"} <= set(runs)
    alerts = get_json(client, "alerts")
    errors = {(e["run"], e["tag"]): e["error"] for e in alerts["errors"]}
    nonfinite = {a["run"] for a in alerts["alerts"] if a["code"] == "nonfinite"}
    for run, (what, items) in hostile_logs.MALFORMED.items():
        bad_tag = items[0][0]
        assert (run, bad_tag) in errors, (run, what, alerts["errors"])
        assert "gradlens record" in errors[(run, bad_tag)] or "unreadable" in errors[(run, bad_tag)]
        # The healthy tag beside it is analysed: its NaN at step 1 is an alert.
        assert run in nonfinite, (run, what)
        assert get_json(client, "alerts", run=run)["errors"], run
        status, ctype, _ = get(client, "series", run=run, tag=bad_tag)
        assert status == 400 and ctype.startswith("text/plain"), (run, status)
    headlines = {h["run"]: h for h in get_json(client, "overview")["runs"]}
    assert all(headlines[run]["first_nonfinite_step"] == 1 for run in hostile_logs.MALFORMED)
    for run in ("dtypes_layers_not_list", "dtypes_deep_json", "dtypes_not_utf8"):
        maps = get_json(client, "dtypes", run=run)["maps"]
        assert [m["map"] for m in maps] == [None] * hostile_logs.STEPS and all("error" in m for m in maps)


def test_damaged_files_and_two_writers_are_named_by_the_routes(hostile_logdir):
    logdir, flipped, (first, second) = hostile_logdir
    _, client = client_for(logdir)
    runs = {r["run"]: r for r in get_json(client, "runs")["runs"]}
    (damage,) = runs["flipped"]["problems"]
    assert damage["file"] == os.path.relpath(flipped, logdir)
    assert "data checksum mismatch" in damage["error"] and "steps 10-19" in damage["error"]
    (overlap,) = runs["two_writers"]["problems"]
    assert os.path.basename(first) in overlap["error"] and os.path.basename(second) in overlap["error"]
    assert "both hold steps 5-9" in overlap["error"]
    assert runs["good"]["problems"] == []
    errors = get_json(client, "alerts")["errors"]
    files = {(e["run"], e["file"]) for e in errors if e["tag"] is None}
    assert ("flipped", damage["file"]) in files and ("two_writers", overlap["file"]) in files
    assert [e["run"] for e in get_json(client, "alerts", run="flipped")["errors"]] == ["flipped"]


@pytest.mark.slow
def test_cli_reports_damage_two_writers_and_malformed_records_without_a_traceback(hostile_logdir):
    from tests.support import hostile_logs

    logdir, flipped, (first, _) = hostile_logdir
    for args in ([], ["--json"], ["--run", "^good$"], ["--fail-on", "error"]):
        result = cli("report", logdir, "-q", *args)
        assert "Traceback" not in result.stderr, result.stderr[-2000:]
        assert result.returncode == (1 if "--fail-on" in args else 0), (args, result.stderr[-1000:])
        if "--run" in args:  # only the runs it names are read (issue 31)
            assert flipped not in result.stderr and "two_writers" not in result.stderr
            continue
        assert flipped in result.stderr and "data checksum mismatch" in result.stderr
        assert os.path.basename(first) in result.stderr and "run two_writers: event files" in result.stderr
        assert "both hold steps 5-9" in result.stderr
    report = json.loads(cli("report", logdir, "-q", "--json").stdout)
    tags = {(e["run"], e["tag"]) for e in report["errors"]}
    for run, (_, items) in hostile_logs.MALFORMED.items():
        assert (run, items[0][0]) in tags, run
    assert {e["run"] for e in report["errors"] if e["tag"] is None} == {"flipped", "two_writers"}
    alone = json.loads(cli("report", logdir, "-q", "--json", "--run", "^good$").stdout)
    assert [r["run"] for r in alone["runs"]] == ["good"] and alone["errors"] == []
    exported = cli("export", logdir, "-q")
    assert exported.returncode == 0 and "Traceback" not in exported.stderr


def test_cli_skips_a_symlink_loop_with_a_message(tmp_path):
    from tests.support import hostile_logs

    logdir = tmp_path / "logs"
    hostile_logs.stats_run(str(logdir / "run"), range(3))
    os.symlink("../run", str(logdir / "run" / "up"))  # run/up -> run: a loop
    os.symlink(str(logdir), str(logdir / "run" / "root"))  # and one back to the logdir
    result = cli("report", str(logdir), "-q", "--json", timeout=120)  # was > 10 min and 1.9 GB
    assert result.returncode == 0, result.stderr
    assert [r["run"] for r in json.loads(result.stdout)["runs"]] == ["run"]
    assert "symbolic link loop" in result.stderr and "run/up" in result.stderr


def _without_read_override():
    """A command prefix under which permissions apply (root reads any directory:
    setpriv drops CAP_DAC_OVERRIDE/CAP_DAC_READ_SEARCH), or None."""
    if os.geteuid() != 0:
        return []
    import shutil

    setpriv = shutil.which("setpriv")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search"] if setpriv else None


def test_cli_skips_an_unreadable_directory_with_a_message(tmp_path):
    from tests.support import hostile_logs

    prefix = _without_read_override()
    if prefix is None:
        pytest.skip("running as root without setpriv: no directory is unreadable")
    logdir = tmp_path / "logs"
    hostile_logs.stats_run(str(logdir / "readable"), range(3))
    hostile_logs.stats_run(str(logdir / "locked" / "inner"), range(3))
    unreadable = hostile_logs.stats_run(str(logdir / "unreadable_file"), range(3))
    os.chmod(str(logdir / "locked"), 0o000)
    os.chmod(unreadable, 0o000)
    try:
        result = subprocess.run(prefix + [sys.executable, "-m", "tb_gradlens", "report", str(logdir), "-q", "--json"],
                                capture_output=True, text=True, timeout=300, cwd=ROOT)
    finally:
        os.chmod(str(logdir / "locked"), 0o755)
        os.chmod(unreadable, 0o644)
    assert unreadable + ": cannot be read (Permission denied)" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.returncode == 0, result.stderr
    assert [r["run"] for r in json.loads(result.stdout)["runs"]] == ["readable"]
    assert "skipped directory" in result.stderr and "locked" in result.stderr and "Permission denied" in result.stderr


def test_a_crash_is_exit_4_in_one_line_never_exit_1(hostile_logdir):
    logdir, _, _ = hostile_logdir
    code = ("import sys; from tb_gradlens import analysis, cli\n"
            "def boom(*a, **k): raise KeyError('simulated bug')\n"
            "analysis.overview = boom\n"
            "sys.exit(cli.main(['report', %r, '-q', '--fail-on', 'error']))" % logdir)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 4, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert "internal error (KeyError: 'simulated bug')" in result.stderr
    debug = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                           env=dict(os.environ, TB_GRADLENS_DEBUG="1"))
    assert debug.returncode == 4 and "Traceback" in debug.stderr


@pytest.mark.slow
@pytest.mark.tensorboard
@pytest.mark.parametrize("load_fast", [False, True], ids=["python_loader", "rust_data_server"])
def test_real_tensorboard_names_damage_and_serves_the_malformed_logdir(hostile_logdir, load_fast):
    from tests.support import hostile_logs

    logdir, flipped, _ = hostile_logdir
    expected = set(hostile_logs.MALFORMED) - {"metadata_deep_json"} | {"good", "flipped", "two_writers"}
    with TensorBoardProcess(logdir, load_fast=load_fast) as tb:
        data = tb.wait_for(lambda d: expected <= {r["run"] for r in d.get("runs", [])}, PREFIX + "runs", timeout=120)
        runs = {r["run"]: r for r in data["runs"]}
        assert "data checksum mismatch" in runs["flipped"]["problems"][0]["error"]
        assert "both hold steps 5-9" in runs["two_writers"]["problems"][0]["error"]
        for route in ROUTES:
            status, _, body = tb.get(PREFIX + route)
            assert status == 200, (route, body[:300])
        alerts = json.loads(tb.get(PREFIX + "alerts")[2])
        tags = {(e["run"], e["tag"]) for e in alerts["errors"]}
        for run, (_, items) in hostile_logs.MALFORMED.items():
            if run in runs:
                assert (run, items[0][0]) in tags, run
        assert {e["run"] for e in alerts["errors"] if e["tag"] is None} == {"flipped", "two_writers"}

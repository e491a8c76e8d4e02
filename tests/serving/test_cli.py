"""The tb-gradlens console script, run for real in a subprocess."""

import csv
import io
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tb_gradlens import metadata
from tb_gradlens import summary
from tests.support.cli_logs import HOSTILE
from tests.support.cli_logs import NAN_STEP
from tests.support.cli_logs import STEPS
from tests.support.cli_logs import run_cli
from tests.support.cli_logs import step_gradients

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def logdir(cli_logdir):
    return cli_logdir  # conftest.py: write_training_logdir's, written once per session


def test_help_on_every_command_has_examples():
    for command in ([], ["report"], ["compare"], ["export"], ["demo"]):
        result = run_cli(*(command + ["--help"]))
        assert result.returncode == 0, result.stderr
        assert "usage: tb-gradlens" in result.stdout
        if command:
            assert "example" in result.stdout


def test_report_names_nan_step_and_fails_on_error(logdir):
    result = run_cli("report", logdir, "--fail-on", "error")
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "run broken" in out and "run healthy" in out
    broken = out[out.index("run broken"):out.index("run healthy")]
    assert "NaN or Inf first at step %d, in dense/bias." % NAN_STEP in broken  # the third answer
    # The hostile name is shown literally, with its escape character neutralised.
    assert "evil\\x1b[31m<img src=x onerror=alert(1)>/kernel" in out
    assert "\x1b" not in out
    assert "ERROR   nonfinite  run broken  steps %d-%d" % (NAN_STEP, NAN_STEP) in out


@pytest.mark.slow
def test_report_exit_codes_by_level_and_run(logdir):
    # The healthy run has only the None-gradient warning.
    assert run_cli("report", logdir, "--run", "^healthy$", "--fail-on", "error").returncode == 0
    assert run_cli("report", logdir, "--run", "^healthy$", "--fail-on", "warning").returncode == 1
    plain = run_cli("report", logdir)
    assert plain.returncode == 0, plain.stderr


def test_report_json_matches_numpy(logdir):
    result = run_cli("report", logdir, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    runs = {r["run"]: r for r in data["runs"]}
    assert runs["broken"]["first_nonfinite_step"] == NAN_STEP
    assert runs["broken"]["first_nonfinite_variables"] == ["dense/bias"]
    assert runs["healthy"]["first_nonfinite_step"] is None
    assert runs["broken"]["disconnected_variables"] == [HOSTILE]
    codes = sorted((a["run"], a["code"]) for a in data["alerts"])
    assert ("broken", "nonfinite") in codes and ("broken", "none_gradient") in codes
    nonfinite = [a for a in data["alerts"] if a["code"] == "nonfinite"]
    assert [(a["step_first"], a["variables"]) for a in nonfinite] == [(NAN_STEP, ["dense/bias"])]


def test_compare_loss_values_against_numpy(logdir):
    result = run_cli("compare", logdir, "healthy", "broken", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    steps = np.arange(STEPS)
    a = (1.0 / (steps + 1)).astype(np.float32).astype(np.float64)
    b = (1.0 / (steps + 1) + 0.01 * steps).astype(np.float32).astype(np.float64)
    assert data["steps"] == steps.tolist()
    np.testing.assert_allclose(data["a"], a, rtol=1e-7)
    np.testing.assert_allclose(data["b"], b, rtol=1e-7)
    np.testing.assert_allclose(data["difference"], b - a, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(data["rel_difference"], (b - a) / np.abs(a), rtol=1e-6, atol=1e-9)
    text = run_cli("compare", logdir, "healthy", "broken")
    assert text.returncode == 0 and "max |(B-A)/|A||" in text.stdout


def test_compare_a_statistic_with_noise_floor(logdir):
    result = run_cli(
        "compare", logdir, "healthy", "broken", "--noise-floor", "healthy",
        "--kind", "grad_stats", "--row", "dense/kernel", "--column", "l2_norm", "--json",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    norms = [np.sqrt(np.sum(step_gradients(s)[0].astype(np.float64) ** 2)) for s in range(STEPS)]
    np.testing.assert_allclose(data["a"], norms, rtol=1e-6)
    np.testing.assert_allclose(data["b"], norms, rtol=1e-6)
    assert data["summary"]["max_abs_rel_difference"] == 0.0
    assert data["summary"]["exceeds_noise"] is None  # 10 steps: too few for the verdict's windows


def test_compare_unknown_run_and_bad_quantity(logdir):
    missing = run_cli("compare", logdir, "healthy", "nope")
    assert missing.returncode == 3 and "nope" in missing.stderr
    bad = run_cli("compare", logdir, "healthy", "broken", "--kind", "grad_stats", "--row", "dense/kernel",
                  "--column", "no_such_column")
    assert bad.returncode == 2 and "no_such_column" in bad.stderr


def test_export_csv_long_format_read_by_pandas(logdir, tmp_path):
    import pandas as pd  # in the test extra: a missing pandas fails, never skips
    out = tmp_path / "export.csv"
    result = run_cli("export", logdir, "--format", "csv", "--kind", "grad_stats", "-o", out)
    assert result.returncode == 0, result.stderr
    df = pd.read_csv(out)
    assert list(df.columns) == ["run", "tag", "kind", "step", "wall_time", "row", "column", "value"]
    n_cols = len(metadata.GRAD_STATS_COLUMNS)
    assert len(df) == 2 * STEPS * 3 * n_cols
    sel = df[(df.run == "broken") & (df.row == "dense/kernel") & (df.column == "l2_norm")].sort_values("step")
    expected = [np.sqrt(np.sum(step_gradients(s)[0].astype(np.float64) ** 2)) for s in range(STEPS)]
    np.testing.assert_allclose(sel.value.to_numpy(), expected, rtol=1e-6)
    nan_row = df[(df.run == "broken") & (df.row == "dense/bias") & (df.column == "nan_count")]
    assert nan_row.set_index("step").value.to_dict() == {s: float(s == NAN_STEP) for s in range(STEPS)}
    hostile = df[(df.row == HOSTILE) & (df.column == "is_none")]
    assert len(hostile) == 2 * STEPS and (hostile.value == 1.0).all()


def test_export_json_lines_read_by_pandas(logdir):
    import pandas as pd  # in the test extra: a missing pandas fails, never skips
    result = run_cli("export", logdir, "--format", "json", "--run", "^broken$")
    assert result.returncode == 0, result.stderr
    df = pd.read_json(io.StringIO(result.stdout), lines=True)
    assert set(df.run) == {"broken"} and set(df.kind) == {"grad_stats"}  # histograms only by --kind (issue 40)
    mean = df[(df.kind == "grad_stats") & (df.row == "dense/bias") & (df.column == "mean")]
    mean = mean.set_index("step").value
    assert mean[NAN_STEP] == 0.5  # statistics over the finite elements [0.5, NaN]
    assert mean[0] == 0.0
    none_mean = df[(df.kind == "grad_stats") & (df.row == HOSTILE) & (df.column == "mean")]
    assert len(none_mean) == STEPS and none_mean.value.isna().all()  # NaN travels as NaN


def test_missing_and_empty_logdir_are_clear_errors(tmp_path):
    missing = run_cli("report", tmp_path / "nope")
    assert missing.returncode == 3 and "does not exist" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = run_cli("report", tmp_path / "empty")
    assert empty.returncode == 3 and "no TensorBoard event files" in empty.stderr
    usage = run_cli("report")
    assert usage.returncode == 2


def test_corrupted_and_truncated_files_are_skipped_with_a_warning(logdir, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(logdir, damaged)
    garbage = damaged / "garbage" / "events.out.tfevents.0.garbage"
    garbage.parent.mkdir()
    garbage.write_bytes(os.urandom(4096))
    (healthy_file,) = list((damaged / "healthy").iterdir())
    data = healthy_file.read_bytes()
    healthy_file.write_bytes(data[: len(data) * 2 // 3])
    result = run_cli("report", damaged, "--json")
    assert result.returncode == 0, result.stderr
    assert "skipped damaged event file" in result.stderr
    assert str(garbage) in result.stderr and str(healthy_file) in result.stderr
    assert "truncated" in result.stderr
    report = json.loads(result.stdout)
    runs = {r["run"]: r for r in report["runs"]}
    assert runs["broken"]["first_nonfinite_step"] == NAN_STEP  # the rest is still reported
    assert "healthy" in runs


def test_python_dash_m_runs_the_same_command(logdir):
    result = run_cli("report", logdir, "--json", script=[sys.executable, "-m", "tb_gradlens"])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["runs"]


def test_read_commands_do_not_import_tensorflow(logdir):
    code = (
        "import sys; from tb_gradlens import cli; rc = cli.main(['report', %r, '-q']);"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'; sys.exit(rc)" % logdir
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def write_lens_logdir(logdir):
    """Run 'lstm': its writer asked for gradients every 2 steps and comparisons,
    could not compare (unsupported), and the gradient record of step 4 is missing.
    Run 'complete': everything it asked for is there."""
    from tb_gradlens import records

    variable = tf.Variable([1.0, 2.0], name="w")
    for run, steps, unsupported in (
        ("lstm", (0, 2, 6), [records.unsupported(
            "comparison float32", ["divergence"], "a tensor from inside the LSTM's while loop", 0)]),
        ("complete", (0, 2, 4, 6), []),
    ):
        expected = [records.expectation("grad_stats", "model", every=2)]
        writer = tf.summary.create_file_writer(os.path.join(logdir, run))
        with writer.as_default():
            summary.lens_status(records.lens_status("GradLensCallback", expected, unsupported), step=0)
            for step in steps:
                summary.gradients([tf.ones([2])], [variable], step=step, name="model", histogram=False)
                tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
        writer.close()
    return logdir


@pytest.mark.slow
def test_report_lists_unsupported_features_and_fails_a_run_lacking_records(tmp_path):
    logdir = write_lens_logdir(str(tmp_path / "logs"))
    plain = run_cli("report", logdir)
    assert plain.returncode == 0, plain.stderr  # no --fail-on: a report, not a gate
    lstm = plain.stdout[plain.stdout.index("run lstm"):]
    assert "unsupported: comparison float32 (divergence) since step 0: a tensor from inside the LSTM's " \
           "while loop" in lstm
    assert "MISSING: grad_stats records under model: 1 of 4 expected steps (every 2), first missing step 4" in lstm
    gate = run_cli("report", logdir, "--fail-on", "error")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "0 alert(s) at or above error" in gate.stdout
    assert "1 run(s) lack records their writers asked for (lstm): failing" in gate.stdout
    complete = run_cli("report", logdir, "--run", "^complete$", "--fail-on", "error")
    assert complete.returncode == 0, complete.stdout
    data = json.loads(run_cli("report", logdir, "--json", "--fail-on", "warning").stdout)
    assert data["runs_missing_records"] == ["lstm"]
    runs = {r["run"]: r for r in data["runs"]}
    assert runs["lstm"]["lens"]["missing"][0]["first_missing_step"] == 4
    assert runs["complete"]["lens"] == {"statuses": 1, "unsupported": [], "missing": [], "errors": []}


def test_compare_without_a_loss_scalar_says_what_it_compares_instead(tmp_path):
    from tb_gradlens import records
    from tb_gradlens.writing import summary_ops

    ref = records.variant("float32", "float32", "float32", "float32")
    cand = records.variant("mixed_bfloat16", "mixed_bfloat16", "bfloat16", "float32")
    record = metadata.RecordMetadata(metadata.LOSS_COMPARISON, ["loss"], metadata.LOSS_COMPARISON_COLUMNS_V1,
                                     records.comparison_extras(ref, cand), version=1)
    for run, scale in (("a", 1.0), ("b", 1.1)):
        writer = tf.summary.create_file_writer(str(tmp_path / run))
        with writer.as_default():
            for step in range(3):
                loss = scale / (step + 1)
                summary_ops.write_record("model_vs_float32", record,
                                        tf.constant([[loss, loss, 0.0, 0.0]], tf.float32), step)
        writer.close()
    result = run_cli("compare", tmp_path, "a", "b")
    assert result.returncode == 0, result.stderr
    assert "note: run 'a', 'b' has no 'loss' scalar: comparing the training loss" in result.stderr
    assert "compare loss_comparison candidate of loss" in result.stdout
    assert "verdict: max |(B-A)/|A|| 0.1 at step 0 (no noise-floor run" in result.stdout
    accuracy_only = run_cli("compare", tmp_path, "a", "b", "--tag", "accuracy")
    assert accuracy_only.returncode == 3 and "no scalar tag 'accuracy'" in accuracy_only.stderr


def _loss_runs(logdir, runs):
    import tensorflow as tf

    for run, values in runs.items():
        with tf.summary.create_file_writer(str(logdir / run)).as_default():
            for step, value in enumerate(values):
                tf.summary.scalar("loss", float(value), step=step)


@pytest.mark.slow
def test_compare_fails_on_beyond_noise_as_a_ci_gate(tmp_path):
    """Issue 25: `compare --fail-on beyond-noise` exits 1 only when B drifts beyond the noise
    floor for several windows of steps; one wild step alone is no verdict."""
    rng = np.random.default_rng(0)
    steps = np.arange(60)
    a = 2.0 / (1.0 + 0.1 * steps)
    noisy = lambda: a * (1.0 + 0.01 * rng.normal(size=60))  # noqa: E731
    spiked = noisy()
    spiked[30] *= 1.5
    _loss_runs(tmp_path, {"a": a, "noise": noisy(), "same": spiked, "drift": a * (1.0 + 0.003 * steps)})
    within = run_cli("compare", tmp_path, "a", "same", "--noise-floor", "noise", "--fail-on", "beyond-noise")
    assert within.returncode == 0, within.stderr
    assert "verdict: within the noise floor" in within.stdout
    beyond = run_cli("compare", tmp_path, "a", "drift", "--noise-floor", "noise", "--fail-on", "beyond-noise",
                     "--json")
    assert beyond.returncode == 1, beyond.stderr
    summary = json.loads(beyond.stdout)["summary"]
    assert summary["exceeds_noise"] is True and summary["noise"]["window"] == 10
    assert run_cli("compare", tmp_path, "a", "drift", "--noise-floor", "noise").returncode == 0  # no gate asked
    usage = run_cli("compare", tmp_path, "a", "drift", "--fail-on", "beyond-noise")
    assert usage.returncode == 2 and "--noise-floor" in usage.stderr

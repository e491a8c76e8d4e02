"""The command line as a CI gate, from a newcomer's first run (issue 28, items 7 and 8).

A damaged event file fails ``report --fail-on warning`` (what was not read can
hold any alert); every subcommand's help lists its exit codes; a mistyped run
is "no such run" with the runs the logdir has; the progress bar moves while a
large file is read; a model that trains in float32 (Keras' global policy reset
by ``clear_session``) says why it has no comparison.
"""

import io
import json
import os
import shutil
import sys

import numpy as np
import pytest

from tests.support.cli_logs import run_cli

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/


@pytest.fixture(scope="module")
def logdir(cli_logdir):
    return cli_logdir  # conftest.py: write_training_logdir's, written once per session


def test_every_subcommand_help_lists_its_exit_codes():
    for command in ("report", "compare", "export", "advise", "demo"):
        result = run_cli(command, "--help")
        assert result.returncode == 0, result.stderr
        text = result.stdout
        assert "exit status: 0 " in text, command
        assert ("4 internal error" in text) and ("2 usage" in text), command


@pytest.mark.slow
def test_a_damaged_event_file_fails_the_warning_gate(tmp_path):
    import tensorflow as tf

    from tb_gradlens import summary

    variable = tf.Variable(np.ones((3, 2), np.float32), name="dense/kernel")
    with tf.summary.create_file_writer(str(tmp_path / "clean")).as_default():
        for step in range(10):
            summary.gradients([tf.fill([3, 2], 0.1 * (step + 1))], [variable], step=step)
    assert run_cli("report", tmp_path, "--fail-on", "warning").returncode == 0  # no alert: a pass
    (events,) = list((tmp_path / "clean").iterdir())
    data = bytearray(events.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: half of the run's steps are not read
    events.write_bytes(bytes(data))
    gate = run_cli("report", tmp_path, "--fail-on", "warning")
    assert gate.returncode == 1, gate.stdout + gate.stderr
    assert "skipped damaged event file" in gate.stderr
    assert "0 alert(s) at or above warning" in gate.stdout
    assert "1 event file problem(s) leave steps unread (%s): failing" % events in gate.stdout
    data = json.loads(run_cli("report", tmp_path, "--fail-on", "warning", "--json").stdout)
    assert [p["file"] for p in data["unread_files"]] == [str(events)]
    # The error gate is about errors: a damaged file is a warning.
    assert run_cli("report", tmp_path, "--fail-on", "error").returncode == 0


@pytest.mark.slow
def test_a_mistyped_run_is_no_such_run_with_the_runs_it_knows(logdir):
    for args in (("compare", logdir, "healthy", "nosuch"), ("compare", logdir, "healthy", "broken",
                                                          "--noise-floor", "healthyy")):
        result = run_cli(*args)
        assert result.returncode == 3, result.stderr
        assert "no such run '%s'" % args[-1] in result.stderr
        assert "its runs: broken, healthy" in result.stderr
    report = run_cli("report", logdir, "--run", "^nosuch$")
    assert report.returncode == 3 and "broken, healthy" in report.stderr


class _Terminal(io.StringIO):
    def isatty(self):
        return True


@pytest.mark.slow
def test_the_progress_bar_moves_while_a_large_file_is_read(tmp_path, monkeypatch):
    from benchmarks import frontend_logdir

    from tb_gradlens.serving import logdir as logdir_lib

    path = tmp_path / "big"
    frontend_logdir.write_logdir(str(path), variables=128, steps=300, hist_every=1, div_every=10)
    for run in ("float32", "float32_seed1"):
        shutil.rmtree(path / run)
    (big,) = list((path / "mixed_bfloat16").iterdir())
    assert big.stat().st_size > 30e6
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(logdir_lib, "PROGRESS_DELAY", 0.0, raising=False)
    logdir_lib.open_logdir(str(path), progress=True)
    updates = [u for u in terminal.getvalue().split("\r") if u.startswith("checking ")]
    assert len(set(updates)) >= 4, updates  # one file: it advances while the file is checked, not once at its end


@pytest.mark.slow
def test_no_comparison_logged_says_why_when_every_layer_computes_in_float32(tmp_path):
    import keras

    from tb_gradlens.keras import GradLensCallback

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        keras.backend.clear_session()  # resets the global policy: the model below computes in float32
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        x = np.ones((8, 4), np.float32)
        model.fit(x, np.zeros((8, 1), np.float32), batch_size=4, epochs=1, verbose=0,
                  callbacks=[GradLensCallback(str(tmp_path / "f32"), compare_every=1)])
    finally:
        keras.mixed_precision.set_global_policy("float32")
    result = run_cli("report", tmp_path)
    assert result.returncode == 0, result.stderr
    # The second answer says why in a plain sentence; the writer's whole reason is among its details.
    assert "2. Which part diverges most? No comparison logged. Every layer computes in float32." in result.stdout
    data = json.loads(run_cli("report", tmp_path, "--json").stdout)
    assert data["runs"][0]["no_comparison"].startswith("every layer computes in float32")

"""The command line at its edges (issue 40, item 10): nothing to export is an
error, a mistyped choice lists the valid ones, the helps are complete, the
progress bar counts the logdir's size, and a default export a user can open.

Logdirs written with TensorBoard's TF-free writer (tests/support/hostile_logs.py);
the commands run in this process (``tb_gradlens.cli.main``), as `tb-gradlens` runs them.
"""

import io
import os
import re

import numpy as np
import pytest

from tb_gradlens import cli
from tb_gradlens import metadata
from tb_gradlens.serving import logdir as logdir_lib
from tests.support import hostile_logs

ROWS = ["dense/kernel", "dense/bias"]
STEPS = range(8)


def hist(step):
    h = np.zeros((len(ROWS), len(metadata.HISTOGRAM_COLUMNS)), np.float32)
    h[:, 140] = 4
    return h


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """Two runs with gradient statistics and histograms (and a loss), and a run of a
    plain TensorBoard summary (no gradlens records)."""
    root = tmp_path_factory.mktemp("edges")
    for run in ("float32", "mixed_bfloat16"):
        hostile_logs.write_records(str(root / run), [
            ("gradients/grad_stats/s", hostile_logs.content(metadata.GRAD_STATS, ROWS), hostile_logs.stats(2, 1.0)),
            ("gradients/grad_histogram/h", hostile_logs.content(metadata.GRAD_HISTOGRAM, ROWS), hist),
        ], steps=STEPS, scalars=["loss"])
    hostile_logs.write_records(str(root / "plain"), [], steps=STEPS, scalars=["accuracy"])
    return str(root)


def call(capsys, *args):
    """(exit status, stdout, stderr) of ``tb-gradlens ARGS``."""
    status = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return status, out.out, out.err


# ---------------------------------------------------------------------------
# Nothing to export: a clear error and a non-zero exit, no header alone.
# ---------------------------------------------------------------------------


def test_export_of_no_matching_run_is_an_error_naming_the_runs(logdir, capsys):
    status, out, err = call(capsys, "export", logdir, "-q", "--run", "^bf16$")
    assert status == 3 and out == ""
    assert "nothing to export" in err and "'^bf16$'" in err and "float32, mixed_bfloat16, plain" in err


def test_export_of_a_garbage_logdir_is_an_error(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    with open(tmp_path / "run" / "events.out.tfevents.1.host", "wb") as f:
        f.write(np.random.default_rng(0).bytes(5000))
    status, out, err = call(capsys, "export", tmp_path, "-q")
    assert status == 3 and out == "" and "nothing to export" in err
    hostile_logs.write_records(str(tmp_path / "plain"), [], steps=STEPS, scalars=["accuracy"])
    status, out, err = call(capsys, "export", tmp_path, "-q", "-o", tmp_path / "out.csv")
    assert status == 3 and "nothing to export" in err and not (tmp_path / "out.csv").exists()


def test_export_of_a_kind_no_run_holds_is_an_error_saying_what_they_hold(logdir, capsys):
    status, out, err = call(capsys, "export", logdir, "-q", "--kind", "divergence")
    assert status == 3 and out == ""
    assert "no divergence records" in err and "grad_stats, grad_histogram" in err


# ---------------------------------------------------------------------------
# A mistyped choice lists the valid ones.
# ---------------------------------------------------------------------------


def test_a_mistyped_kind_lists_the_kinds(logdir, capsys):
    status, _, err = call(capsys, "export", logdir, "-q", "--kind", "grad_stat")
    assert status == 2 and "did you mean 'grad_stats'?" in err and "grad_histogram, divergence" in err
    status, _, err = call(capsys, "compare", logdir, "float32", "mixed_bfloat16", "-q", "--kind", "grad_stat",
                          "--row", "dense/kernel")
    assert status == 2 and "did you mean 'grad_stats'?" in err and "scalar, grad_stats" in err


def test_a_mistyped_row_or_column_lists_the_rows_or_columns(logdir, capsys):
    status, _, err = call(capsys, "compare", logdir, "float32", "mixed_bfloat16", "-q", "--kind", "grad_stats",
                          "--row", "dense/kernl")
    assert status == 3 and "did you mean 'dense/kernel'?" in err and "its rows: dense/bias, dense/kernel" in err
    status, _, err = call(capsys, "compare", logdir, "float32", "mixed_bfloat16", "-q", "--kind", "grad_stats",
                          "--row", "dense/kernel", "--column", "l2_nrm")
    assert status == 2 and "did you mean 'l2_norm'?" in err and "its columns: l2_norm, mean" in err


# ---------------------------------------------------------------------------
# Helps, sizes, the default export.
# ---------------------------------------------------------------------------


def test_export_help_lists_exit_5_and_demo_help_its_defaults(capsys):
    status, out, _ = call(capsys, "export", "--help")
    assert status == 0 and re.search(r"\b5 the\s+output", out)
    status, out, _ = call(capsys, "demo", "--help")
    text = " ".join(out.split())
    assert status == 0
    for default in ("(default: /tmp/gradlens_demo)", "(default: 300)", "(default: 6006, or the next free one"):
        assert default in text, text


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_the_progress_bar_counts_the_logdirs_size_once_per_pass(logdir, monkeypatch):
    stream = Terminal()
    monkeypatch.setattr("sys.stderr", stream)
    monkeypatch.setattr(logdir_lib, "PROGRESS_DELAY", 0.0)
    logdir_lib.open_logdir(logdir, progress=True)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(logdir) for f in files)
    counts = re.findall(r"(checking|loading) \S+ \[[#.]+\] ([\d.]+)/([\d.]+) MB", stream.getvalue())
    assert {c[0] for c in counts} == {"checking", "loading"}
    for _, done, total in counts:
        assert float(total) == pytest.approx(size / 1e6, abs=0.051) and float(done) <= float(total)
    assert float(counts[-1][1]) == float(counts[-1][2])


def test_the_default_export_leaves_the_histograms_out_and_says_so(logdir, capsys):
    status, out, err = call(capsys, "export", logdir, "-q")
    assert status == 0 and "grad_histogram records left out (--kind grad_histogram exports them)" in err
    kinds = {line.split(",")[2] for line in out.splitlines()[1:]}
    assert kinds == {"grad_stats"}
    status, out, _ = call(capsys, "export", logdir, "-q", "--kind", "grad_histogram")
    assert status == 0 and {line.split(",")[2] for line in out.splitlines()[1:]} == {"grad_histogram"}


# ---------------------------------------------------------------------------
# The demo owns its runs and checks its port before training (cli/demo.py).
# ---------------------------------------------------------------------------


def test_the_demo_takes_the_next_free_port_or_refuses_one_given(capsys):
    import socket

    from tb_gradlens.cli import demo

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        taken = held.getsockname()[1]
        port, note = demo.choose_port(None, default=taken)
        assert port != taken and demo.port_free(port) and "port %d is in use" % taken in note
        with pytest.raises(demo.DemoError, match="port %d is in use.*--port" % taken):
            demo.choose_port(taken)
    assert demo.choose_port(0) == (0, None)


def test_the_demo_replaces_its_own_runs_only_and_one_demo_writes_at_a_time(tmp_path):
    from tb_gradlens.cli import demo

    for run in ("float32", "mixed_bfloat16"):
        hostile_logs.write_records(str(tmp_path / run), [], steps=range(2), scalars=["loss"])
    hostile_logs.write_records(str(tmp_path / "mine"), [], steps=range(2), scalars=["loss"])
    assert demo.replace_own_runs(str(tmp_path)) == ["float32", "mixed_bfloat16"]
    assert sorted(os.listdir(tmp_path)) == ["mine"]  # a run the demo did not write stays
    hostile_logs.write_records(str(tmp_path / "float32"), [], steps=range(2), scalars=["loss"])
    (tmp_path / "float32" / "notes.txt").write_text("mine")
    with pytest.raises(demo.DemoError, match="files the demo did not write \\(notes.txt\\)"):
        demo.replace_own_runs(str(tmp_path))
    assert (tmp_path / "float32" / "notes.txt").exists()
    with demo.writing_lock(str(tmp_path)):
        with pytest.raises(demo.DemoError, match="another tb-gradlens demo is writing"):
            with demo.writing_lock(str(tmp_path)):
                pass
    with demo.writing_lock(str(tmp_path)):  # released when the first is done
        pass

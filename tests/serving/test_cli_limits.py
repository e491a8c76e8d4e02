"""The command line's own limits (issue 31 item 8, and item 7's CLI part):
a refused --run pattern is a usage error said before the logdir is read,
output errors have their own exit status, number options take plain ASCII
integers, and names cannot reorder what the terminal shows."""

import os

import pytest

from tests.support import hostile_logs
from tb_gradlens import cli

RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE
EXIT_OUTPUT = 5  # README "Command line": the output could not be written


@pytest.fixture()
def logdir(tmp_path):
    root = tmp_path / "logs"
    hostile_logs.stats_run(str(root / "small"), range(3))
    hostile_logs.stats_run(str(root / ("evil" + RLO + "lenrek")), range(3))
    return str(root)


def test_a_refused_run_pattern_is_a_usage_error_before_the_logdir_is_read(tmp_path, capsys):
    missing = str(tmp_path / "not_there")
    for command in ("report", "export", "advise"):
        assert cli.main([command, missing, "--run", "(a)\\1", "-q"]) == cli.EXIT_USAGE, command
        assert "backreferences" in capsys.readouterr().err


def test_run_pattern_reads_only_the_runs_it_names(logdir, capsys):
    """A run that is not selected is neither checked nor loaded: an unreadable
    event file there is not even mentioned."""
    other = os.path.join(logdir, "other")
    os.makedirs(other)
    with open(os.path.join(other, "events.out.tfevents.1.x"), "wb") as f:
        f.write(b"garbage that is no record at all")
    assert cli.main(["report", logdir, "--run", "^small$", "-q"]) == cli.EXIT_OK
    captured = capsys.readouterr()
    assert "other" not in captured.err and "small" in captured.out


def test_output_errors_have_their_own_exit_status(logdir, tmp_path, capsys):
    missing_dir = str(tmp_path / "no_such_dir" / "out.csv")
    assert cli.main(["export", logdir, "-q", "-o", missing_dir]) == EXIT_OUTPUT
    assert "no_such_dir" in capsys.readouterr().err
    import sys

    full = open("/dev/full", "w")
    saved, sys.stdout = sys.stdout, full
    try:
        status = cli.main(["report", logdir, "-q", "--json"])
    finally:
        sys.stdout = saved
        try:
            full.close()
        except OSError:
            pass  # what the failed write left in the buffer
    assert status == EXIT_OUTPUT
    assert "No space left" in capsys.readouterr().err


@pytest.mark.parametrize("number", ["1_000", " 5", "5 ", "\uff15", "\u0665", "+5", "0x10"])
def test_number_options_take_plain_ascii_integers_only(tmp_path, number, capsys):
    missing = str(tmp_path / "not_there")
    assert cli.main(["compare", missing, "a", "b", "--max-rows", number]) == cli.EXIT_USAGE
    assert "plain integer" in capsys.readouterr().err
    assert cli.main(["demo", "--steps", number, "--no-serve", "--logdir", missing]) == cli.EXIT_USAGE


def test_bidirectional_controls_in_names_are_escaped(logdir, capsys):
    assert cli.main(["report", logdir, "-q"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert RLO not in out and "evil\\u202elenrek" in out

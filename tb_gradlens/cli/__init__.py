"""The ``tb-gradlens`` command line (also ``python -m tb_gradlens``).

Commands, one module each (``add_parser`` adds its subparser, ``run`` runs
it): ``report`` (headline and alerts per run, a CI gate with ``--fail-on``),
``compare`` (``runs.py``: the run comparison, two runs step by step),
``export`` (long-format CSV or JSON Lines for pandas), ``advise`` (the
precision advisor's latest recommendation) and ``demo``.  The read commands use
TensorBoard's own reading code (``tb_gradlens.serving.logdir``) and the analysis the
plugin serves (``tb_gradlens.analysis``); they never import TensorFlow.

Exit status: 0 success (no alert at or above ``--fail-on``), 1 alerts at or
above ``--fail-on``, 2 usage error, 3 the logdir or a run/quantity could not
be read, 4 internal error (a crash is never 1, and never a traceback unless
$TB_GRADLENS_DEBUG is set), 5 the output (``-o`` file, standard output)
could not be written.
"""

import argparse
import os
import sys
from typing import Optional
from typing import Sequence

from tb_gradlens.cli import advise as advise_command
from tb_gradlens.cli import demo as demo_command
from tb_gradlens.cli import export as export_command
from tb_gradlens.cli import report as report_command
from tb_gradlens.cli import runs as runs_command
from tb_gradlens.cli.common import CommandError
from tb_gradlens.cli.common import ENV_DEBUG
from tb_gradlens.cli.common import EXIT_ALERTS  # noqa: F401
from tb_gradlens.cli.common import EXIT_INTERNAL
from tb_gradlens.cli.common import EXIT_OK  # noqa: F401
from tb_gradlens.cli.common import EXIT_OUTPUT
from tb_gradlens.cli.common import EXIT_READ_ERROR  # noqa: F401
from tb_gradlens.cli.common import EXIT_USAGE
from tb_gradlens.cli.common import FORMATTER
from tb_gradlens.cli.common import printable


# The subcommands in the order ``--help`` lists them; each module adds its own
# subparser (``add_parser``) whose default ``func`` is its ``run(args)``.
COMMANDS = (report_command, runs_command, export_command, advise_command, demo_command)


def build_parser() -> argparse.ArgumentParser:
    """The ``tb-gradlens`` parser with every command's subparser."""
    parser = argparse.ArgumentParser(
        prog="tb-gradlens",
        description="tb_gradlens: gradient statistics and bfloat16 divergence for "
        "TensorBoard, without a browser.",
        epilog="exit status: 0 ok, 1 alerts at or above --fail-on, 2 usage error, "
        "3 logdir/run/quantity not readable, 4 internal error, 5 output not writable.\nRun 'tb-gradlens COMMAND --help' for examples.",
        formatter_class=FORMATTER,
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command; its exit status (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: 2 on usage errors, 0 on --help
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    stdout = sys.stdout
    sys.stdout = OutputStream(stdout)
    try:
        status = args.func(args)
        sys.stdout.flush()  # a full disk behind stdout shows here at the latest
        return status
    except OutputError as e:
        print("tb-gradlens: writing the output failed: %s" % printable(e.strerror or e), file=sys.stderr)
        return EXIT_OUTPUT
    except CommandError as e:
        print("tb-gradlens: %s" % printable(e), file=sys.stderr)
        return e.status
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        print("tb-gradlens: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # a file or directory that could not be read
        print("tb-gradlens: %s" % printable(e), file=sys.stderr)
        return EXIT_READ_ERROR
    except Exception as e:  # noqa: BLE001 - a crash: exit 4, one line (traceback on request)
        if os.environ.get(ENV_DEBUG):
            import traceback

            traceback.print_exc()
        print("tb-gradlens: internal error (%s: %s); set %s=1 to see where"
              % (type(e).__name__, printable(str(e)[:500]), ENV_DEBUG), file=sys.stderr)
        return EXIT_INTERNAL
    finally:
        sys.stdout = stdout


class OutputError(OSError):
    """Writing the command's output (standard output) failed."""


class OutputStream:
    """Standard output whose write errors are ``OutputError`` (exit 5), not
    read errors; a closed pipe stays ``BrokenPipeError`` (exit 0)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(e.errno, e.strerror) from None

    def flush(self):
        try:
            return self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputError(e.errno, e.strerror) from None

    def __getattr__(self, name):
        return getattr(self._stream, name)



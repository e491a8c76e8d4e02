"""The ``tb-gradlens`` command line (also ``python -m tb_gradlens``).

Commands: ``report`` (headline and alerts per run, a CI gate with
``--fail-on``), ``compare`` (two runs step by step), ``export`` (long-format
CSV or JSON Lines for pandas) and ``demo``.  The read commands use
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

from tb_gradlens.cli import advise as advise_command
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
from tb_gradlens.cli.common import plain_int
from tb_gradlens.cli.common import printable


def _add_logdir(parser):
    parser.add_argument("logdir", help="TensorBoard log directory (runs are its sub-directories)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def _add_run_filter(parser):
    parser.add_argument("--run", help="only runs whose name matches this regex")


def _add_json(parser):
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def build_parser():
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="tb-gradlens",
        description="tb_gradlens: gradient statistics and bfloat16 divergence for "
        "TensorBoard, without a browser.",
        epilog="exit status: 0 ok, 1 alerts at or above --fail-on, 2 usage error, "
        "3 logdir/run/quantity not readable, 4 internal error, 5 output not writable.\nRun 'tb-gradlens COMMAND --help' for examples.",
        formatter_class=formatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    report = sub.add_parser(
        "report",
        help="headline and alerts of every run; a CI gate with --fail-on",
        description="Per run: the worst divergence and where, the first NaN/Inf step, "
        "disconnected and zero-gradient variables, a dtype summary, what the lens could not "
        "log and which records it asked for are missing; then the alerts (those that say "
        "the same in several runs once).",
        epilog="examples:\n"
        "  tb-gradlens report logs/\n"
        "  tb-gradlens report logs/ --run 'bf16' --fail-on error   # CI gate\n"
        "  tb-gradlens report logs/ --json > report.json\n\n"
        "exit status: 0 ok (nothing at or above --fail-on), 1 with --fail-on: an alert at or above it, a run\n"
        "lacking records its writer asked for, or (--fail-on warning) an event file not read in full\n"
        "(damaged, truncated, two writers), 2 usage, 3 logdir/run not readable, 4 internal error",
        formatter_class=formatter,
    )
    _add_logdir(report)
    _add_run_filter(report)
    _add_json(report)
    report.add_argument(
        "--fail-on", choices=("warning", "error"),
        help="exit 1 when an alert of this severity or worse exists, or a run lacks "
        "records its writer asked for (its lens_status)",
    )
    report.set_defaults(func=report_command.report)

    compare = sub.add_parser(
        "compare",
        help="compare one quantity between two runs, step by step",
        description="Step-aligned values of a quantity in RUN_A and RUN_B: difference, "
        "ratio, relative difference; steps logged by one run only are listed. "
        "An optional noise-floor run C (e.g. float32 with another seed) shows whether "
        "B drifts from A more than ordinary run-to-run variation, on sustained evidence: "
        "B's mean |(B-A)/|A|| over windows of logged steps against C's, several windows in a row.",
        epilog="examples:\n"
        "  tb-gradlens compare logs/ float32 mixed_bfloat16                  # the loss scalar\n"
        "  tb-gradlens compare logs/ float32 mixed_bfloat16 --kind grad_stats \\\n"
        "      --row mlp/dense_1/kernel --column l2_norm --noise-floor float32_seed1\n"
        "  tb-gradlens compare logs/ float32 mixed_bfloat16 --noise-floor float32_seed1 \\\n"
        "      --fail-on beyond-noise                                         # a CI gate\n"
        "  tb-gradlens compare logs/ float32 mixed_bfloat16 --json\n\n"
        "exit status: 0 compared (within the noise floor, or none given), 1 beyond the noise floor with\n"
        "--fail-on beyond-noise, 2 usage, 3 logdir/run/quantity not readable, 4 internal error",
        formatter_class=formatter,
    )
    _add_logdir(compare)
    compare.add_argument("run_a", metavar="RUN_A")
    compare.add_argument("run_b", metavar="RUN_B")
    compare.add_argument("--noise-floor", metavar="RUN_C", help="a third run as noise floor")
    compare.add_argument("--kind", default="scalar", help="'scalar' (default) or a record kind, e.g. grad_stats")
    compare.add_argument("--tag", default=None, help="scalar tag (default: loss, the training loss; "
                         "a run without it falls back to the loss its comparisons logged) or record tag prefix")
    compare.add_argument("--row", help="variable or layer path (record kinds)")
    compare.add_argument("--column", help="statistic or metric (record kinds), e.g. l2_norm")
    _add_json(compare)
    compare.add_argument("--max-rows", type=plain_int, default=40, help="table rows shown (0: all)")
    compare.add_argument("--fail-on", choices=("beyond-noise",), default=None,
                         help="exit 1 when run B is beyond the noise floor (needs --noise-floor)")
    compare.set_defaults(func=runs_command.compare_runs)

    export = sub.add_parser(
        "export",
        help="long-format CSV or JSON Lines of every record, for pandas",
        description="One row per (run, tag, step, row, column): run, tag, kind, step, "
        "wall_time, row, column, value. NaN and infinities are kept (CSV: nan/inf; "
        "JSON Lines: NaN/Infinity). dtype maps are not exported (they are not numbers).",
        epilog="examples:\n"
        "  tb-gradlens export logs/ --format csv -o gradlens.csv\n"
        "  tb-gradlens export logs/ --format json --kind divergence -o div.jsonl\n"
        "pandas:\n"
        "  pd.read_csv('gradlens.csv')        pd.read_json('div.jsonl', lines=True)\n\n"
        "exit status: 0 exported, 2 usage, 3 logdir/run not readable, 4 internal error",
        formatter_class=formatter,
    )
    _add_logdir(export)
    export.add_argument("--format", choices=("csv", "json"), default="csv")
    export.add_argument("--kind", action="append", help="only this record kind (repeatable)")
    _add_run_filter(export)
    export.add_argument("-o", "--output", help="output file (default: standard output)")
    export.set_defaults(func=export_command.export)

    advise = sub.add_parser(
        "advise",
        help="the precision advisor's latest recommendation: which layers to keep in float32",
        description="Per run: the latest advice the precision advisor recorded (its units ranked "
        "by the error each causes alone in 16 bits, the layers to keep in float32, the gradient "
        "divergence before and after, verified) and the code that applies it. The measurement "
        "itself runs in Python, where the model and its data are: tb_gradlens.advise(model, "
        "(x, y), log_dir=...) once, or GradLensCallback(..., advisor=tb_gradlens.Advisor((x, y))) "
        "during training.",
        epilog="examples:\n"
        "  tb-gradlens advise logs/\n"
        "  tb-gradlens advise logs/ --run bf16 --json\n\n"
        "exit status: 0 advice printed, 2 usage, 3 logdir/run not readable or no run has advice,\n"
        "4 internal error",
        formatter_class=formatter,
    )
    _add_logdir(advise)
    _add_run_filter(advise)
    _add_json(advise)
    advise.set_defaults(func=advise_command.advise)

    demo = sub.add_parser(
        "demo",
        help="train the demo MLP (float32 and mixed_bfloat16) and serve TensorBoard",
        description="Train the 784-64-64-10 MLP in float32 and mixed_bfloat16 on "
        "scikit-learn's bundled digits, log with tb_gradlens, then serve "
        "TensorBoard with the GradLens tab on 127.0.0.1.",
        epilog="examples:\n"
        "  tb-gradlens demo\n"
        "  tb-gradlens demo --logdir /tmp/gradlens_demo --port 6006\n"
        "  tb-gradlens demo --steps 50 --no-serve\n\n"
        "exit status: 0 trained (and served until Ctrl-C), 2 usage, 4 internal error, 130 interrupted",
        formatter_class=formatter,
    )
    demo.add_argument("--logdir", default="/tmp/gradlens_demo")
    demo.add_argument("--steps", type=plain_int, default=300)
    demo.add_argument("--port", type=plain_int, default=6006)
    demo.add_argument(
        "--no-serve", action="store_true", help="only write the logdir, do not serve"
    )
    demo.set_defaults(func=advise_command.demo)
    return parser


def main(argv=None):
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



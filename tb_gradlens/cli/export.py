"""``tb-gradlens export``: long-format CSV or JSON Lines for pandas."""

import argparse
import csv
import json
import sys

from tb_gradlens.cli import common
from tb_gradlens.cli.common import CommandError
from tb_gradlens.cli.common import EXIT_OK
from tb_gradlens.cli.common import EXIT_USAGE
from tb_gradlens.cli.common import printable


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """``tb-gradlens export``'s arguments, help and examples."""
    parser = subparsers.add_parser(
        "export",
        help="long-format CSV or JSON Lines of every record, for pandas",
        description="One row per (run, tag, step, row, column): run, tag, kind, step, "
        "wall_time, row, column, value. NaN and infinities are kept (CSV: nan/inf; "
        "JSON Lines: NaN/Infinity). By default every record kind but grad_histogram (281 columns per "
        "variable and step: 20x the rest; --kind grad_histogram exports it). dtype maps are not "
        "exported (they are not numbers).",
        epilog="examples:\n"
        "  tb-gradlens export logs/ --format csv -o gradlens.csv\n"
        "  tb-gradlens export logs/ --format json --kind divergence -o div.jsonl\n"
        "pandas:\n"
        "  pd.read_csv('gradlens.csv')        pd.read_json('div.jsonl', lines=True)\n\n"
        "exit status: 0 exported, 2 usage (an unknown --kind: the kinds are listed), 3 logdir/run not readable\n"
        "or nothing to export (no run matches, no record of the kinds asked for), 4 internal error, 5 the\n"
        "output (-o file, standard output) could not be written",
        formatter_class=common.FORMATTER,
    )
    common.add_logdir_arguments(parser)
    parser.add_argument("--format", choices=("csv", "json"), default="csv")
    parser.add_argument("--kind", action="append", help="only this record kind (repeatable; default: every "
                        "kind but grad_histogram)")
    common.add_run_filter(parser)
    parser.add_argument("-o", "--output", help="output file (default: standard output)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the rows; ``EXIT_OK``."""
    from tb_gradlens import analysis

    from tb_gradlens.analysis import runs as runs_analysis

    kinds = set(args.kind or [])
    for kind in sorted(kinds - set(analysis.FLOAT_KINDS)):
        raise CommandError("unknown --kind %r%s; the kinds: %s" % (
            kind, runs_analysis.did_you_mean(kind, analysis.FLOAT_KINDS), ", ".join(analysis.FLOAT_KINDS)), EXIT_USAGE)
    source, loaded = common.open_source(args)
    runs = common.select_runs(source, args.run)
    if not runs:
        if args.run:
            raise CommandError("nothing to export: no run with gradlens records matches %r in %s; its runs: %s"
                               % (args.run, args.logdir, common.known_runs_text(loaded.all_runs)))
        raise CommandError("nothing to export: no run of %s holds gradlens records (its runs: %s)"
                           % (args.logdir, common.known_runs_text(loaded.all_runs)))
    present = analysis.kinds_present(source, runs)
    chosen = kinds or set(present) - set(analysis.NOT_BY_DEFAULT)
    if not set(present) & chosen:
        raise CommandError("nothing to export: the run(s) hold no %s records; they hold %s"
                           % (" or ".join(sorted(chosen)) or "exportable", ", ".join(present) or "none"))
    left_out = [k for k in present if k not in chosen and not kinds]
    if left_out:
        print("note: %s records left out (--kind %s exports them)" % (", ".join(left_out), left_out[0]),
              file=sys.stderr)
    rows, problems = analysis.export_rows(source, runs, chosen)
    out = common.open_output(args.output)
    count = 0
    try:
        if args.format == "csv":
            writer = csv.DictWriter(out, fieldnames=analysis.EXPORT_FIELDS)
            writer.writeheader()
            for row in rows:
                writer.writerow(row)
                count += 1
        else:
            for row in rows:
                out.write(json.dumps(row, ensure_ascii=False))
                out.write("\n")
                count += 1
    except OSError as e:
        if out is sys.stdout:
            raise
        raise CommandError("writing %s failed after %d rows: %s" % (args.output, count, e.strerror or e),
                           common.EXIT_OUTPUT) from None
    finally:
        if out is not sys.stdout:
            out.close()
    for run, tag, error in problems:
        print("warning: run %s tag %s not exported: %s" % (printable(run), printable(tag), printable(error)), file=sys.stderr)
    if out is not sys.stdout:
        print("wrote %d rows to %s" % (count, printable(args.output)), file=sys.stderr)
    return EXIT_OK

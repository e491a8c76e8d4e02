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
        "JSON Lines: NaN/Infinity). dtype maps are not exported (they are not numbers).",
        epilog="examples:\n"
        "  tb-gradlens export logs/ --format csv -o gradlens.csv\n"
        "  tb-gradlens export logs/ --format json --kind divergence -o div.jsonl\n"
        "pandas:\n"
        "  pd.read_csv('gradlens.csv')        pd.read_json('div.jsonl', lines=True)\n\n"
        "exit status: 0 exported, 2 usage, 3 logdir/run not readable, 4 internal error",
        formatter_class=common.FORMATTER,
    )
    common.add_logdir_arguments(parser)
    parser.add_argument("--format", choices=("csv", "json"), default="csv")
    parser.add_argument("--kind", action="append", help="only this record kind (repeatable)")
    common.add_run_filter(parser)
    parser.add_argument("-o", "--output", help="output file (default: standard output)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the rows; ``EXIT_OK``."""
    from tb_gradlens import analysis
    from tb_gradlens import metadata

    source, _ = common.open_source(args)
    runs = common.select_runs(source, args.run)
    kinds = set(args.kind or [])
    unknown = kinds - set(metadata.KINDS)
    if unknown:
        raise CommandError("unknown --kind %s (kinds: %s)" % (", ".join(sorted(unknown)), ", ".join(metadata.KINDS)), EXIT_USAGE)
    rows, problems = analysis.export_rows(source, runs, kinds)
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

"""``tb-gradlens export``: long-format CSV or JSON Lines for pandas."""

import csv
import json
import sys

from tb_gradlens.cli import common
from tb_gradlens.cli.common import CommandError
from tb_gradlens.cli.common import EXIT_OK
from tb_gradlens.cli.common import EXIT_USAGE
from tb_gradlens.cli.common import printable


def export(args):
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

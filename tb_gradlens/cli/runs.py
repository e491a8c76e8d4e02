"""``tb-gradlens compare``: two runs (and a noise floor) step by step
(``analysis.compare_runs``)."""

import sys

from tb_gradlens.cli import common
from tb_gradlens.cli.common import CommandError
from tb_gradlens.cli.common import EXIT_ALERTS
from tb_gradlens.cli.common import EXIT_OK
from tb_gradlens.cli.common import EXIT_USAGE
from tb_gradlens.cli.common import printable


def compare_runs(args):
    from tensorboard import errors

    from tb_gradlens import analysis

    if args.fail_on and not args.noise_floor:
        raise CommandError("--fail-on beyond-noise needs a noise floor: --noise-floor RUN_C", EXIT_USAGE)
    source, loaded = common.open_source(args)
    common.require_runs(loaded, [args.run_a, args.run_b, args.noise_floor])
    quantity = analysis.Quantity(kind=args.kind, tag=args.tag, row=args.row, column=args.column)
    try:
        result = analysis.compare_runs(source, args.run_a, args.run_b, quantity, args.noise_floor)
    except errors.NotFoundError as e:
        raise CommandError(str(e)) from None
    except errors.InvalidArgumentError as e:
        raise CommandError(str(e), EXIT_USAGE) from None
    if result["note"]:
        print("note: %s" % printable(result["note"]), file=sys.stderr)
    status = EXIT_ALERTS if args.fail_on and result["summary"]["exceeds_noise"] else EXIT_OK
    if args.json:
        print(common.dumps(result))
        return status
    q = result["quantity"]
    what = q["tag"] if q["kind"] == analysis.SCALAR else "%s %s of %s" % (q["kind"], q["column"], q["row"])
    print("compare %s: A=%s  B=%s%s" % (
        printable(what), printable(args.run_a), printable(args.run_b),
        "  noise floor=%s" % printable(args.noise_floor) if args.noise_floor else ""))
    rows = list(zip(result["steps"].tolist(), result["a"].tolist(), result["b"].tolist(),
                    result["difference"].tolist(), result["ratio"].tolist(),
                    result["rel_difference"].tolist()))
    if args.max_rows and len(rows) > args.max_rows:
        import numpy as np

        keep = sorted(set(int(i) for i in np.linspace(0, len(rows) - 1, args.max_rows)))
        shown = [rows[i] for i in keep]
        print("(%d of %d steps shown; --max-rows 0 or --json for all)" % (len(shown), len(rows)))
        rows = shown
    print(common.table(["step", "A", "B", "B-A", "B/A", "(B-A)/|A|"], rows))
    s = result["summary"]
    print("\nmax |(B-A)/|A||: %s" % common.fmt(s["max_abs_rel_difference"]))
    print("verdict: %s" % printable(s["verdict"]))
    for label, key in (("A", "only_in_a"), ("B", "only_in_b")):
        steps = result[key]
        if len(steps):
            print("steps only in %s (%d): %s%s" % (label, len(steps), ", ".join(str(int(x)) for x in steps[:20]),
                                                  " ..." if len(steps) > 20 else ""))
    return status

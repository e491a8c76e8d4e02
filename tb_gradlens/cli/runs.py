"""``tb-gradlens compare``: the run comparison, two runs (and a noise floor)
step by step (``analysis.compare_runs``).  The command keeps its name; in the
code "comparison" alone is the precision comparison of one step."""

import argparse
import sys

from tb_gradlens.cli import common
from tb_gradlens.cli.common import CommandError
from tb_gradlens.cli.common import EXIT_ALERTS
from tb_gradlens.cli.common import EXIT_OK
from tb_gradlens.cli.common import EXIT_USAGE
from tb_gradlens.cli.common import printable


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """``tb-gradlens compare``'s arguments, help and examples."""
    parser = subparsers.add_parser(
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
        formatter_class=common.FORMATTER,
    )
    common.add_logdir_arguments(parser)
    parser.add_argument("run_a", metavar="RUN_A")
    parser.add_argument("run_b", metavar="RUN_B")
    parser.add_argument("--noise-floor", metavar="RUN_C", nargs="+",
                        help="one or more runs as noise floor (float32 with other seeds: with several, a "
                             "window's floor is the largest of their differences from A)")
    parser.add_argument("--kind", default="scalar", help="'scalar' (default) or a record kind, e.g. grad_stats")
    parser.add_argument("--tag", default=None, help="scalar tag (default: loss, the training loss; "
                        "a run without it falls back to the loss its comparisons logged) or record tag prefix")
    parser.add_argument("--row", help="variable or layer path (record kinds)")
    parser.add_argument("--column", help="statistic or metric (record kinds), e.g. l2_norm")
    common.add_json_flag(parser)
    parser.add_argument("--max-rows", type=common.plain_int, default=40, help="table rows shown (0: all)")
    parser.add_argument("--fail-on", choices=("beyond-noise",), default=None,
                        help="exit 1 when run B is beyond the noise floor (needs --noise-floor)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the run comparison; ``EXIT_ALERTS`` when ``--fail-on beyond-noise`` fails."""
    from tensorboard import errors

    from tb_gradlens import analysis

    if args.fail_on and not args.noise_floor:
        raise CommandError("--fail-on beyond-noise needs a noise floor: --noise-floor RUN_C", EXIT_USAGE)
    source, loaded = common.open_source(args)
    common.require_runs(loaded, [args.run_a, args.run_b] + list(args.noise_floor or []))
    quantity = analysis.Quantity(kind=args.kind, tag=args.tag, row=args.row, column=args.column)
    try:
        comparison = analysis.compare_runs(source, args.run_a, args.run_b, quantity, args.noise_floor)
    except errors.NotFoundError as e:
        raise CommandError(str(e)) from None
    except errors.InvalidArgumentError as e:
        raise CommandError(str(e), EXIT_USAGE) from None
    if comparison.note:
        print("note: %s" % printable(comparison.note), file=sys.stderr)
    from tb_gradlens.analysis import answers
    from tb_gradlens.serving import judgment_json

    result = judgment_json.run_comparison_json(comparison)
    result["summary"]["answer"] = answers.noise_sentence(comparison)  # what the tab's Compare view says
    status = EXIT_ALERTS if args.fail_on and result["summary"]["exceeds_noise"] else EXIT_OK
    if args.json:
        print(common.dumps(result))
        return status
    q = result["quantity"]
    what = q["tag"] if q["kind"] == analysis.SCALAR else "%s %s of %s" % (q["kind"], q["column"], q["row"])
    print("compare %s: A=%s  B=%s%s" % (
        printable(what), printable(args.run_a), printable(args.run_b),
        "  noise floor=%s" % ", ".join(printable(r) for r in args.noise_floor) if args.noise_floor else ""))
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
    for label, key in (("A", "a"), ("B", "b"), ("noise floor", "noise")):
        if result["environment_differences"] and result["environments"].get(key):
            print("environment of %s: %s" % (label, printable(result["environments"][key])))
    print("\n%s" % printable(s["answer"]["text"]))
    print("max |(B-A)/|A||: %s" % common.fmt(s["max_abs_rel_difference"]))
    print("verdict: %s" % printable(s["verdict"]))
    for label, key in (("A", "only_in_a"), ("B", "only_in_b")):
        steps = result[key]
        if len(steps):
            print("steps only in %s (%d): %s%s" % (label, len(steps), ", ".join(str(int(x)) for x in steps[:20]),
                                                  " ..." if len(steps) > 20 else ""))
    return status

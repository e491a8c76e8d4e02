"""``tb-gradlens advise``: the precision advisor's latest recommendation per run."""

import argparse

from tb_gradlens.cli import common
from tb_gradlens.cli.common import CommandError
from tb_gradlens.cli.common import EXIT_OK
from tb_gradlens.cli.common import printable


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """``tb-gradlens advise``'s arguments, help and examples."""
    parser = subparsers.add_parser(
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
        formatter_class=common.FORMATTER,
    )
    common.add_logdir_arguments(parser)
    common.add_run_filter(parser)
    common.add_json_flag(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print each run's latest advice; ``EXIT_OK``, or CommandError when no run has any."""
    from tb_gradlens.analysis import advice as advice_analysis
    from tb_gradlens.serving import judgment_json

    source, loaded = common.open_source(args)
    runs = common.select_runs(source, args.run)
    answers = [advice_analysis.run_advice(source, run) for run in runs]
    found = [a for a in answers if a.latest is not None]
    if args.json:
        print(common.dumps({"logdir": args.logdir, "runs": [judgment_json.advice_json(a) for a in found],
                      "errors": [e for a in answers for e in a.errors] + common.read_problems(loaded)}))
    else:
        for run, latest in [(a.run, a.latest) for a in found]:
            if latest is None:
                continue
            print("run %s" % printable(run))
            for line in advice_analysis.text_lines(latest.advice, latest.step):
                print("  " + printable(line))
            print("\n".join("    " + printable(line) for line in latest.code.splitlines()))
            print("")
    if not found:
        raise CommandError("no run with precision advisor records (advice)%s in %s; measure with "
                           "tb_gradlens.advise(model, data, log_dir=...) or GradLensCallback(advisor=...)"
                           % (" matching %r" % args.run if args.run else "", args.logdir))
    return EXIT_OK

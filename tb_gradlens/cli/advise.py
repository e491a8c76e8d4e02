"""``tb-gradlens advise`` (the precision advisor's latest recommendation per run)
and ``tb-gradlens demo``."""

from tb_gradlens.cli import common
from tb_gradlens.cli.common import CommandError
from tb_gradlens.cli.common import EXIT_OK
from tb_gradlens.cli.common import printable


def advise(args):
    from tb_gradlens.analysis import advice as advice_analysis

    source, loaded = common.open_source(args)
    runs = common.select_runs(source, args.run)
    answers = [advice_analysis.run_advice(source, run) for run in runs]
    found = [a for a in answers if a["latest"] is not None]
    if args.json:
        print(common.dumps({"logdir": args.logdir, "runs": found,
                      "errors": [e for a in answers for e in a["errors"]] + common.read_problems(loaded)}))
    else:
        for a in found:
            latest = a["latest"]
            print("run %s" % printable(a["run"]))
            for line in advice_analysis.text_lines(source.advice(a["run"], latest["tag"])[-1]["advice"],
                                                   latest["step"]):
                print("  " + printable(line))
            print("\n".join("    " + printable(line) for line in latest["code"].splitlines()))
            print("")
    if not found:
        raise CommandError("no run with precision advisor records (advice)%s in %s; measure with "
                           "tb_gradlens.advise(model, data, log_dir=...) or GradLensCallback(advisor=...)"
                           % (" matching %r" % args.run if args.run else "", args.logdir))
    return EXIT_OK


def demo(args):
    import os

    # The demo's own process: TensorFlow's start-up notes and the XLA service lines of its XLA comparison
    # are INFO logs (level 0); warnings (level 1) still print.  A level the user set is kept.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    from tb_gradlens import demo

    return demo.run(
        args.logdir, steps=args.steps, port=args.port, serve_after=not args.no_serve
    )

"""The ``tb-gradlens`` command line (also ``python -m tb_gradlens``).

Commands: ``report`` (headline and alerts per run, a CI gate with
``--fail-on``), ``compare`` (two runs step by step), ``export`` (long-format
CSV or JSON Lines for pandas) and ``demo``.  The read commands use
TensorBoard's own reading code (``tb_gradlens.logdir``) and the analysis the
plugin serves (``tb_gradlens.analysis``); they never import TensorFlow.

Exit status: 0 success (no alert at or above ``--fail-on``), 1 alerts at or
above ``--fail-on``, 2 usage error, 3 the logdir or a run/quantity could not
be read, 4 internal error (a crash is never 1, and never a traceback unless
$TB_GRADLENS_DEBUG is set).
"""

import argparse
import csv
import json
import os
import re
import sys
import types

EXIT_OK = 0
EXIT_ALERTS = 1
EXIT_USAGE = 2
EXIT_READ_ERROR = 3
EXIT_INTERNAL = 4
ENV_DEBUG = "TB_GRADLENS_DEBUG"

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text):
    """``text`` safe for a terminal: control characters as \\xNN escapes."""
    return _CONTROL.sub(lambda m: "\\x%02x" % ord(m.group()), str(text))


def _no_tensorflow_for_reading():
    """Make TensorBoard's compat layer use its TensorFlow stub.

    The read commands need only TensorBoard's event reading; without this,
    TensorBoard imports TensorFlow when it is installed (seconds of start-up).
    """
    sys.modules.setdefault("tensorboard.compat.notf", types.ModuleType("tensorboard.compat.notf"))


class CommandError(Exception):
    """A failure to report as one line with an exit status."""

    def __init__(self, message, status=EXIT_READ_ERROR):
        super().__init__(message)
        self.status = status


def _open(args):
    """(Source, LogdirSource) of ``args.logdir``; warnings printed to stderr."""
    _no_tensorflow_for_reading()
    from tb_gradlens import logdir as logdir_lib
    from tb_gradlens import reading

    try:
        loaded = logdir_lib.open_logdir(args.logdir, progress=not args.quiet)
    except logdir_lib.LogdirError as e:
        raise CommandError(str(e)) from None
    for problem in loaded.problems:
        print("warning: %s" % printable(problem), file=sys.stderr)
    return reading.Source(loaded.provider, loaded.ctx, loaded.experiment_id), loaded


def _read_problems(loaded, runs=None):
    """The logdir's problems (of ``runs`` and of no run, if given) as JSON error entries."""
    return [p.to_json() for p in loaded.problems if runs is None or p.run is None or p.run in runs]


def _select_runs(source, pattern):
    """The runs whose name matches ``pattern`` (Python regex syntax, matched in
    bounded time by ``tb_gradlens.patterns``); a refused pattern is a usage error."""
    from tb_gradlens import patterns

    runs = source.runs()
    if pattern:
        try:
            runs = [runs[i] for i in patterns.filter_names(pattern, runs)]
        except patterns.PatternError as e:
            raise CommandError("--run %r: %s" % (pattern, e), EXIT_USAGE) from None
    return runs


def _dumps(obj):
    """JSON with NaN/Infinity as the strings the HTTP routes use."""
    from tb_gradlens.json_encoding import encode_json

    return encode_json(obj)


def _fmt(value, digits=4):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.*g" % (digits, value)
    return printable(value)


def _table(headers, rows):
    """A plain-text table with columns padded to their widest cell."""
    rows = [[_fmt(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------


def _dtype_summary(source, run):
    """{"model_output_dtype", "compute_dtypes", "mixed_layers"} of the newest dtype map."""
    from tb_gradlens import metadata

    for entry in reversed(source.entries_of_kind(run, metadata.DTYPES)):
        maps = [m for m in source.dtype_maps(run, entry.tag) if m["map"] is not None]
        if not maps:
            continue  # (unreadable maps are error entries of the alerts)
        dmap = maps[-1]["map"]
        layers = dmap.get("layers", [])
        computes = sorted({str(layer.get("compute_dtype")) for layer in layers})
        mixed = [
            layer.get("path")
            for layer in layers
            if layer.get("compute_dtype") != layer.get("variable_dtype")
            and layer.get("variable_dtype") not in (None, "", "none")
        ]
        return {
            "model_output_dtype": dmap.get("model_output_dtype"),
            "compute_dtypes": computes,
            "mixed_layers": len(mixed),
            "layers": len(layers),
        }
    return None


def _report(args):
    from tb_gradlens import analysis
    from tb_gradlens.analysis import advice as advice_analysis

    source, loaded = _open(args)
    runs = _select_runs(source, args.run)
    if not runs:
        raise CommandError(
            "no run with gradlens records%s in %s"
            % (" matching %r" % args.run if args.run else "", args.logdir)
        )
    source = source.restricted(runs)  # another run's records are never read
    headlines = {h["run"]: h for h in analysis.overview(source) if h["run"] in runs}
    alerts, problems = analysis.run_alerts(source, runs)
    dtypes = {run: _dtype_summary(source, run) for run in runs}
    lens = {run: analysis.coverage(source, run) for run in runs}
    advice = {run: advice_analysis.run_advice(source, run)["latest"] for run in runs}
    fail_levels = {"error": ("error",), "warning": ("error", "warning")}.get(args.fail_on, ())
    failing = [a for a in alerts if a.severity in fail_levels]
    incomplete = [run for run in runs if lens[run]["missing"]] if args.fail_on else []
    if args.json:
        print(
            _dumps(
                {
                    "logdir": args.logdir,
                    "runs": [dict(headlines[r], dtypes=dtypes[r], lens=lens[r], advice=advice[r]) for r in runs],
                    "alerts": [a.to_json() for a in alerts],
                    "errors": problems + source.point_errors(runs)
                    + _read_problems(loaded, runs if args.run else None),
                    "fail_on": args.fail_on,
                    "failing_alerts": len(failing),
                    "runs_missing_records": incomplete,
                }
            )
        )
    else:
        advice_lines = {run: advice_analysis.report_lines(source, run) for run in runs}
        print(_report_text(runs, headlines, dtypes, lens, alerts, problems + source.point_errors(runs),
                           advice_lines))
        if args.fail_on:
            print(
                "\n%d alert(s) at or above %s%s"
                % (len(failing), args.fail_on, ": failing" if failing else "")
            )
            if incomplete:
                print("%d run(s) lack records their writers asked for (%s): failing"
                      % (len(incomplete), ", ".join(printable(r) for r in incomplete)))
    return EXIT_ALERTS if failing or incomplete else EXIT_OK


def _headline_text(h):
    out = []
    worst = h.get("worst_divergence")
    if worst:
        from tb_gradlens import records

        sides = tuple(records.read_variant(worst.get(k)).label for k in ("candidate", "reference"))
        limit = "" if worst.get("limit") is None else ", limit %s" % _fmt(worst["limit"])
        out.append(
            "  worst divergence: %s %s = %s at step %d (%s vs %s%s)"
            % (printable(worst["row"]), worst["metric"], _fmt(worst["value"]), worst["step"],
               printable(sides[0]), printable(sides[1]), limit)
        )
    else:
        out.append("  worst divergence: - (no comparison logged)")
    if h.get("first_nonfinite_step") is not None:
        out.append(
            "  first NaN/Inf: step %d in %s"
            % (h["first_nonfinite_step"], ", ".join(printable(v) for v in h["first_nonfinite_variables"]))
        )
    else:
        out.append("  first NaN/Inf: none")
    for label, key in (("disconnected (None gradient)", "disconnected_variables"),
                       ("zero gradient", "zero_gradient_variables")):
        names = h.get(key) or []
        out.append("  %s: %s" % (label, ", ".join(printable(n) for n in names) if names else "none"))
    return out


def _lens_text(lens):
    out = []
    for u in lens["unsupported"]:
        out.append("  unsupported: %s (%s) since step %s: %s" % (
            printable(u["what"]), ", ".join(printable(k) for k in u["kinds"]) or "-", u["step"],
            printable(u["reason"])))
    for m in lens["missing"]:
        out.append("  MISSING: %s records under %s: %d of %d expected steps (every %d), first missing step %d"
                   % (m["kind"], printable(m["name"]), m["expected"] - m["found"], m["expected"], m["every"],
                      m["first_missing_step"]))
    for e in lens["errors"]:
        out.append("  lens status unreadable: %s" % printable(e))
    return out


def _report_text(runs, headlines, dtypes, lens, alerts, problems, advice_lines=None):
    out = []
    for run in runs:
        h = headlines[run]
        out.append("run %s" % printable(run))
        out += _headline_text(h)
        d = dtypes.get(run)
        if d:
            out.append(
                "  dtypes: %d layers, compute %s, %d mixed, model output %s"
                % (d["layers"], "/".join(d["compute_dtypes"]), d["mixed_layers"], printable(d["model_output_dtype"]))
            )
        out += _lens_text(lens[run])
        out += ["  " + printable(line) for line in (advice_lines or {}).get(run, [])]
        counts = h.get("alert_counts", {})
        out.append(
            "  alerts: %d error, %d warning, %d info"
            % (counts.get("error", 0), counts.get("warning", 0), counts.get("info", 0))
        )
        out.append("")
    out += _alerts_text(alerts)
    for p in problems:
        out.append("error: run %s tag %s: %s" % (printable(p["run"]), printable(p["tag"]), printable(p["error"])))
    return "\n".join(out)


def _alerts_text(alerts):
    """The alerts, those that say the same thing in several runs grouped."""
    from tb_gradlens import analysis

    if not alerts:
        return ["no alerts"]
    groups = analysis.group_alerts(alerts)
    out = ["alerts (%d%s):" % (len(alerts), ", %d distinct" % len(groups) if len(groups) < len(alerts) else "")]
    for _, group in groups:
        a = group[0]
        names = ", ".join(printable(v) for v in a.variables[:5])
        if len(a.variables) > 5:
            names += " (+%d more)" % (len(a.variables) - 5)
        where = ", ".join("run %s  steps %d-%d" % (printable(g.run), g.step_first, g.step_last) for g in group)
        out.append("%-7s %s  %s" % (a.severity.upper(), a.code, where))
        out.append("  variables: %s" % (names or "-"))
        if a.limit is not None:
            out.append("  limit: %s on %s" % (_fmt(a.limit), a.view.get("column")))
        out.append("  why: %s%s" % (printable(a.explanation),
                                    " (run %s; the same in %d more)" % (printable(a.run), len(group) - 1)
                                    if len(group) > 1 else ""))
        out.append("  fix: %s" % printable(a.fix))
    return out


# ---------------------------------------------------------------------------
# compare
# ---------------------------------------------------------------------------


def _compare(args):
    from tensorboard import errors

    from tb_gradlens import analysis

    source, _ = _open(args)
    quantity = analysis.Quantity(kind=args.kind, tag=args.tag, row=args.row, column=args.column)
    try:
        result = analysis.compare_runs(source, args.run_a, args.run_b, quantity, args.noise_floor)
    except errors.NotFoundError as e:
        raise CommandError(str(e)) from None
    except errors.InvalidArgumentError as e:
        raise CommandError(str(e), EXIT_USAGE) from None
    if result["note"]:
        print("note: %s" % printable(result["note"]), file=sys.stderr)
    if args.json:
        print(_dumps(result))
        return EXIT_OK
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
    print(_table(["step", "A", "B", "B-A", "B/A", "(B-A)/|A|"], rows))
    s = result["summary"]
    print("\nmax |(B-A)/|A||: %s" % _fmt(s["max_abs_rel_difference"]))
    if args.noise_floor:
        print("noise floor max |(C-A)/|A||: %s" % _fmt(s["noise_max_abs_rel_difference"]))
    print("verdict: %s" % printable(s["verdict"]))
    for label, key in (("A", "only_in_a"), ("B", "only_in_b")):
        steps = result[key]
        if len(steps):
            print("steps only in %s (%d): %s%s" % (label, len(steps), ", ".join(str(int(x)) for x in steps[:20]),
                                                  " ..." if len(steps) > 20 else ""))
    return EXIT_OK


# ---------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------


def _export(args):
    from tb_gradlens import analysis
    from tb_gradlens import metadata

    source, _ = _open(args)
    runs = _select_runs(source, args.run)
    kinds = set(args.kind or [])
    unknown = kinds - set(metadata.KINDS)
    if unknown:
        raise CommandError("unknown --kind %s (kinds: %s)" % (", ".join(sorted(unknown)), ", ".join(metadata.KINDS)), EXIT_USAGE)
    rows, problems = analysis.export_rows(source, runs, kinds)
    out = open(args.output, "w", newline="", encoding="utf-8") if args.output and args.output != "-" else sys.stdout
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
    finally:
        if out is not sys.stdout:
            out.close()
    for run, tag, error in problems:
        print("warning: run %s tag %s not exported: %s" % (printable(run), printable(tag), printable(error)), file=sys.stderr)
    if out is not sys.stdout:
        print("wrote %d rows to %s" % (count, printable(args.output)), file=sys.stderr)
    return EXIT_OK


# ---------------------------------------------------------------------------
# demo
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# advise
# ---------------------------------------------------------------------------


def _advise(args):
    from tb_gradlens.analysis import advice as advice_analysis

    source, loaded = _open(args)
    runs = _select_runs(source, args.run)
    answers = [advice_analysis.run_advice(source, run) for run in runs]
    found = [a for a in answers if a["latest"] is not None]
    if args.json:
        print(_dumps({"logdir": args.logdir, "runs": found,
                      "errors": [e for a in answers for e in a["errors"]] + _read_problems(loaded)}))
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


def _demo(args):
    from tb_gradlens import demo

    return demo.run(
        args.logdir, steps=args.steps, port=args.port, serve_after=not args.no_serve
    )


# ---------------------------------------------------------------------------
# parser
# ---------------------------------------------------------------------------


def _add_logdir(parser):
    parser.add_argument("logdir", help="TensorBoard log directory (runs are its sub-directories)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bar")


def build_parser():
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="tb-gradlens",
        description="tb_gradlens: gradient statistics and bfloat16 divergence for "
        "TensorBoard, without a browser.",
        epilog="exit status: 0 ok, 1 alerts at or above --fail-on, 2 usage error, "
        "3 logdir/run/quantity not readable, 4 internal error.\nRun 'tb-gradlens COMMAND --help' for examples.",
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
        "  tb-gradlens report logs/ --json > report.json",
        formatter_class=formatter,
    )
    _add_logdir(report)
    report.add_argument("--run", help="only runs whose name matches this regex")
    report.add_argument("--json", action="store_true", help="machine-readable output")
    report.add_argument(
        "--fail-on", choices=("warning", "error"),
        help="exit 1 when an alert of this severity or worse exists, or a run lacks "
        "records its writer asked for (its lens_status)",
    )
    report.set_defaults(func=_report)

    compare = sub.add_parser(
        "compare",
        help="compare one quantity between two runs, step by step",
        description="Step-aligned values of a quantity in RUN_A and RUN_B: difference, "
        "ratio, relative difference; steps logged by one run only are listed. "
        "An optional noise-floor run C (e.g. float32 with another seed) shows whether "
        "B drifts from A more than ordinary run-to-run variation.",
        epilog="examples:\n"
        "  tb-gradlens compare logs/ float32 mixed_bfloat16                  # the loss scalar\n"
        "  tb-gradlens compare logs/ float32 mixed_bfloat16 --kind grad_stats \\\n"
        "      --row mlp/dense_1/kernel --column l2_norm --noise-floor float32_seed1\n"
        "  tb-gradlens compare logs/ float32 mixed_bfloat16 --json",
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
    compare.add_argument("--json", action="store_true", help="machine-readable output")
    compare.add_argument("--max-rows", type=int, default=40, help="table rows shown (0: all)")
    compare.set_defaults(func=_compare)

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
        "  pd.read_csv('gradlens.csv')        pd.read_json('div.jsonl', lines=True)",
        formatter_class=formatter,
    )
    _add_logdir(export)
    export.add_argument("--format", choices=("csv", "json"), default="csv")
    export.add_argument("--kind", action="append", help="only this record kind (repeatable)")
    export.add_argument("--run", help="only runs whose name matches this regex")
    export.add_argument("-o", "--output", help="output file (default: standard output)")
    export.set_defaults(func=_export)

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
        "  tb-gradlens advise logs/ --run bf16 --json",
        formatter_class=formatter,
    )
    _add_logdir(advise)
    advise.add_argument("--run", help="only runs whose name matches this regex")
    advise.add_argument("--json", action="store_true", help="machine-readable output")
    advise.set_defaults(func=_advise)

    demo = sub.add_parser(
        "demo",
        help="train the demo MLP (float32 and mixed_bfloat16) and serve TensorBoard",
        description="Train the 784-64-64-10 MLP in float32 and mixed_bfloat16 on "
        "scikit-learn's bundled digits, log with tb_gradlens, then serve "
        "TensorBoard with the GradLens tab on 127.0.0.1.",
        epilog="examples:\n"
        "  tb-gradlens demo\n"
        "  tb-gradlens demo --logdir /tmp/gradlens_demo --port 6006\n"
        "  tb-gradlens demo --steps 50 --no-serve",
        formatter_class=formatter,
    )
    demo.add_argument("--logdir", default="/tmp/gradlens_demo")
    demo.add_argument("--steps", type=int, default=300)
    demo.add_argument("--port", type=int, default=6006)
    demo.add_argument(
        "--no-serve", action="store_true", help="only write the logdir, do not serve"
    )
    demo.set_defaults(func=_demo)
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
    try:
        return args.func(args)
    except CommandError as e:
        print("tb-gradlens: %s" % printable(e), file=sys.stderr)
        return e.status
    except BrokenPipeError:
        return EXIT_OK
    except KeyboardInterrupt:
        print("tb-gradlens: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # a file or directory that could not be read or written
        print("tb-gradlens: %s" % printable(e), file=sys.stderr)
        return EXIT_READ_ERROR
    except Exception as e:  # noqa: BLE001 - a crash: exit 4, one line (traceback on request)
        if os.environ.get(ENV_DEBUG):
            import traceback

            traceback.print_exc()
        print("tb-gradlens: internal error (%s: %s); set %s=1 to see where"
              % (type(e).__name__, printable(str(e)[:500]), ENV_DEBUG), file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())

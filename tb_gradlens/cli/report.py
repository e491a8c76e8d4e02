"""``tb-gradlens report``: each run's headline, dtypes, lens status, advice and
alerts; a CI gate with ``--fail-on``."""

import argparse

from tb_gradlens.cli import common
from tb_gradlens.cli.common import CommandError
from tb_gradlens.cli.common import EXIT_ALERTS
from tb_gradlens.cli.common import EXIT_OK
from tb_gradlens.cli.common import printable


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


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """``tb-gradlens report``'s arguments, help and examples."""
    parser = subparsers.add_parser(
        "report",
        help="headline and alerts of every run; a CI gate with --fail-on",
        description="Per run, five answers in plain sentences (the GradLens tab says the same): "
        "1. is it beyond float32's own noise (against a float32 run with another seed), 2. which "
        "gradient or layer output diverges most and from which step, 3. any NaN, None or all-zero "
        "gradient and where first, 4. what to keep in float32 (the line to paste), 5. better or "
        "worse over training; then a dtype summary, what the lens could not log and which records "
        "it asked for are missing; then the alerts (those that say the same in several runs once).",
        epilog="examples:\n"
        "  tb-gradlens report logs/\n"
        "  tb-gradlens report logs/ --run 'bf16' --fail-on error   # CI gate\n"
        "  tb-gradlens report logs/ --json > report.json\n\n"
        "exit status: 0 ok (nothing at or above --fail-on), 1 with --fail-on: an alert at or above it, a run\n"
        "lacking records its writer asked for, or (--fail-on warning) an event file not read in full\n"
        "(damaged, truncated, two writers), 2 usage, 3 logdir/run not readable, 4 internal error",
        formatter_class=common.FORMATTER,
    )
    common.add_logdir_arguments(parser)
    common.add_run_filter(parser)
    common.add_json_flag(parser)
    parser.add_argument(
        "--fail-on", choices=("warning", "error"),
        help="exit 1 when an alert of this severity or worse exists, or a run lacks "
        "records its writer asked for (its lens_status)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the report; the exit status (``EXIT_ALERTS`` when ``--fail-on`` fails)."""
    from tb_gradlens import analysis
    from tb_gradlens.analysis import advice as advice_analysis
    from tb_gradlens.analysis import answers
    from tb_gradlens.analysis import environments
    from tb_gradlens.serving import judgment_json

    source, loaded = common.open_source(args)
    runs = common.select_runs(source, args.run)
    if not runs:
        if args.run:  # only the matching runs were read: name every run of the logdir
            raise CommandError("no run with gradlens records matching %r in %s; its runs: %s"
                               % (args.run, args.logdir, common.known_runs_text(loaded.all_runs)))
        raise CommandError("no run with gradlens records in %s; its runs with gradlens records: %s"
                           % (args.logdir, common.known_runs_text(source.runs())))
    source = source.restricted(runs)  # another run's records are never read
    headlines = {h["run"]: h for h in judgment_json.overview_json(analysis.overview(source)) if h["run"] in runs}
    said = {r["run"]: r for r in answers.logdir_answers(source, runs)["runs"]}
    alerts, problems = analysis.run_alerts(source, runs)
    dtypes = {run: _dtype_summary(source, run) for run in runs}
    lens = {run: analysis.coverage(source, run) for run in runs}
    advice = {run: judgment_json.latest_advice_json(advice_analysis.run_advice(source, run).latest) for run in runs}
    hardware = {run: environments.run_environment(source, run) for run in runs}
    fail_levels = {"error": ("error",), "warning": ("error", "warning")}.get(args.fail_on, ())
    failing = [a for a in alerts if a.severity in fail_levels]
    incomplete = [run for run in runs if lens[run]["missing"]] if args.fail_on else []
    # An event file not read in full is a warning: what was not read can hold any alert.
    unread = common.unread_files(loaded, runs) if args.fail_on == "warning" else []
    if args.json:
        print(
            common.dumps(
                {
                    "logdir": args.logdir,
                    "runs": [dict(headlines[r], dtypes=dtypes[r], lens=lens[r], advice=advice[r],
                                  answers=said[r]["answers"], comparisons=said[r]["comparisons"],
                                  precision=said[r]["precision"], environment=hardware[r]) for r in runs],
                    "alerts": [a.to_json() for a in alerts],
                    "errors": problems + source.point_errors(runs)
                    + common.read_problems(loaded, runs if args.run else None),
                    "fail_on": args.fail_on,
                    "failing_alerts": len(failing),
                    "runs_missing_records": incomplete,
                    "unread_files": [p.to_json() for p in unread],
                }
            )
        )
    else:
        advice_lines = {run: advice_analysis.report_lines(source, run) for run in runs}
        print(_report_text(runs, headlines, dtypes, lens, alerts, problems + source.point_errors(runs),
                           advice_lines, said, hardware))
        if args.fail_on:
            print(
                "\n%d alert(s) at or above %s%s"
                % (len(failing), args.fail_on, ": failing" if failing else "")
            )
            if incomplete:
                print("%d run(s) lack records their writers asked for (%s): failing"
                      % (len(incomplete), ", ".join(printable(r) for r in incomplete)))
            if unread:
                print("%d event file problem(s) leave steps unread (%s): failing"
                      % (len(unread), ", ".join(printable(p.path or p.run) for p in unread)))
    return EXIT_ALERTS if failing or incomplete or unread else EXIT_OK


def _answer_lines(run_answer):
    """The five answers of a run (``analysis.answers``), one numbered line each
    (the line to paste under the fourth), then the run's comparisons."""
    out = []
    for i, a in enumerate(run_answer["answers"], 1):
        out.append("  %d. %s %s" % (i, a["question"], printable(a["text"])))
        if a.get("code"):
            out.append("       %s" % printable(a["code"]))
    if len(run_answer["comparisons"]) > 1:
        out.append("  compared: %s" % "; ".join(
            "%s, %s" % (_compared_text(c), printable(c["answer"]["short"])) for c in run_answer["comparisons"]))
    elif run_answer["comparisons"]:
        out.append("  compared: %s" % _compared_text(run_answer["comparisons"][0]))
    return out


def _compared_text(comparison):
    """A comparison's label, and what its reference was where its record says."""
    said = comparison.get("reference")
    return printable(comparison["label"]) + (" (%s)" % printable(said) if said else "")


def _headline_text(h):
    """The headline's facts the answers do not say (loss scale, optimizer
    steps, step offsets); the third answer says where a NaN starts."""
    out = []
    steps = h.get("optimizer_steps")
    if steps and steps.get("loss_scale"):
        first, last = steps["loss_scale"]
        out.append("  loss scale: %g -> %g, %d skipped update(s)%s%s" % (
            first, last, len(steps["skips"]),
            " at steps " + ", ".join(str(s) for s in steps["skips"][:8]) if steps["skips"] else "",
            " (%d in trouble: see the alerts)" % len(steps["trouble"]) if steps["trouble"] else ""))
    if steps and steps.get("differ_from") is not None:
        out.append("  steps: one per train step (batch); the optimizer's own step falls behind from step %d "
                   "(skipped updates): step %d is optimizer step %d" % (
                       steps["differ_from"], steps["last_step"], steps["last_iteration"]))
    for o in h.get("step_offsets") or []:
        out.append("  steps: from step %d the records are at train step + %d (the optimizer restarted "
                   "below steps this run already holds, so the run's steps continue)" % (o["step"], o["offset"]))
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


def _environment_text(found):
    """The run's environment and what float32 measured to be (when recorded)."""
    out = []
    if found and found.get("text"):
        out.append("  environment: %s" % printable(found["text"]))
    if found and found.get("float32_text"):
        out.append("  float32 where the references run: %s" % printable(found["float32_text"]))
    return out


def _report_text(runs, headlines, dtypes, lens, alerts, problems, advice_lines=None, said=None, hardware=None):
    out = []
    for run in runs:
        h = headlines[run]
        out.append("run %s" % printable(run))
        if said:
            out += _answer_lines(said[run])
        out += _headline_text(h)
        out += _environment_text((hardware or {}).get(run))
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
            out.append("  limit: %s on %s" % (common.fmt(a.limit), a.view.get("column")))
        out.append("  why: %s%s" % (printable(a.explanation),
                                    " (run %s; the same in %d more)" % (printable(a.run), len(group) - 1)
                                    if len(group) > 1 else ""))
        out.append("  fix: %s" % printable(a.fix))
    return out

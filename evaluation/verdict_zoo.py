"""The verdict zoo: do the limits hold on models nobody tuned them on?

Trains the models of ``zoo_models`` (healthy, split into a calibration and a
held-out half) and ``zoo_faults`` (injected numerical faults) with the lens
(``GradLensCallback`` in ``model.fit``, or ``GradLens`` in a custom loop),
then judges them with the analysis the tab and ``tb-gradlens report`` share:

* every healthy configuration: no warning and no error, and its largest
  judged value against its limit (the harm index ``value / limit``: 1 is
  the limit; "tight" when the largest is at least 1/3);
* every fault: caught with its code on its layer or variable, its first step
  within one logging interval.

Run (from the repository root)::

    python -m evaluation.verdict_zoo                       # everything (long on 2 cores)
    python -m evaluation.verdict_zoo --only 'vit|fault'    # a regex on configuration names
    python -m evaluation.verdict_zoo --split held_out      # only the held-out healthy models
    python -m evaluation.verdict_zoo --logdir DIR --keep   # keep the runs
    python -m evaluation.verdict_zoo --logdir DIR --judge-only

The alert zoo of the earlier models (``alert_zoo.py``) uses the same judging.
"""

import argparse
import os
import re
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from evaluation import alert_zoo  # noqa: E402
from evaluation import zoo_faults  # noqa: E402
from evaluation import zoo_models  # noqa: E402

Config = alert_zoo.Config
Expect = alert_zoo.Expect
BF16, F32 = "mixed_bfloat16", "float32"
STEPS, EVERY = 40, 4
# Batch per data kind: large enough that a batch's statistics mean something.
BATCH = {"images": 8, "default": 16}
# Custom-loop rows of a few models (the rest use model.fit).
LOOP = ("vit", "gru_text", "temporal_cnn", "rmsnorm_swiglu")
# Findings on healthy models that are true (decided in issue 38): the U-Net's
# Conv2DTranspose bias gradient, which TensorFlow sums over 8 x 32 x 32
# positions in bfloat16, is 55-88% off float32 and 15-30x its own sampling
# noise; the warning must be raised, and say why.
KNOWN_FINDINGS = {"unet_autoencoder": Expect("bf16_divergence", r"^up/bias$", (0, EVERY - 1))}


def _batch(name):
    return BATCH["images"] if any(k in name for k in ("net", "vgg", "vit", "unet", "convnext")) else BATCH["default"]


def healthy_configs(split=None, policies=(BF16, F32), steps=STEPS, every=EVERY):
    out = []
    for name, workload in zoo_models.HEALTHY.items():
        if split and zoo_models.SPLIT[name] != split:
            continue
        for policy in policies:
            tag = "bf16" if policy == BF16 else "f32"

            def build(p=policy, w=workload):
                return w.build(p)

            note = "%s (%s)" % (workload.note, zoo_models.SPLIT[name])
            known = KNOWN_FINDINGS.get(name) if policy == BF16 else None
            out.append(Config("%s_fit_%s" % (name, tag),
                              alert_zoo.fit_run(build, workload.data, loss=workload.loss, batch=_batch(name)),
                              steps, every, known, note + ("; a true finding kept" if known else "")))
            if name in LOOP and policy == BF16 and workload.loss == zoo_models.SPARSE_CE:
                out.append(Config("%s_loop_%s" % (name, tag), alert_zoo.loop_run(build, workload.data,
                                                                                 batch=_batch(name)),
                                  steps, every, None, note + ", custom loop"))
    return out


def fault_configs(steps=STEPS // 2, every=EVERY):
    out = []
    for name, fault in zoo_faults.FAULTS.items():
        workload = fault.workload

        def build(f=fault):
            return f.workload.build(f.policy)

        out.append(Config("fault_" + name,
                          alert_zoo.fit_run(build, workload.data, loss=workload.loss, batch=_batch(name),
                                            edit_batch=fault.edit_batch),
                          steps, every, Expect(fault.code, fault.row, (0, every - 1)), fault.note))
    return out


# The test suite's subset (tests/evaluation/test_verdict_zoo.py): small models, few steps.
QUICK_HEALTHY = ("gru_text", "temporal_cnn", "rmsnorm_swiglu", "bigru_attention", "encoder_decoder_step",
                 "two_towers", "tabular_normalization", "float32_input_norm")
QUICK_FAULTS = ("naive_std_bilstm", "cumsum_mean_conv1d", "unscaled_attention", "hardcoded_bf16",
                "naive_log1m_sigmoid", "sum_squares_f16", "timestamp_normalization", "offset_coordinates",
                "large_stream_mlp", "bf16_embedding_distance", "fading_naive_norm", "decoder_bf16_output")


def quick_configs(steps=12, every=3):
    """Healthy bfloat16 rows of QUICK_HEALTHY and the faults of QUICK_FAULTS, 12 steps."""
    healthy = [c for c in healthy_configs(policies=(BF16,), steps=steps, every=every)
               if c.name.rsplit("_", 2)[0] in QUICK_HEALTHY]
    faults = [c for c in fault_configs(steps, every) if c.name[len("fault_"):] in QUICK_FAULTS]
    return healthy + faults


def harm_index(logdir):
    """{kind: (largest value / limit, row, step)} over the judged rows of a run."""
    from tb_gradlens import analysis
    from tb_gradlens.serving import logdir as logdir_lib
    from tb_gradlens.serving import reading
    from tb_gradlens.analysis import harm
    from tb_gradlens.analysis import tolerances

    loaded = logdir_lib.open_logdir(logdir, progress=False)
    source = reading.Source(loaded.provider, loaded.ctx, loaded.experiment_id)
    out = {}
    for run in source.runs():
        for entry in source.entries(run):
            if entry.kind not in analysis.DIVERGENCE_KINDS or entry.record is None:
                continue
            judged = tolerances.judge_entry(source, entry)
            ratio = harm.ratio(judged.values, judged.limits)
            if not np.isfinite(ratio).any():
                continue
            s, r = np.unravel_index(int(np.nanargmax(np.where(np.isfinite(ratio), ratio, -1))), ratio.shape)
            steps = source.series(run, entry.tag).steps
            found = (float(ratio[s, r]), entry.record.rows[r], int(steps[s]), bool(judged.measured[r]))
            if found[0] > out.get(entry.kind, (-1.0,))[0]:
                out[entry.kind] = found
    return out


# Expected codes that are a value above a limit (the others are not a threshold on a column).
LIMIT_CODES = ("bf16_divergence", "f16_divergence", alert_zoo.TRANSIENT)


def fault_margin(ratios, held_steps, immediate):
    """How many times the limits could be raised with the alert still firing:
    ``max(max over runs of held_steps consecutive comparisons of their
    smallest ratio, largest ratio / immediate)`` of one row's [S] ratios."""
    ratios = np.where(np.isfinite(ratios), ratios, np.where(np.isposinf(ratios), np.inf, 0.0))
    held = max((ratios[i:i + held_steps].min() for i in range(len(ratios) - held_steps + 1)), default=0.0)
    return max(held, float(ratios.max(initial=0.0)) / immediate)


def margins(logdir, config):
    """(largest ratio of any judged row, (fault margin, row) on the expected
    rows or None) of one configuration's kept run."""
    from tb_gradlens import analysis
    from tb_gradlens.analysis import harm
    from tb_gradlens.analysis import tolerances
    from tb_gradlens.serving import logdir as logdir_lib
    from tb_gradlens.serving import reading

    thresholds = analysis.DEFAULT_THRESHOLDS
    loaded = logdir_lib.open_logdir(os.path.join(logdir, config.name), progress=False)
    source = reading.Source(loaded.provider, loaded.ctx, loaded.experiment_id)
    largest, best = (np.nan, None, None), None
    for run in source.runs():
        for entry in source.entries(run):
            if entry.kind not in analysis.DIVERGENCE_KINDS or entry.record is None:
                continue
            judged = tolerances.judge_entry(source, entry)
            ratio = harm.ratio(judged.values, judged.limits)
            for r, row in enumerate(entry.record.rows):
                column = ratio[:, r]
                if np.isfinite(column).any() and not np.nanmax(column) <= largest[0]:
                    largest = (float(np.nanmax(column)), row, entry.kind)
                if config.expect is not None and config.expect.code in LIMIT_CODES and re.search(config.expect.row, row):
                    m = (fault_margin(column, thresholds.held_comparisons, thresholds.immediate_factor)
                         if config.expect.code != alert_zoo.TRANSIENT else float(np.nanmax(column)))
                    if best is None or m > best[0]:
                        best = (m, row)
    return largest, best


def margin_table(logdir, configs):
    """Markdown: per configuration, the largest value / limit (healthy: at most
    1/1.5 leaves 1.5x below the line) and, for a fault judged by a limit, how
    many times its limit could be raised with it still caught (at least 1.5)."""
    lines = ["| configuration | split | largest value / limit (row) | fault margin (row) | within 1.5x of the line |",
             "|---|---|---|---|---|"]
    for config in configs:
        if not os.path.isdir(os.path.join(logdir, config.name)):
            continue
        (largest, row, kind), best = margins(logdir, config)
        name = config.name
        split = (zoo_faults.FAULT_SPLIT.get(name[len("fault_"):], "-") if name.startswith("fault_")
                 else zoo_models.SPLIT.get(re.sub(r"_(fit|loop)_(bf16|f32)$", "", name), "-"))
        healthy = config.expect is None
        close = (healthy and largest > 1 / 1.5) or (best is not None and best[0] < 1.5)
        if not healthy and config.expect.code not in LIMIT_CODES:
            best, close = ("n/a: %s is no limit" % config.expect.code, ""), False
        lines.append("| %s | %s | %s | %s | %s |" % (
            name, split, "-" if np.isnan(largest) else "%.2f (%s)" % (largest, row),
            "-" if best is None else ("%s%s" % best if isinstance(best[0], str) else "%.2f (%s)" % best),
            "**yes**" if close else "no"))
    return "\n".join(lines)


def harm_table(logdir, configs):
    kinds = ("activation_divergence", "divergence", "loss_comparison")
    lines = ["| configuration | layer outputs | gradients | loss | largest |", "|---|---|---|---|---|"]
    for config in configs:
        path = os.path.join(logdir, config.name)
        if config.expect is not None or not os.path.isdir(path):
            continue
        found = harm_index(path)
        cells = ["%.2f (%s, step %d%s)" % (v, row, step, "" if measured else ", formula")
                 for v, row, step, measured in (found.get(k, (np.nan, "-", -1, True)) for k in kinds)]
        largest = max((v[0] for v in found.values()), default=float("nan"))
        lines.append("| %s | %s | %.2f |" % (config.name, " | ".join(cells), largest))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="regex on configuration names")
    parser.add_argument("--split", choices=("calibration", "held_out"), help="only this half of the healthy models")
    parser.add_argument("--no-faults", action="store_true")
    parser.add_argument("--steps", type=int, help="steps per configuration")
    parser.add_argument("--logdir", help="where the runs go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the logs")
    parser.add_argument("--judge-only", action="store_true", help="judge the runs kept in --logdir")
    args = parser.parse_args(argv)
    configs = healthy_configs(args.split) + ([] if args.no_faults else fault_configs())
    if args.only:
        configs = [c for c in configs if re.search(args.only, c.name)]
    if args.judge_only and not args.logdir:
        parser.error("--judge-only needs --logdir")
    logdir = args.logdir or tempfile.mkdtemp(prefix="verdict_zoo_")
    start = time.perf_counter()
    try:
        results = alert_zoo.run(configs, logdir, args.steps, train=not args.judge_only)
        print()
        print(alert_zoo.table(results))
        print("\nHarm index (value / limit; 1 is the limit) of the healthy runs:\n")
        print(harm_table(logdir, [r[0] for r in results]))
        print("\nMargins to the line:\n")
        print(margin_table(logdir, [r[0] for r in results]))
    finally:
        if not (args.keep or args.judge_only):
            shutil.rmtree(logdir, ignore_errors=True)
    failed = [c.name for c, alerts, problems, _, headlines in results
              if not alert_zoo.verdict(c, alerts, problems, headlines)[0]]
    print("\n%d configurations, %d as expected%s (%.0f s)" % (
        len(results), len(results) - len(failed), "; failed: " + ", ".join(failed) if failed else "",
        time.perf_counter() - start))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

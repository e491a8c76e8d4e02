"""Does Compare runs agree with the alerts on every model of the zoo?

For each configuration of the verdict zoo (the healthy bfloat16 models of
``zoo_models`` and the faults of ``zoo_faults``): three runs of the same
model and data order without the lens, the loss of every step logged:

* A: float32, seed 0;  N1, N2: float32, seeds 1 and 2 (the noise floor: other seeds);
* B: the configuration's own policy (mixed_bfloat16, or the fault's), seed 0;

500 steps (the keras.applications models: 60), then
``analysis.compare_runs(A, B, noise_run=[N1, N2])`` (the verdict the tab's
Compare view and ``tb-gradlens compare --noise-floor`` give) and, from a
verdict-zoo logdir of the same configuration (``--verdict-logdir``, kept
with ``verdict_zoo.py --keep``), whether its alerts found harm a loss
trajectory can show (16-bit divergence, non-finite values; the structural
``bf16_model_output`` says how the model is configured, not how far it
went).  A row agrees when both say harm or neither does; its margin is how
far the sustained windows sit from the rule's factor (``run_noise_factor``,
2): ``min(ratio in the run of run_noise_windows windows) / factor`` for a
run called beyond, ``factor / that`` for one called within (at least 1.5
keeps it off the line).

Run (from the repository root)::

    python -m evaluation.compare_zoo --verdict-logdir DIR         # everything (long on 2 cores)
    python -m evaluation.compare_zoo --verdict-logdir DIR --only 'stream|timestamp'
"""

import argparse
import os
import re
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from evaluation import compare_noise  # noqa: E402
from evaluation import verdict_zoo  # noqa: E402
from evaluation import zoo_faults  # noqa: E402
from evaluation import zoo_models  # noqa: E402

STEPS = 500
SHORT = 60  # the keras.applications models: tens of seconds a step on 2 cores for three runs
NOISE_SEEDS = (1, 2)
HARM_CODES = ("bf16_divergence", "f16_divergence", "nonfinite")


def _steps(name, steps):
    return SHORT if re.search(r"densenet|mobilenet|vgg|convnext|efficientnet|resnet", name) else steps


def losses(workload, policy, seed, steps, batch, edit_batch=None):
    """The training loss of every step of one run (Adam 1e-3, train_on_batch, the data order of ``seed``)."""
    import keras

    keras.utils.set_random_seed(seed)
    model = workload.build(policy, seed)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=workload.loss)
    rng = np.random.default_rng(seed)
    out = []
    for step in range(steps):
        x, y = workload.data(batch, rng)
        if edit_batch is not None:
            x, y = edit_batch(step, x.copy(), y)
        out.append(float(model.train_on_batch(x, y)))
    return np.array(out)


def window_ratios(a, b, noises, thresholds):
    """[W] B's mean |(B - A) / A| over the largest of the noise runs', window by window
    (``analysis.runs``' windows)."""
    from tb_gradlens.analysis import harm

    with np.errstate(invalid="ignore", divide="ignore"):
        width = harm.window_width(len(a), thresholds.run_noise_window)
        mb = harm.window_means((b - a) / np.abs(a), width)
        mn = np.fmax.reduce([harm.window_means((n - a) / np.abs(a), width) for n in noises])
        return np.where(mn > 0, mb / mn, np.where(mb > 0, np.inf, 0.0))


def sustained_margin(ratios, factor, count):
    """(beyond, margin): the largest over runs of ``count`` consecutive windows
    of their smallest ratio, against ``factor`` (beyond when above it)."""
    ratios = np.asarray(ratios, np.float64)
    runs = [np.nanmin(ratios[i:i + count]) for i in range(len(ratios) - count + 1)]
    best = max(runs, default=np.nan)
    if not np.isfinite(best):
        return None, np.nan
    return best > factor, (best / factor if best > factor else factor / max(best, 1e-12))


def configurations(only=None):
    out = [(name, w, "mixed_bfloat16", None) for name, w in zoo_models.HEALTHY.items()]
    out += [("fault_" + name, f.workload, f.policy, f.edit_batch) for name, f in zoo_faults.FAULTS.items()]
    return [c for c in out if not only or re.search(only, c[0])]


def alert_harm(verdict_logdir, name):
    """The 16-bit harm codes the alerts raise on the configuration's kept verdict-zoo run (None: not kept)."""
    from evaluation import alert_zoo

    names = [name + "_fit_bf16", name]
    for candidate in names:
        path = os.path.join(verdict_logdir, candidate)
        if os.path.isdir(path):
            alerts, _, _ = alert_zoo.analyse(path)
            return sorted({a.code for a in alerts if a.code in HARM_CODES and a.severity != "info"})
    return None


def main(argv=None):
    from tb_gradlens import analysis

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="regex on configuration names")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--verdict-logdir", required=True, help="a verdict_zoo.py --keep logdir of the same zoo")
    args = parser.parse_args(argv)
    thresholds = analysis.DEFAULT_THRESHOLDS
    print("| configuration | alerts (harm) | compare | windows B / N (sustained run) | margin | agree |")
    print("|---|---|---|---|---|---|")
    agree = total = 0
    start = time.perf_counter()
    for name, workload, policy, edit in configurations(args.only):
        batch, steps = verdict_zoo._batch(name), _steps(name, args.steps)
        a = losses(workload, "float32", 0, steps, batch, edit)
        noises = [losses(workload, "float32", s, steps, batch, edit) for s in NOISE_SEEDS]
        b = losses(workload, policy, 0, steps, batch, edit)
        runs = dict({"a": a, "b": b}, **{"n%d" % s: n for s, n in zip(NOISE_SEEDS, noises)})
        result = analysis.compare_runs(compare_noise._Runs(runs), "a", "b",
                                       noise_run=["n%d" % s for s in NOISE_SEEDS])
        ratios = window_ratios(a, b, noises, thresholds)
        beyond, margin = sustained_margin(ratios, thresholds.run_noise_factor, thresholds.run_noise_windows)
        said = result.summary.exceeds_noise
        harm = alert_harm(args.verdict_logdir, name)
        ok = harm is not None and bool(harm) == bool(said)
        agree, total = agree + ok, total + 1
        print("| %s (%d steps) | %s | %s | %s | %.2f | %s |" % (
            name, steps, "not kept" if harm is None else (", ".join(harm) or "-"),
            "beyond" if said else "within", " ".join("%.2g" % r for r in ratios),
            margin, "ok" if ok else "NO"), flush=True)
    print("\n%d configurations, %d agree (%.0f s)" % (total, agree, time.perf_counter() - start))
    return 0 if agree == total else 1


if __name__ == "__main__":
    sys.exit(main())

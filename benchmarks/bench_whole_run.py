"""A whole training run with the lens at its defaults against the same run without it, cost by part.

What a user decides on is the whole run (issue 41): ``model.fit`` of N steps
with ``GradLensCallback(logdir)`` at its defaults (every step checked for a
non-finite loss or gradient, statistics every 20 steps, a comparison every
100 from step 100, healthy records flushed together every second) against the
same fit without it, on a fresh model built with the same seed, the two
alternated in rounds (plain first in even rounds, the lens first in odd
ones).  mixed_bfloat16, Adam, jit_compile as Keras chooses ("auto": off on
CPU).

Models: ``convnet`` (three Conv2D+BatchNorm+ReLU blocks, 32x32, batch 32),
``resnet50`` and ``efficientnet_b0`` (keras.applications, weights=None,
32x32, batch 16), ``transformer`` (the keras-io text classifier with Dropout
of evaluation/real_models.py, batch 16), ``mlp`` (the README demo's MLP
on digits, batch 64).

Measured per fit: the wall time of the whole ``model.fit`` call, and the
wall time of each step from one ``on_train_batch_begin`` of a timing callback
placed first to the next (the last to ``on_train_end``): a step's interval
holds everything the lens does for it, its batch-end hooks included.  The
cost of the lens, lens minus plain of the same round, is split by step:

  tracing      step 0 (Keras and the lens trace there) and the first
               comparison step beyond the median comparison step (its passes'
               trace)
  check        the steps that log nothing (the non-finite check)
  logged       the steps that log statistics (not step 0, not a comparison)
  comparisons  the comparison steps, their first one's trace left out
  rest         the whole run's difference minus the steps' (the setup before
               the first step, the last flush and closing after the last)

each as a percentage of the plain run, medians over rounds; the whole run's
ratio with its interquartile range over rounds (bench_logging.spread).  Both
clocks: wall time, and the process's CPU time (all threads), which other
tenants of a loaded machine disturb less (a table each).

Run: python -m benchmarks.bench_whole_run [--models convnet,mlp] [--steps 2000] [--rounds 3]
       [--options compare_every=1000,nonfinite_replay=False] [--tiny] [--json PATH]
--options: ``GradLensCallback`` arguments other than the defaults (name=value,
each value a Python literal), the same for every model; the parts are split
by that callback's schedules.
--tiny: the MLP and the conv net at 24 steps, 1 round (no timing asserted).
"""

import argparse
import ast
import json
import os
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.harness import cell  # noqa: E402
from benchmarks.harness import spread  # noqa: E402
from benchmarks.harness import write_json  # noqa: E402
from evaluation import real_models  # noqa: E402

POLICY = "mixed_bfloat16"
NAMES = ("convnet", "resnet50", "transformer", "efficientnet_b0", "mlp")
BATCH = {"convnet": 32, "resnet50": 16, "transformer": 16, "efficientnet_b0": 16, "mlp": 64}
PARTS = ("tracing", "check", "logged", "comparisons", "rest")


def convnet(policy, seed=0):
    """Three Conv2D+BatchNorm+ReLU blocks (32, 64, 128 filters, max pooling), a float32 softmax."""
    import keras

    keras.utils.set_random_seed(seed)
    with real_models.global_policy(policy):
        inputs = keras.Input((32, 32, 3))
        x = inputs
        for i, filters in enumerate((32, 64, 128)):
            x = keras.layers.Conv2D(filters, 3, padding="same", name="conv_%d" % i)(x)
            x = keras.layers.BatchNormalization(name="bn_%d" % i)(x)
            x = keras.layers.ReLU(name="relu_%d" % i)(x)
            x = keras.layers.MaxPooling2D(name="pool_%d" % i)(x)
        x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
        x = keras.layers.Dense(10, name="logits")(x)
        return keras.Model(inputs, real_models._softmax_float32(x), name="convnet")


def build_and_data(name, rows):
    """A fresh compiled model (seed 0, clear session) and (x, y) of ``rows`` rows."""
    import keras

    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    if name == "convnet":
        model, data = convnet(POLICY), real_models.images(32)(rows, rng)
    else:
        workload = real_models.ZOO[name]
        model, data = workload.build(POLICY), workload.data(rows, rng)
    model.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
    return model, data


class StepClock:
    """Each step's wall time, from one batch's begin to the next's (the last to the end of training)."""

    def __new__(cls):
        import keras

        class _Clock(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.marks = {"wall": [], "cpu": []}

            def on_train_batch_begin(self, batch, logs=None):
                self._mark()

            def on_train_end(self, logs=None):
                self._mark()

            def _mark(self):
                self.marks["wall"].append(time.perf_counter())
                self.marks["cpu"].append(time.process_time())

        return _Clock()


CLOCKS = ("wall", "cpu")


def lens_options(text):
    """``GradLensCallback`` keyword arguments from "name=value,..." (values Python literals)."""
    options = {}
    for item in filter(None, (text or "").split(",")):
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit("--options: %r is not name=value" % item)
        try:
            options[name.strip()] = ast.literal_eval(value.strip())
        except (ValueError, SyntaxError):
            raise SystemExit("--options: the value of %s, %r, is not a Python literal" % (name, value))
    return options


def one_fit(name, lens, steps, logdir, options=None):
    """{clock: (total seconds, [step seconds])} and the lens's callback (or None) of one fresh fit;
    ``options``: the callback's arguments beyond its log directory."""
    from tb_gradlens.keras import GradLensCallback

    model, (x, y) = build_and_data(name, steps * BATCH[name])
    clock = StepClock()
    callback = GradLensCallback(tempfile.mkdtemp(dir=logdir), **(options or {})) if lens else None
    start = time.perf_counter(), time.process_time()
    model.fit(x, y, batch_size=BATCH[name], epochs=1, verbose=0, shuffle=False,
              callbacks=[clock] + ([callback] if callback else []))
    totals = time.perf_counter() - start[0], time.process_time() - start[1]
    return {c: (t, list(np.diff(clock.marks[c]))) for c, t in zip(CLOCKS, totals)}, callback


def split(plain, lensed, callback):
    """The lens's cost by part, in seconds (``PARTS``), from one round's two fits."""
    (plain_total, plain_steps), (lens_total, lens_steps) = plain, lensed
    n = min(len(plain_steps), len(lens_steps))
    diff = np.asarray(lens_steps[:n]) - np.asarray(plain_steps[:n])
    compared = [i for i in range(1, n) if callback.compare_schedule(i)]
    logged = [i for i in range(1, n) if callback.gradient_schedule(i) and i not in compared]
    quiet = [i for i in range(1, n) if i not in compared and i not in logged]
    trace = diff[0]
    if len(compared) > 1:  # the first comparison's trace: beyond the median comparison step
        extra = max(0.0, diff[compared[0]] - float(np.median(diff[compared[1:]])))
        trace += extra
    else:
        extra = 0.0
    parts = {"tracing": trace, "check": diff[quiet].sum(), "logged": diff[logged].sum(),
             "comparisons": diff[compared].sum() - extra}
    parts["rest"] = (lens_total - plain_total) - sum(parts.values())
    return {k: float(v) for k, v in parts.items()}, len(compared), len(logged), len(quiet)


def bench_model(name, steps, rounds, logdir, log=print, options=None):
    """{clock: the whole run's figures} of ``rounds`` alternated pairs of fits (``options``: ``one_fit``)."""
    totals = {c: {"plain": [], "lens": []} for c in CLOCKS}
    parts = {c: [] for c in CLOCKS}
    counts = None
    for r in range(rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        fits, callback = {}, None
        for lens in order:
            fits[lens], made = one_fit(name, lens, steps, logdir, options)
            callback = made or callback
            log("round %d %s %s: %.1f s wall, %.1f s CPU" % (
                r, name, "lens" if lens else "plain", fits[lens]["wall"][0], fits[lens]["cpu"][0]), flush=True)
        for c in CLOCKS:
            totals[c]["plain"].append(fits[False][c][0])
            totals[c]["lens"].append(fits[True][c][0])
            part, *counts = split(fits[False][c], fits[True][c], callback)
            parts[c].append({k: v / fits[False][c][0] for k, v in part.items()})
    out = {}
    for c in CLOCKS:
        ratio = np.array(totals[c]["lens"]) / np.array(totals[c]["plain"])
        out[c] = {"model": name, "clock": c, "steps": steps, "batch": BATCH[name], "rounds": rounds,
                  "options": dict(options or {}),
                  "plain_s": float(np.median(totals[c]["plain"])), "lens_s": float(np.median(totals[c]["lens"])),
                  "ratio": spread(ratio), "parts": {k: float(np.median([p[k] for p in parts[c]])) for k in PARTS},
                  "comparison_steps": counts[0], "logged_steps": counts[1], "quiet_steps": counts[2]}
    return out


def table(results, clock):
    lines = ["| model (%s time) | steps | batch | plain s | lens s | whole run lens / plain | " % clock
             + " | ".join("%s %%" % p for p in PARTS) + " |", "|" + "---|" * (6 + len(PARTS))]
    for r in (r[clock] for r in results):
        lines.append("| %s | %d | %d | %.1f | %.1f | %s | %s |" % (
            r["model"], r["steps"], r["batch"], r["plain_s"], r["lens_s"], cell(r["ratio"]),
            " | ".join("%+.1f" % (100 * r["parts"][p]) for p in PARTS)))
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma list of %s (default: all; --tiny: mlp,convnet)" % ", ".join(NAMES))
    parser.add_argument("--steps", type=int, help="steps per fit (default 2000; --tiny: 24)")
    parser.add_argument("--rounds", type=int, help="default 3 (--tiny: 1)")
    parser.add_argument("--options", help="GradLensCallback arguments beyond the defaults: name=value,...")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    names = (args.models or ("mlp,convnet" if args.tiny else ",".join(NAMES))).split(",")
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise SystemExit("unknown model(s) %s (known: %s)" % (", ".join(unknown), ", ".join(NAMES)))
    steps = args.steps or (24 if args.tiny else 2000)
    rounds = args.rounds or (1 if args.tiny else 3)
    options = lens_options(args.options)
    logdir = tempfile.mkdtemp(prefix="gradlens_whole_run_")
    results = []
    for name in names:
        results.append(bench_model(name, steps, rounds, logdir, options=options))
        print(json.dumps(results[-1]), flush=True)
    if options:
        print("GradLensCallback options beyond the defaults: %s" % ", ".join("%s=%r" % kv for kv in options.items()))
    for clock in CLOCKS:
        print(table(results, clock))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What checking every step for a non-finite loss or gradient costs (issue 26).

The callback's default (``nonfinite_replay="auto"``) runs, on every train
step it does not log, a trace of the step with one reduction over the
gradients and one conditional that a healthy step does not take; with
``nonfinite_replay=False`` (and no loss scaling) Keras' own train function
runs those steps.  Variants, identical models (same weights), one fit call
per variant per round, interleaved:

  plain       no callback
  checked     GradLensCallback logging nothing in the window (its defaults otherwise)
  unchecked   the same with nonfinite_replay=False

Per round and variant: the median and the 10th percentile of the per-batch
wall times (the first 2 batches of a call dropped); the ratio variant /
plain of the same round; reported as the median over rounds with the
interquartile range.  The 10th percentile is the quieter statistic on a
shared machine.  ``--first`` also times the first fit call of a fresh model
(tracing: the checked step's trace holds the replay's two passes).
``--jit``: every variant compiled with ``jit_compile=True`` (the check runs
around the compiled step and holds the values its replay needs).
``--mirrored``: under MirroredStrategy over two logical CPUs (the check's
sums all-reduced every step), global batch twice the default.

Run: python -m benchmarks.bench_nonfinite [--models mlp,transformer] [--rounds 15] [--first] [--jit | --mirrored]
     [--json PATH]   (the printed rows, each with the machine line)
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from evaluation import benchmark_models  # noqa: E402
from benchmarks.harness import BatchTimer  # noqa: E402
from benchmarks.harness import spread  # noqa: E402
from benchmarks.harness import write_rows  # noqa: E402

IDLE = dict(gradient_every=10**9, compare_every=10**9, start_step=10**9)


def _callbacks(variant, tmp):
    from tb_gradlens.keras import GradLensCallback

    if variant == "plain":
        return []
    return [GradLensCallback(os.path.join(tmp, variant), nonfinite_replay=variant == "checked" and "auto", **IDLE)]


_MIRRORED = []  # (one strategy for every model: two make collectives of the same keys)


def _strategy(mirrored):
    import contextlib

    import tensorflow as tf

    if not mirrored:
        return contextlib.nullcontext()
    if not _MIRRORED:
        _MIRRORED.append(tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))
    return _MIRRORED[0].scope()


def bench_model(name, rounds, batches, batch_size, tiny=False, jit=False, mirrored=False):
    import keras

    rng = np.random.default_rng(0)
    x, y = benchmark_models.batch(name, batch_size * batches, rng, tiny)
    tmp = tempfile.mkdtemp(prefix="gradlens_nonfinite_bench_")
    variants = ("plain", "checked", "unchecked")
    fitted, callbacks = {}, {}
    for v in variants:
        keras.utils.set_random_seed(0)
        with _strategy(mirrored):
            model = benchmark_models.build(name, "mixed_bfloat16", tiny=tiny)
            model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="sparse_categorical_crossentropy",
                          jit_compile=jit)
        fitted[v], callbacks[v] = model, _callbacks(v, tmp)
    medians = {v: [] for v in variants}
    lows = {v: [] for v in variants}
    for _ in range(rounds):
        for v in variants:
            timer = BatchTimer()
            fitted[v].fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False,
                          callbacks=callbacks[v] + [timer])
            times = np.array(timer.times[2:])
            medians[v].append(float(np.median(times)))
            lows[v].append(float(np.percentile(times, 10)))
    out = {"model": name, "batch": batch_size, "jit_compile": jit, "mirrored": mirrored,
           "plain_ms_per_step": 1000 * float(np.median(medians["plain"]))}
    for stat, table in (("median", medians), ("p10", lows)):
        base = np.array(table["plain"])
        out[stat] = {v: spread(np.array(table[v]) / base) for v in variants if v != "plain"}
    return out


def first_call(name, batch_size, tiny=False):
    """Seconds of the first fit call (2 batches) of a fresh model, per variant."""
    import keras

    rng = np.random.default_rng(0)
    x, y = benchmark_models.batch(name, 2 * batch_size, rng, tiny)
    tmp = tempfile.mkdtemp(prefix="gradlens_nonfinite_first_")
    out = {}
    for v in ("plain", "checked", "unchecked"):
        keras.utils.set_random_seed(0)
        model = benchmark_models.build(name, "mixed_bfloat16", tiny=tiny)
        model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="sparse_categorical_crossentropy")
        start = time.perf_counter()
        model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False, callbacks=_callbacks(v, tmp))
        out[v] = time.perf_counter() - start
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,transformer")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--batches", type=int, default=42)
    parser.add_argument("--first", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--jit", action="store_true")
    parser.add_argument("--mirrored", action="store_true")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.mirrored:  # (before TensorFlow makes its devices)
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    results = []
    for name in args.models.split(","):
        batch = benchmark_models.DEFAULT_BATCH[name] * (2 if args.mirrored else 1)
        result = bench_model(name, args.rounds, args.batches, batch, args.tiny, args.jit, args.mirrored)
        if args.first:
            result["first_call_s"] = first_call(name, benchmark_models.DEFAULT_BATCH[name], args.tiny)
        print(json.dumps(result), flush=True)
        results.append(result)
    write_rows(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

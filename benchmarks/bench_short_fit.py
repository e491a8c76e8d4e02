"""What a new user pays first: a whole short model.fit, tracing included, with the lens vs without.

keras.applications DenseNet121, EfficientNetB0, ConvNeXtTiny and ResNet50
(weights=None, 32x32 inputs, 10 classes, float32 softmax as in the zoo of
evaluation/real_models.py) and the ~5M transformer of evaluation/benchmark_models.py;
mixed_bfloat16, Adam, sparse categorical crossentropy, jit_compile as Keras
chooses ("auto": off on CPU), batch 16 (transformer: benchmark_models.DEFAULT_BATCH).
Every fit is model.fit(epochs=1, verbose=0) of --steps batches on a fresh
model, built with the same seed after keras.backend.clear_session(), so that
every fit traces Keras' train function (and the lens's steps) anew.  The
variants run interleaved in one process: for each round, for each variant in
order, one whole fit.  Before the rounds, each variant fits the zoo's small
CNN for 2 batches, untimed, so that what a process pays once (TensorFlow's
first op runs, the lens's first summary writer) lands in no timed fit
(--no-warmup keeps it in round 1).

Variants:
  plain             no callback
  plain_built       no callback, model.optimizer.build(model.trainable_variables) before fit
  defaults          GradLensCallback(logdir) at its defaults
  gradient_every_1  GradLensCallback(logdir, gradient_every=1)
  NAME=JSON         (--variants) GradLensCallback(logdir, **JSON)

Measured per fit: the wall time of the whole model.fit call; per batch, the
wall time on_train_batch_begin -> end of a timing callback placed first in
the callbacks list; the first batch (Keras traces its train function there),
the median of the other batches, and the slow batches (over 3x that median:
where the lens traces its logging steps, e.g. its first gradient step).
Reported per model and variant, as medians over rounds: the total, the
ratio variant / plain of the same round (median and interquartile range of
the per-round ratios, bench_logging.spread), the first batch, the median
batch, the slow batches' indices, and extra_first_batches_s = the sum of the
slow batches' times minus plain's first batch of the same round: the first
batches' time beyond Keras' own first trace (it counts one ordinary step per
slow batch after the first, a median batch each), shown beside plain's first
batch.

Run: python -m benchmarks.bench_short_fit --models densenet121 [--steps 50] [--rounds 3]
       [--variants defaults,gradient_every_1] [--variants 'every_5={"gradient_every": 5}']
       [--no-warmup] [--tiny] [--json PATH]
--tiny runs the zoo's small BatchNorm+Dropout CNN (or --models at their tiny
sizes where they have one) for 4 steps, 1 round (no timing asserted).
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
from evaluation import real_models  # noqa: E402
from benchmarks.harness import BatchTimer  # noqa: E402
from benchmarks.harness import cell  # noqa: E402
from benchmarks.harness import spread  # noqa: E402
from benchmarks.harness import write_json  # noqa: E402

POLICY = "mixed_bfloat16"
APPLICATIONS = {"densenet121": "DenseNet121", "efficientnet_b0": "EfficientNetB0",
                "convnext_tiny": "ConvNeXtTiny", "resnet50": "ResNet50"}
NAMES = tuple(APPLICATIONS) + ("transformer",)
TINY_MODEL = "bn_dropout_cnn"
# plain_built: no callback, the optimizer built before fit, so Keras traces its step once (its
# Adam otherwise makes its moments in the step's first trace, which TensorFlow then traces again;
# the lens builds the optimizer before its own trace): the baseline for the lens's own tracing.
PLAIN_BUILT = "plain, optimizer built before fit"
VARIANTS = {"plain": None, "plain_built": PLAIN_BUILT, "defaults": {}, "gradient_every_1": {"gradient_every": 1}}
SLOW = 3.0  # a slow batch takes over SLOW x the median of the batches after the first


def build_and_data(name, rows, tiny):
    """A fresh compiled model (seed 0, clear session) and (x, y) of ``rows`` rows."""
    import keras

    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    if name in APPLICATIONS:
        model = real_models._application(getattr(keras.applications, APPLICATIONS[name]), POLICY, 32, 0)
        data = real_models.images(32)(rows, rng)
    elif name in benchmark_models.NAMES:
        model, data = benchmark_models.build(name, POLICY, tiny=tiny), benchmark_models.batch(name, rows, rng, tiny)
    else:
        model, data = real_models.ZOO[name].build(POLICY), real_models.ZOO[name].data(rows, rng)
    model.compile(optimizer=keras.optimizers.Adam(), loss="sparse_categorical_crossentropy")
    return model, data


def one_fit(name, kwargs, steps, batch_size, logdir, tiny):
    """Total, first batch, median of the others and the slow batches of one fresh fit."""
    from tb_gradlens.keras import GradLensCallback

    model, (x, y) = build_and_data(name, steps * batch_size, tiny)
    timer = BatchTimer()
    lens = isinstance(kwargs, dict)
    if kwargs == PLAIN_BUILT:
        model.optimizer.build(model.trainable_variables)
    callbacks = [timer, GradLensCallback(tempfile.mkdtemp(dir=logdir), **kwargs)] if lens else [timer]
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
    total = time.perf_counter() - start
    times = timer.times
    median = float(np.median(times[1:] or times))
    slow = [i for i, t in enumerate(times) if t > SLOW * median]
    return {"total_s": total, "first_batch_s": times[0], "median_batch_s": median, "slow_batches": slow,
            "slow_batches_s": float(sum(times[i] for i in slow))}


def bench_model(name, variants, rounds, steps, batch_size, logdir, tiny):
    fits = {v: [] for v in variants}
    for r in range(rounds):
        for v, kwargs in variants.items():
            fits[v].append(one_fit(name, kwargs, steps, batch_size, logdir, tiny))
            print("round %d %s %s: %.1f s, slow batches %s" % (r, name, v, fits[v][-1]["total_s"],
                                                               fits[v][-1]["slow_batches"]), flush=True)
    plain_total = np.array([f["total_s"] for f in fits["plain"]])
    plain_first = np.array([f["first_batch_s"] for f in fits["plain"]])
    result = {"model": name, "batch": batch_size, "steps": steps, "rounds": rounds,
              "plain_first_batch_s": float(np.median(plain_first)), "variants": {}, "fits": fits}
    for v, per_round in fits.items():
        column = lambda key: np.array([f[key] for f in per_round])  # noqa: E731
        result["variants"][v] = {
            "kwargs": variants[v],
            "total_s": float(np.median(column("total_s"))),
            "ratio": spread(column("total_s") / plain_total),
            "first_batch_s": float(np.median(column("first_batch_s"))),
            "median_batch_ms": 1000 * float(np.median(column("median_batch_s"))),
            "slow_batches": [f["slow_batches"] for f in per_round],
            "extra_first_batches_s": float(np.median(column("slow_batches_s") - plain_first)),
        }
    return result


def parse_variants(text):
    """plain, then each --variants: a comma list of VARIANTS' names, or one NAME=JSON (default: all)."""
    chosen = {"plain": None}
    for item in text or []:
        name, _, kwargs = item.partition("=")
        if kwargs:
            chosen[name] = json.loads(kwargs)
        else:
            for part in name.split(","):
                if part not in VARIANTS:
                    raise SystemExit("unknown variant %r (known: %s)" % (part, ", ".join(VARIANTS)))
                chosen[part] = VARIANTS[part]
    if len(chosen) == 1:
        chosen.update(VARIANTS)
    return chosen


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", help="comma list of %s (default: all; --tiny: %s)" % (
        ", ".join(NAMES), TINY_MODEL))
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--rounds", type=int, help="default 3 (--tiny: 1)")
    parser.add_argument("--steps", type=int, help="batches per fit (default 50; --tiny: 4)")
    parser.add_argument("--batch", type=int,
                        help="batch size (default 16; transformer: benchmark_models.DEFAULT_BATCH)")
    parser.add_argument("--variants", action="append",
                        help="variants beside plain: a comma list of %s, or NAME=JSON of GradLensCallback "
                             "kwargs (one per --variants); repeatable (default: all)"
                             % ", ".join(v for v in VARIANTS if v != "plain"))
    parser.add_argument("--no-warmup", action="store_true", help="no untimed fits before the rounds")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    names = (args.models or (TINY_MODEL if args.tiny else ",".join(NAMES))).split(",")
    rounds = args.rounds or (1 if args.tiny else 3)
    steps = args.steps or (4 if args.tiny else 50)
    variants = parse_variants(args.variants)
    logdir = tempfile.mkdtemp(prefix="gradlens_short_fit_")
    if not args.no_warmup:
        for kwargs in variants.values():
            one_fit(TINY_MODEL, kwargs, 2, 16, logdir, True)
    results = []
    for name in names:
        batch_size = args.batch or (benchmark_models.DEFAULT_BATCH["transformer"] if name == "transformer" else 16)
        results.append(bench_model(name, variants, rounds, steps, batch_size, logdir, args.tiny))
        print(json.dumps({k: v for k, v in results[-1].items() if k != "fits"}), flush=True)
    print("| model | variant | fit s | fit / plain | first batch s | median batch ms | slow batches "
          "| extra_first_batches_s | / plain's first batch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for v, s in r["variants"].items():
            print("| %s | %s | %.1f | %s | %.2f | %.1f | %s | %.2f | %.2fx |" % (
                r["model"], v, s["total_s"], "–" if v == "plain" else cell(s["ratio"]), s["first_batch_s"],
                s["median_batch_ms"], " / ".join(",".join(map(str, b)) or "none" for b in s["slow_batches"]),
                s["extra_first_batches_s"], s["extra_first_batches_s"] / r["plain_first_batch_s"]))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

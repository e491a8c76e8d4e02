"""The precision advisor's cost: a comparison step with and without it, and a one-off round.

Identical models (same weights), mixed_bfloat16, model.fit with
GradLensCallback(compare_every=1) in both variants; the advisor variant adds
``advisor=Advisor(batch, units_per_step=K)`` (K units measured per
comparison step: 2 + 2K passes, plus one verification pass at the step that
ends a round).  Per-batch wall time (on_train_batch_begin -> end, which
includes the advisor's work in the lens's on_train_batch_end) of one fit call
of N batches per round; the first round is a warm-up (it traces every
pass) and is dropped; the ratio advisor / comparison-only of the same round
is reported as the median over rounds, beside the plain step.

Also a one-off ``tb_gradlens.advise`` (eager, every unit at once): wall time,
passes and units (deep models: consecutive layers grouped into at most
``max_units`` blocks).

Run: python -m benchmarks.bench_advisor [--models mlp,transformer] [--tiny]
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
from benchmarks.harness import write_json  # noqa: E402


def bench_model(name, tiny, rounds, batches, batch_size, units_per_step):
    import keras

    import tb_gradlens
    from tb_gradlens.keras import GradLensCallback

    rng = np.random.default_rng(0)
    x, y = benchmark_models.batch(name, batch_size * batches, rng, tiny)
    probe = benchmark_models.batch(name, batch_size, rng, tiny)
    tmp = tempfile.mkdtemp(prefix="gradlens_advisor_bench_")
    advisor = tb_gradlens.Advisor(probe, units_per_step=units_per_step)
    variants = {
        "plain": lambda: [],
        "compare": lambda: [GradLensCallback(os.path.join(tmp, "compare"), gradient_every=0, compare_every=1,
                                             update_stats=False)],
        "compare_advisor": lambda: [GradLensCallback(os.path.join(tmp, "advisor"), gradient_every=0,
                                                     compare_every=1, update_stats=False, advisor=advisor)],
    }
    fitted, callbacks = {}, {}
    for v, make in variants.items():
        keras.utils.set_random_seed(0)
        model = benchmark_models.build(name, "mixed_bfloat16", tiny=tiny)
        model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="sparse_categorical_crossentropy")
        fitted[v], callbacks[v] = model, make()
    per_round = {v: [] for v in variants}
    for r in range(rounds + 1):  # round 0: warm-up (traces)
        for v in variants:
            timer = BatchTimer()
            fitted[v].fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False,
                          callbacks=callbacks[v] + [timer])
            if r:
                per_round[v].append(float(np.median(timer.times[1:])))
    plain, compare, advised = (np.array(per_round[v]) for v in ("plain", "compare", "compare_advisor"))
    keras.utils.set_random_seed(0)
    model = benchmark_models.build(name, "mixed_bfloat16", tiny=tiny)
    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="sparse_categorical_crossentropy")
    start = time.perf_counter()
    once = tb_gradlens.advise(model, probe)
    one_off = time.perf_counter() - start
    cost = once.payload["cost"]
    return {
        "model": name,
        "units_per_step": units_per_step,
        "plain_ms_per_step": 1000 * float(np.median(plain)),
        "compare_ms_per_step": 1000 * float(np.median(compare)),
        "advisor_ms_per_step": 1000 * float(np.median(advised)),
        "advisor_over_compare": float(np.median(advised / compare)),
        "advisor_over_plain": float(np.median(advised / plain)),
        "one_off_seconds": one_off,
        "one_off_passes": cost["passes"],
        "units": cost["units"],
        "recommendation": once.advice.recommendation["float32"],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,transformer")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--units-per-step", type=int, default=4)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    results = []
    for name in args.models.split(","):
        r = bench_model(name, args.tiny, args.rounds, args.batches, args.batch, args.units_per_step)
        results.append(r)
        print(json.dumps(r), flush=True)
    print("| model | units | plain ms/step | comparison step ms | + advisor (%d units/step) ms | "
          "advisor / comparison | one-off advise s (passes) |" % args.units_per_step)
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print("| %s | %d | %.1f | %.1f | %.1f | %.2fx | %.2f (%d) |" % (
            r["model"], r["units"], r["plain_ms_per_step"], r["compare_ms_per_step"], r["advisor_ms_per_step"],
            r["advisor_over_compare"], r["one_off_seconds"], r["one_off_passes"]))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

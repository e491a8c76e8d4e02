"""The lens's cost on real models under model.fit: steps it does not log, and the first step.

keras.applications MobileNetV2 (alpha 0.35) and ResNet50, weights=None,
32x32 inputs, 10 classes, mixed_bfloat16, batch 16, jit_compile as Keras
chooses on this machine ("auto": off on CPU) and, for MobileNetV2, also
jit_compile=True.  Side by side in one process, interleaved:

  unlogged step   per-batch wall time (on_train_batch_begin -> end) of an
                  epoch of N batches with GradLensCallback attached but
                  logging nothing in the window (its schedules start far
                  later) / the same without the callback; the first 2
                  batches of each fit are dropped (tracing), the median of
                  the rest per fit, the ratio per round, the median over
                  rounds.  Target 1.00x: the lens adds one predicate per
                  schedule to a step it does not log, no host sync, no
                  retrace (traces of the step are counted).
  first step      wall time of the first batch of a fresh model's first
                  fit (Keras traces and optimizes its train function, runs
                  it), with the callback at its defaults but
                  compare_every=100 (step 0 is then a gradient step and a
                  comparison step: the lens's parts are traced then too) /
                  without.

Run: python -m benchmarks.bench_real_models [--models mobilenet_v2,resnet50]
     [--tiny] [--rounds R] [--first-rounds F] [--batches N] [--json PATH]
--tiny runs the zoo's small BatchNorm+Dropout CNN for a few batches (what
the test suite runs; no timing is asserted).
"""

import argparse
import json
import os
import sys
import tempfile

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from evaluation import real_models  # noqa: E402
from benchmarks.harness import BatchTimer  # noqa: E402
from benchmarks.harness import write_rows  # noqa: E402

POLICY = "mixed_bfloat16"
FAR = 10**9


def count_lens_traces():
    """Count the traces of the lens's step (its Python body runs only when
    TensorFlow traces it); call once, before any callback is created."""
    from tb_gradlens.keras import live, probe

    counts = {"n": 0}

    def counting(original):
        def traced(self, data):
            counts["n"] += 1
            return original(self, data)

        return traced

    live.LiveStep.train_step = counting(live.LiveStep.train_step)
    probe.ProbeStep.step = counting(probe.ProbeStep.step)
    return counts


def _build(name, jit):
    workload = real_models.ZOO[name]
    model = workload.build(POLICY)
    import keras

    model.compile(optimizer=keras.optimizers.SGD(1e-3), loss=workload.loss, jit_compile=True if jit else "auto")
    return model


def unlogged_ratio(name, jit, rounds, batches, batch_size, logdir, counts):
    from tb_gradlens.keras import GradLensCallback

    x, y = real_models.ZOO[name].data(batch_size * batches, np.random.default_rng(0))
    models = {"plain": _build(name, jit), "lens": _build(name, jit)}
    lens = GradLensCallback(os.path.join(logdir, "idle"), gradient_every=FAR, compare_every=FAR, start_step=FAR)
    counts["n"] = 0
    per_round = {"plain": [], "lens": []}
    traced_after_first = None
    for r in range(rounds):
        order = ("plain", "lens") if r % 2 == 0 else ("lens", "plain")
        for variant in order:
            timer = BatchTimer()
            models[variant].fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False,
                                callbacks=[timer] + ([lens] if variant == "lens" else []))
            per_round[variant].append(float(np.median(timer.times[2:] or timer.times)))
        if r == 0:
            traced_after_first = counts["n"]
    ratios = np.array(per_round["lens"]) / np.array(per_round["plain"])
    return {
        "plain_ms": 1000 * float(np.median(per_round["plain"])),
        "ratio": float(np.median(ratios)),
        "ratio_range": [float(ratios.min()), float(ratios.max())],
        "lens_traces_first_fit": traced_after_first,
        "lens_traces_later_fits": counts["n"] - traced_after_first,
    }


def first_step(name, jit, rounds, batch_size, logdir):
    from tb_gradlens.keras import GradLensCallback

    x, y = real_models.ZOO[name].data(batch_size * 2, np.random.default_rng(1))
    times = {"plain": [], "lens": []}
    for r in range(rounds):
        order = ("plain", "lens") if r % 2 == 0 else ("lens", "plain")
        for variant in order:
            model = _build(name, jit)
            timer = BatchTimer()
            callbacks = [timer]
            if variant == "lens":
                callbacks.append(GradLensCallback(os.path.join(logdir, "first_%d" % r), compare_every=100))
            model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False, callbacks=callbacks)
            times[variant].append(timer.times[0])
    return {"plain_s": float(np.median(times["plain"])), "lens_s": float(np.median(times["lens"])),
            "ratio": float(np.median(np.array(times["lens"]) / np.array(times["plain"]))),
            "rounds": rounds}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mobilenet_v2,resnet50")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--first-rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    configs = [(name, False) for name in args.models.split(",")]
    if "mobilenet_v2" in args.models.split(","):
        configs.append(("mobilenet_v2", True))
    if args.tiny:
        configs = [("bn_dropout_cnn", False), ("bn_dropout_cnn", True)]
    logdir = tempfile.mkdtemp(prefix="gradlens_real_models_")
    counts = count_lens_traces()
    results = []
    for name, jit in configs:
        result = {"model": name, "jit_compile": jit}
        result["unlogged"] = unlogged_ratio(name, jit, args.rounds, args.batches, args.batch, logdir,
                                            counts)
        result["first_step"] = first_step(name, jit, args.first_rounds, args.batch, logdir)
        results.append(result)
        print(json.dumps(result), flush=True)
    print("| model | jit_compile | plain ms/step | step not logged (lens/plain) | lens traces after 1st fit "
          "| first step plain | first step with lens | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        u, f = r["unlogged"], r["first_step"]
        print("| %s | %s | %.1f | %.3fx (%.3f-%.3f) | %d | %.1f s | %.1f s | %.2fx |" % (
            r["model"], r["jit_compile"], u["plain_ms"], u["ratio"], u["ratio_range"][0], u["ratio_range"][1],
            u["lens_traces_later_fits"], f["plain_s"], f["lens_s"], f["ratio"]))
    write_rows(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

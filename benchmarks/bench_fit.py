"""model.fit overhead of GradLensCallback, and the cost of a comparison step.

Identical models (same weights), mixed_bfloat16, jit_compile="auto" (Keras'
default: no XLA on CPU). Each variant trains with model.fit for one epoch of
N batches per round; a timing callback records per-batch wall time
(on_train_batch_begin -> end), the first 2 batches of each fit call (tracing)
are dropped, and the ratio variant / plain of the same round is reported as
the median over rounds.

Variants:
  callback_not_logging  the callback attached, logging nothing in the window
  gradients_every_step  gradient statistics + histogram + update stats every step
  compare_every_step    a bf16-vs-f32 comparison (gradients, activations, loss) every step
                        (target: <= 2.2x a plain step, about one extra float32 forward+backward)

Run: python benchmarks/bench_fit.py [--models mlp,convnet,transformer] [--tiny]
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import models  # noqa: E402


class BatchTimer:
    """Per-batch wall time of one fit call."""

    def __new__(cls):
        import keras

        class _Timer(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.times = []

            def on_train_batch_begin(self, batch, logs=None):
                self._t = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                self.times.append(time.perf_counter() - self._t)

        return _Timer()


def bench_model(name, tiny, rounds, batches, batch_size):
    import keras

    from tb_gradlens.keras import GradLensCallback

    rng = np.random.default_rng(0)
    x, y = models.batch(name, batch_size * batches, rng, tiny)
    tmp = tempfile.mkdtemp(prefix="gradlens_fit_bench_")
    variants = {
        "plain": lambda: [],
        "callback_not_logging": lambda: [GradLensCallback(os.path.join(tmp, "idle"), gradient_every=10**9,
                                                          compare_every=10**9, start_step=10**9)],
        "gradients_every_step": lambda: [GradLensCallback(os.path.join(tmp, "grads"), gradient_every=1,
                                                          compare_every=0)],
        "compare_every_step": lambda: [GradLensCallback(os.path.join(tmp, "compare"), gradient_every=0,
                                                        compare_every=1, update_stats=False)],
    }
    fitted = {}
    for v in variants:
        keras.utils.set_random_seed(0)
        model = models.build(name, "mixed_bfloat16", tiny=tiny)
        model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="sparse_categorical_crossentropy")
        fitted[v] = model
    per_round = {v: [] for v in variants}
    # One callback per variant for all rounds: a second fit() reuses its trace.
    callbacks = {v: make_callbacks() for v, make_callbacks in variants.items()}
    for _ in range(rounds):
        for v in variants:
            timer = BatchTimer()
            fitted[v].fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False,
                          callbacks=callbacks[v] + [timer])
            per_round[v].append(float(np.median(timer.times[2:])))
    base = np.array(per_round["plain"])
    result = {
        "model": name,
        "plain_ms_per_step": 1000 * float(np.median(base)),
        "ratio": {v: float(np.median(np.array(t) / base)) for v, t in per_round.items() if v != "plain"},
    }
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,convnet,transformer")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    results = []
    for name in args.models.split(","):
        r = bench_model(name, args.tiny, args.rounds, args.batches, args.batch)
        results.append(r)
        print(json.dumps(r), flush=True)
    print("| model | plain ms/step | callback, step not logged | gradients every step | comparison every step |")
    print("|---|---|---|---|---|")
    for r in results:
        q = r["ratio"]
        print("| %s | %.1f | %.3fx | %.3fx | %.3fx |" % (r["model"], r["plain_ms_per_step"], q["callback_not_logging"],
                                                       q["gradients_every_step"], q["compare_every_step"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

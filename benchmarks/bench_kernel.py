"""The compiled kernel on vs off: a model.fit at the callback's defaults.

Each fit runs in a fresh process (``$TB_GRADLENS_KERNEL`` is read once per
process: unset = the kernel as TensorFlow ops, ``0`` = TensorFlow ops
only), alternating on and off round by round; a process builds the model
under ``mixed_bfloat16``, then times two ``fit`` calls of ``--steps`` steps
with ``GradLensCallback(log_dir)`` at its defaults (statistics every 20
steps, comparisons every 100 from step 100): the first with its tracing,
the second traced already.  Printed: the median of the rounds per model and
side, the on/off ratio and the rounds' spread.

    python -m benchmarks.bench_kernel [--models mlp,convnet,transformer] [--rounds 3] [--steps 120]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Small real models, each step short enough for 2 x 120 steps per process.
SIZES = {
    "mlp": dict(batch=64),
    "convnet": dict(batch=8, width=0.25),
    "transformer": dict(batch=8, layers=2, d_model=64, heads=2, seq=32, vocab=2000),
}


def child(name, steps):
    import numpy as np

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras

    from evaluation import benchmark_models
    from tb_gradlens.keras import GradLensCallback
    from tb_gradlens.numerics import kernel

    size = dict(SIZES[name])
    batch_size = size.pop("batch")
    keras.utils.set_random_seed(0)
    policy = "mixed_bfloat16"
    if name == "mlp":
        model = benchmark_models.mlp(policy)
    elif name == "convnet":
        model = benchmark_models.convnet(policy, width=size["width"])
    else:
        model = benchmark_models.transformer(policy, **size)
    rng = np.random.default_rng(0)
    x, y = benchmark_models.batch(name, batch_size * steps, rng)
    if name == "transformer":
        x = x[:, :size["seq"]] % size["vocab"]
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    out = {}
    with tempfile.TemporaryDirectory() as log_dir:
        callback = GradLensCallback(log_dir)
        for label in ("first_fit_s", "second_fit_s"):
            start = time.perf_counter()
            model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
            out[label] = time.perf_counter() - start
    out["kernel"] = kernel.status() if hasattr(kernel, "status") else "?"
    print("RESULT " + json.dumps(out, default=str))


def run_child(name, steps, on):
    env = dict(os.environ)
    env.pop("TB_GRADLENS_KERNEL", None)
    if not on:
        env["TB_GRADLENS_KERNEL"] = "0"
    done = subprocess.run([sys.executable, "-m", "benchmarks.bench_kernel", "--child", name, "--steps", str(steps)],
                          env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError("child %s failed:\n%s" % (name, done.stderr[-3000:]))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="mlp,convnet,transformer")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--child")
    args = parser.parse_args(argv)
    if args.child:
        return child(args.child, args.steps)
    names = args.models.split(",")
    results = {(n, side): [] for n in names for side in ("on", "off")}
    for r in range(args.rounds):
        for n in names:
            order = ("on", "off") if r % 2 == 0 else ("off", "on")
            for side in order:
                found = run_child(n, args.steps, side == "on")
                results[(n, side)].append(found)
                print("round %d %-11s kernel %-3s first %.2f s, second %.2f s  (%s)" % (
                    r, n, side, found["first_fit_s"], found["second_fit_s"], str(found["kernel"])[:70]), flush=True)
    print("\n| model | fit | kernel on (median) | kernel off (median) | on/off | on rounds | off rounds |")
    print("|---|---|---|---|---|---|---|")
    for n in names:
        for label, key in (("first (traced)", "first_fit_s"), ("second", "second_fit_s")):
            on = [f[key] for f in results[(n, "on")]]
            off = [f[key] for f in results[(n, "off")]]
            print("| %s | %s | %.2f s | %.2f s | %.2fx | %s | %s |" % (
                n, label, statistics.median(on), statistics.median(off), statistics.median(on) / statistics.median(off),
                ", ".join("%.2f" % v for v in on), ", ".join("%.2f" % v for v in off)))


if __name__ == "__main__":
    main()

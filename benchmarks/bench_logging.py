"""Training-step overhead of gradient logging, side by side with what users do today.

For each model (mixed_bfloat16, custom GradientTape loop, jit off as Keras'
"auto" is on CPU), every variant is traced and warmed up, then timed in
interleaved rounds (baseline, variant, baseline, variant, ...); the figure
reported is the median over rounds of variant time / baseline time of the
same round, so machine noise hits both sides alike.

Variants:
  baseline             the plain training step
  lens_every_step      tb_gradlens.summary.gradients every step (stats + log2 histogram)
  lens_stats_only      the same without the histogram record
  lens_not_logged      the lens under record_if(False): the cost on steps it does not log
  scalars_per_variable 9 tf.summary.scalar per variable (the hand-written loop)
  histogram_per_var    tf.summary.histogram per variable
  check_numerics       tf.debugging.enable_check_numerics() (global; timed last)

Also: event-file bytes per logged step of each writing variant.

Run: python benchmarks/bench_logging.py [--models mlp,convnet,transformer] [--tiny]
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

HAND_WRITTEN_STATS = ("norm", "mean", "std", "min", "max", "max_abs", "rms", "zero_fraction", "nan_count")


def hand_written_scalars(grads, variables, step):
    """The per-variable scalar loop users write since Keras dropped write_grads."""
    import tensorflow as tf

    for g, v in zip(grads, variables):
        if g is None:
            continue
        g = tf.cast(tf.convert_to_tensor(g), tf.float32)  # embeddings give IndexedSlices
        name = v.path if hasattr(v, "path") else v.name
        tf.summary.scalar(name + "/norm", tf.norm(g), step=step)
        tf.summary.scalar(name + "/mean", tf.reduce_mean(g), step=step)
        tf.summary.scalar(name + "/std", tf.math.reduce_std(g), step=step)
        tf.summary.scalar(name + "/min", tf.reduce_min(g), step=step)
        tf.summary.scalar(name + "/max", tf.reduce_max(g), step=step)
        tf.summary.scalar(name + "/max_abs", tf.reduce_max(tf.abs(g)), step=step)
        tf.summary.scalar(name + "/rms", tf.sqrt(tf.reduce_mean(g * g)), step=step)
        tf.summary.scalar(
            name + "/zero_fraction", tf.reduce_mean(tf.cast(g == 0, tf.float32)), step=step
        )
        tf.summary.scalar(
            name + "/nan_count", tf.reduce_sum(tf.cast(tf.math.is_nan(g), tf.float32)), step=step
        )


def hand_written_histograms(grads, variables, step):
    import tensorflow as tf

    for g, v in zip(grads, variables):
        if g is not None:
            name = v.path if hasattr(v, "path") else v.name
            tf.summary.histogram(name, tf.convert_to_tensor(g), step=step)


def make_step(model, loss_fn, optimizer, variant, writer):
    """A tf.function training step for one variant."""
    import tensorflow as tf

    import tb_gradlens

    @tf.function
    def step_fn(x, y, step):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        variables = model.trainable_variables
        grads = tape.gradient(loss, variables)
        if variant in ("lens_every_step", "lens_stats_only", "lens_not_logged"):
            with writer.as_default(), tf.summary.record_if(variant != "lens_not_logged"):
                tb_gradlens.summary.gradients(
                    grads, variables, step=step, histogram=variant == "lens_every_step"
                )
        elif variant == "scalars_per_variable":
            with writer.as_default():
                hand_written_scalars(grads, variables, step)
        elif variant == "histogram_per_var":
            with writer.as_default():
                hand_written_histograms(grads, variables, step)
        optimizer.apply(grads, variables)
        return loss

    return step_fn


def time_steps(fn, batches, step0):
    import tensorflow as tf

    start = time.perf_counter()
    loss = None
    for i, (x, y) in enumerate(batches):
        loss = fn(x, y, tf.constant(step0 + i, tf.int64))
    float(loss)  # wait for the last step
    return time.perf_counter() - start


def dir_bytes(path):
    return sum(
        os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files
    )


def bench_model(name, tiny, rounds, steps_per_round, batch_size):
    import keras
    import tensorflow as tf

    policy = "mixed_bfloat16"
    keras.utils.set_random_seed(0)
    model = models.build(name, policy, tiny=tiny)
    n_params = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    optimizer = keras.optimizers.SGD(1e-3)
    rng = np.random.default_rng(0)
    batches = [
        tuple(tf.constant(a) for a in models.batch(name, batch_size, rng, tiny))
        for _ in range(steps_per_round)
    ]
    variants = [
        "lens_every_step",
        "lens_stats_only",
        "lens_not_logged",
        "scalars_per_variable",
        "histogram_per_var",
    ]
    tmp = tempfile.mkdtemp(prefix="gradlens_bench_")
    writers = {v: tf.summary.create_file_writer(os.path.join(tmp, v)) for v in variants}
    fns = {"baseline": make_step(model, loss_fn, optimizer, "baseline", None)}
    for v in variants:
        fns[v] = make_step(model, loss_fn, optimizer, v, writers[v])
    logged_steps = {v: 0 for v in variants}
    step = 0
    for v, fn in fns.items():  # trace and warm up
        time_steps(fn, batches[:2], step)
        step += 2
        if v in logged_steps and v != "lens_not_logged":
            logged_steps[v] += 2
    ratios = {v: [] for v in variants}
    base_times = []
    for _ in range(rounds):
        for v in variants:
            t_base = time_steps(fns["baseline"], batches, step)
            step += len(batches)
            t_var = time_steps(fns[v], batches, step)
            step += len(batches)
            if v != "lens_not_logged":
                logged_steps[v] += len(batches)
            ratios[v].append(t_var / t_base)
            base_times.append(t_base / len(batches))
    for w in writers.values():
        w.flush()
    result = {
        "model": name,
        "parameters": n_params,
        "variables": len(model.trainable_variables),
        "baseline_ms_per_step": 1000 * float(np.median(base_times)),
        "ratio": {v: float(np.median(r)) for v, r in ratios.items()},
        "bytes_per_logged_step": {
            v: dir_bytes(os.path.join(tmp, v)) / logged_steps[v]
            for v in variants
            if logged_steps[v]
        },
    }
    # check_numerics is global: measure it last, on its own, then turn it off.
    fn_cn = make_step(model, loss_fn, optimizer, "baseline", None)
    tf.debugging.enable_check_numerics()
    try:
        time_steps(fn_cn, batches[:2], step)
        cn = []
        for _ in range(rounds):
            t_cn = time_steps(fn_cn, batches, step)
            tf.debugging.disable_check_numerics()
            t_base = time_steps(fns["baseline"], batches, step)
            tf.debugging.enable_check_numerics()
            cn.append(t_cn / t_base)
        result["ratio"]["check_numerics"] = float(np.median(cn))
    finally:
        tf.debugging.disable_check_numerics()
    return result


def format_table(results):
    lines = []
    header = "| model | params | vars | base ms/step | " + " | ".join(
        ["lens every step", "lens stats only", "lens, step not logged", "scalars/var", "histogram/var", "check_numerics"]
    ) + " | bytes/logged step: lens | scalars/var | histogram/var |"
    lines.append(header)
    lines.append("|" + "---|" * (header.count("|") - 1))
    for r in results:
        q = r["ratio"]
        b = r["bytes_per_logged_step"]
        lines.append(
            "| %s | %d | %d | %.1f | %.3fx | %.3fx | %.3fx | %.3fx | %.3fx | %.3fx | %d | %d | %d |"
            % (
                r["model"], r["parameters"], r["variables"], r["baseline_ms_per_step"],
                q["lens_every_step"], q["lens_stats_only"], q["lens_not_logged"],
                q["scalars_per_variable"], q["histogram_per_var"], q.get("check_numerics", float("nan")),
                b["lens_every_step"], b["scalars_per_variable"], b["histogram_per_var"],
            )
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,convnet,transformer")
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (for the test suite)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20, help="steps per timed round")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    results = []
    for name in args.models.split(","):
        r = bench_model(name, args.tiny, args.rounds, args.steps, args.batch)
        results.append(r)
        print(json.dumps(r), flush=True)
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

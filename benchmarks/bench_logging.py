"""Training-step overhead of gradient logging, side by side with what users do today.

For each model (mixed_bfloat16, custom GradientTape loop, jit off as Keras'
"auto" is on CPU), every variant is traced and warmed up, then timed in
interleaved rounds (baseline, variant, baseline, variant, ...); the figure
reported is the median over rounds of variant time / baseline time of the
same round, with the interquartile range of those ratios as the noise, so
machine noise hits both sides alike.

Variants:
  baseline             the plain training step
  lens_every_step      tb_gradlens.summary.gradients every step (stats + log2 histogram)
  lens_stats_only      the same without the histogram record
  lens_not_logged      the lens under record_if(False): the cost on steps it does not log
  scalars_per_variable 9 tf.summary.scalar per variable (the hand-written loop)
  histogram_per_var    tf.summary.histogram per variable
  check_numerics       tf.debugging.enable_check_numerics() (global; timed last)

Also, on the gradients of one step of each model: the statistics pass
(``numerics.gradient_statistics``, every column and the histogram) of each
backend against a floor measured in the same rounds, one read of the same
gradients (a reduce_sum of each, added up); and the event-file bytes per
logged step of each writing variant.

Run: python -m benchmarks.bench_logging [--models mlp,convnet,transformer,resnet50,mobilenet_v2] [--tiny]
"""

import argparse
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
from evaluation import benchmark_models  # noqa: E402

VARIANTS = ["lens_every_step", "lens_stats_only", "lens_not_logged", "scalars_per_variable", "histogram_per_var"]
PASS_BACKENDS = ("kernel", "tf", "xla")


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


def pass_versus_floor(grads, rounds, reps):
    """The statistics pass of each backend against one read of the same
    gradients, interleaved; ratios per round, and ns per element."""
    import tensorflow as tf

    from tb_gradlens import numerics
    from tb_gradlens.numerics import kernel

    def dense_part(g):
        return g.values if isinstance(g, tf.IndexedSlices) else g

    elements = int(sum(int(tf.size(dense_part(g))) for g in grads if g is not None))
    present = [g for g in grads if g is not None]
    fns = {"floor": tf.function(lambda gs: tf.add_n([tf.reduce_sum(dense_part(g)) for g in gs]))}
    backends = [b for b in PASS_BACKENDS if b != "kernel" or kernel.library() is not None]
    for b in backends:
        fns[b] = tf.function(lambda gs, b=b: numerics.gradient_statistics(gs, backend=b))

    def run(fn):
        start = time.perf_counter()
        for _ in range(reps):
            out = fn(present)
        tf.nest.map_structure(lambda t: t.numpy(), out)
        return (time.perf_counter() - start) / reps

    for fn in fns.values():  # trace, compile, warm up
        run(fn)
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            times[k].append(run(fn))
    floor = np.array(times["floor"])
    return {
        "elements": elements,
        "floor_ms": 1000 * float(np.median(floor)),
        "floor_ns_per_element": 1e9 * float(np.median(floor)) / max(elements, 1),
        "pass": {
            b: dict(spread(np.array(times[b]) / floor), ms=1000 * float(np.median(times[b])),
                    ns_per_element=1e9 * float(np.median(times[b])) / max(elements, 1))
            for b in backends
        },
        "kernel": kernel.status(),
    }


def bench_model(name, tiny, rounds, steps_per_round, batch_size, pass_rounds):
    import keras
    import tensorflow as tf

    policy = "mixed_bfloat16"
    keras.utils.set_random_seed(0)
    model = benchmark_models.build(name, policy, tiny=tiny)
    n_params = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    optimizer = keras.optimizers.SGD(1e-3)
    rng = np.random.default_rng(0)
    batches = [
        tuple(tf.constant(a) for a in benchmark_models.batch(name, batch_size, rng, tiny))
        for _ in range(steps_per_round)
    ]
    tmp = tempfile.mkdtemp(prefix="gradlens_bench_")
    writers = {v: tf.summary.create_file_writer(os.path.join(tmp, v)) for v in VARIANTS}
    fns = {"baseline": make_step(model, loss_fn, optimizer, "baseline", None)}
    for v in VARIANTS:
        fns[v] = make_step(model, loss_fn, optimizer, v, writers[v])
    logged_steps = {v: 0 for v in VARIANTS}
    step = 0
    for v, fn in fns.items():  # trace and warm up
        time_steps(fn, batches[:2], step)
        step += 2
        if v in logged_steps and v != "lens_not_logged":
            logged_steps[v] += 2
    ratios = {v: [] for v in VARIANTS}
    base_times = []
    for _ in range(rounds):
        for v in VARIANTS:
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
        "batch": batch_size,
        "baseline_ms_per_step": 1000 * float(np.median(base_times)),
        "ratio": {v: float(np.median(r)) for v, r in ratios.items()},
        "spread": {v: spread(r) for v, r in ratios.items()},
        "bytes_per_logged_step": {
            v: dir_bytes(os.path.join(tmp, v)) / logged_steps[v]
            for v in VARIANTS
            if logged_steps[v]
        },
    }
    # The statistics pass alone, on this model's gradients of one step.
    x, y = batches[0]
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    result["pass_vs_floor"] = pass_versus_floor(grads, pass_rounds, 1 if tiny else 5)
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
        result["spread"]["check_numerics"] = spread(cn)
    finally:
        tf.debugging.disable_check_numerics()
    return result


def format_table(results):
    lines = []
    header = "| model | params | vars | batch | base ms/step | " + " | ".join(
        ["lens every step", "lens stats only", "lens, step not logged", "scalars/var", "histogram/var",
         "check_numerics"]
    ) + " | bytes/logged step: lens | lens stats only | scalars/var | histogram/var |"
    lines.append(header)
    lines.append("|" + "---|" * (header.count("|") - 1))
    for r in results:
        q = r["spread"]
        b = r["bytes_per_logged_step"]
        lines.append(
            "| %s | %d | %d | %d | %.1f | %s | %s | %s | %s | %s | %s | %d | %d | %d | %d |"
            % (
                r["model"], r["parameters"], r["variables"], r["batch"], r["baseline_ms_per_step"],
                cell(q["lens_every_step"]), cell(q["lens_stats_only"]), cell(q["lens_not_logged"]),
                cell(q["scalars_per_variable"]), cell(q["histogram_per_var"]), cell(q["check_numerics"]),
                b["lens_every_step"], b["lens_stats_only"], b["scalars_per_variable"], b["histogram_per_var"],
            )
        )
    lines.append("")
    lines.append("Statistics pass (all columns + histogram) vs one read of the same gradients, same rounds:")
    lines.append("")
    lines.append("| model | elements | floor ms (ns/element) | " + " | ".join(
        "%s: ms, x floor (IQR)" % b for b in PASS_BACKENDS) + " |")
    lines.append("|---|---|---|" + "---|" * len(PASS_BACKENDS))
    for r in results:
        p = r["pass_vs_floor"]
        cells = []
        for b in PASS_BACKENDS:
            s = p["pass"].get(b)
            cells.append("%.2f, %s" % (s["ms"], cell(s)) if s else "n/a")
        lines.append("| %s | %d | %.2f (%.2f) | %s |" % (
            r["model"], p["elements"], p["floor_ms"], p["floor_ns_per_element"], " | ".join(cells)))
    if results:
        lines.append("")
        lines.append("kernel: " + results[0]["pass_vs_floor"]["kernel"])
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(benchmark_models.NAMES))
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (for the test suite)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pass-rounds", type=int, default=15, help="rounds of the pass-vs-floor timing")
    parser.add_argument("--steps", type=int, help="steps per timed round (default: benchmark_models.DEFAULT_STEPS)")
    parser.add_argument("--batch", type=int, help="batch size (default: benchmark_models.DEFAULT_BATCH)")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    results = []
    for name in args.models.split(","):
        batch = args.batch or benchmark_models.DEFAULT_BATCH[name]
        r = bench_model(name, args.tiny, args.rounds, args.steps or benchmark_models.DEFAULT_STEPS[name], batch,
                        args.pass_rounds)
        results.append(r)
        print(json.dumps(r), flush=True)
    print(format_table(results))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

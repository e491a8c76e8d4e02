"""The lens's passes on a model's real sizes, each against one read of the same bytes.

Per model (mixed_bfloat16, weights as built, random gradients of the
variables' shapes; each pass a ``tf.function``, median of --rounds calls
after one warm-up, results read back to the host):

  read gradients   one reduce_sum per gradient, added (the floor of target 1)
  gradient pass    numerics.gradient_statistics (all columns and the histogram)
  weight copy      the callback's copy of the weights before the update
  update pass      numerics.update_statistics (weights before and after)
  read activations one reduce_sum per layer output and per reference (--activations)
  divergence       numerics.divergence_metrics over every layer output of one
                   training forward pass against a float32 copy times 1.001

Run: python -m benchmarks.bench_passes [--models transformer,resnet50] [--rounds 15] [--activations]
     [--json PATH]
"""

import argparse
import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from evaluation import benchmark_models  # noqa: E402
from benchmarks.harness import spread  # noqa: E402
from benchmarks.harness import write_rows  # noqa: E402


def _spread_ms(fn, rounds):
    """The spread (harness.spread) of --rounds calls' wall times in ms, after one warm-up."""
    import tensorflow as tf

    tf.nest.map_structure(lambda t: t.numpy(), fn())
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), fn())
        times.append(time.perf_counter() - t)
    s = spread(times)
    return dict(s, **{k: 1000 * s[k] for k in ("median", "p25", "p75")})


def bench_model(name, rounds, activations, tiny=False):
    import tensorflow as tf

    from tb_gradlens import compare
    from tb_gradlens import numerics

    model = benchmark_models.build(name, "mixed_bfloat16", tiny=tiny)
    variables = model.trainable_variables
    grads = [tf.random.normal(v.shape) * 1e-3 for v in variables]
    sizes = [int(np.prod(v.shape)) for v in variables]
    copies = [tf.Variable(tf.zeros(v.shape, v.dtype)) for v in variables]
    read = tf.function(lambda gs: tf.add_n([tf.reduce_sum(g) for g in gs]))
    stats = tf.function(lambda gs: numerics.gradient_statistics(gs, sizes))

    @tf.function
    def copy():
        for c, v in zip(copies, variables):
            c.assign(tf.convert_to_tensor(v.value))
        return tf.constant(True)

    @tf.function
    def update(gs):
        return numerics.update_statistics([c.read_value() for c in copies],
                                          [tf.convert_to_tensor(v.value) for v in variables], gs)

    spreads = {
        "read gradients": _spread_ms(lambda: read(grads), rounds),
        "gradient pass": _spread_ms(lambda: stats(grads), rounds),
        "weight copy": _spread_ms(copy, rounds),
        "update pass": _spread_ms(lambda: update(grads), rounds),
    }
    out = {"model": name, "elements": sum(sizes), "variables": len(variables), "ms": {}}
    if activations:
        x, _ = benchmark_models.batch(name, benchmark_models.DEFAULT_BATCH[name], np.random.default_rng(0), tiny)
        recorder = compare.ActivationRecorder(model, keep_tensors=True)
        with recorder:
            model(x, training=True)
        acts = [t for _, t in recorder.outputs]
        refs = [tf.cast(a, tf.float32) * 1.001 for a in acts]
        dtypes = [a.dtype.name for a in acts]
        both = tf.function(lambda c, r: tf.add_n([tf.reduce_sum(tf.cast(a, tf.float32)) for a in c]
                                                 + [tf.reduce_sum(b) for b in r]))
        div = tf.function(lambda c, r: numerics.divergence_metrics(c, r, dtypes))
        out["activation_elements"] = sum(int(np.prod(a.shape)) for a in acts)
        spreads["read activations"] = _spread_ms(lambda: both(acts, refs), rounds)
        spreads["divergence"] = _spread_ms(lambda: div(acts, refs), rounds)
    out["ms"].update((k, s["median"]) for k, s in spreads.items())
    return out, spreads


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="transformer,resnet50")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--activations", action="store_true")
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--json", help="also write the results here: a row per model, each pass's ms as a spread")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        r, spreads = bench_model(name, args.rounds, args.activations, args.tiny)
        print(json.dumps(r), flush=True)
        print("%s: %d elements in %d variables; %s" % (name, r["elements"], r["variables"], ", ".join(
            "%s %.1f ms" % kv for kv in r["ms"].items())), flush=True)
        rows.append(dict(r, spread_ms=spreads))
    write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

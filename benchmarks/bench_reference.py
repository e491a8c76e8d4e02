"""The IEEE reference where float32 is degraded: its exactness and its cost (issue 39).

Where the float32 probe finds float32 degraded (TF32, oneDNN's fpmath mode),
a comparison's float32 reference computes in float64.  On this CPU float32
is IEEE, so the degradation is emulated (``tests/support/other_hardware``:
the float32 inputs of matmul/conv rounded to 11 bits, as TF32 rounds them).
Per model and 16-bit policy, one batch, the model as configured against:

  ieee        the float32 reference, unemulated (IEEE float32: what is wanted)
  tf32        the float32 reference under emulated TF32 (ieee_reference=False)
  float64     the reference computed in float64 under emulated TF32 (the default)

Exactness: the candidate's gradient divergence (median rel_l2 over the
variables) against each, and ``tf32`` and ``float64`` as a ratio to
``ieee``.  Cost: the traced reference pass, median of ``--rounds`` calls
after a warm-up, float64 against float32 on this CPU (no emulation).

Run: python -m benchmarks.bench_reference [--models mlp,transformer,convnet] [--rounds 10] [--tiny] [--json PATH]
"""

import argparse
import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from evaluation import benchmark_models  # noqa: E402
from benchmarks.harness import write_rows  # noqa: E402

POLICIES = ("mixed_float16", "mixed_bfloat16")


def _median_rel_l2(candidate, reference):
    """The median over the variables of ||c - r|| / ||r|| (float64)."""
    values = [np.linalg.norm(np.asarray(c, np.float64) - np.asarray(r, np.float64))
              / np.linalg.norm(np.asarray(r, np.float64))
              for c, r in zip(candidate, reference) if c is not None and r is not None]
    return float(np.median(values))


def _timed(pass_, x, y, rounds):
    pass_(x, y)  # (traced and warmed up)
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        out = pass_(x, y)
        np.asarray(out[0])
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def bench(name, policy, rounds, tiny):
    import keras
    import tensorflow as tf

    from tests.support import other_hardware
    from tb_gradlens import compare

    keras.utils.set_random_seed(0)
    model = benchmark_models.build(name, policy, tiny=tiny)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    x, y = benchmark_models.batch(name, benchmark_models.DEFAULT_BATCH[name], np.random.default_rng(0), tiny)
    x, y = tf.constant(x), tf.constant(y)
    candidate = compare.KerasPass(model, compare.Variant(None), activations=False)
    cand_grads = [np.asarray(tf.convert_to_tensor(g)) for g in candidate(x, y)[1]]

    def reference(computed_in=None):
        return compare.KerasPass(model, "float32", activations=False, computed_in=computed_in)

    grads = {"ieee": reference()(x, y)[1]}
    with other_hardware.emulated_reduced_float32(11):
        grads["tf32"] = reference()(x, y)[1]
        grads["float64"] = reference("float64")(x, y)[1]
    divergence = {k: _median_rel_l2(cand_grads, [np.asarray(tf.convert_to_tensor(g)) for g in v])
                  for k, v in grads.items()}
    seconds = {"float32": _timed(reference(), x, y, rounds), "float64": _timed(reference("float64"), x, y, rounds)}
    return {"model": name, "policy": policy, "divergence": divergence,
            "ratio_to_ieee": {k: divergence[k] / divergence["ieee"] for k in ("tf32", "float64")},
            "reference_pass_ms": {k: 1000 * v for k, v in seconds.items()},
            "float64_cost": seconds["float64"] / seconds["float32"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="mlp,convnet,transformer")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--json", help="also write the results here: the rows printed")
    args = parser.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        for policy in POLICIES:
            rows.append(bench(name, policy, args.rounds, args.tiny))
            print(json.dumps(rows[-1]), flush=True)
    print("\n| model | policy | divergence vs IEEE float32 | vs TF32 reference | vs float64 reference (default) "
          "| float32 pass ms | float64 pass ms | float64 / float32 |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        d, q, ms = r["divergence"], r["ratio_to_ieee"], r["reference_pass_ms"]
        print("| %s | %s | %.4g | %.4g (%.2fx) | %.4g (%.4fx) | %.1f | %.1f | %.2fx |" % (
            r["model"], r["policy"], d["ieee"], d["tf32"], q["tf32"], d["float64"], q["float64"], ms["float32"],
            ms["float64"], r["float64_cost"]))
    write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

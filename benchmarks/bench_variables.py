"""Many tiny variables: what the first logged step and each later one cost.

For N variables of 4 float32 elements (the worst case for per-variable
costs: nothing to amortize them over), ``tb_gradlens.summary.gradients`` is
called on N gradients, eagerly and inside a ``tf.function`` (the first call
traces), with and without the histogram.  Reported per N: seconds of the
first and of a later call, the same for a plain ``tf.function`` that only
reads the N gradients (what the user's own step costs anyway), growth of the
process's peak memory, and the event-file bytes of the first and of a
later logged step (the first holds each tag's metadata once).

Variables are ``tf.Variable`` objects up to ``--max-real`` (default 10^5);
beyond, light stand-ins with the same ``path``, ``dtype`` and ``shape``
(creating 10^6 ``tf.Variable`` takes longer than the logging measured).
The traced runs stop at ``--traced-max`` (default 10^4): past it,
TensorFlow's own set-up of a function with that many tensor arguments
takes tens of minutes and gigabytes (10^5: killed after 22 minutes at
8 GB).  The histogram runs stop at ``--histogram-max`` (default 10^5): its
record alone is 1,124 bytes per variable and step.

Run: python -m benchmarks.bench_variables [--counts 10000,100000,1000000] [--tiny]
"""

import argparse
import collections
import json
import os
import resource
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.harness import write_json  # noqa: E402

StandIn = collections.namedtuple("StandIn", ("path", "dtype", "shape"))


def peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def dir_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    if hasattr(out, "numpy"):
        out.numpy()
    return time.perf_counter() - start


def bench(n, histogram, max_real, size, traced):
    import numpy as np
    import tensorflow as tf

    from tb_gradlens import summary

    start = time.perf_counter()
    if n <= max_real:
        variables = [tf.Variable(tf.zeros([size]), name="block_%d/w" % i) for i in range(n)]
    else:
        variables = [StandIn("block_%d/w" % i, tf.float32, tf.TensorShape([size])) for i in range(n)]
    values = np.random.default_rng(0).normal(size=(n, size)).astype(np.float32)
    grads = tf.unstack(tf.constant(values))
    made = time.perf_counter() - start
    out = {"variables": n, "histogram": histogram, "real_variables": n <= max_real,
           "make_seconds": made}
    tmp = tempfile.mkdtemp(prefix="gradlens_vars_")

    # Baselines: a function that only takes the N tensors (what passing
    # them into any tf.function costs), and one that reads each once.
    nan = float("nan")
    out.update(identity_first_s=nan, identity_later_s=nan, plain_first_s=nan, plain_later_s=nan)
    if traced:
        identity = tf.function(lambda g: g[0], autograph=False)
        out["identity_first_s"] = timed(lambda: identity(grads))
        out["identity_later_s"] = timed(lambda: identity(grads))
        plain = tf.function(lambda g: tf.add_n([tf.reduce_sum(t) for t in g]), autograph=False)
        out["plain_first_s"] = timed(lambda: plain(grads))
        out["plain_later_s"] = timed(lambda: plain(grads))

    out["traced"] = {k: nan for k in ("first_s", "later_s", "peak_mb_growth", "first_step_bytes",
                                      "later_step_bytes")}
    for mode in ("eager", "traced") if traced else ("eager",):
        path = os.path.join(tmp, mode)
        writer = tf.summary.create_file_writer(path, max_queue=10**6)
        if mode == "traced":
            step_fn = tf.function(lambda g, s: summary.gradients(g, variables, step=s, histogram=histogram),
                                  autograph=False)
        else:
            def step_fn(g, s):
                return summary.gradients(g, variables, step=s, histogram=histogram)
        before = peak_mb()
        with writer.as_default():
            first = timed(lambda: step_fn(grads, tf.constant(0, tf.int64)))
            writer.flush()
            first_bytes = dir_bytes(path)
            later = timed(lambda: step_fn(grads, tf.constant(1, tf.int64)))
            writer.flush()
        out[mode] = {"first_s": first, "later_s": later, "peak_mb_growth": peak_mb() - before,
                     "first_step_bytes": first_bytes, "later_step_bytes": dir_bytes(path) - first_bytes}
        writer.close()
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", default="10000,100000,1000000")
    parser.add_argument("--tiny", action="store_true", help="100 and 1,000 variables (the test suite)")
    parser.add_argument("--max-real", type=int, default=100000)
    parser.add_argument("--traced-max", type=int, default=10000)
    parser.add_argument("--histogram-max", type=int, default=100000)
    parser.add_argument("--size", type=int, default=4, help="elements per variable")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    counts = [100, 1000] if args.tiny else [int(c) for c in args.counts.split(",")]
    results = []
    for n in counts:
        for histogram in (False, True) if n <= args.histogram_max else (False,):
            r = bench(n, histogram, args.max_real, args.size, n <= args.traced_max)
            results.append(r)
            print(json.dumps(r), flush=True)
    print("| variables | histogram | first call s: eager / traced | later call s: eager / traced | "
          "tf.function taking the N tensors: first / later s | one reduce_sum each: first / later s | "
          "peak memory growth MB: eager / traced | bytes: first step / later step |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        e, t = r["eager"], r["traced"]
        print("| %d%s | %s | %.2f / %.2f | %.3f / %.3f | %.2f / %.3f | %.2f / %.3f | %.0f / %.0f | %.0f / %.0f |" % (
            r["variables"], "" if r["real_variables"] else " (stand-ins)", "yes" if r["histogram"] else "no",
            e["first_s"], t["first_s"], e["later_s"], t["later_s"], r["identity_first_s"],
            r["identity_later_s"], r["plain_first_s"], r["plain_later_s"], e["peak_mb_growth"],
            t["peak_mb_growth"], e["first_step_bytes"], e["later_step_bytes"]))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

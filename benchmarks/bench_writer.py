"""What the resilient writer costs in the README's custom loop (MLP, mixed_bfloat16).

Variants, interleaved in rounds in one process, on the same batches:

  plain            the training step, no logging
  tf writer        tb_gradlens.summary.gradients every step, TensorFlow's writer
  resilient        the same with tb_gradlens.summary.create_file_writer (each
                   flush checked through a tf.py_function)
  tf writer /10    the README's form: ``if step % 10 == 0:`` around the
                   ``as_default()`` block, so 9 steps of 10 neither write nor flush
  resilient /10    the same with the resilient writer

Prints ms per step (median over rounds) and its ratio to ``plain``'s;
``--json PATH`` also writes a row per variant: the ms as a spread over rounds
(harness.spread), that ratio, and the spread of the per-round ratios.

    python -m benchmarks.bench_writer [--rounds 7 --steps 40] [--json PATH]
"""

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.harness import spread  # noqa: E402
from benchmarks.harness import write_rows  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)

    import numpy as np
    import tensorflow as tf
    import keras

    from evaluation import real_models
    import tb_gradlens

    logdir = tempfile.mkdtemp(prefix="gradlens_writer_")
    model = real_models.build_compiled("mlp", "mixed_bfloat16", optimizer="sgd")
    x, y = real_models.digits(64, np.random.default_rng(0))
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    optimizer = keras.optimizers.SGD(1e-3)
    writers = {"tf writer": tf.summary.create_file_writer(os.path.join(logdir, "tf")),
               "resilient": tb_gradlens.summary.create_file_writer(os.path.join(logdir, "resilient")),
               "tf writer /10": tf.summary.create_file_writer(os.path.join(logdir, "tf10")),
               "resilient /10": tb_gradlens.summary.create_file_writer(os.path.join(logdir, "every10"))}

    def make_step(writer, every):
        @tf.function
        def step_fn(xb, yb, step):
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            if writer is not None:
                if step % every == 0:
                    with writer.as_default():
                        tb_gradlens.summary.gradients(grads, model.trainable_variables, step=step)
            optimizer.apply(grads, model.trainable_variables)
            return loss
        return step_fn

    variants = {"plain": make_step(None, 1), "tf writer": make_step(writers["tf writer"], 1),
                "resilient": make_step(writers["resilient"], 1),
                "tf writer /10": make_step(writers["tf writer /10"], 10),
                "resilient /10": make_step(writers["resilient /10"], 10)}
    times = {name: [] for name in variants}
    counter = 0
    for _ in range(args.rounds + 1):  # the first round traces and warms up
        for name, fn in variants.items():
            start = time.perf_counter()
            for _ in range(args.steps):
                fn(x, y, tf.constant(counter, tf.int64))
                counter += 1
            times[name].append((time.perf_counter() - start) / args.steps * 1e3)
    plain = np.array(times["plain"][1:])
    base = spread(plain)["median"]
    print("| variant | ms/step | vs plain |")
    print("|---|---|---|")
    rows = []
    for name, values in times.items():
        ms = spread(values[1:])
        print("| %s | %.2f | %.2fx |" % (name, ms["median"], ms["median"] / base))
        rows.append({"variant": name, "steps": args.steps, "ms_per_step": ms, "vs_plain": ms["median"] / base,
                     "vs_plain_per_round": spread(np.array(values[1:]) / plain)})
    for writer in writers.values():
        writer.close()
    write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

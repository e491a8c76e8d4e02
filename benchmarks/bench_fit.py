"""model.fit overhead of GradLensCallback, and the cost of a comparison step.

Identical models (same weights), mixed_bfloat16, jit_compile="auto" (Keras'
default: no XLA on CPU). Each variant trains with model.fit for one epoch of
N batches per round; a timing callback records per-batch wall time
(on_train_batch_begin -> end), the first 2 batches of each fit call (tracing)
are dropped, and the ratio variant / plain of the same round is reported as
the median over rounds, with the interquartile range of the per-round ratios
as the noise.

Variants:
  callback_not_logging  the callback attached, logging nothing in the window (its defaults: every
                        step checked for a non-finite loss or gradient, issue 26)
  not_logging_unchecked the same with nonfinite_replay=False: Keras' own train function runs the
                        steps (what an unlogged step cost before the check)
  gradients_every_step  gradient statistics + histogram every step (update statistics at their
                        default, every 20 steps: the median is a step without them)
  updates_every_step    the same with update statistics every step too (update_every=1)
  gradients_no_updates  gradient statistics + histogram every step, update_stats=False
  gradients_comparisons_on  gradients_every_step with comparisons configured but not due (step 0
                        only): what a gradient step costs at the defaults, where one trace serves both
  gradients_every_4     the same every 4th step: its logged steps and the steps between them
                        (which must cost 1.00x: same trace, no host sync) reported apart
  compare_every_step    a bf16-vs-f32 comparison (gradients, activations, loss) every step
                        (target: <= 2.5x a plain step, one extra float32 forward+backward)
  compare_no_activations  the same with activations=False (what the layer outputs' comparison costs)
  compare_without_limits  compare_every_step without what the limits are measured from (the
                        stable-rounding pass and the half batch's gradients; the comparison step
                        before issue 25)
  compare_without_stable, compare_without_half_batch  compare_every_step without one of the two
  float32_step          a plain step of the same model in float32 (no lens): the physical part
                        of a comparison step is one such pass beside the bf16 step
  in_step_gradients     what gradients_every_step costs when written inside the train step
                        (tb_gradlens.summary in the traced step; a prototype for the callback)

Run: python -m benchmarks.bench_fit [--models mlp,convnet,transformer,resnet50,mobilenet_v2]
       [--variants callback_not_logging,gradients_every_step,...] [--tiny]
"""

import argparse
import contextlib
import json
import os
import sys
import tempfile

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from evaluation import benchmark_models  # noqa: E402
from benchmarks.harness import BatchTimer  # noqa: E402
from benchmarks.harness import cell  # noqa: E402
from benchmarks.harness import spread  # noqa: E402
from benchmarks.harness import write_json  # noqa: E402


def in_step_gradients(log_dir):
    """A prototype of what GradLensCallback costs when it writes inside the
    train step (``tb_gradlens.summary`` in the traced step: no buffers, no
    eager write call, no host sync), as the callback could without XLA:
    gradient statistics, histogram and update statistics every step."""
    import keras
    import tensorflow as tf

    from tb_gradlens import numerics
    from tb_gradlens import records
    from tb_gradlens import summary
    from tb_gradlens.writing import summary_ops

    class InStep(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            optimizer = self.model.optimizer
            if not hasattr(self, "writer"):
                self.writer = tf.summary.create_file_writer(log_dir)
            original = self.original = optimizer.apply_gradients
            writer = self.writer

            def apply_gradients(grads_and_vars):
                pairs = list(grads_and_vars)
                grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
                step = tf.identity(optimizer.iterations)
                before = [tf.identity(v.value) for v in variables]
                with writer.as_default():
                    summary.gradients(grads, variables, step=step)
                result = original(pairs)
                with writer.as_default():
                    after = [tf.identity(v.value) for v in variables]
                    summary.update_stats(
                        numerics.update_statistics(before, after), summary_ops.variable_paths(variables),
                        step=step, extras=records.update_extras([v.dtype for v in variables]))
                return result

            object.__setattr__(optimizer, "apply_gradients", apply_gradients)
            if getattr(self, "train_function", None) is None:
                self.model.make_train_function(force=True)
                self.train_function = self.model.train_function
            self.model.train_function = self.train_function

        def on_train_end(self, logs=None):
            object.__delattr__(self.model.optimizer, "apply_gradients")

    return InStep()


EVERY = 4  # the gradients_every_4 variant


@contextlib.contextmanager
def _without(stable_pass, half_batch):
    """Comparisons set up in the block run no stable-rounding pass (with
    ``stable_pass``) and take no half-batch gradients (with ``half_batch``):
    where neither is measured their records' limits fall back to the depth
    formula."""
    from unittest import mock

    from tb_gradlens import compare

    def plain_reference(model, reference, candidate, activations=True, optimizer=None):
        return compare.KerasPass(model, reference, activations, optimizer)

    with contextlib.ExitStack() as stack:
        if stable_pass:
            stack.enter_context(mock.patch.object(compare, "stable_pass_for", lambda *a, **k: None))
        if half_batch:
            stack.enter_context(mock.patch.object(compare, "reference_pass_for", plain_reference))
        yield


# variant -> what its comparisons leave out (``_without``: stable pass, half batch)
_LEFT_OUT = {"compare_without_limits": (True, True), "compare_without_stable": (True, False),
             "compare_without_half_batch": (False, True)}


def bench_model(name, tiny, rounds, batches, batch_size, only=None):
    import keras

    from tb_gradlens.keras import GradLensCallback

    rng = np.random.default_rng(0)
    x, y = benchmark_models.batch(name, batch_size * batches, rng, tiny)
    tmp = tempfile.mkdtemp(prefix="gradlens_fit_bench_")
    variants = {
        "plain": lambda: [],
        "callback_not_logging": lambda: [GradLensCallback(os.path.join(tmp, "idle"), gradient_every=10**9,
                                                          compare_every=10**9, start_step=10**9)],
        "not_logging_unchecked": lambda: [GradLensCallback(os.path.join(tmp, "idle_unchecked"),
                                                           gradient_every=10**9, compare_every=10**9,
                                                           start_step=10**9, nonfinite_replay=False)],
        "gradients_every_step": lambda: [GradLensCallback(os.path.join(tmp, "grads"), gradient_every=1,
                                                          compare_every=0)],
        "updates_every_step": lambda: [GradLensCallback(os.path.join(tmp, "updates"), gradient_every=1,
                                                        update_every=1, compare_every=0)],
        "gradients_no_updates": lambda: [GradLensCallback(os.path.join(tmp, "grads_no_updates"), gradient_every=1,
                                                          compare_every=0, update_stats=False)],
        "float32_step": lambda: [],
        "gradients_comparisons_on": lambda: [GradLensCallback(os.path.join(tmp, "grads_comparisons_on"),
                                                              gradient_every=1, compare_every=10**9)],
        "gradients_every_4": lambda: [GradLensCallback(os.path.join(tmp, "every4"), gradient_every=EVERY,
                                                       compare_every=0)],
        "compare_every_step": lambda: [GradLensCallback(os.path.join(tmp, "compare"), gradient_every=0,
                                                        compare_every=1, update_stats=False)],
        "compare_no_activations": lambda: [GradLensCallback(os.path.join(tmp, "compare_noact"), gradient_every=0,
                                                            compare_every=1, update_stats=False,
                                                            activations=False)],
        "in_step_gradients": lambda: [in_step_gradients(os.path.join(tmp, "in_step"))],
    }
    for v in _LEFT_OUT:  # compare_every_step with its comparisons' baselines left out
        variants[v] = lambda v=v: [GradLensCallback(os.path.join(tmp, v), gradient_every=0, compare_every=1,
                                                    update_stats=False)]
    if only:
        variants = {v: make for v, make in variants.items() if v == "plain" or v in only}
    fitted = {}
    for v in variants:
        keras.utils.set_random_seed(0)
        model = benchmark_models.build(name, "float32" if v == "float32_step" else "mixed_bfloat16", tiny=tiny)
        model.compile(optimizer=keras.optimizers.SGD(1e-3), loss="sparse_categorical_crossentropy")
        fitted[v] = model
    per_round = {v: [] for v in variants if v != "gradients_every_4"}
    if "gradients_every_4" in variants:
        per_round.update(every_4_logged_steps=[], every_4_steps_between=[])
    # One callback per variant for all rounds: a second fit() reuses its trace.
    callbacks = {v: make_callbacks() for v, make_callbacks in variants.items()}
    for _ in range(rounds):
        for v in variants:
            timer = BatchTimer()
            with _without(*_LEFT_OUT[v]) if v in _LEFT_OUT else contextlib.nullcontext():
                fitted[v].fit(x, y, batch_size=batch_size, epochs=1, verbose=0, shuffle=False,
                              callbacks=callbacks[v] + [timer])
            if v == "gradients_every_4":
                logged = [t for i, t in enumerate(timer.times) if i >= 2 and (timer.first_step + i) % EVERY == 0]
                between = [t for i, t in enumerate(timer.times) if i >= 2 and (timer.first_step + i) % EVERY]
                per_round["every_4_logged_steps"].append(float(np.median(logged)))
                per_round["every_4_steps_between"].append(float(np.median(between)))
            else:
                per_round[v].append(float(np.median(timer.times[2:])))
    base = np.array(per_round["plain"])
    result = {
        "model": name,
        "batch": batch_size,
        "plain_ms_per_step": 1000 * float(np.median(base)),
        "ratio": {v: float(np.median(np.array(t) / base)) for v, t in per_round.items() if v != "plain"},
        "spread": {v: spread(np.array(t) / base) for v, t in per_round.items() if v != "plain"},
    }
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(benchmark_models.NAMES))
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int,
                        help="batches per fit call (default: 2 + benchmark_models.DEFAULT_STEPS)")
    parser.add_argument("--batch", type=int, help="batch size (default: benchmark_models.DEFAULT_BATCH)")
    parser.add_argument("--variants", help="comma list of the variants to run beside plain (default: all)")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    results = []
    for name in args.models.split(","):
        r = bench_model(name, args.tiny, args.rounds, args.batches or 2 + benchmark_models.DEFAULT_STEPS[name],
                        args.batch or benchmark_models.DEFAULT_BATCH[name],
                        args.variants.split(",") if args.variants else None)
        results.append(r)
        print(json.dumps(r), flush=True)
    columns = [("callback_not_logging", "callback, step not logged"),
               ("not_logging_unchecked", "callback, step not logged, nonfinite_replay=False"),
               ("gradients_every_step", "gradients every step"),
               ("updates_every_step", "gradients and updates every step"),
               ("gradients_no_updates", "gradients every step, update_stats=False"),
               ("gradients_comparisons_on", "gradients every step, comparisons configured"),
               ("every_4_logged_steps", "every 4: logged steps"),
               ("every_4_steps_between", "every 4: steps between"),
               ("compare_every_step", "comparison every step"),
               ("compare_without_limits", "comparison every step, no stable pass nor half batch"),
               ("compare_without_stable", "comparison every step, no stable pass"),
               ("compare_without_half_batch", "comparison every step, no half batch"),
               ("compare_no_activations", "comparison every step, activations=False"),
               ("float32_step", "plain float32 step"),
               ("in_step_gradients", "gradients written in the step (prototype)")]
    columns = [c for c in columns if any(c[0] in r["spread"] for r in results)]
    print("| model | batch | plain ms/step | " + " | ".join(title for _, title in columns) + " |")
    print("|---|---|---|" + "---|" * len(columns))
    for r in results:
        q = r["spread"]
        print("| %s | %d | %.1f | %s |" % (r["model"], r["batch"], r["plain_ms_per_step"], " | ".join(
            cell(q[key]) if key in q else "–" for key, _ in columns)))
    write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())

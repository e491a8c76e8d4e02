"""The alert zoo: do the alerts tell the truth on real models?

Trains real Keras models for a few hundred steps each, logging with
``GradLensCallback`` (``model.fit``) or with the custom-loop API
(``tb_gradlens.keras.GradLens``, ``tb_gradlens.summary``), then runs the
analysis the tab and ``tb-gradlens report`` share, and prints a confusion
table: configuration x alert code.

* Healthy configurations, the recommended ``mixed_bfloat16`` setup (float32
  softmax) and the same models in ``float32``: the README demo's MLP,
  keras.applications MobileNetV2 and ResNet50 (weights=None, 32x32), the
  keras-io Transformer text classifier, an LSTM and a Conv+BatchNorm+Dropout
  CNN.  Target: no warning and no error.
* Injected faults, each with the code it must raise, the variable or layer it
  must name, and the steps its first step must lie in (the fault's step and
  one logging interval after it).  Target: every fault caught.

Dropout: ``keras.layers.Dropout`` draws its mask in the compute dtype, so
a float32 pass seeded alike drops other units than the bfloat16 step.
``GradLensCallback`` and ``compare_keras`` now give
both passes the step's own draws (``tb_gradlens/compare/randomness.py``),
with or without XLA; the fit rows of Dropout models still run with
``jit_compile=True`` (their setup from before), and the custom-loop rows use
``Float32MaskDropout`` (evaluation/real_models.py), whose mask is the same in
both passes.

Run (from the repository root)::

    python -m evaluation.alert_zoo                    # everything (long on 2 cores)
    python -m evaluation.alert_zoo --only 'mlp|fault' # a regex on configuration names
    python -m evaluation.alert_zoo --tiny             # the test-suite subset, few steps

``--logdir DIR --keep`` keeps the logs (``tb-gradlens report DIR/<config>``);
``--logdir DIR --judge-only`` judges kept logs again without training.
"""

import argparse
import collections
import os
import re
import shutil
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from evaluation import real_models  # noqa: E402

# What a fault must raise: the code, a regex the named variable or layer must
# match (re.search on one of the alert's variables), and the range of steps
# [lo, hi] its first step must lie in.
Expect = collections.namedtuple("Expect", ("code", "row", "first_step"))

# One configuration: ``train(logdir, steps, every)`` writes one run.
Config = collections.namedtuple("Config", ("name", "train", "steps", "every", "expect", "note"))

# Columns of the table, in this order.
CODES = (
    "none_gradient", "zero_gradient", "nonfinite", "bf16_divergence", "f16_divergence",
    "f32_f64_mismatch", "divergence", "flush_to_zero", "underflow", "lost_update",
    "bf16_model_output", "hardcoded_16_bit",
)


# ---------------------------------------------------------------------------
# Training: model.fit with the callback, and a custom loop with GradLens.
# ---------------------------------------------------------------------------


def _batches(data, batch, seed=0, count=16):
    rng = np.random.default_rng(seed)
    return [data(batch, rng) for _ in range(count)]


def fit_run(build, data, loss=real_models.SPARSE_CE, batch=16, jit=False, learning_rate=1e-3,
            edit_batch=None):
    """A ``train`` that runs ``model.fit`` with ``GradLensCallback``.

    ``build()`` returns the uncompiled model; ``data(batch, rng)`` a batch;
    ``edit_batch(step, x, y)`` may change the batch of a step (faults).
    """

    def train(logdir, steps, every):
        import keras
        import tensorflow as tf

        from tb_gradlens.keras import GradLensCallback

        model = build()
        model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss=loss, jit_compile=jit)
        batches = _batches(data, batch)

        def gen():
            for step in range(steps):
                x, y = batches[step % len(batches)]
                if edit_batch is not None:
                    x, y = edit_batch(step, x.copy(), y)
                yield x, y

        x0, y0 = batches[0]
        spec = (tf.TensorSpec(x0.shape, x0.dtype), tf.TensorSpec(y0.shape, y0.dtype))
        dataset = tf.data.Dataset.from_generator(gen, output_signature=spec)
        callback = GradLensCallback(logdir, gradient_every=every, update_every=every, compare_every=every)
        model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[callback])

    return train


def loop_run(build, data, batch=16, learning_rate=1e-3, extra_loss=None, on_step=None):
    """A ``train`` with a custom loop logging through ``GradLens``: gradient
    and update statistics, the dtype map, ``compare_keras`` against float32
    (eager, before the step), and the loss scalar.

    ``extra_loss(model)`` adds a term inside the tape; ``on_step(step,
    optimizer)`` runs before each step (e.g. a learning-rate change).
    """

    def train(logdir, steps, every):
        import keras
        import tensorflow as tf

        from tb_gradlens.keras import GradLens

        model = build()
        optimizer = keras.optimizers.Adam(learning_rate)
        model.compile(optimizer=optimizer, loss=real_models.SPARSE_CE)  # compute_loss
        loss_fn = keras.losses.SparseCategoricalCrossentropy()
        variables = model.trainable_variables
        batches = [tuple(tf.constant(a) for a in b) for b in _batches(data, batch)]
        lens = GradLens(logdir, gradient_every=every, compare_every=every)
        lens.log_dtypes(model, batches[0][0], step=0)

        @tf.function
        def train_step(x, y):
            with tf.GradientTape() as tape:
                loss = loss_fn(y, model(x, training=True))
                if extra_loss is not None:
                    loss += extra_loss(model)
            grads = tape.gradient(loss, variables)
            optimizer.apply(grads, variables)
            return loss, grads

        for step in range(steps):
            x, y = batches[step % len(batches)]
            if on_step is not None:
                on_step(step, optimizer)
            lens.compare_keras(model, x, y, step)
            logged = lens.should_log(step)
            before = [tf.identity(v) for v in variables] if logged else None
            loss, grads = train_step(x, y)
            if logged:
                lens.log_gradients(grads, variables, step)
                lens.log_updates(before, variables, variables, step, grads)
                with lens.writer.as_default():
                    tf.summary.scalar("loss", loss, step=step)
        lens.flush()

    return train


# ---------------------------------------------------------------------------
# Faults that need a hand-written loop.
# ---------------------------------------------------------------------------


def none_gradient_run(how):
    """A custom loop where one variable's gradient is None, ``how``:
    unwatched (a non-trainable variable the tape does not watch),
    stop_gradient, numpy (a value through .numpy()), outside_tape (an op
    computed before the tape opened)."""

    def train(logdir, steps, every):
        import tensorflow as tf

        from tb_gradlens import summary

        rng = np.random.default_rng(0)
        w = tf.Variable(rng.normal(size=(8, 4)).astype(np.float32), name="dense/kernel")
        other = tf.Variable(rng.normal(size=(4,)).astype(np.float32), name=how,
                            trainable=how != "unwatched")
        writer = tf.summary.create_file_writer(logdir)
        with writer.as_default():
            for step in range(steps):
                x = tf.constant(rng.normal(size=(16, 8)).astype(np.float32))
                if how == "outside_tape":
                    scale = other * 2.0  # computed before the tape: not recorded
                with tf.GradientTape() as tape:
                    if how == "stop_gradient":
                        scale = tf.stop_gradient(other)
                    elif how == "numpy":
                        scale = tf.constant(other.numpy())
                    elif how == "unwatched":
                        scale = other * 1.0
                    loss = tf.reduce_mean(tf.square(tf.matmul(x, w) * scale))
                grads = tape.gradient(loss, [w, other])
                if step % every == 0:
                    summary.gradients(grads, [w, other], step=step)
                w.assign_sub(0.01 * grads[0])
        writer.close()

    return train


def cancellation_run(logdir, steps, every):
    """float32 vs float64 on (x*1e10 + 1 - 1e10)^2: the 1 is lost in float32
    (gradient 0) and kept in float64 (gradient 2e10 at x = 1)."""
    import tensorflow as tf

    from tb_gradlens.keras import GradLens

    x = tf.Variable([1.0], name="x")
    w = tf.Variable([0.5, -0.25], name="w")

    def loss_fn(weights, dtype):
        xv, wv = (tf.cast(t, dtype) for t in weights)
        big = tf.constant(1e10, dtype)
        return tf.reduce_sum(tf.square(xv * big + 1.0 - big)) + tf.reduce_sum(wv * wv)

    lens = GradLens(logdir, gradient_every=every, compare_every=every)
    for step in range(steps):
        lens.compare(loss_fn, [x, w], step, reference="float64", candidate="float32")
    lens.flush()


# ---------------------------------------------------------------------------
# The configurations.
# ---------------------------------------------------------------------------

BF16 = "mixed_bfloat16"
F32 = "float32"


def _nan_from(nan_step):
    def edit(step, x, y):
        if step >= nan_step:
            x[0, :8] = -5.0  # log(x + 1) of -5: NaN from here on
        return x, y

    return edit


def _drift_objective(model):
    import tensorflow as tf

    return -tf.reduce_mean(model.get_layer("drift").offset)


def _raise_learning_rate_at(drift_step):
    def on_step(step, optimizer):
        if step == drift_step:
            optimizer.learning_rate.assign(3e-2)

    return on_step


def _scaled_loss(scale):
    import keras

    base = keras.losses.SparseCategoricalCrossentropy()

    def loss(y, p):
        return base(y, p) * scale

    return loss


def _both_ways(name, tag, build, data, jit=False, loop_build=None, note="", steps=300):
    """The fit row (``jit`` for Keras Dropout: the same masks under XLA) and the
    custom-loop row (``loop_build``, e.g. with float32-mask Dropout) of a model."""
    return [
        Config("%s_fit_%s" % (name, tag), fit_run(build, data, jit=jit), steps, 10, None,
               note + (", XLA" if jit else "")),
        Config("%s_loop_%s" % (name, tag), loop_run(loop_build or build, data), steps, 10, None,
               note + (", float32-mask Dropout" if loop_build else "")),
    ]


def healthy_configs(policies=(BF16, F32), tiny=False):
    """The healthy rows; ``tiny``: the README demo MLP only, 60 steps."""
    zoo = real_models.ZOO
    dropout = real_models.float32_mask_dropout
    out = []
    for policy in policies:
        tag = "bf16" if policy == BF16 else "f32"
        mlp = lambda p=policy: real_models.mlp(p)  # noqa: E731
        if tiny:
            out.append(Config("mlp_fit_" + tag, fit_run(mlp, real_models.digits, batch=64, jit=True), 60, 5,
                              None, "README demo MLP, XLA"))
            continue
        out += [
            Config("mlp_fit_" + tag, fit_run(mlp, real_models.digits, batch=64, jit=True), 300, 10, None,
                   "README demo MLP, XLA"),
            Config("mlp_loop_" + tag, loop_run(mlp, real_models.digits, batch=64), 300, 10, None,
                   "README demo MLP"),
            Config("mobilenet_v2_fit_" + tag, fit_run(lambda p=policy: real_models.mobilenet_v2(p),
                                                      zoo["mobilenet_v2"].data), 150, 10, None,
                   "keras.applications, 32x32"),
            Config("resnet50_fit_" + tag, fit_run(lambda p=policy: real_models.resnet50(p),
                                                  zoo["resnet50"].data, batch=8), 100, 10, None,
                   "keras.applications, 32x32"),
        ]
        out += _both_ways("transformer", tag, lambda p=policy: real_models.transformer_classifier(p),
                          zoo["transformer"].data, jit=True, note="keras-io text classifier",
                          loop_build=lambda p=policy: real_models.transformer_classifier(p, dropout_class=dropout))
        out += _both_ways("lstm", tag, lambda p=policy: real_models.recurrent(p), zoo["lstm"].data, note="LSTM")
        out += _both_ways("bn_dropout_cnn", tag, lambda p=policy: real_models.bn_dropout_cnn(p),
                          zoo["bn_dropout_cnn"].data, jit=True, note="Conv+BatchNorm+Dropout",
                          loop_build=lambda p=policy: real_models.bn_dropout_cnn(p, dropout_class=dropout))
    return out


def fault_configs(tiny=False):
    """The injected faults; ``tiny``: fewer steps (the test-suite subset)."""
    digits = real_models.digits
    steps, every = (30, 5) if tiny else (100, 10)
    nan_step, drift_step = (12, 50) if tiny else (37, 120)
    drift_steps = 80 if tiny else 300
    return [
        Config("fault_dead_relu", fit_run(lambda: real_models.mlp(BF16, hidden_bias=-100.0), digits, batch=64),
               steps, every, Expect("zero_gradient", r"dense_2/kernel$", (0, every - 1)),
               "dense_2's bias at -100: its ReLUs never fire"),
    ] + [
        Config("fault_none_" + how, none_gradient_run(how), 50 if not tiny else 20, 5,
               Expect("none_gradient", "^%s$" % how, (0, 4)), "gradient of %r is None" % how)
        for how in ("unwatched", "stop_gradient", "numpy", "outside_tape")
    ] + [
        Config("fault_nan_log", fit_run(lambda: real_models.log_input_mlp(BF16), digits, batch=64,
                                        edit_batch=_nan_from(nan_step)),
               steps, every, Expect("nonfinite", r"^log_inputs$|dense_1/kernel$", (nan_step, nan_step + every - 1)),
               "log(x + 1) of an input of -5 from step %d" % nan_step),
        Config("fault_bf16_output", fit_run(lambda: real_models.mlp(BF16, float32_output=False), digits,
                                            batch=64), steps, every,
               Expect("bf16_model_output", r"predictions", (0, every - 1)), "softmax left in bfloat16"),
        Config("fault_cancellation", cancellation_run, 50 if not tiny else 20, 5,
               Expect("f32_f64_mismatch", r"^x$", (0, 4)), "(x*1e10 + 1 - 1e10)^2, float32 vs float64"),
        Config("fault_naive_variance", fit_run(lambda: real_models.naive_norm_mlp(BF16),
                                               real_models.FAULT_ZOO["naive_norm_mlp"].data, batch=64),
               steps, every, Expect("bf16_divergence", r"naive_norm", (0, every - 1)),
               "variance as E[x^2]-E[x]^2 in bfloat16, inputs of mean 16"),
        Config("fault_underflow", fit_run(lambda: real_models.mlp(BF16), digits, batch=64,
                                          loss=_scaled_loss(2.0 ** -112)),
               steps, every, Expect("underflow", r"mlp/", (0, every - 1)),
               "loss x 2^-112: gradients below 2^-126"),
        Config("fault_lost_updates", fit_run(lambda: real_models.mlp("bfloat16"), digits, batch=64,
                                             learning_rate=1e-5),
               steps, every, Expect("lost_update", r"kernel", (0, 2 * every - 1)), "bfloat16 weights, Adam at 1e-5"),
        Config("fault_growing_divergence",
               loop_run(lambda: real_models.drift_mlp(BF16), real_models.vectors(32), batch=64,
                        learning_rate=1e-4, extra_loss=_drift_objective,
                        on_step=_raise_learning_rate_at(drift_step)),
               drift_steps, 10, Expect("bf16_divergence", r"drift", (drift_step, drift_step + 10)),
               "an offset that grows once the learning rate is raised at step %d" % drift_step),
    ]


def all_configs(tiny=False):
    return healthy_configs(tiny=tiny) + fault_configs(tiny)


# ---------------------------------------------------------------------------
# Judging.
# ---------------------------------------------------------------------------


def analyse(logdir):
    """(alerts, errors, headlines) of every run of ``logdir``, as ``tb-gradlens report`` sees them."""
    from tb_gradlens import analysis
    from tb_gradlens.serving import judgment_json
    from tb_gradlens.serving import logdir as logdir_lib
    from tb_gradlens.serving import reading

    loaded = logdir_lib.open_logdir(logdir, progress=False)
    source = reading.Source(loaded.provider, loaded.ctx, loaded.experiment_id)
    alerts, problems = analysis.run_alerts(source)
    return alerts, problems, judgment_json.overview_json(analysis.overview(source))


def budget_ratios(logdir):
    """{kind: (largest ratio, row)} of a run's judged rows: rel_l2 (loss:
    rel_error) over the rounding budget with its factor set to 1, i.e.
    rel_l2 / (u x depth) for activations and / (u x sqrt(depth)) for
    gradients and the loss (x sqrt(2) when both sides round alike).  The
    constants of ``Thresholds`` should sit well above these on healthy runs."""
    from tb_gradlens import analysis
    from tb_gradlens.serving import logdir as logdir_lib
    from tb_gradlens.serving import reading
    from tb_gradlens.analysis import tolerances

    unit = analysis.DEFAULT_THRESHOLDS.replace(
        gradient_rounding=1.0, value_rounding=1.0, low_precision_gradient_rel_l2=0.0,
        low_precision_value_rel_l2=0.0, float32_rel_l2=0.0, rise_factor=float("inf"))
    loaded = logdir_lib.open_logdir(logdir, progress=False)
    source = reading.Source(loaded.provider, loaded.ctx, loaded.experiment_id)
    out = {}
    for run in source.runs():
        for entry in source.entries(run):
            if entry.kind not in analysis.DIVERGENCE_KINDS:
                continue
            judged = tolerances.judge_entry(source, entry, unit)
            for r, limit in enumerate(judged.limits):
                values = judged.values[~judged.noise[:, r], r]
                if limit is None or not limit > 0 or not np.isfinite(values).any():
                    continue
                ratio = float(np.nanmax(values)) / limit
                if ratio > out.get(entry.kind, (-1.0, ""))[0]:
                    out[entry.kind] = (ratio, entry.record.rows[r])
    return out


def ratio_table(logdir, configs):
    """Markdown: per healthy configuration, the largest budget ratios."""
    kinds = ("activation_divergence", "divergence", "loss_comparison")
    lines = ["| configuration | activations: rel_l2 / (u x depth) | gradients: rel_l2 / (u x sqrt(depth)) "
             "| loss: rel_error / (u x sqrt(depth)) |", "|---|---|---|---|"]
    for config in configs:
        path = os.path.join(logdir, config.name)
        if config.expect is not None or not os.path.isdir(path):
            continue
        found = budget_ratios(path)
        cells = ["%.2g (%s)" % found[k] if k in found else "-" for k in kinds]
        lines.append("| %s | %s |" % (config.name, " | ".join(cells)))
    return "\n".join(lines)


# The expected "code" of a fault that must stay a transient: the headline's
# worst row matches, above its limit at some comparison, never harmed, and no
# warning or error anywhere.
TRANSIENT = "transient"


def verdict(config, alerts, problems=(), headlines=()):
    """(ok, why) of a configuration's alerts (and unreadable tags: never ok)."""
    if problems:
        return False, "%d tag(s) could not be analysed: %s" % (len(problems), problems[0]["error"])
    loud = [a for a in alerts if a.severity in ("warning", "error")]
    if config.expect is None:
        if loud:
            return False, "false %s" % ", ".join(sorted({"%s %s" % (a.severity, a.code) for a in loud}))
        return True, "clean"
    e = config.expect
    if e.code == TRANSIENT:
        if loud:
            return False, "a transient raised %s" % ", ".join(sorted({a.code for a in loud}))
        worst = [(h.get("worst_divergence") or {}) for h in headlines]
        found = [w for w in worst if re.search(e.row, w.get("row") or "") and w.get("verdict") == TRANSIENT]
        if not found:
            return False, "no transient headline on /%s/ (%s)" % (
                e.row, ", ".join("%s %s" % (w.get("row"), w.get("verdict")) for w in worst) or "none")
        return True, "transient at step %d" % found[0]["above_steps"][0]
    lo, hi = e.first_step
    for a in alerts:
        if a.code != e.code or not any(re.search(e.row, v) for v in a.variables):
            continue
        first = _first_step_of(a, e.row)
        if lo <= first <= hi:
            return True, "caught at step %d" % first
        return False, "%s at step %d, outside %d-%d" % (e.code, first, lo, hi)
    return False, "missed (no %s naming /%s/)" % (e.code, e.row)


def _first_step_of(alert, pattern):
    steps = [d["step_first"] for d in alert.details
             if "variable" in d and "step_first" in d and re.search(pattern, d["variable"])]
    return min(steps) if steps else alert.step_first


def cell(alerts, code):
    found = [a for a in alerts if a.code == code]
    if not found:
        return ""
    letters = {"error": "E", "warning": "W", "info": "I"}
    return " ".join(sorted({letters[a.severity] for a in found}))


def table(results):
    """The confusion table (Markdown): one row per configuration."""
    header = ["configuration", "what", "steps"] + [c.replace("_", " ") for c in CODES] + ["expected", "verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for config, alerts, problems, seconds, headlines in results:
        ok, why = verdict(config, alerts, problems, headlines)
        expected = "-" if config.expect is None else "%s on /%s/" % (config.expect.code, config.expect.row)
        row = [config.name, config.note, str(config.steps)] + [cell(alerts, c) for c in CODES]
        row += [expected, ("ok: " if ok else "FAIL: ") + why]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def run(configs, logdir, steps=None, every=None, log=print, train=True):
    """Train (unless ``train`` is False: judge the runs already in ``logdir``)
    and judge each configuration: [(config, alerts, problems, seconds)]."""
    results = []
    for config in configs:
        path = os.path.join(logdir, config.name)
        n, k = steps or config.steps, every or config.every
        start = time.perf_counter()
        if train:
            shutil.rmtree(path, ignore_errors=True)
            config.train(path, n, k)
        elif not os.path.isdir(path):
            log("%-32s not in %s" % (config.name, logdir))
            continue
        seconds = time.perf_counter() - start
        try:
            alerts, problems, headlines = analyse(path)
        except Exception as e:  # noqa: BLE001 - keep training the others; the logs stay
            alerts, problems, headlines = [], [{"run": config.name, "tag": "-", "error": repr(e)}], []
        config = config._replace(steps=n, every=k)
        results.append((config, alerts, problems, seconds, headlines))
        ok, why = verdict(config, alerts, problems, headlines)
        log("%-32s %6.1fs  %s  %s" % (config.name, seconds, "ok  " if ok else "FAIL", why), flush=True)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="regex on configuration names")
    parser.add_argument("--steps", type=int, help="steps per configuration (default: each one's own)")
    parser.add_argument("--logdir", help="where the runs go (default: a temporary directory)")
    parser.add_argument("--keep", action="store_true", help="keep the logs")
    parser.add_argument("--tiny", action="store_true", help="the test-suite subset: the demo MLP, fewer steps")
    parser.add_argument("--judge-only", action="store_true",
                        help="do not train: judge the runs kept in --logdir (after a change to the rules)")
    args = parser.parse_args(argv)
    configs = all_configs(args.tiny)
    if args.only:
        configs = [c for c in configs if re.search(args.only, c.name)]
    if args.judge_only and not args.logdir:
        parser.error("--judge-only needs --logdir")
    logdir = args.logdir or tempfile.mkdtemp(prefix="alert_zoo_")
    try:
        results = run(configs, logdir, args.steps, train=not args.judge_only)
    finally:
        if not (args.keep or args.judge_only):
            shutil.rmtree(logdir, ignore_errors=True)
    print()
    print(table(results))
    if args.keep or args.judge_only:
        print("\nMeasured against the rounding budget (healthy runs; defaults: value_rounding 5, "
              "gradient_rounding 96):\n")
        print(ratio_table(logdir, [r[0] for r in results]))
    failed = [c.name for c, alerts, problems, _, headlines in results
              if not verdict(c, alerts, problems, headlines)[0]]
    print("\n%d configurations, %d as expected%s" % (
        len(results), len(results) - len(failed), "; failed: " + ", ".join(failed) if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

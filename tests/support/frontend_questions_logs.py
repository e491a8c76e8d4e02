"""A logdir with known answers to the GradLens tab's four questions.

Q1 which variable diverged from float32 first, and how badly against the tolerance?
Q2 where did the NaN come from (first step, first variable)?
Q3 which layers have dead or disconnected gradients?
Q4 is the bfloat16 run different from the float32 run beyond float32-vs-float32 noise?

Runs, written with tb_gradlens' own writers:
  nan_dead_unused  a real custom-loop training (float32, SGD) of a small net whose
                   output is scaled by sqrt(gate); the gate is set to 0 before step
                   NAN_STEP, so d sqrt(gate)/d gate is infinite there (the gate's
                   gradient is the first non-finite one, everything is NaN after);
                   the layer "dead" has biases of -50 (dead ReLU: all-zero
                   gradients), the variable "unused" is not on the loss's path
                   (None gradient).  Gradient statistics and histograms every step.
  mixed_bfloat16   divergence records with designed values (rel_l2): the
                   bfloat16-vs-float32 comparison (per variable, per layer, the
                   loss - above its tolerance from LOSS_STEP; one variable
                   computed in float32) and an XLA-vs-bfloat16 one whose tag
                   sorts first; update statistics (LOST_ROW, stored in bfloat16,
                   loses updates from LOST_STEP); the loss (loss_b).
  float32          the loss (loss_a); float32_seed1 the loss (loss_noise).
  wide             a divergence record of WIDE variables (row labels at 128 rows).
  no_loss          gradient statistics and no loss scalar (as model.fit runs
                   without a loss scalar): Compare must keep its pickers.
  fit_mixed_bfloat16  a second bfloat16 run (sorting before mixed_bfloat16) trained
                   like model.fit logs: the bf16-vs-float32 comparison within its
                   limits, the loss every FIT_EVERY steps, update statistics of
                   float32 weights: not the run a view opens on by default.
  measured         a comparison judged by limits measured on each step (the
                   stable-rounding column, record format 2): MEASURED_ROWS with a
                   single exceedance (no alert), two harmed rows and one within.
  wide             also gradient statistics of its WIDE variables.
"""

import os

import numpy as np

from tb_gradlens.analysis.codes import DEFAULT_THRESHOLDS

NAN_STEP = 150
TRAIN_STEPS = 160
DEAD = ("dead/kernel", "dead/bias")
UNUSED = "unused"
GATE = "gate"
COMPARE_STEPS = list(range(0, 160, 10))
Q4_STEPS = list(range(60))

# Q1: rel_l2 per variable and step, designed around the tolerance the alert rules give this
# comparison's gradients and loss (README "Alerts": the rounding budget 96 x u x sqrt(depth) of
# bfloat16 at the model's depth, 3 layers here; every gradient row shares it, the one computed in
# float32 too: it is a gradient of the bfloat16 model).  test_q1 reads it from the limits route.
TOLERANCE = 96 * 2.0**-8 * 3**0.5  # 0.65
DIV_ROWS = ("mlp/dense_1/kernel", "mlp/dense_1/bias", "mlp/dense_2/kernel", "mlp/logits/kernel",
            "mlp/logits/bias", "mlp/norm/gamma")
ROW_DTYPES = ("bfloat16", "bfloat16", "bfloat16", "bfloat16", "bfloat16", "float32")
FIRST_ROW, FIRST_STEP = "mlp/dense_2/kernel", 40  # exceeds first (1.2x at step 40, 2.5x at the end)
WORST_ROW, WORST_RATIO = "mlp/logits/kernel", 6  # the worst (6x from step 80)
BELOW_ROW, BELOW_VALUE = "mlp/dense_1/kernel", 0.0073  # below its tolerance
ZERO_ROW = "mlp/dense_1/bias"  # 0: both sides zero (a dead ReLU)
LAYERS = ("mlp/dense_1", "mlp/dense_2", "mlp/logits")
LOSS_STEP = 120  # the loss's relative error exceeds its tolerance from here (1.5x)
LOST_ROW, LOST_STEP = "mlp/dense_2/kernel", 30  # lost_update_bf16 0.4 from here (a bfloat16 weight)
WIDE = 128
FIT_EVERY = 5
RUNS = {"float32", "float32_seed1", "mixed_bfloat16", "nan_dead_unused", "wide", "no_loss", "fit_mixed_bfloat16",
        "measured"}

# The "measured" run: rel_l2 against limits measured on each step (README "Alerts": a gradient's
# limit = C x max(u, the largest stable-rounding divergence of the last 4 comparisons), C the default
# stable_factor, u = 2^-8 for bfloat16; no half-batch noise is logged).  Its stable column is logged
# as 0.06 / C up to step 40 and 0.018 / C from 50 (both above u), so whatever C is the limits are
# 0.06 up to step 70 and 0.018 from step 80 on.
MEASURED_STEPS = list(range(0, 100, 10))
MEASURED_ROWS = ("net/a/kernel", "net/b/kernel", "net/c/kernel", "net/d/kernel")
SINGLE_ROW, SINGLE_STEP = "net/a/kernel", 30  # above its limit at one comparison: not an alert
HARMED_ROW, HARMED_STEP = "net/b/kernel", 60  # above at 60 and 70: harmed (an alert) from 60
WITHIN_ROW = "net/c/kernel"
SHIFT_ROW, SHIFT_STEP = "net/d/kernel", 80  # 0.03 throughout: 0.5x its limit, then 1.7x from 80 (harmed)
STABLE_FACTOR = DEFAULT_THRESHOLDS.stable_factor


def measured_stable(step):
    return (0.06 if step < 50 else 0.018) / STABLE_FACTOR


def measured_limit(step):
    window = [s for s in MEASURED_STEPS if step - 30 <= s <= step]
    return STABLE_FACTOR * max(2.0**-8, max(measured_stable(s) for s in window))


def measured_rel_l2(row, step):
    if row == SINGLE_ROW:
        return 0.09 if step == SINGLE_STEP else (0.005 if step >= 80 else 0.03)
    if row == HARMED_ROW:
        return 0.09 if step in (60, 70) else (0.01 if step >= 80 else 0.03)
    if row == WITHIN_ROW:
        return 0.008
    return 0.03


def rel_l2(row, step):
    """The designed rel_l2 of a row at a step."""
    t = TOLERANCE
    if row == FIRST_ROW:
        if step < FIRST_STEP:
            return 0.5 * t
        return (1.2 + (2.5 - 1.2) * (step - FIRST_STEP) / (COMPARE_STEPS[-1] - FIRST_STEP)) * t
    if row == WORST_ROW:
        return 0.2 * t if step < 80 else WORST_RATIO * t
    if row == BELOW_ROW:
        return BELOW_VALUE
    if row == ZERO_ROW:
        return 0.0
    if row == "mlp/norm/gamma":
        return 5e-4
    return 0.3 * t


def loss_a(step):
    return 2.0 / (1.0 + 0.1 * step)


def loss_noise(step):
    return loss_a(step) * (1.0 + 0.01 * np.sin(step))


def loss_b(step):
    return loss_a(step) * (1.0 + 0.002 * step)


def q4_first_beyond():
    """Independent answer (float32 values): windows of max(10, ceil(steps / 20)) steps; the first
    of 3 windows in a row where the mean |b - a| / |a| is above 2x the noise run's mean; and that
    noise mean (the one noise figure)."""
    f32 = np.float32
    a = np.array([f32(loss_a(s)) for s in Q4_STEPS], np.float64)
    n = np.array([f32(loss_noise(s)) for s in Q4_STEPS], np.float64)
    b = np.array([f32(loss_b(s)) for s in Q4_STEPS], np.float64)
    rb, rn = np.abs(b - a) / np.abs(a), np.abs(n - a) / np.abs(a)
    width = max(10, -(-len(a) // 20))
    means = [(rb[i:i + width].mean(), rn[i:i + width].mean()) for i in range(0, len(a) - width + 1, width)]
    for w in range(len(means) - 2):
        if all(mb > 2 * mn for mb, mn in means[w:w + 3]):
            return Q4_STEPS[w * width], means[w][1]
    raise AssertionError("the Q4 logdir must be beyond its noise floor")


def _train_nan_dead_unused(logdir):
    import tensorflow as tf

    from tb_gradlens import summary

    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(32, 8)).astype(np.float32))
    y = tf.constant(rng.normal(size=(32, 1)).astype(np.float32))
    init = lambda shape: tf.constant(rng.normal(scale=0.3, size=shape).astype(np.float32))  # noqa: E731
    variables = {
        "dense/kernel": tf.Variable(init((8, 16)), name="dense/kernel"),
        "dense/bias": tf.Variable(tf.zeros(16), name="dense/bias"),
        "dead/kernel": tf.Variable(init((16, 8)), name="dead/kernel"),
        "dead/bias": tf.Variable(tf.fill([8], -50.0), name="dead/bias"),
        GATE: tf.Variable(1.0, name=GATE),
        "head/kernel": tf.Variable(init((24, 1)), name="head/kernel"),
        UNUSED: tf.Variable(tf.zeros(4), name=UNUSED),
    }
    trainable = list(variables.values())
    v = variables
    writer = tf.summary.create_file_writer(os.path.join(logdir, "nan_dead_unused"))

    @tf.function
    def step_fn(step):
        with tf.GradientTape() as tape:
            h = tf.nn.relu(x @ v["dense/kernel"] + v["dense/bias"])
            z = tf.nn.relu(h @ v["dead/kernel"] + v["dead/bias"])
            out = tf.concat([h * tf.sqrt(v[GATE]), z], axis=1) @ v["head/kernel"]
            loss = tf.reduce_mean((out - y) ** 2)
        grads = tape.gradient(loss, trainable)
        with writer.as_default():
            summary.gradients(grads, trainable, step=step)
            tf.summary.scalar("loss", loss, step=step)
        for g, var in zip(grads, trainable):
            if g is not None:
                var.assign_sub(0.01 * g)

    for step in range(TRAIN_STEPS):
        if step == NAN_STEP:
            v[GATE].assign(0.0)
        step_fn(tf.constant(step, tf.int64))
    writer.close()


def _write_comparisons(logdir):
    import tensorflow as tf

    from tb_gradlens import compare
    from tb_gradlens import metadata
    from tb_gradlens import records
    from tb_gradlens import summary
    from tb_gradlens.writing import summary_ops

    cols = metadata.DIVERGENCE_COLUMNS_V1  # no stable-rounding column: the depth formula judges
    f32 = records.variant("float32", "float32", "float32", "float32")
    bf16 = records.variant("mixed_bfloat16", "mixed_bfloat16", "bfloat16", "float32")
    xla = records.variant("mixed_bfloat16+xla", "mixed_bfloat16", "bfloat16", "float32", jit_compile=True)
    bf16_name = compare.default_name(compare.Variant("float32"), compare.Variant("mixed_bfloat16"))
    xla_name = "mixed_bfloat16+xla_vs_mixed_bfloat16"
    assert xla_name < bf16_name  # the XLA comparison's tags sort first
    writer = tf.summary.create_file_writer(os.path.join(logdir, "mixed_bfloat16"))
    with writer.as_default():
        for step in COMPARE_STEPS:
            m = np.zeros((len(DIV_ROWS), len(cols)), np.float32)
            m[:, cols.index("rel_l2")] = [rel_l2(r, step) for r in DIV_ROWS]
            m[:, cols.index("cosine")] = 1 - m[:, 0] ** 2 / 2
            m[:, cols.index("norm_ratio")] = 1.0
            summary_ops.divergence(m, DIV_ROWS, records.comparison_extras(f32, bf16, row_dtypes=ROW_DTYPES),
                                  step=step, name=bf16_name)
            a = np.zeros((len(LAYERS), len(cols)), np.float32)
            a[:, 0] = [0.002, 0.004, 0.02 if step >= 100 else 0.006]
            summary_ops.divergence(a, LAYERS, records.comparison_extras(f32, bf16, row_dtypes=["bfloat16"] * 3),
                                  step=step, name=bf16_name, kind=metadata.ACTIVATION_DIVERGENCE)
            err = (1.5 if step >= LOSS_STEP else 0.3) * TOLERANCE
            summary_ops.loss_comparison([[1.0, 1.0 + err, err, err]], records.comparison_extras(f32, bf16),
                                       step=step, name=bf16_name)
            u = np.zeros((len(DIV_ROWS), 3), np.float32)
            u[:, 0], u[:, 1] = 1e-4, 1e-3
            u[DIV_ROWS.index(LOST_ROW), 2] = 0.4 if step >= LOST_STEP else 0.01
            summary_ops.update_stats(u, DIV_ROWS, step=step, name="updates",
                                    extras=records.update_extras(["bfloat16"] * len(DIV_ROWS)))
            x = np.zeros((len(DIV_ROWS), len(cols)), np.float32)
            x[:, 0] = 0.002
            summary_ops.divergence(x, DIV_ROWS, records.comparison_extras(bf16, xla), step=step, name=xla_name)
        for step in Q4_STEPS:
            tf.summary.scalar("loss", loss_b(step), step=step)
        summary.gradients([tf.ones([2])], [tf.Variable(tf.ones([2]), name="w")], step=0)
    writer.close()
    rows = ["model/block_%03d/%s" % (i // 2, "kernel" if i % 2 == 0 else "bias") for i in range(WIDE)]
    wide = [tf.Variable(tf.ones([2]), name=row) for row in rows]
    writer = tf.summary.create_file_writer(os.path.join(logdir, "wide"))
    with writer.as_default():
        for step in range(0, 50, 10):
            m = np.zeros((WIDE, len(cols)), np.float32)
            m[:, 0] = np.linspace(1e-3, 0.2, WIDE)
            summary_ops.divergence(m, rows, records.comparison_extras(f32, bf16), step=step, name=bf16_name)
            summary.gradients([tf.fill([2], 0.1 * (i + 1)) for i in range(WIDE)], wide, step=step)
    writer.close()
    _write_fit_and_measured(logdir, f32, bf16, bf16_name)
    writer = tf.summary.create_file_writer(os.path.join(logdir, "no_loss"))
    with writer.as_default():
        summary.gradients([tf.ones([2])], [tf.Variable(tf.ones([2]), name="w")], step=0)
    writer.close()
    for run, fn in (("float32", loss_a), ("float32_seed1", loss_noise)):
        writer = tf.summary.create_file_writer(os.path.join(logdir, run))
        with writer.as_default():
            for step in Q4_STEPS:
                tf.summary.scalar("loss", fn(step), step=step)
            summary.gradients([tf.ones([2])], [tf.Variable(tf.ones([2]), name="w")], step=0)
        writer.close()


def _write_fit_and_measured(logdir, f32, bf16, bf16_name):
    import tensorflow as tf

    from tb_gradlens import metadata
    from tb_gradlens import records
    from tb_gradlens import summary
    from tb_gradlens.writing import summary_ops

    cols = metadata.DIVERGENCE_COLUMNS_V1
    writer = tf.summary.create_file_writer(os.path.join(logdir, "fit_mixed_bfloat16"))
    with writer.as_default():
        for step in COMPARE_STEPS:
            m = np.zeros((len(DIV_ROWS), len(cols)), np.float32)
            m[:, cols.index("rel_l2")] = 0.1 * TOLERANCE
            m[:, cols.index("cosine")] = 1.0
            m[:, cols.index("norm_ratio")] = 1.0
            summary_ops.divergence(m, DIV_ROWS, records.comparison_extras(f32, bf16, row_dtypes=ROW_DTYPES),
                                  step=step, name=bf16_name)
            u = np.zeros((len(DIV_ROWS), 3), np.float32)
            u[:, 0], u[:, 1], u[:, 2] = 1e-4, 1e-3, 0.5  # float32 weights: what bfloat16 storage would lose
            summary_ops.update_stats(u, DIV_ROWS, step=step, name="updates",
                                    extras=records.update_extras(["float32"] * len(DIV_ROWS)))
        for step in range(0, len(Q4_STEPS), FIT_EVERY):
            tf.summary.scalar("loss", loss_b(step), step=step)
        summary.gradients([tf.ones([2])], [tf.Variable(tf.ones([2]), name="w")], step=0)
    writer.close()
    full = metadata.DIVERGENCE_COLUMNS
    writer = tf.summary.create_file_writer(os.path.join(logdir, "measured"))
    with writer.as_default():
        for step in MEASURED_STEPS:
            m = np.full((len(MEASURED_ROWS), len(full)), np.nan, np.float32)
            m[:, full.index("rel_l2")] = [measured_rel_l2(r, step) for r in MEASURED_ROWS]
            m[:, full.index("cosine")] = 1.0
            m[:, full.index("norm_ratio")] = 1.0
            m[:, full.index("nonfinite")] = 0.0
            m[:, full.index(metadata.STABLE_REL_L2)] = measured_stable(step)
            summary_ops.divergence(m, MEASURED_ROWS, records.comparison_extras(
                f32, bf16, row_dtypes=["bfloat16"] * len(MEASURED_ROWS)), step=step, name=bf16_name)
        summary.gradients([tf.ones([2])], [tf.Variable(tf.ones([2]), name="w")], step=0)
    writer.close()


def write_logdir(logdir):
    """Write every run; returns logdir."""
    _train_nan_dead_unused(logdir)
    _write_comparisons(logdir)
    return logdir

"""The alert rules (tb_gradlens.analysis): what rounding explains is no alert, what it
does not explain is, and NaN/Inf win.

Numbers marked "measured" are what the README demo and the alert zoo logged on
healthy models (issue 14: they raised false warnings under the fixed thresholds).
"""

import numpy as np
import pytest
import tensorflow as tf

from tb_gradlens import analysis
from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis import tolerances
from tb_gradlens.serving import routes_impl
from tb_gradlens.writing import summary_ops
from tb_gradlens.serving import judgment_json

from tests.support.readback import make_series
from tests.support.readback import source_of

U = float_formats.unit_roundoff("bfloat16")  # 2^-8
T = analysis.DEFAULT_THRESHOLDS
BF16 = records.variant("mixed_bfloat16", "mixed_bfloat16", "bfloat16", "float32")
F32 = records.variant("float32", "float32", "float32", "float32")
COLS = metadata.DIVERGENCE_COLUMNS_V1  # format version 1: judged by the depth formula


def table(rel, cosine=1.0, norm_ratio=1.0, flush=0.0, nonfinite=0.0):
    """float32 [S, R, DIVERGENCE_COLUMNS] with the given columns (others 0)."""
    rel = np.asarray(rel, np.float32)
    out = np.zeros(rel.shape + (len(COLS),), np.float32)
    for name, value in (("rel_l2", rel), ("cosine", cosine), ("norm_ratio", norm_ratio),
                        ("flush_to_zero", flush), ("nonfinite", nonfinite)):
        out[..., COLS.index(name)] = value
    return out


def comparison_extras(row_dtypes=None, candidate=BF16, reference=F32):
    return records.comparison_extras(reference, candidate, row_dtypes=row_dtypes)


def context(depth, acts=()):
    return tolerances.ComparisonContext(tuple(acts), (), depth)


# ---------------------------------------------------------------------------
# What rounding explains.
# ---------------------------------------------------------------------------


def test_the_healthy_demo_rows_that_raised_warnings_are_within_their_budget():
    """Measured on the README demo (issue 14): the logits' rel L2 0.0108 and the
    loss's rel error 0.036 were warnings under the fixed 0.01; the bias's 1.6%
    flush to zero (one element of 64) too."""
    layers = ["mlp/dense_1", "mlp/dense_2", "mlp/logits", "predictions"]
    dtypes = ["bfloat16", "bfloat16", "bfloat16", "float32"]
    acts = make_series(metadata.ACTIVATION_DIVERGENCE,
                       table([[0.0028, 0.0038, 0.0108, 0.0046]] * 6),
                       comparison_extras(dtypes), rows=layers)
    grads = make_series(metadata.DIVERGENCE, table([[0.05, 0.06, 0.14]] * 6, flush=[[0, 0.016, 0]] * 6),
                        comparison_extras(["bfloat16"] * 3), rows=["k", "mlp/dense_2/bias", "b"])
    loss_table = np.zeros((6, 1, 4), np.float32)
    loss_table[:, 0] = [0.09, 0.0933, 0.0033, 0.036]
    loss = make_series(metadata.LOSS_COMPARISON, loss_table, comparison_extras(), rows=["loss"])
    ctx = context(4, dtypes)
    for series in (acts, grads, loss):
        assert analysis.alerts_for_divergence(series, T, ctx) == []
    judged = analysis.judge(acts, ctx)
    # Deeper layers may diverge more: value_rounding x u x depth, or less when
    # rise_factor x the layer's early baseline is below that.
    want = [min(T.value_rounding * U * d, T.rise_factor * base) for d, base in ((1, 0.0028), (2, 0.0038), (3, 0.0108))]
    assert judged.limits[-1, :3] == pytest.approx(want)


def layers(n):
    return ["l%d" % i for i in range(n)]


def test_a_row_beyond_its_budget_alerts_from_its_first_step_with_its_limit():
    # "norm" is the first layer, "deep" the 30th: 0.06 is what rounding explains there.
    rel = np.full((4, 30), 0.003)
    rel[2:, 0] = rel[2:, -1] = [0.05, 0.06]
    rows = ["norm"] + layers(28) + ["deep"]
    series = make_series(metadata.ACTIVATION_DIVERGENCE, table(rel),
                         comparison_extras(["bfloat16"] * 30), rows=rows)
    ctx = context(30, ["bfloat16"] * 30)
    judged = analysis.judge(series, ctx)
    (alert,) = analysis.alerts_for_divergence(series, T, ctx)
    assert (alert.code, alert.variables, alert.step_first) == ("bf16_divergence", ["norm"], 20)
    assert alert.limit == pytest.approx(T.value_rounding * U * 1) == judged.limits[0, 0]
    assert alert.view == {"name": "activation_divergence", "run": "run", "tag": series.tag,
                          "column": "rel_l2", "row": "norm", "step": 20}
    assert "the outputs of the layers norm" in alert.explanation and "depth 1" in alert.explanation
    assert "tb_gradlens.advise(model" in alert.fix and "tb-gradlens advise" in alert.fix  # the precision advisor


def test_a_float32_layer_after_bfloat16_layers_inherits_their_rounding():
    """The float32 softmax after bfloat16 logits carries bfloat16 error, not
    float32's: it is judged by bfloat16's unit roundoff."""
    series = make_series(metadata.ACTIVATION_DIVERGENCE, table([[0.003, 0.004]] * 3),
                         comparison_extras(["bfloat16", "float32"]), rows=["logits", "softmax"])
    judged = analysis.judge(series, context(2, ["bfloat16", "float32"]))
    assert judged.dtypes == ["bfloat16", "bfloat16"]
    assert judged.limits[0, 1] == pytest.approx(T.value_rounding * U * 2)


def test_a_sustained_rise_over_the_early_baseline_alerts_a_single_spike_does_not():
    base = [0.003] * 6
    rel = np.full((12, 20), 0.003)
    rel[:, -1] = base + [0.05, 0.003, 0.003, 0.04, 0.05, 0.06]  # under the budget of layer 20
    series = make_series(metadata.ACTIVATION_DIVERGENCE, table(rel), comparison_extras(["bfloat16"] * 20),
                         rows=layers(19) + ["drift"])
    ctx = context(20, ["bfloat16"] * 20)
    (alert,) = analysis.alerts_for_divergence(series, T, ctx)
    assert alert.step_first == 90 and alert.variables == ["drift"]  # index 9, not the spike at 6
    assert alert.limit == pytest.approx(T.rise_factor * 0.003) and "baseline" in alert.details[0]["basis"]
    assert max(rel[:, -1]) < T.value_rounding * U * 20
    assert analysis.alerts_for_divergence(series, T.replace(rise_factor=30), ctx) == []


def test_two_sides_that_round_alike_start_at_zero_and_are_judged_against_rounding():
    """XLA vs not, measured on the demo: exactly 0 at step 0, then ~0.004."""
    xla = records.variant("mixed_bfloat16+xla", "mixed_bfloat16", "bfloat16", "float32", jit_compile=True)
    same = records.variant("mixed_bfloat16", "mixed_bfloat16", "bfloat16", "float32")
    rel = np.array([0.0, 0.0032, 0.0033, 0.0031, 0.0034, 0.0033, 0.0036, 0.0035])[:, None]
    series = make_series(metadata.ACTIVATION_DIVERGENCE, table(rel),
                         comparison_extras(["bfloat16"], xla, same), rows=["dense_1"])
    assert analysis.alerts_for_divergence(series, T, context(4, ["bfloat16"] * 4)) == []


# ---------------------------------------------------------------------------
# A reference at the noise of its own computation (issue 13 item 5).
# ---------------------------------------------------------------------------


def write_comparison(logdir, run, kind, rows, tables, extras, name="model_vs_float32"):
    version = 1 if np.shape(tables[0])[-1] == len(metadata.kind_columns(kind, 1)) else 2
    record = metadata.RecordMetadata(kind, rows, metadata.kind_columns(kind, version), extras, version)
    writer = tf.summary.create_file_writer(str(logdir / run))
    with writer.as_default():
        for step, t in enumerate(tables):
            summary_ops.write_record(name, record, tf.constant(t), step * 10)
    writer.close()


def test_a_gradient_whose_true_value_is_zero_is_not_judged_nor_the_headline(tmp_path):
    """An attention key bias (measured rel L2 3e4) or a bias before BatchNorm: the
    float32 reference is the rounding noise of its own computation."""
    rows = ["mha/key/kernel", "mha/key/bias"]
    tables = table([[0.05, 3e4]] * 5, cosine=0.2, norm_ratio=[[1.0, 3e4]] * 5)
    write_comparison(tmp_path, "bf16", metadata.DIVERGENCE, rows, tables, comparison_extras(["bfloat16"] * 2))
    source = source_of(str(tmp_path))
    alerts, problems = analysis.run_alerts(source)
    assert alerts == [] and problems == []
    (headline,) = judgment_json.overview_json(analysis.overview(source))
    assert headline["worst_divergence"]["row"] == "mha/key/kernel"
    tag = source.entries("bf16")[0].tag
    limits = routes_impl.limits_impl(source, "bf16", tag)
    assert limits["limits"][1] == [None] * 5 and "rounding noise" in limits["basis"][1]
    assert limits["limits"][0] == pytest.approx([T.gradient_rounding * U * np.sqrt(2)] * 5)


# ---------------------------------------------------------------------------
# NaN and Inf win.
# ---------------------------------------------------------------------------


def test_nan_wins_the_worst_divergence_from_its_first_step(tmp_path):
    """Issue 14: a run whose comparisons are NaN from step 30 showed 0.064 at step 10."""
    rel = np.array([[0.01, 0.02], [0.064, 0.02], [0.01, 0.03], [np.nan, np.nan], [np.nan, np.nan]])
    nonfinite = np.where(np.isnan(rel), 5.0, 0.0)
    write_comparison(tmp_path, "bf16", metadata.DIVERGENCE, ["a", "b"], table(rel, nonfinite=nonfinite),
                     comparison_extras(["bfloat16"] * 2))
    source = source_of(str(tmp_path))
    worst = judgment_json.worst_divergence_json(analysis.worst_divergence(source, "bf16"))
    assert worst["step"] == 30 and worst["nonfinite"] is True and np.isnan(worst["value"])
    (alert,) = [a for a in analysis.run_alerts(source)[0] if a.code == "nonfinite"]
    assert (alert.step_first, alert.view["step"]) == (30, 30)


def test_the_loss_alert_says_what_was_compared_in_words():
    loss_table = np.zeros((3, 1, 4), np.float32)
    loss_table[:, 0] = [2.3, 4.6, 2.3, 1.0]  # the bfloat16 loss is twice the float32 one
    series = make_series(metadata.LOSS_COMPARISON, loss_table, comparison_extras(), rows=["loss"])
    (alert,) = analysis.alerts_for_divergence(series, T, context(4))
    assert alert.explanation.startswith(
        "Computed in mixed_bfloat16, the training loss differs from the float32 computation")
    assert "loss of loss" not in alert.explanation and "rel error up to 1" in alert.explanation


def test_an_unknown_compute_dtype_is_said_and_judged_by_the_fixed_floor():
    old = {"label": "mine", "policy": "my_float16_experiment", "device": "default", "jit_compile": False}
    series = make_series(metadata.ACTIVATION_DIVERGENCE, table([[0.02]] * 3),
                         {"reference": F32, "candidate": old}, rows=["dense"])
    (alert,) = analysis.alerts_for_divergence(series, T, context(1))
    assert alert.code == "divergence" and alert.limit == T.low_precision_value_rel_l2
    assert "compute dtype not recorded" in alert.explanation


# ---------------------------------------------------------------------------
# Flush to zero, underflow.
# ---------------------------------------------------------------------------


def test_flush_to_zero_needs_more_than_rounding_can_zero():
    """Measured on the demo: 1 bias element of 64 (1.6%) at rel L2 0.05 is rounding."""
    flush = np.array([[0.016, 0.6]] * 4)
    series = make_series(metadata.DIVERGENCE, table([[0.05, 0.05]] * 4, flush=flush),
                         comparison_extras(["bfloat16"] * 2), rows=["bias", "tiny"])
    (alert,) = analysis.alerts_for_divergence(series, T, context(4))
    assert (alert.code, alert.variables) == ("flush_to_zero", ["tiny"])
    assert alert.limit == pytest.approx(0.05)  # the row's own relative error there


def histogram_table(exponents, counts, steps=3):
    t = np.zeros((steps, len(exponents), len(metadata.HISTOGRAM_COLUMNS)), np.float32)
    for r, (e, n) in enumerate(zip(exponents, counts)):
        t[:, r, e - metadata.MIN_EXPONENT] = n
        t[:, r, metadata.N_EXP_BINS] = 10  # exact zeros
        t[:, r, -20 - metadata.MIN_EXPONENT] = 90
    return t


def test_underflow_is_gradient_mass_next_to_the_smallest_normal_number():
    hist = histogram_table([-120, -60, -10], [50, 50, 50])
    series = make_series(metadata.GRAD_HISTOGRAM, hist, rows=["near_2^-126", "fine", "f16_near_2^-14"])
    (alert,) = analysis.alerts_for_histogram(series, T, ("float32", "float32", "float16"))
    assert (alert.code, alert.variables) == ("underflow", ["near_2^-126", "f16_near_2^-14"])
    assert alert.details[0]["worst"] == pytest.approx(50 / 150) and "2^-126" in alert.explanation
    assert analysis.alerts_for_histogram(series, T.replace(underflow_binades=4), ("float32",) * 3) == []


# ---------------------------------------------------------------------------
# Grouping.
# ---------------------------------------------------------------------------


def test_alerts_that_repeat_per_run_are_grouped(tmp_path):
    rows = ["frozen", "w"]
    for run in ("a", "b", "c"):
        record = metadata.RecordMetadata(metadata.GRAD_STATS, rows, metadata.GRAD_STATS_COLUMNS)
        t = np.zeros((2, len(metadata.GRAD_STATS_COLUMNS)), np.float32)
        t[0, metadata.GRAD_STATS_COLUMNS.index("is_none")] = 1.0 if run != "c" else 0.0
        writer = tf.summary.create_file_writer(str(tmp_path / run))
        with writer.as_default():
            summary_ops.write_record("model", record, tf.constant(t), 0)
        writer.close()
    alerts, _ = analysis.run_alerts(source_of(str(tmp_path)))
    (group,) = analysis.group_alerts(alerts)
    assert [a.run for a in group[1]] == ["a", "b"] and group[0] == alerts[0].to_json()["group"]


def test_a_display_filter_never_changes_a_limit_or_a_verdict(tmp_path):
    """Issue 25: with the variable regex 'dense_2' the Overview and the alerts judged against the
    limit of depth 1 while the Divergence view kept the model's.  A filtered view now shows the
    judgement of the whole record, restricted to the rows and steps it shows."""
    from tb_gradlens.serving import filtered_source

    layers = ["dense_1", "dense_2", "dense_3", "dense_4"]
    rel = [[0.003, 0.006, 0.012, 0.03]] * 6  # dense_4 at depth 4: 0.03 < 5 u 4 = 0.078, but > 5 u 1
    write_comparison(tmp_path, "bf16", metadata.ACTIVATION_DIVERGENCE, layers, table(rel),
                     comparison_extras(["bfloat16"] * 4))
    source = source_of(str(tmp_path))
    tag = source.entries("bf16")[0].tag
    whole = routes_impl.limits_impl(source, "bf16", tag)
    assert analysis.run_alerts(source)[0] == []
    for pattern, step_min in (("dense_4", None), ("dense_[34]", 20), (None, 30)):
        shown = filtered_source.FilteredSource(source, pattern, step_min)
        assert analysis.run_alerts(shown)[0] == []
        (headline,) = judgment_json.overview_json(analysis.overview(shown))
        want = whole["limits"][layers.index(headline["worst_divergence"]["row"])][0]
        assert headline["worst_divergence"]["limit"] == pytest.approx(want)
        judged = tolerances.judge_entry(shown, shown.entry("bf16", tag))
        kept = [layers.index(r) for r in shown.series("bf16", tag).record.rows]
        np.testing.assert_allclose(judged.limits[0], [whole["limits"][r][0] for r in kept])


# ---------------------------------------------------------------------------
# Issue 38: harm wherever the rounding happens, one verdict per finding.
# ---------------------------------------------------------------------------


def measured_table(kind, rel, stable, half_batch=None):
    """float32 [S, R, columns of version 2] with rel (rel_error for the loss), the stable pass's
    column and the half batch's."""
    columns = metadata.kind_columns(kind, 2)
    rel = np.asarray(rel, np.float32)
    out = np.zeros(rel.shape + (len(columns),), np.float32)
    if kind == metadata.LOSS_COMPARISON:
        out[..., columns.index("reference")] = 1.0
        out[..., columns.index("candidate")] = 1.0 + rel
        out[..., columns.index("abs_error")] = rel
        out[..., columns.index("rel_error")] = rel
        out[..., columns.index(metadata.STABLE_REL_ERROR)] = stable
        out[..., columns.index(metadata.HALF_BATCH_REL_ERROR)] = np.nan if half_batch is None else half_batch
        return out
    out[..., columns.index("rel_l2")] = rel
    out[..., columns.index("cosine")] = 1.0
    out[..., columns.index("norm_ratio")] = 1.0
    out[..., columns.index(metadata.STABLE_REL_L2)] = stable
    if kind == metadata.DIVERGENCE:
        out[..., columns.index(metadata.HALF_BATCH_REL_L2)] = np.nan if half_batch is None else half_batch
    return out


def test_damage_born_at_a_layer_boundary_is_not_excused_by_the_stable_pass(tmp_path):
    """Measured on the zoo's timestamp Normalization: the layer's output 70 roundings off float32 and the
    stable pass, which rounds its input too, exactly as far: the old rule (4 x the stable divergence)
    called it rounding.  The layers after it carry the damage: they are not excused by it either, and
    the alert says where it is born."""
    layers = ["input_norm", "dense_1", "logits", "predictions"]
    healthy = [0.8 * U, 1.5 * U, 2.0 * U, 1.0 * U]
    damaged = [70 * U, 66 * U, 60 * U, 20 * U]
    for run, rel in (("healthy", healthy), ("timestamp", damaged)):
        write_comparison(tmp_path, run, metadata.ACTIVATION_DIVERGENCE, layers,
                         measured_table(metadata.ACTIVATION_DIVERGENCE, [rel] * 5, [rel] * 5),
                         comparison_extras(["bfloat16"] * 3 + ["float32"]))
    source = source_of(str(tmp_path))
    alerts, problems = analysis.run_alerts(source)
    assert problems == []
    (alert,) = alerts
    assert (alert.run, alert.code, alert.variables[0]) == ("timestamp", "bf16_divergence", "input_norm")
    assert "born where values enter input_norm" in alert.explanation and "70x" in alert.explanation
    assert "in float32" in alert.fix
    # The limit: 4 x the stable divergence counted up to 2 x one rounding, the first row carrying nothing.
    assert alert.limit == pytest.approx(T.stable_factor * T.boundary_factor * U)
    headlines = {h["run"]: h["worst_divergence"] for h in judgment_json.overview_json(analysis.overview(source))}
    assert headlines["timestamp"]["verdict"] == "harmed" and headlines["healthy"]["verdict"] == "within"


def test_the_loss_is_judged_by_its_sampling_noise_wherever_it_rounded(tmp_path):
    """Measured on the zoo's large residual stream: the loss 43% off float32, its stable value as far off,
    its half-batch noise 18%: beyond what another batch moves it, so harm, born between layers."""
    write_comparison(tmp_path, "stream", metadata.LOSS_COMPARISON, ["loss"],
                     measured_table(metadata.LOSS_COMPARISON, [[0.43]] * 4, [[0.43]] * 4, [[0.18]] * 4),
                     comparison_extras())
    write_comparison(tmp_path, "healthy", metadata.LOSS_COMPARISON, ["loss"],
                     measured_table(metadata.LOSS_COMPARISON, [[0.04]] * 4, [[0.04]] * 4, [[0.18]] * 4),
                     comparison_extras())
    alerts, _ = analysis.run_alerts(source_of(str(tmp_path)))
    (alert,) = alerts
    assert alert.run == "stream" and alert.limit == pytest.approx(T.half_batch_fraction * 0.18, rel=1e-6)
    assert "born where values cross between layers" in alert.explanation


def test_a_transient_has_its_verdict_in_the_headline_and_no_alert(tmp_path):
    """Issue 38 item 2: 5.5x above its limit at the first comparison, within it after: the headline
    says so, and the fault's own stable divergence at that step is not the next comparisons' baseline."""
    rows = ["naive_norm", "dense_1"]
    stable = [[2 * U, 2 * U]] + [[1 * U, 1 * U]] * 4
    rel = [[5.5 * T.stable_factor * 2 * U, 1.0 * U]] + [[1.2 * U, 1.0 * U]] * 4
    write_comparison(tmp_path, "fading", metadata.ACTIVATION_DIVERGENCE, rows,
                     measured_table(metadata.ACTIVATION_DIVERGENCE, rel, stable), comparison_extras(["bfloat16"] * 2))
    source = source_of(str(tmp_path))
    assert analysis.run_alerts(source)[0] == []
    (headline,) = judgment_json.overview_json(analysis.overview(source))
    worst = headline["worst_divergence"]
    assert (worst["row"], worst["step"], worst["verdict"], worst["above_steps"]) == ("naive_norm", 0, "transient", [0])
    assert worst["ratio"] == pytest.approx(5.5, rel=1e-4)
    assert worst["verdict_text"].startswith("above its limit once, at step 0")
    limits = routes_impl.limits_impl(source, "fading", source.entries("fading")[0].tag)["limits"][0]
    assert limits[1] == pytest.approx(T.stable_factor * U)  # not 4 x the faulty step's 2 roundings

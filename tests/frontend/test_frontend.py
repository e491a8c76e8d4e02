"""The GradLens tab in a real browser (Debian's Chromium via Playwright)
against a real `tensorboard` process.

The logdir is written by the project's own code: tb_gradlens.demo trains the
float32 and mixed_bfloat16 MLPs (gradient statistics, histograms, loss), and
tb_gradlens.writing.summary_ops.write_record adds the kinds the demo does not log yet
(divergence, activation divergence, a dtype map, and a gradient record whose
variable is named like an HTML injection).

Every number checked on screen is compared with the JSON route fetched here.
Screenshots of each view go to test-artifacts/frontend/.  The four questions
and the defects of issue 15 are tested in test_frontend_questions.py.
Without Chromium or Playwright the tests skip, except under CI (env CI set),
where they fail.
"""

import csv
import io
import json
import math
import os
import urllib.parse

import numpy as np
import pytest

from tests.support.frontend_page import (  # noqa: F401 (browser, page: fixtures)
    PREFIX, Page, browser, chart, navigate, number, open_tab, page, plot_of, require_browser, route, screenshot,
    shown_close, step_x, table_dicts, table_rows, tag_of, wait_complete, wait_drawn,
)
from tests.support.tb_server import TensorBoardProcess

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.tensorboard]  # a real TensorBoard in Chromium

HOSTILE = "<img src=x onerror=alert(1)>"
STEPS = 12
BF16 = "mixed_bfloat16"
F32 = "float32"
DIV_NAN = (7, 1)  # (step, row) of the NaN in the divergence record
REFERENCE = {"label": "float32 shadow", "policy": "float32", "device": "CPU", "jit_compile": False}
CANDIDATE = {"label": "bf16 candidate", "policy": "mixed_bfloat16", "device": "CPU", "jit_compile": False}
LAYERS = ("dense_1", "dense_2", "logits", "predictions")


# ---------------------------------------------------------------------------
# The logdir.
# ---------------------------------------------------------------------------


def divergence_values(n_rows):
    """float32 [steps, rows, DIVERGENCE_COLUMNS_V1]: rel_l2 = 1e-3 (r+1) 1.3^s, a NaN at DIV_NAN."""
    from tb_gradlens import metadata

    cols = metadata.DIVERGENCE_COLUMNS_V1  # format version 1 records: the depth formula
    v = np.zeros((STEPS, n_rows, len(cols)), np.float32)
    s = np.arange(STEPS)[:, None]
    r = np.arange(n_rows)[None, :]
    rel = 1e-3 * (r + 1) * 1.3**s
    v[:, :, cols.index("rel_l2")] = rel
    v[:, :, cols.index("cosine")] = 1 - rel**2 / 2
    v[:, :, cols.index("norm_ratio")] = 1 + rel / 3
    v[:, :, cols.index("max_abs")] = rel * 0.01
    v[:, :, cols.index("max_rel")] = rel * 4
    v[:, :, cols.index("ulp_rms")] = 0.29 + s * 0.01 + r
    v[:, :, cols.index("sign_flip")] = rel / 10
    v[:, :, cols.index("flush_to_zero")] = 0.0
    step, row = DIV_NAN
    v[step, row, cols.index("rel_l2")] = np.nan
    v[step, row, cols.index("nonfinite")] = 3
    return v


def activation_values():
    """float32 [steps, layers, columns]: deeper layers diverge more (rel_l2 = 2e-3 (d+1) (1 + s/10))."""
    from tb_gradlens import metadata

    cols = metadata.DIVERGENCE_COLUMNS_V1  # format version 1 records: the depth formula
    v = np.zeros((STEPS, len(LAYERS), len(cols)), np.float32)
    s = np.arange(STEPS)[:, None]
    d = np.arange(len(LAYERS))[None, :]
    v[:, :, cols.index("rel_l2")] = 2e-3 * (d + 1) * (1 + s / 10)
    v[:, :, cols.index("cosine")] = 1.0
    v[:, :, cols.index("norm_ratio")] = 1.0
    return v


DTYPE_MAP = {
    "layers": [
        {"path": "mlp/dense_1", "class": "Dense", "policy": "mixed_bfloat16",
         "compute_dtype": "bfloat16", "variable_dtype": "float32", "output_dtype": "bfloat16"},
        {"path": "mlp/dense_2", "class": "Dense", "policy": "mixed_bfloat16",
         "compute_dtype": "bfloat16", "variable_dtype": "float32", "output_dtype": "bfloat16"},
        {"path": "mlp/predictions", "class": "Activation", "policy": "float32",
         "compute_dtype": "float32", "variable_dtype": "float32", "output_dtype": "float32"},
        {"path": HOSTILE, "class": "Dense", "policy": "bfloat16",
         "compute_dtype": "bfloat16", "variable_dtype": "bfloat16", "output_dtype": "bfloat16"},
    ],
    "variables": [{"path": "dense_1/kernel", "dtype": "float32"}, {"path": HOSTILE, "dtype": "bfloat16"}],
    "model_output_dtype": "bfloat16",
}


def build_logdir(logdir):
    """Write the test logdir; returns the divergence rows (demo variables + HOSTILE)."""
    import tensorflow as tf

    from tb_gradlens import demo
    from tb_gradlens import metadata
    from tb_gradlens import summary
    from tb_gradlens.writing import summary_ops

    demo.write_demo_logdir(logdir, steps=STEPS)
    model = demo.build_mlp(BF16)
    variables = summary_ops.variable_paths(model.trainable_variables)
    rows = variables + [HOSTILE]
    div = metadata.RecordMetadata(
        metadata.DIVERGENCE, rows, metadata.DIVERGENCE_COLUMNS_V1,
        {"reference": REFERENCE, "candidate": CANDIDATE}, version=1,
    )
    act = metadata.RecordMetadata(
        metadata.ACTIVATION_DIVERGENCE, LAYERS, metadata.DIVERGENCE_COLUMNS_V1,
        {"reference": REFERENCE, "candidate": CANDIDATE}, version=1,
    )
    # A gradient record whose only variable has a hostile name and a None gradient.
    hostile = metadata.RecordMetadata(
        metadata.GRAD_STATS, [HOSTILE], metadata.GRAD_STATS_COLUMNS,
        {"variable_dtypes": ["float32"], "gradient_dtypes": ["none"]},
    )
    cols = metadata.GRAD_STATS_COLUMNS
    none_row = np.full((1, len(cols)), np.nan, np.float32)
    for name in ("zero_fraction", "subnormal_fraction", "nan_count", "posinf_count", "neginf_count"):
        none_row[0, cols.index(name)] = 0
    none_row[0, cols.index("count")] = 4
    none_row[0, cols.index("is_none")] = 1
    dv, av = divergence_values(len(rows)), activation_values()
    writer = tf.summary.create_file_writer(os.path.join(logdir, BF16), filename_suffix=".extra")
    with writer.as_default():
        summary.dtypes(DTYPE_MAP, step=0)
        for step in range(STEPS):
            summary_ops.write_record("precision", div, tf.constant(dv[step]), step)
            summary_ops.write_record("precision", act, tf.constant(av[step]), step)
            summary_ops.write_record("odd", hostile, tf.constant(none_row), step)
    writer.close()
    return rows


# ---------------------------------------------------------------------------
# Fixtures: one tensorboard and one browser for the module.
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    require_browser()
    path = str(tmp_path_factory.mktemp("frontend") / "logs")
    build_logdir(path)
    return path


@pytest.fixture(scope="module")
def tensorboard_ready():
    """When conftest.py's ``tensorboard`` on this logdir is ready: both runs, every step."""
    return (lambda d: {r["run"] for r in d.get("runs", [])} >= {F32, BF16}
            and len(next(r for r in d["runs"] if r["run"] == BF16)["tags"]) == 6
            and all(t["max_step"] == STEPS - 1 for r in d["runs"] for t in r["tags"] if t["kind"] != "dtypes"))


def tab_frame(p):
    """The GradLens iframe inside TensorBoard's page, once its view is drawn."""
    p.wait_for_selector("iframe", timeout=60000)
    p.wait_for_function("() => [...document.querySelectorAll('iframe')].some(f => { try { return "
                        "f.contentWindow.location.href.includes('plugin_entry.html?name=gradlens'); } "
                        "catch (e) { return false; } })", timeout=60000)
    frame = next(f for f in p.frames if "plugin_entry.html?name=gradlens" in f.url)
    wait_drawn(frame)
    return frame


# ---------------------------------------------------------------------------
# Tests.
# ---------------------------------------------------------------------------


def test_tab_in_tensorboard_follows_reload_hash_and_dark_mode_live(tensorboard, page):
    """Issue 15 defect 9: dark mode switched while a view is open, and a changed address, take effect."""
    tb = tensorboard
    listing = tb.get_json("/data/plugins_listing")
    assert listing["gradlens"]["enabled"] and listing["gradlens"]["tab_name"] == "GradLens"
    p = page.page
    p.goto(tb.url + "/#gradlens")
    frame = tab_frame(p)
    tabs = [t.strip() for t in p.locator("[role=tab]").all_text_contents()]
    assert "GradLens" in tabs
    runs = [r["run"] for r in route(tb, "overview")["runs"]]
    shown = frame.eval_on_selector_all(".gl-run-row td:first-child", "tds => tds.map(td => td.textContent)")
    assert shown == runs == [F32, BF16]

    # TensorBoard's reload button reaches the tab (experimental.DataReloaded) and it refetches.
    reloads = int(frame.evaluate("document.documentElement.dataset.reloads"))
    p.locator("button.reload-button").click()
    frame.wait_for_function("(n) => Number(document.documentElement.dataset.reloads) > n", arg=reloads)
    assert frame.evaluate("document.documentElement.dataset.host") == "connected"

    # The view is kept in TensorBoard's hash (p.gradlens.*): the address can be shared ...
    navigate(page, lambda: frame.click(".gl-tabs [data-view=gradients]"), frame)
    assert "p.gradlens.view=gradients" in p.url
    shared = p.url
    # ... and a changed address switches the open tab's view (issue 15, defect 9).
    navigate(page, lambda: p.evaluate("location.hash = '#gradlens&p.gradlens.view=divergence&p.gradlens.run=%s'" % BF16),
             frame)
    assert frame.eval_on_selector(".gl-tabs [aria-selected=true]", "b => b.textContent") == "Divergence"

    # TensorBoard's dark mode switched while a view is open redraws every chart in dark colors (defect 9).
    canvases = frame.locator("figure.gl-chart .gl-plot canvas")
    assert canvases.count() >= 2
    p.evaluate("document.body.classList.add('dark-mode')")
    frame.wait_for_function("document.documentElement.dataset.theme === 'dark'")
    background = frame.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(32, 33, 36)"
    # Every chart drawn again (a chart drawing when the theme changed has no data-plot for a moment).
    frame.wait_for_function("[...document.querySelectorAll('figure.gl-chart .gl-plot canvas')]"
                            ".every(c => c.dataset.plot && JSON.parse(c.dataset.plot).theme === 'dark')")
    themes = frame.eval_on_selector_all("figure.gl-chart .gl-plot canvas", "cs => cs.map(c => JSON.parse(c.dataset.plot).theme)")
    assert set(themes) == {"dark"}
    screenshot(page, "tensorboard-divergence-dark")
    p.evaluate("document.body.classList.remove('dark-mode')")
    frame.wait_for_function("document.documentElement.dataset.theme === 'light'")

    other = page.context.new_page()
    try:
        other.goto(shared)
        frame2 = tab_frame(other)
        assert frame2.eval_on_selector(".gl-tabs [aria-selected=true]", "b => b.textContent") == "Gradients"
    finally:
        other.close()
    page.assert_clean()


def test_overview_headline_alerts_and_alert_click(tensorboard, page):
    tb = tensorboard
    overview = {r["run"]: r for r in route(tb, "overview")["runs"]}
    alerts = route(tb, "alerts")["alerts"]
    p = open_tab(tb, page, "view=overview")
    rows = {r["run"]: r for r in table_dicts(p, "table.gl-table", "tr.gl-run-row")}
    assert set(rows) == {F32, BF16}
    worst = overview[BF16]["worst_divergence"]
    # NaN wins the worst divergence (issue 14): the NaN written at DIV_NAN, not the
    # largest finite rel_l2 (row HOSTILE at the last step).
    step, row = DIV_NAN
    div_rows = tag_of(tb, BF16, "divergence")["rows"]
    assert math.isnan(number(worst["value"])) and worst["nonfinite"] is True
    assert worst["row"] == div_rows[row] and worst["step"] == step
    limits = route(tb, "limits", run=BF16, tag=worst["tag"])
    assert worst["limit"] == pytest.approx(limits["limits"][row][limits["steps"].index(step)])
    # The second answer says it in words (issue 40): the comparison is not finite from that step, in that row.
    said = {r["run"]: r for r in route(tb, "answers")["runs"]}[BF16]
    q2 = next(a for a in said["answers"] if a["id"] == "diverges_most")
    assert q2["verdict"] == "nonfinite" and q2["step"] == step and q2["row"] == div_rows[row]
    assert rows[BF16]["diverges most"] == q2["short"] == "not finite from step %d (%s)" % (step, div_rows[row])
    assert rows[BF16]["comparisons"] == "bf16 candidate vs float32 shadow"
    # The only NaN is in the compared gradients (DIV_NAN): it is the run's first NaN/Inf step.
    assert overview[BF16]["first_nonfinite_step"] == DIV_NAN[0]
    assert rows[BF16]["first NaN/Inf"].startswith("step %d: " % DIV_NAN[0])
    assert rows[BF16]["disconnected (None)"] == HOSTILE == overview[BF16]["disconnected_variables"][0]
    counts = overview[BF16]["alert_counts"]
    assert rows[BF16]["alerts E/W/I"] == "%d / %d / %d" % (counts["error"], counts["warning"], counts["info"])
    assert rows[F32]["diverges most"] == "–" and rows[F32]["first NaN/Inf"] == "none"  # float32: the reference

    codes = p.eval_on_selector_all(".gl-alert .gl-alert-code", "n => n.map(x => x.textContent)")
    assert codes == [a["code"] for a in alerts]
    texts = p.eval_on_selector_all(".gl-alert .gl-alert-text", "n => n.map(x => x.textContent)")
    assert texts == [a["explanation"] for a in alerts]
    screenshot(page, "overview")

    nonfinite = next(a for a in alerts if a["code"] == "nonfinite")
    step, row = DIV_NAN
    assert nonfinite["step_first"] == step and nonfinite["view"]["name"] == "divergence"
    navigate(page, lambda: p.locator(".gl-alert").nth(alerts.index(nonfinite)).click())
    assert p.eval_on_selector(".gl-tabs [aria-selected=true]", "b => b.textContent") == "Divergence"
    assert p.text_content(".gl-sec-gradients .gl-step-title") == "Variables at step %d" % step
    assert p.eval_on_selector(".gl-metric", "s => s.value") == nonfinite["view"]["column"]
    table = ".gl-sec-gradients table.gl-table"
    selected = table_dicts(p, table, "tr.gl-selected")
    assert [r["variable"] for r in selected] == [nonfinite["view"]["row"]]
    # The NaN written at DIV_NAN is shown as NaN, and nonfinite = 3.
    assert selected[0]["rel_l2"] == "NaN" and selected[0]["nonfinite"] == "3"
    page.assert_clean()


def test_divergence_view_numbers_heatmap_hover_and_keyboard(tensorboard, page):
    tb = tensorboard
    tag = tag_of(tb, BF16, "divergence")
    rows = tag["rows"]
    last = STEPS - 1
    series = route(tb, "series", run=BF16, tag=tag["tag"], step_min=last, step_max=last, max_steps=1)
    p = open_tab(tb, page, "view=divergence&run=" + BF16)
    assert p.text_content(".gl-candidate") == "bf16 candidate"
    assert p.text_content(".gl-reference") == "float32 shadow"
    assert "policy mixed_bfloat16, computes in bfloat16" in p.text_content(".gl-variants")
    assert p.text_content(".gl-run-name") == BF16

    expected = divergence_values(len(rows)).astype(np.float64)[last]  # [rows, columns]
    # The limit of each row at each step: the alert rules' (limits route), bfloat16's budget for all
    # (format 1 records: no stable-rounding column, the same limit at every step).
    limits = route(tb, "limits", run=BF16, tag=tag["tag"])
    assert limits["rows"] == rows and len({v for row in limits["limits"] for v in row}) == 1
    tolerance = limits["limits"][0][0]
    table = ".gl-sec-gradients table.gl-table"
    shown = table_dicts(p, table)
    assert sorted(r["variable"] for r in shown) == sorted(rows)
    # Ranked by rel_l2 / its limit, worst first: the written rel_l2 grows with the row index.
    assert [r["variable"] for r in shown] == rows[::-1]
    for c, column in enumerate(series["columns"]):
        for r, name in enumerate(series["rows"]):
            text = next(s for s in shown if s["variable"] == name)[column]
            route_value = number(series["values"][c][r][0])
            assert route_value == pytest.approx(np.float32(expected[r, c]), rel=1e-6)
            assert shown_close(text, route_value), (name, column, text, route_value)
            if column == "rel_l2":
                ratio = next(s for s in shown if s["variable"] == name)["× limit"]
                assert float(ratio) == pytest.approx(route_value / tolerance, rel=0.05)

    # Heatmap: hover the hostile row's last cell; the tooltip shows it literally, with step, value, ratio.
    heat = chart(p, "variables × steps")
    canvas = heat.locator("canvas").first
    plot = plot_of(heat)
    assert plot["rows"] == len(rows) and plot["steps"] == STEPS
    row_h = (plot["y1"] - plot["y0"]) / plot["rows"]
    canvas.hover(position={"x": step_x(plot, last) + 2, "y": plot["y0"] + row_h * (len(rows) - 0.5)})
    tip = heat.locator(".gl-tooltip")
    lines = tip.locator("div").all_text_contents()
    want = number(series["values"][0][len(rows) - 1][0])
    assert lines[0] == HOSTILE and lines[1] == "step %d" % last
    assert lines[2].startswith("rel_l2 ") and shown_close(lines[2].split(" ", 1)[1], want)
    assert lines[3].endswith("× its limit %s at this step" % float("%.4g" % tolerance))
    assert lines[4] == "limit: " + limits["basis"][len(rows) - 1]  # the basis of the limit, on hover
    screenshot(page, "divergence")

    # Keyboard: focus the heatmap, Home goes to step 0, Enter selects (row 0, step 0).
    canvas.focus()
    p.keyboard.press("Home")
    assert tip.locator("div").all_text_contents()[1] == "step 0"
    navigate(page, lambda: p.keyboard.press("Enter"))
    assert p.text_content(".gl-sec-gradients .gl-step-title") == "Variables at step 0"
    assert "row=" in p.evaluate("location.hash") and "step=0" in p.evaluate("location.hash")

    # Activation divergence: layers in depth order with their values at step 0.
    act = table_dicts(p, ".gl-sec-activations table.gl-table")
    assert [r["layer"] for r in act] == list(LAYERS)
    for depth, r in enumerate(act):
        # Depth counts from 1 (the first layer), as the tolerance's basis does ("depth 1: 5 x u x 1").
        assert r["depth"] == str(depth + 1) and shown_close(r["rel_l2"], float(np.float32(2e-3 * (depth + 1))))
    page.assert_clean()


def test_divergence_filter_step_range_and_error_state(tensorboard, page):
    tb = tensorboard
    p = open_tab(tb, page, "view=divergence&run=" + BF16)
    # Typed into the shared controls (keyboard: fill + Enter commits each).
    navigate(page, lambda: (p.fill(".gl-regex", "dense_2"), p.press(".gl-regex", "Enter")))
    navigate(page, lambda: (p.fill(".gl-smin", "2"), p.press(".gl-smin", "Enter")))
    navigate(page, lambda: (p.fill(".gl-smax", "5"), p.press(".gl-smax", "Enter")))
    assert all(k in p.evaluate("location.hash") for k in ("filter=dense_2", "smin=2", "smax=5"))
    shown = table_dicts(p, ".gl-sec-gradients table.gl-table")
    assert sorted(r["variable"] for r in shown) == ["mlp/dense_2/bias", "mlp/dense_2/kernel"]
    assert p.text_content(".gl-sec-gradients .gl-step-title") == "Variables at step 5"
    domain = plot_of(chart(p, "rel_l2 per step"))["domain"]
    assert 1.5 <= domain[0] <= 2 and 5 <= domain[1] <= 5.5  # steps 2-5 (and the heatmap's cells around them)
    # A regex the server rejects: the error is shown, no crash.
    navigate(page, lambda: p.evaluate("location.hash = 'view=divergence&run=%s&filter=(' " % BF16))
    error = p.text_content(".gl-view:not(.gl-pending) .gl-error")
    assert "400" in error
    # The console reports the failed request (HTTP 400): that one is expected.
    assert all("400" in e for e in page.errors)
    assert page.dialogs == []


def test_gradients_view_numbers_histogram_and_requests(tensorboard, page):
    """Every number against the routes; issue 15 defect 13: only what is drawn is asked for."""
    tb = tensorboard
    tag = tag_of(tb, F32, "grad_stats", "gradients")
    series = route(tb, "series", run=F32, tag=tag["tag"], max_steps=STEPS)
    p = open_tab(tb, page, "view=gradients&run=" + F32)
    wait_complete(p)
    shown = {r["variable"]: r for r in table_dicts(p, ".gl-view:not(.gl-pending) table.gl-table")}
    assert sorted(shown) == sorted(series["rows"])
    cols = series["columns"]
    for r, name in enumerate(series["rows"]):
        at = lambda c: number(series["values"][cols.index(c)][r][-1])  # noqa: E731
        assert shown_close(shown[name]["l2_norm"], at("l2_norm"))
        assert shown_close(shown[name]["max |g|"], at("max_abs"))
        assert shown_close(shown[name]["zero fraction"], at("zero_fraction"))
        assert shown[name]["NaN/Inf"] == "%d" % (at("nan_count") + at("posinf_count") + at("neginf_count"))
        assert shown[name]["status"] == "ok"
    # Healthy gradients: the histogram shown is the variable with the largest max |g|.
    biggest = max(range(len(series["rows"])),
                  key=lambda r: max(number(v) for v in series["values"][cols.index("max_abs")][r]))
    assert p.text_content(".gl-hist-var") == series["rows"][biggest]
    assert list(shown)[0] == series["rows"][biggest]  # the table starts with the variable it focuses
    plot = plot_of(chart(p, "log2 |g| bin"))
    assert plot["steps"] == STEPS and plot["rows"] < 281
    screenshot(page, "gradients")
    # Only what is drawn is asked for: the columns and max_steps of every series, histograms sampled.
    asked = [urllib.parse.parse_qs(urllib.parse.urlsplit(u).query) for u in page.requests if "/series?" in u]
    assert asked and all("max_steps" in a and "columns" in a for a in asked)
    assert any("/histograms?" in u and "max_steps=" in u for u in page.requests)
    navigate(page, lambda: p.locator("tr.gl-var-row", has_text="mlp/logits/bias").click())
    wait_complete(p)
    assert p.text_content(".gl-hist-var") == "mlp/logits/bias"
    # The hostile variable's None gradient (record "odd").
    odd = tag_of(tb, BF16, "grad_stats", "odd")
    p = open_tab(tb, page, "view=gradients&run=%s&tag=%s" % (BF16, urllib.parse.quote(odd["tag"])))
    (row,) = table_dicts(p, ".gl-view:not(.gl-pending) table.gl-table")
    assert row["variable"] == HOSTILE and row["l2_norm"] == "None" and row["status"] == "None (disconnected)"
    screenshot(page, "gradients-hostile")
    page.assert_clean()


def test_charts_zoom_legend_smoothing_and_download(tensorboard, page):
    """Issue 15 defect 11: drag-to-zoom and reset, legend toggles, smoothing, CSV/JSON per chart."""
    p = open_tab(tensorboard, page, "view=gradients&run=%s&k=3" % F32)
    figure = chart(p, "L2 norm")
    canvas = figure.locator("canvas").first
    plot = plot_of(figure)
    assert plot["domain"][0] <= 0 and plot["domain"][1] >= STEPS - 1  # every step (and the heatmap's cells)
    full = plot["domain"]
    assert all(float(t) == int(t) for t in plot["xTicks"])
    # Drag from step 2 to step 8 zooms the view (every chart; the zoom is in the address).
    y = (plot["y0"] + plot["y1"]) / 2
    box = canvas.bounding_box()

    def drag():
        p.mouse.move(box["x"] + step_x(plot, 2), box["y"] + y)
        p.mouse.down()
        p.mouse.move(box["x"] + step_x(plot, 5), box["y"] + y, steps=4)
        p.mouse.move(box["x"] + step_x(plot, 8), box["y"] + y, steps=4)
        p.mouse.up()

    navigate(page, drag)
    figure = chart(p, "L2 norm")
    zoomed = plot_of(figure)["domain"]
    assert 1 <= zoomed[0] <= 3 and 7 <= zoomed[1] <= 9
    assert plot_of(chart(p, "Gradient health"))["domain"] == zoomed
    assert p.evaluate("location.hash").count("step=") == 0  # a drag is no click
    # The zoom survives a reload (TensorBoard's auto-reload redraws the view every 30 s).
    reloads = int(p.evaluate("document.documentElement.dataset.reloads"))
    p.click(".gl-reload")
    p.wait_for_function("(n) => Number(document.documentElement.dataset.reloads) > n", arg=reloads)
    wait_drawn(p)
    figure = chart(p, "L2 norm")
    # (the reloaded view's canvas exists before its first draw sets data-plot: wait for the draw)
    p.wait_for_function("(d) => { const c = document.querySelector('.gl-view:not(.gl-pending) .gl-line canvas');"
                        " return !!(c && c.dataset.plot && c.dataset.plot.includes(d)); }",
                        arg=json.dumps(zoomed, separators=(",", ":")))
    assert plot_of(figure)["domain"] == zoomed
    navigate(page, lambda: figure.locator(".gl-reset-zoom").click())
    figure = chart(p, "L2 norm")
    assert plot_of(figure)["domain"] == full
    assert figure.locator(".gl-reset-zoom").is_hidden()
    # Legend entries hide and show their series.
    names = figure.locator(".gl-legend-name").all_text_contents()
    assert len(names) == 3
    figure.locator(".gl-legend-item").first.click()
    assert plot_of(figure)["hidden"] == [names[0]]
    figure.locator(".gl-legend-item").first.click()
    assert plot_of(figure)["hidden"] == []
    # CSV and JSON hold what the chart shows.
    with p.expect_download() as info:
        figure.locator(".gl-download-csv").click()
    rows = list(csv.reader(io.StringIO(open(info.value.path()).read())))
    assert rows[0] == ["name", "step", "value"] and len(rows) == 1 + 3 * STEPS
    assert {r[0] for r in rows[1:]} == set(names)
    with p.expect_download() as info:
        figure.locator(".gl-download-json").click()
    data = json.load(open(info.value.path()))
    assert [s["name"] for s in data["series"]] == names and data["series"][0]["steps"] == list(range(STEPS))
    # Smoothing (TensorBoard's debiased moving average) applies to every line chart of the view.
    navigate(page, lambda: p.evaluate("location.hash = location.hash + '&smooth=0.6'"))
    assert p.eval_on_selector(".gl-smooth", "s => s.value") == "0.6"
    page.assert_clean()


def test_dtypes_view_and_hostile_layer(tensorboard, page):
    tb = tensorboard
    data = route(tb, "dtypes", run=BF16)
    assert data["maps"][0]["map"] == DTYPE_MAP
    p = open_tab(tb, page, "view=dtypes&run=" + BF16)
    warning = p.text_content(".gl-output-warning")
    assert "bfloat16" in warning and "float32" in warning
    layers = table_rows(p, ".gl-layer-row")
    assert [r[0] for r in layers] == [layer["path"] for layer in DTYPE_MAP["layers"]]
    assert [r[3] for r in layers] == [layer["compute_dtype"] for layer in DTYPE_MAP["layers"]]
    mixed = p.eval_on_selector_all(".gl-layer-row.gl-mixed td:first-child", "n => n.map(x => x.textContent)")
    assert mixed == ["mlp/dense_1", "mlp/dense_2"]
    # The hostile name is text: no <img> element exists, no dialog opened.
    assert p.evaluate("document.querySelectorAll('img').length") == 0
    screenshot(page, "dtypes")
    page.assert_clean()


def test_compare_view_numbers(tensorboard, page):
    tb = tensorboard
    compare = route(tb, "compare", run_a=F32, run_b=BF16, kind="scalar", tag="loss")
    a = route(tb, "scalars", run=F32, tag="loss")
    b = route(tb, "scalars", run=BF16, tag="loss")
    assert a["steps"] == b["steps"] == compare["steps"]
    av = np.array(a["values"], np.float64)
    bv = np.array(b["values"], np.float64)
    rel = (bv - av) / np.abs(av)
    np.testing.assert_allclose([number(v) for v in compare["rel_difference"]], rel, rtol=1e-9)
    # Opened without a state: A is the float32 run, B the bfloat16 one, the loss; no noise-floor run here.
    p = open_tab(tb, page, "view=compare")
    assert [p.eval_on_selector(s, "x => x.value") for s in (".gl-runa", ".gl-runb", ".gl-qtag")] == [F32, BF16, "loss"]
    assert p.eval_on_selector(".gl-verdict", "x => x.dataset.kind") == "no-noise"
    # A percentage in the sentence (the first answer's words): "up to 0.72%".
    assert shown_close(str(float(p.text_content(".gl-max-rel").rstrip("%")) / 100), float(np.abs(rel).max()),
                       rel=0.05)
    rows = table_rows(p, ".gl-cmp-row")
    assert [int(r[0]) for r in rows] == compare["steps"][::-1][:10]
    for r in rows:
        i = compare["steps"].index(int(r[0]))
        assert shown_close(r[1], av[i]) and shown_close(r[2], bv[i])
        assert shown_close(r[3], bv[i] - av[i], rel=1e-3) and shown_close(r[4], rel[i], rel=1e-3)
    screenshot(page, "compare")
    page.assert_clean()


@pytest.mark.parametrize("view", ["overview", "divergence", "gradients", "dtypes", "compare"])
def test_dark_mode_standalone_screenshots(tensorboard, browser, view):
    page = Page(browser, dark=True)
    try:
        p = open_tab(tensorboard, page, "view=%s&run=%s" % (view, BF16 if view != "overview" else ""))
        wait_complete(p)
        assert p.evaluate("document.documentElement.dataset.theme") == "dark"
        assert p.evaluate("getComputedStyle(document.body).color") == "rgb(232, 234, 237)"
        themes = p.eval_on_selector_all("figure.gl-chart .gl-plot canvas", "cs => cs.map(c => JSON.parse(c.dataset.plot).theme)")
        assert set(themes) <= {"dark"}
        screenshot(page, view + "-dark")
        page.assert_clean()
    finally:
        page.close()


def test_empty_logdir_shows_how_to_log(tmp_path, browser):
    logdir = tmp_path / "empty"
    logdir.mkdir()
    page = Page(browser)
    try:
        with TensorBoardProcess(str(logdir)) as tb:
            page.page.goto(tb.url + "/data/plugin_entry.html?name=gradlens")
            page.page.wait_for_selector(".gl-empty-state", timeout=30000)
            text = page.page.text_content(".gl-empty-state")
            assert text.startswith("No gradlens data yet: log with tb_gradlens.summary.gradients(")
            screenshot(page, "empty")
        page.assert_clean()
    finally:
        page.close()

"""The GradLens tab in a real browser (Debian's Chromium via Playwright)
against a real `tensorboard` process.

The logdir is written by the project's own code: tb_gradlens.demo trains the
float32 and mixed_bfloat16 MLPs (gradient statistics, histograms, loss), and
tb_gradlens.summary_v2.write_record adds the kinds the demo does not log yet
(divergence, activation divergence, a dtype map, and a gradient record whose
variable is named like an HTML injection).

Every number checked on screen is compared with the JSON route fetched here.
Screenshots of each view go to test-artifacts/frontend/.
Without Chromium or Playwright the tests skip, except under CI (env CI set),
where they fail.
"""

import json
import math
import os
import re
import urllib.parse

import numpy as np
import pytest

from tb_server import TensorBoardProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARTIFACTS = os.path.join(ROOT, "test-artifacts", "frontend")
CHROMIUM = "/usr/bin/chromium"
PREFIX = "/data/plugin/gradlens/"
HOSTILE = "<img src=x onerror=alert(1)>"
STEPS = 12
BF16 = "mixed_bfloat16"
F32 = "float32"
DIV_NAN = (7, 1)  # (step, row) of the NaN in the divergence record
REFERENCE = {"label": "float32 shadow", "policy": "float32", "device": "CPU", "jit_compile": False}
CANDIDATE = {"label": "bf16 candidate", "policy": "mixed_bfloat16", "device": "CPU", "jit_compile": False}
LAYERS = ("dense_1", "dense_2", "logits", "predictions")


def _require_browser():
    """Skip without Playwright/Chromium; fail instead under CI."""
    problem = None
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the machine
        problem = "playwright is not installed (%s)" % e
    if problem is None and not os.path.exists(CHROMIUM):
        problem = "Chromium is missing at %s (apt-get install -y chromium)" % CHROMIUM
    if problem:
        if os.environ.get("CI"):
            pytest.fail("browser tests cannot run in CI: " + problem)
        pytest.skip(problem)


# ---------------------------------------------------------------------------
# The logdir.
# ---------------------------------------------------------------------------


def divergence_values(n_rows):
    """float32 [steps, rows, DIVERGENCE_COLUMNS]: rel_l2 = 1e-3 (r+1) 1.3^s, a NaN at DIV_NAN."""
    from tb_gradlens import metadata

    cols = metadata.DIVERGENCE_COLUMNS
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

    cols = metadata.DIVERGENCE_COLUMNS
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
    from tb_gradlens import summary_v2

    demo.write_demo_logdir(logdir, steps=STEPS)
    model = demo.build_mlp(BF16)
    variables = summary_v2.variable_paths(model.trainable_variables)
    rows = variables + [HOSTILE]
    div = metadata.RecordMetadata(
        metadata.DIVERGENCE, rows, metadata.DIVERGENCE_COLUMNS,
        {"reference": REFERENCE, "candidate": CANDIDATE},
    )
    act = metadata.RecordMetadata(
        metadata.ACTIVATION_DIVERGENCE, LAYERS, metadata.DIVERGENCE_COLUMNS,
        {"reference": REFERENCE, "candidate": CANDIDATE},
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
            summary_v2.write_record("precision", div, tf.constant(dv[step]), step)
            summary_v2.write_record("precision", act, tf.constant(av[step]), step)
            summary_v2.write_record("odd", hostile, tf.constant(none_row), step)
    writer.close()
    return rows


# ---------------------------------------------------------------------------
# Fixtures.
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    _require_browser()
    path = str(tmp_path_factory.mktemp("frontend") / "logs")
    build_logdir(path)
    return path


@pytest.fixture(scope="module")
def tensorboard(logdir):
    with TensorBoardProcess(logdir, load_fast=False) as tb:
        tb.wait_for(
            lambda d: {r["run"] for r in d.get("runs", [])} >= {F32, BF16}
            and len(next(r for r in d["runs"] if r["run"] == BF16)["tags"]) == 6
            and all(t["max_step"] == STEPS - 1 for r in d["runs"] for t in r["tags"] if t["kind"] != "dtypes"),
            PREFIX + "runs",
            timeout=120,
        )
        yield tb


@pytest.fixture(scope="module")
def browser():
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


class Page:
    """A browser page that records console errors, page errors and dialogs."""

    def __init__(self, browser, dark=False):
        self.context = browser.new_context(
            viewport={"width": 1280, "height": 900}, color_scheme="dark" if dark else "light"
        )
        self.page = self.context.new_page()
        self.errors = []
        self.dialogs = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

        def on_dialog(dialog):
            self.dialogs.append(dialog.message)
            dialog.dismiss()

        self.page.on("dialog", on_dialog)
        # Opening the tab's document directly makes Chromium ask for /favicon.ico,
        # which TensorBoard does not serve (inside TensorBoard it is not asked for).
        self.page.route("**/favicon.ico", lambda r: r.fulfill(status=204, body=""))

    def assert_clean(self):
        """No console error, no page error, no dialog (no injected script ran)."""
        assert self.errors == []
        assert self.dialogs == []

    def close(self):
        self.context.close()


@pytest.fixture()
def page(browser):
    p = Page(browser)
    yield p
    p.close()


def route(tb, name, **params):
    query = urllib.parse.urlencode(params, doseq=True)
    return tb.get_json(PREFIX + name + ("?" + query if query else ""))


def number(v):
    return float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}.get(v, v)) if isinstance(v, str) else float(v)


def open_tab(tb, page, hash_state=""):
    """Open the tab's own document (what TensorBoard iframes) with a hash state; wait until drawn."""
    page.page.goto(tb.url + "/data/plugin_entry.html?name=gradlens" + ("#" + hash_state if hash_state else ""))
    wait_drawn(page)
    return page.page


def wait_drawn(page):
    page.page.wait_for_selector(".gl-view:not(.gl-pending)", timeout=30000)


def navigate(page, action):
    """Run action (which changes the view) and wait for the next drawn view."""
    before = page.page.evaluate("document.documentElement.dataset.ready || ''")
    action()
    page.page.wait_for_function(
        "(b) => document.documentElement.dataset.ready && document.documentElement.dataset.ready !== b "
        "&& !document.querySelector('.gl-loading')",
        arg=before,
        timeout=30000,
    )


def screenshot(page, name):
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.page.screenshot(path=os.path.join(ARTIFACTS, name + ".png"), full_page=True)


def cell_numbers(page, selector):
    """Displayed numbers and data-value numbers of the cells matching selector."""
    out = []
    for cell in page.page.query_selector_all(selector):
        out.append((cell.text_content(), number(cell.get_attribute("data-value"))))
    return out


def shown_close(text, want, rel=5e-4):
    """The 4-significant-digit text on screen equals want (NaN/Inf spelled out)."""
    if math.isnan(want):
        return text == "NaN"
    if math.isinf(want):
        return text == ("+Inf" if want > 0 else "-Inf")
    return math.isclose(float(text), want, rel_tol=rel, abs_tol=1e-12)


def tag_of(tb, run, kind, prefix=None):
    runs = route(tb, "runs")["runs"]
    tags = [t for r in runs if r["run"] == run for t in r["tags"] if t["kind"] == kind]
    if prefix:
        tags = [t for t in tags if t["tag"].startswith(prefix + "/")]
    return tags[0]


def table_rows(page, row_selector):
    """[[cell text, ...], ...] of the table rows matching row_selector."""
    return page.evaluate(
        "(s) => [...document.querySelectorAll(s)].map(tr => [...tr.cells].map(td => td.textContent))",
        row_selector,
    )


def column_index(page, table_selector, label):
    labels = page.evaluate(
        "(s) => [...document.querySelector(s).tHead.rows[0].cells].map(th => th.textContent.replace(/ [▲▼]$/, ''))",
        table_selector,
    )
    return labels.index(label)


# ---------------------------------------------------------------------------
# Tests.
# ---------------------------------------------------------------------------


def test_tab_listed_opens_follows_reload_dark_mode_and_shares_state(tensorboard, page):
    tb = tensorboard
    listing = tb.get_json("/data/plugins_listing")
    assert listing["gradlens"]["enabled"] and listing["gradlens"]["tab_name"] == "GradLens"
    p = page.page
    p.goto(tb.url + "/#gradlens")
    p.wait_for_selector("iframe", timeout=60000)
    tabs = [t.strip() for t in p.locator("[role=tab]").all_text_contents()]
    assert "GradLens" in tabs
    frame = next(f for f in p.frames if "plugin_entry.html?name=gradlens" in f.url)
    frame.wait_for_selector(".gl-view:not(.gl-pending)", timeout=30000)
    runs = [r["run"] for r in route(tb, "overview")["runs"]]
    shown = frame.eval_on_selector_all(".gl-run-row td:first-child", "tds => tds.map(td => td.textContent)")
    assert shown == runs == [F32, BF16]

    # TensorBoard's reload button reaches the tab (experimental.DataReloaded) and it refetches.
    reloads = int(frame.evaluate("document.documentElement.dataset.reloads"))
    p.locator("button.reload-button").click()
    frame.wait_for_function("(n) => Number(document.documentElement.dataset.reloads) > n", arg=reloads)
    assert frame.evaluate("document.documentElement.dataset.host") == "connected"

    # The view is kept in TensorBoard's hash (p.gradlens.*): the address can be shared.
    frame.click(".gl-tabs [data-view=dtypes]")
    frame.wait_for_selector(".gl-view-dtypes:not([hidden])")
    assert "p.gradlens.view=dtypes" in p.url
    shared = p.url
    # TensorBoard's dark mode (class on its body) is followed.
    p.evaluate("document.body.classList.add('dark-mode')")
    frame.wait_for_function("document.documentElement.dataset.theme === 'dark'")
    background = frame.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(32, 33, 36)"
    screenshot(page, "tensorboard-dtypes-dark")

    other = page.context.new_page()
    try:
        other.goto(shared)
        other.wait_for_selector("iframe", timeout=60000)
        frame2 = next(f for f in other.frames if "plugin_entry.html?name=gradlens" in f.url)
        frame2.wait_for_selector(".gl-view-dtypes:not([hidden])", timeout=30000)
        assert frame2.eval_on_selector(".gl-tabs [aria-selected=true]", "b => b.textContent") == "Dtypes"
    finally:
        other.close()
    page.assert_clean()


def test_overview_headline_alerts_and_alert_click(tensorboard, page):
    tb = tensorboard
    overview = {r["run"]: r for r in route(tb, "overview")["runs"]}
    alerts = route(tb, "alerts")["alerts"]
    p = open_tab(tb, page, "view=overview")
    rows = {r[0]: r for r in table_rows(p, ".gl-run-row")}
    assert set(rows) == {F32, BF16}
    worst = overview[BF16]["worst_divergence"]
    # NaN wins the worst divergence (issue 14): the NaN written at DIV_NAN, not the
    # largest finite rel_l2 (row HOSTILE at the last step).
    step, row = DIV_NAN
    div_rows = tag_of(tb, BF16, "divergence")["rows"]
    assert math.isnan(number(worst["value"])) and worst["nonfinite"] is True
    assert worst["row"] == div_rows[row] and worst["step"] == step
    bf16 = rows[BF16]
    assert bf16[1] == "rel_l2" and shown_close(bf16[2], math.nan) and bf16[3] == div_rows[row]
    assert bf16[4] == str(step)
    assert "bf16 candidate" in bf16[5] and "float32 shadow" in bf16[5]
    # The only NaN is in the compared gradients (DIV_NAN): it is the run's first NaN/Inf step.
    assert overview[BF16]["first_nonfinite_step"] == DIV_NAN[0] and bf16[6] == str(DIV_NAN[0])
    assert bf16[7] == str(len(overview[BF16]["disconnected_variables"])) == "1"
    counts = overview[BF16]["alert_counts"]
    assert bf16[9] == "%d / %d / %d" % (counts["error"], counts["warning"], counts["info"])
    assert rows[F32][1:5] == ["", "", "", ""]

    codes = p.eval_on_selector_all(".gl-alert .gl-alert-code", "n => n.map(x => x.textContent)")
    assert codes == [a["code"] for a in alerts]
    texts = p.eval_on_selector_all(".gl-alert .gl-alert-text", "n => n.map(x => x.textContent)")
    assert texts == [a["explanation"] for a in alerts]
    screenshot(page, "overview")

    nonfinite = next(a for a in alerts if a["code"] == "nonfinite")
    step, row = DIV_NAN
    assert nonfinite["step_first"] == step and nonfinite["view"]["name"] == "divergence"
    index = alerts.index(nonfinite)
    navigate(page, lambda: p.locator(".gl-alert").nth(index).click())
    assert p.eval_on_selector(".gl-tabs [aria-selected=true]", "b => b.textContent") == "Divergence"
    assert p.text_content(".gl-view:not(.gl-pending) h2:has-text('Worst variables')") == "Worst variables at step %d" % step
    assert p.eval_on_selector(".gl-metric", "s => s.value") == nonfinite["view"]["column"]
    selected = table_rows(p, ".gl-var-row.gl-selected")
    assert [r[0] for r in selected] == [nonfinite["view"]["row"]]
    # The NaN written at DIV_NAN is shown as NaN, and nonfinite = 3.
    rel_col = column_index(p, ".gl-view:not(.gl-pending) table:has(.gl-var-row)", "rel_l2")
    nf_col = column_index(p, ".gl-view:not(.gl-pending) table:has(.gl-var-row)", "nonfinite")
    assert selected[0][rel_col] == "NaN" and selected[0][nf_col] == "3"
    page.assert_clean()


def test_divergence_view_numbers_heatmap_hover_and_keyboard(tensorboard, page):
    tb = tensorboard
    tag = tag_of(tb, BF16, "divergence")
    rows = tag["rows"]
    last = STEPS - 1
    series = route(tb, "series", run=BF16, tag=tag["tag"], step_min=last, step_max=last)
    p = open_tab(tb, page, "view=divergence&run=" + BF16)
    assert p.text_content(".gl-candidate") == "bf16 candidate (mixed_bfloat16, CPU)"
    assert p.text_content(".gl-reference") == "float32 shadow (float32, CPU)"
    assert p.text_content(".gl-run-name") == BF16

    expected = divergence_values(len(rows)).astype(np.float64)[last]  # [rows, columns]
    table_sel = ".gl-view:not(.gl-pending) table:has(.gl-var-row)"
    shown = table_rows(p, ".gl-var-row")
    assert sorted(r[0] for r in shown) == sorted(rows)
    # Ranked by rel_l2, worst first: the written rel_l2 grows with the row index.
    assert [r[0] for r in shown] == rows[::-1]
    for c, column in enumerate(series["columns"]):
        col = column_index(p, table_sel, column)
        for r, name in enumerate(series["rows"]):
            text = next(s for s in shown if s[0] == name)[col]
            route_value = number(series["values"][c][r][0])
            assert route_value == pytest.approx(np.float32(expected[r, c]), rel=1e-6)
            assert shown_close(text, route_value), (name, column, text, route_value)

    # Heatmap: hover the hostile row's last cell; the tooltip shows it literally, with step and value.
    canvas = p.locator(".gl-heatmap .gl-plot canvas").first
    plot = json.loads(canvas.get_attribute("data-plot"))
    assert plot["rows"] == len(rows) and plot["steps"] == STEPS
    row_h = (plot["y1"] - plot["y0"]) / plot["rows"]
    canvas.hover(position={"x": plot["x1"] - 3, "y": plot["y0"] + row_h * (len(rows) - 0.5)})
    tip = p.locator(".gl-heatmap .gl-tooltip").first
    lines = tip.locator("div").all_text_contents()
    want = number(series["values"][0][len(rows) - 1][0])
    assert lines[0] == HOSTILE and lines[1] == "step %d" % last
    assert lines[2].startswith("rel_l2 ") and shown_close(lines[2].split(" ", 1)[1], want)
    screenshot(page, "divergence")

    # Keyboard: focus the heatmap, Home goes to step 0, Enter selects (row 0, step 0).
    canvas.focus()
    p.keyboard.press("Home")
    lines = tip.locator("div").all_text_contents()
    assert lines[1] == "step 0"
    navigate(page, lambda: p.keyboard.press("Enter"))
    assert p.text_content(".gl-view:not(.gl-pending) h2:has-text('Worst variables')") == "Worst variables at step 0"
    assert "row=" in p.evaluate("location.hash") and "step=0" in p.evaluate("location.hash")

    # Activation divergence: layers in depth order with their values at step 0.
    act = [r for r in table_rows(p, ".gl-layer-row")]
    assert [r[1] for r in act] == list(LAYERS)
    for depth, r in enumerate(act):
        assert r[0] == str(depth) and shown_close(r[2], float(np.float32(2e-3 * (depth + 1))))
    page.assert_clean()


def test_divergence_filter_step_range_and_error_state(tensorboard, page):
    tb = tensorboard
    p = open_tab(tb, page, "view=divergence&run=" + BF16)
    # Typed into the shared controls (keyboard: fill + Enter commits each).
    navigate(page, lambda: (p.fill(".gl-regex", "dense_2"), p.press(".gl-regex", "Enter")))
    navigate(page, lambda: (p.fill(".gl-smin", "2"), p.press(".gl-smin", "Enter")))
    navigate(page, lambda: (p.fill(".gl-smax", "5"), p.press(".gl-smax", "Enter")))
    assert all(k in p.evaluate("location.hash") for k in ("filter=dense_2", "smin=2", "smax=5"))
    shown = table_rows(p, ".gl-var-row")
    assert sorted(r[0] for r in shown) == ["mlp/dense_2/bias", "mlp/dense_2/kernel"]
    assert p.text_content(".gl-view:not(.gl-pending) h2:has-text('Worst variables')") == "Worst variables at step 5"
    # A regex the server rejects: the error is shown, no crash.
    navigate(page, lambda: p.evaluate("location.hash = 'view=divergence&run=%s&filter=(' " % BF16))
    error = p.text_content(".gl-view:not(.gl-pending) .gl-error")
    assert "400" in error
    # The console reports the failed request (HTTP 400): that one is expected.
    assert all("400" in e for e in page.errors)
    assert page.dialogs == []


def test_gradients_view_numbers_and_histogram(tensorboard, page):
    tb = tensorboard
    tag = tag_of(tb, F32, "grad_stats", "gradients")
    series = route(tb, "series", run=F32, tag=tag["tag"])
    p = open_tab(tb, page, "view=gradients&run=" + F32)
    shown = {r[0]: r for r in table_rows(p, ".gl-var-row")}
    assert list(shown) == series["rows"]
    cols = series["columns"]
    for r, name in enumerate(series["rows"]):
        at = lambda c: number(series["values"][cols.index(c)][r][-1])  # noqa: E731
        assert shown_close(shown[name][1], at("l2_norm"))
        assert shown_close(shown[name][2], at("max_abs"))
        assert shown_close(shown[name][3], at("zero_fraction"))
        assert shown[name][4] == "%d" % (at("nan_count") + at("posinf_count") + at("neginf_count"))
    assert p.text_content(".gl-hist-var") == series["rows"][0]
    # Histogram plot: one row per exponent bin plus 0, +Inf, -Inf, NaN; every step.
    plot = json.loads(p.locator(".gl-heatmap .gl-plot canvas").get_attribute("data-plot"))
    assert plot["rows"] == 281 and plot["steps"] == STEPS
    screenshot(page, "gradients")
    navigate(page, lambda: p.locator(".gl-var-row", has_text="mlp/logits/bias").click())
    assert p.text_content(".gl-hist-var") == "mlp/logits/bias"
    # The hostile variable's None gradient (record "odd").
    odd = tag_of(tb, BF16, "grad_stats", "odd")
    p = open_tab(tb, page, "view=gradients&run=%s&tag=%s" % (BF16, urllib.parse.quote(odd["tag"])))
    (row,) = table_rows(p, ".gl-var-row")
    assert row[0] == HOSTILE and row[1] == "NaN" and row[5] == "yes (None gradient)"
    screenshot(page, "gradients-hostile")
    page.assert_clean()


def test_dtypes_view_and_hostile_layer(tensorboard, page):
    tb = tensorboard
    data = route(tb, "dtypes", run=BF16)
    assert data["maps"][0]["map"] == DTYPE_MAP
    p = open_tab(tb, page, "view=dtypes&run=" + BF16)
    warning = p.text_content(".gl-output-warning")
    assert "bfloat16" in warning and "float32" in warning
    layers = table_rows(p, ".gl-layer-row")
    assert [r[0] for r in layers] == [l["path"] for l in DTYPE_MAP["layers"]]
    assert [r[3] for r in layers] == [l["compute_dtype"] for l in DTYPE_MAP["layers"]]
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
    p = open_tab(tb, page, "view=compare&runA=%s&runB=%s&qkind=scalar&qtag=loss" % (F32, BF16))
    assert shown_close(p.text_content(".gl-max-rel"), float(np.abs(rel).max()))
    rows = table_rows(p, ".gl-cmp-row")
    assert [int(r[0]) for r in rows] == compare["steps"][::-1][:10]
    for r in rows:
        i = compare["steps"].index(int(r[0]))
        assert shown_close(r[1], av[i]) and shown_close(r[2], bv[i])
        assert shown_close(r[3], bv[i] - av[i], rel=1e-3) and shown_close(r[4], rel[i], rel=1e-3)
    screenshot(page, "compare")
    page.assert_clean()


def test_dark_mode_standalone_screenshots(tensorboard, browser):
    page = Page(browser, dark=True)
    try:
        p = open_tab(tensorboard, page, "view=divergence&run=" + BF16)
        assert p.evaluate("document.documentElement.dataset.theme") == "dark"
        assert p.evaluate("getComputedStyle(document.body).color") == "rgb(232, 234, 237)"
        screenshot(page, "divergence-dark")
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

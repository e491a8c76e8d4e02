"""The GradLens tab answers a user's four questions by looking, and every alert lands on its evidence.

A real `tensorboard` (one per module) serves a logdir with known answers
(frontend_questions_logs.py: a real training with a NaN from sqrt(0), a dead
ReLU layer and an unused variable; designed divergence records; float32,
float32-with-another-seed and bfloat16 losses).  The tests act as a user in
Debian's Chromium: click the alert, read the sentence, the chart (its rule
at the marked step, its highlighted series, its pixels) and the table.
"""

import re

import numpy as np
import pytest

from tests.support import frontend_questions_logs as q
from tests.support.frontend_page import (  # noqa: F401 (browser, page: fixtures)
    DEAD, MAGENTA, NONE_GREY, ZERO_GREY, Page, browser, chart, close_to, heatmap_cell, navigate, open_tab, page,
    plot_of, pixels, require_browser, route, rule_at, screenshot, step_x, table_dicts, wait_complete,
)

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.tensorboard]  # a real training's logdir, in Chromium

@pytest.fixture(scope="module")
def tensorboard(questions_tensorboard):
    """The session's TensorBoard on the questions logdir (conftest.py)."""
    return questions_tensorboard


def click_alert(page, code, run):
    p = page.page
    navigate(page, lambda: p.locator(".gl-alert[data-code='%s'][data-run='%s']" % (code, run)).first.click())
    wait_complete(p)
    return p


def shown(value):
    """A number as the tab shows it (format.js fmt: 4 significant digits)."""
    return "%s" % float("%.4g" % value)


def selected_tab(p):
    return p.eval_on_selector(".gl-tabs [aria-selected=true]", "b => b.textContent")


# ---------------------------------------------------------------------------
# The four questions.
# ---------------------------------------------------------------------------


def test_q1_which_variable_diverged_first_and_how_badly(tensorboard, page):
    p = open_tab(tensorboard, page, "view=overview")
    p = click_alert(page, "bf16_divergence", "mixed_bfloat16")
    assert selected_tab(p) == "Divergence"
    # The comparison is named by its variants, and it is the bfloat16-vs-float32 one.
    label = p.eval_on_selector(".gl-tag", "s => s.selectedOptions[0].textContent")
    assert label == "mixed_bfloat16 vs float32"
    headline = p.text_content(".gl-q1")
    assert p.text_content(".gl-first-var") == q.FIRST_ROW
    assert p.text_content(".gl-first-step") == str(q.FIRST_STEP)
    assert p.text_content(".gl-worst-var") == q.WORST_ROW
    # The limit is the alert rules' (the limits route): bfloat16's rounding budget at depth 3, the same
    # at every step for these records (format 1: no stable-rounding column).
    tag = p.eval_on_selector(".gl-tag", "s => s.value")
    limits = route(tensorboard, "limits", run="mixed_bfloat16", tag=tag)
    tolerance = limits["limits"][limits["rows"].index(q.FIRST_ROW)][0]
    assert tolerance == pytest.approx(q.TOLERANCE) and {v for row in limits["limits"] for v in row} == {tolerance}
    assert "%d× its limit %s" % (q.WORST_RATIO, shown(tolerance)) in headline
    # Harmed from the first step above it (held two comparisons): the route's verdict, said as an alert.
    assert p.get_attribute(".gl-q1", "data-verdict") == "harmed"
    # The chart marks the first step and highlights the variable; each row's limit is drawn.
    figure = chart(p, "rel_l2 per step")
    assert figure.get_attribute("data-mark-step") == str(q.FIRST_STEP)
    assert figure.get_attribute("data-highlight") == q.FIRST_ROW
    assert rule_at(figure, q.FIRST_STEP)
    assert int(figure.get_attribute("data-limits")) == len(q.DIV_ROWS)
    heat = chart(p, "variables × steps")
    assert heat.get_attribute("data-selected-row") == q.FIRST_ROW and rule_at(heat, q.FIRST_STEP)
    # The table at the marked step: the variable selected, 1.2x its tolerance there.
    assert p.text_content(".gl-sec-gradients .gl-step-title") == "Variables at step %d" % q.FIRST_STEP
    rows = {r["variable"]: r for r in table_dicts(p, ".gl-sec-gradients table.gl-table")}
    chosen = p.eval_on_selector(".gl-sec-gradients tr.gl-selected", "tr => tr.dataset.key")
    assert chosen == q.FIRST_ROW
    assert rows[q.FIRST_ROW]["× limit"] == "1.2" and rows[q.FIRST_ROW]["first above"] == str(q.FIRST_STEP)
    assert rows[q.FIRST_ROW]["harmed from"] == str(q.FIRST_STEP)
    # Computed in float32, still a gradient of the bfloat16 model: the same budget.
    assert rows["mlp/norm/gamma"]["limit"] == shown(tolerance)
    screenshot(page, "q1-divergence-alert")
    page.assert_clean()


def test_q2_where_the_nan_came_from(tensorboard, page):
    p = open_tab(tensorboard, page, "view=overview")
    overview = {r["run"]: r for r in route(tensorboard, "overview")["runs"]}
    assert overview["nan_dead_unused"]["first_nonfinite_step"] == q.NAN_STEP
    cells = {r["run"]: r for r in table_dicts(p, "table.gl-table", "tr.gl-run-row")}
    assert cells["nan_dead_unused"]["first NaN/Inf"] == "step %d: %s" % (q.NAN_STEP, q.GATE)
    p = click_alert(page, "nonfinite", "nan_dead_unused")
    assert selected_tab(p) == "Gradients"
    assert p.text_content(".gl-nan-step") == str(q.NAN_STEP) and p.text_content(".gl-nan-var") == q.GATE
    figure = chart(p, "NaN + Inf count")
    assert figure.get_attribute("data-mark-step") == str(q.NAN_STEP) and rule_at(figure, q.NAN_STEP)
    assert figure.get_attribute("data-highlight") == q.GATE
    # One non-finite element (the gate's) is visible on the log scale.
    plot = plot_of(figure)
    assert plot["yScale"] == "count" and "1" in plot["yLabels"]
    rows = {r["variable"]: r for r in table_dicts(p, ".gl-view:not(.gl-pending) table.gl-table")}
    assert p.eval_on_selector("tr.gl-var-row.gl-selected", "tr => tr.dataset.key") == q.GATE
    assert rows[q.GATE]["status"] == "NaN/Inf: 1 of 1 elements"
    assert all(r["NaN/Inf"] == "0" for name, r in rows.items() if name not in (q.GATE, q.UNUSED))
    screenshot(page, "q2-nan-alert")
    page.assert_clean()


def test_q3_dead_and_disconnected_gradients(tensorboard, page):
    p = open_tab(tensorboard, page, "view=overview")
    cells = {r["run"]: r for r in table_dicts(p, "table.gl-table", "tr.gl-run-row")}
    assert cells["nan_dead_unused"]["disconnected (None)"] == q.UNUSED
    assert cells["nan_dead_unused"]["dead (all-zero gradient)"] == ", ".join(sorted(q.DEAD))
    p = click_alert(page, "zero_gradient", "nan_dead_unused")
    assert p.text_content(".gl-dead-vars") == ", ".join(sorted(q.DEAD))
    assert p.text_content(".gl-none-vars") == q.UNUSED
    health = chart(p, "Gradient health")
    rows = p.eval_on_selector(".gl-sec-health canvas", "c => JSON.parse(c.dataset.plot).rows")
    names = ["dense/kernel", "dense/bias", "dead/kernel", "dead/bias", q.GATE, "head/kernel", q.UNUSED]
    assert rows == len(names)
    assert close_to(heatmap_cell(health, names.index("dead/kernel"), 20), DEAD)
    assert close_to(heatmap_cell(health, names.index(q.UNUSED), 20), NONE_GREY)
    assert close_to(heatmap_cell(health, names.index(q.GATE), q.NAN_STEP), MAGENTA)
    assert health.get_attribute("data-selected-row") == "dead/bias"
    assert chart(p, "zero fraction").get_attribute("data-highlight") == "dead/bias"
    screenshot(page, "q3-dead-alert")
    page.assert_clean()


def test_q4_bfloat16_beyond_float32_noise(tensorboard, page):
    first, floor = q.q4_first_beyond()
    p = open_tab(tensorboard, page, "view=compare")
    # Out of the box: A float32, B the bfloat16 run, the noise floor the other float32 run.
    picked = [p.eval_on_selector(s, "x => x.value") for s in (".gl-runa", ".gl-runb", ".gl-noise")]
    assert picked == ["float32", "mixed_bfloat16", "float32_seed1"]
    assert p.text_content(".gl-verdict-text") == "Beyond noise"
    assert p.text_content(".gl-verdict-step") == str(first)
    assert float(p.text_content(".gl-noise-level")) == pytest.approx(floor, rel=1e-3)
    assert rule_at(chart(p, "relative difference"), first)
    screenshot(page, "q4-compare")
    page.assert_clean()


# ---------------------------------------------------------------------------
# The defects of issue 15, one test each.
# ---------------------------------------------------------------------------


def test_defect_01_compare_keeps_its_pickers_when_a_run_lacks_the_quantity(tensorboard, page):
    p = open_tab(tensorboard, page, "view=compare&runA=float32&runB=no_loss&noise=none")
    message = p.text_content(".gl-view:not(.gl-pending) .gl-empty-state")
    assert "no_loss" in message and "loss" in message
    for picker in (".gl-runa", ".gl-runb", ".gl-noise", ".gl-qkind", ".gl-qtag"):
        assert p.locator(picker).count() == 1
    # The pickers get out of it.
    navigate(page, lambda: p.select_option(".gl-runb", "mixed_bfloat16"))
    assert p.locator(".gl-verdict").count() == 1
    # The step range is honoured.
    navigate(page, lambda: p.evaluate("location.hash = 'view=compare&smin=10&smax=19'"))
    rows = table_dicts(p, ".gl-view:not(.gl-pending) table.gl-table")
    assert sorted(int(r["step"]) for r in rows) == list(range(10, 20))
    page.assert_clean()


def test_defect_02_overview_honours_regex_and_step_range(tensorboard, page):
    p = open_tab(tensorboard, page, "view=overview&run=nan_dead_unused&filter=%5Edead&smax=149")
    cells = table_dicts(p, "table.gl-table", "tr.gl-run-row")[0]
    assert cells["first NaN/Inf"] == "none"  # the NaN is at step 150, outside the range
    assert cells["disconnected (None)"] == "none"  # "unused" does not match ^dead
    assert cells["dead (all-zero gradient)"] == "dead/bias, dead/kernel"
    codes = p.eval_on_selector_all(".gl-alert", "n => n.map(b => b.dataset.code)")
    assert codes == ["zero_gradient"]
    navigate(page, lambda: p.evaluate("location.hash = 'view=overview&run=nan_dead_unused&filter=%5Edead&smin=100'"))
    cells = table_dicts(p, "table.gl-table", "tr.gl-run-row")[0]
    assert cells["first NaN/Inf"].startswith("step %d: " % (q.NAN_STEP + 1))  # the dead layer is NaN a step later
    page.assert_clean()


def test_defect_03_loss_and_update_alerts_land_on_charts_and_the_table_follows_the_step(tensorboard, page):
    p = open_tab(tensorboard, page, "view=overview")
    p = click_alert(page, "lost_update", "mixed_bfloat16")
    assert selected_tab(p) == "Gradients"
    lost = chart(p, "updates bfloat16 weights would lose")
    assert lost.get_attribute("data-highlight") == q.LOST_ROW and rule_at(lost, q.LOST_STEP)
    assert p.eval_on_selector(".gl-sec-updates", "s => s.dataset.focus") == "1"
    p = open_tab(tensorboard, page, "view=overview")
    loss_alert = next(a for a in route(tensorboard, "alerts", run="mixed_bfloat16")["alerts"]
                      if a["view"]["name"] == "loss_comparison")
    navigate(page, lambda: p.locator(".gl-alert", has_text="the training loss differs").first.click())
    wait_complete(p)
    figure = chart(p, "relative error of the loss")
    assert rule_at(figure, loss_alert["step_first"]) and loss_alert["step_first"] == q.LOSS_STEP
    assert p.text_content(".gl-loss-first") == str(q.LOSS_STEP)
    # Gradients: clicking a step in a chart moves the table to that step.
    p = open_tab(tensorboard, page, "view=gradients&run=nan_dead_unused")
    figure = chart(p, "L2 norm")
    plot = plot_of(figure)
    canvas = figure.locator("canvas").first
    navigate(page, lambda: canvas.click(position={"x": step_x(plot, 42), "y": (plot["y0"] + plot["y1"]) / 2}))
    assert p.text_content("table.gl-table caption").startswith("Variables at step 42 ")
    # After the NaN, the statistics over zero finite elements do not read as a dead gradient.
    navigate(page, lambda: p.evaluate("location.hash = 'view=gradients&run=nan_dead_unused&step=155'"))
    rows = {r["variable"]: r for r in table_dicts(p, ".gl-view:not(.gl-pending) table.gl-table")}
    assert rows["dense/kernel"]["l2_norm"] == "no finite element"
    assert rows["dense/kernel"]["zero fraction"] == "–" and rows["dense/kernel"]["status"].startswith("NaN/Inf")
    page.assert_clean()


def test_defect_04_none_is_drawn_apart_from_nan(tensorboard, page):
    p = open_tab(tensorboard, page, "view=gradients&run=nan_dead_unused&k=7")
    figure = chart(p, "max |g|")
    plot = plot_of(figure)
    # Magenta (NaN/Inf) markers only from the first NaN step on; grey None markers at the bottom from step 0.
    for step in (0, 50, 100, 140):
        top = pixels(figure, step_x(plot, step), plot["y0"], plot["y0"] + 6)
        assert not any(close_to(px, MAGENTA) for px in top), step
    top = pixels(figure, step_x(plot, 155), plot["y0"], plot["y0"] + 6)
    assert any(close_to(px, MAGENTA) for px in top)
    bottom = pixels(figure, step_x(plot, 10), plot["y1"] - 7, plot["y1"] - 1)
    assert any(close_to(px, NONE_GREY) for px in bottom)
    assert "None (disconnected)" in figure.text_content()
    rows = {r["variable"]: r for r in table_dicts(p, ".gl-view:not(.gl-pending) table.gl-table")}
    assert rows[q.UNUSED]["l2_norm"] == "None" and rows[q.UNUSED]["status"] == "None (disconnected)"
    page.assert_clean()


def test_defect_05_nan_count_log_scale_and_histogram_colors_range_and_labels(tensorboard, page):
    p = open_tab(tensorboard, page, "view=gradients&run=nan_dead_unused&row=dense/kernel")
    wait_complete(p)
    counts = plot_of(chart(p, "NaN + Inf count"))
    assert counts["yScale"] == "count" and counts["yDomain"][0] < 1 and counts["yDomain"][1] >= 128
    assert {"1", "10", "100"} <= set(counts["yLabels"])
    hist = chart(p, "log2 |g| bin")
    plot = plot_of(hist)
    assert plot["rows"] < 60  # the data's exponents, not 2^127 .. 2^-149
    gaps = np.diff(plot["labelY"])
    assert len(gaps) and gaps.min() >= 12  # labels never overlap
    nan_row = plot["rows"] - 1
    assert close_to(heatmap_cell(hist, nan_row, 155), MAGENTA)
    text = p.text_content(".gl-limits-outside")
    assert "2^127" in text and "2^-149" in text
    # The whole float32 range on request: dtype limits are lines, labels still apart.
    navigate(page, lambda: p.check(".gl-hrange"))
    wait_complete(p)
    plot = plot_of(chart(p, "log2 |g| bin"))
    assert plot["rows"] == 277 + 5 and np.diff(plot["labelY"]).min() >= 12
    page.assert_clean()


def test_defect_06_divergence_defaults_to_bfloat16_vs_float32_labelled_by_variants(tensorboard, page):
    p = open_tab(tensorboard, page, "view=divergence&run=mixed_bfloat16")
    options = p.eval_on_selector_all(".gl-tag option", "o => o.map(x => x.textContent)")
    assert options == ["mixed_bfloat16 vs float32", "mixed_bfloat16+xla vs mixed_bfloat16"]
    assert not any(re.search(r"/[0-9a-f]{8}$", o) for o in options)
    assert p.text_content(".gl-cmp-label") == "mixed_bfloat16 vs float32"
    page.assert_clean()


def test_defect_07_colors_are_anchored_at_the_limit(tensorboard, page):
    p = open_tab(tensorboard, page, "view=divergence&run=mixed_bfloat16")
    heat = chart(p, "variables × steps")
    rows = list(q.DIV_ROWS)
    below = heatmap_cell(heat, rows.index(q.BELOW_ROW), 50)  # 0.0073 under 0.65: a blue
    assert below[2] > below[0] + 40
    zero = heatmap_cell(heat, rows.index(q.ZERO_ROW), 50)  # 0: both sides zero, grey, not the "best" color
    assert close_to(zero, ZERO_GREY, tol=12)
    above = heatmap_cell(heat, rows.index(q.FIRST_ROW), 60)  # 1.4x its limit: an orange
    assert above[0] > above[2] + 80
    assert "its limit at that step" in heat.locator(".gl-colorlegend").text_content()
    page.assert_clean()


def test_defect_08_worst_k_row_labels_and_round_ticks(tensorboard, page):
    p = open_tab(tensorboard, page, "view=divergence&run=mixed_bfloat16&k=2")
    legend = chart(p, "rel_l2 per step").locator(".gl-legend-name").all_text_contents()
    assert legend == [q.WORST_ROW, q.FIRST_ROW]  # the worst two, not the first two logged
    navigate(page, lambda: p.select_option(".gl-rank", "first"))
    legend = chart(p, "rel_l2 per step").locator(".gl-legend-name").all_text_contents()
    assert legend == [q.FIRST_ROW, q.WORST_ROW]
    ticks = plot_of(chart(p, "rel_l2 per step"))["xTicks"]
    assert ticks and all(t % 20 == 0 for t in ticks)
    loss = plot_of(chart(p, "relative error of the loss"))
    assert len(loss["yLabels"]) >= 3  # a log axis over less than a decade still has labels
    p = open_tab(tensorboard, page, "view=divergence&run=wide")
    heat = plot_of(chart(p, "variables × steps"))
    assert heat["rows"] == q.WIDE and heat["labelled"] >= 32
    assert np.diff(heat["labelY"]).min() >= 12
    page.assert_clean()


def test_defect_10_overview_names_variables_and_says_none(tensorboard, page):
    p = open_tab(tensorboard, page, "view=overview")
    cells = {r["run"]: r for r in table_dicts(p, "table.gl-table", "tr.gl-run-row")}
    assert cells["float32"]["diverges most"] == "–"  # a float32 run is the reference: nothing to compare
    assert cells["nan_dead_unused"]["diverges most"] == "no comparison logged"
    assert cells["float32"]["first NaN/Inf"] == "none"
    assert cells["float32"]["disconnected (None)"] == "none" and cells["float32"]["dead (all-zero gradient)"] == "none"
    # Every comparison of a run, its XLA one too (issue 40).
    assert cells["mixed_bfloat16"]["comparisons"] == "mixed_bfloat16 vs float32; mixed_bfloat16+xla vs mixed_bfloat16"
    assert cells["mixed_bfloat16"]["diverges most"] == "the gradient of %s, %d× its limit, from step %d" % (
        q.WORST_ROW, q.WORST_RATIO, q.FIRST_STEP)
    assert all(v != "" for r in cells.values() for v in r.values())
    screenshot(page, "overview-questions")
    page.assert_clean()


@pytest.mark.parametrize("dark", [False, True], ids=["light", "dark"])
@pytest.mark.parametrize("view, state", [
    ("overview", "view=overview"),
    ("divergence", "view=divergence&run=mixed_bfloat16&rank=first"),
    ("gradients", "view=gradients&run=nan_dead_unused&row=gate&step=150"),
    ("compare", "view=compare"),
])
def test_screenshots_of_every_view(tensorboard, browser, view, state, dark):
    """test-artifacts/frontend/questions-<view>-<theme>.png: looked at by a person, in both themes."""
    page = Page(browser, dark=dark)
    try:
        p = open_tab(tensorboard, page, state)
        wait_complete(p)
        theme = "dark" if dark else "light"
        assert p.evaluate("document.documentElement.dataset.theme") == theme
        themes = p.eval_on_selector_all(".gl-plot canvas", "cs => cs.map(c => JSON.parse(c.dataset.plot).theme)")
        assert set(themes) <= {theme}
        screenshot(page, "questions-%s-%s" % (view, theme))
        page.assert_clean()
    finally:
        page.close()

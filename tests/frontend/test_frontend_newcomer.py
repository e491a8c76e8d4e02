"""The GradLens tab from a newcomer's first minute (issue 28) and the limits per step.

A real `tensorboard` serves frontend_questions_logs.py's logdir (the session's,
conftest.py); Debian's Chromium acts as a user: opens a view without saying
which run, reads the sentences, hovers, drags, ticks runs, reloads.  The
"measured" run is judged by limits measured on each step (README "Alerts"):
the tab draws each row's limit per step, colors by value / the limit at that
step, and takes "above" and "harmed" from the limits route, never from a rule
of its own.
"""

import math
import re

import pytest

from tests.support import frontend_questions_logs as q
from tests.support.frontend_page import (  # noqa: F401 (browser, page: fixtures)
    Page, browser, chart, close_to, drag, heatmap_cell, navigate, open_tab, page, pixels, plot_of, route, step_x,
    table_dicts, wait_complete, wait_drawn,
)

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.tensorboard]  # a real training's logdir, in Chromium

# TensorBoard's run colors (its default palette, light theme), in the order of its runs listing.
TB_PALETTE = ["#425066", "#12b5cb", "#e52592", "#f9ab00", "#9334e6", "#7cb342", "#e8710a"]


@pytest.fixture(scope="module")
def tensorboard(questions_tensorboard):
    return questions_tensorboard


def measured_tag(tb):
    runs = {r["run"]: r for r in route(tb, "runs")["runs"]}
    return next(t["tag"] for t in runs["measured"]["tags"] if t["kind"] == "divergence")


def rgb(hex_color):
    return tuple(int(hex_color[i:i + 2], 16) for i in (1, 3, 5))


def hover(p, figure, x, y):
    figure.scroll_into_view_if_needed()
    box = figure.locator("canvas").first.bounding_box()
    p.mouse.move(box["x"] + x, box["y"] + y)
    return figure.locator(".gl-tooltip")


# ---------------------------------------------------------------------------
# The limits route per step (the changed server contract).
# ---------------------------------------------------------------------------


def test_each_row_has_its_limit_per_step_and_the_routes_verdict(tensorboard, page):
    tb = tensorboard
    limits = route(tb, "limits", run="measured", tag=measured_tag(tb))
    # The route's verdict on the designed record (README "Alerts"), independently of the tab.
    for r, row in enumerate(limits["rows"]):
        assert limits["limits"][r] == pytest.approx([q.measured_limit(s) for s in q.MEASURED_STEPS])
    by_row = dict(zip(limits["rows"], zip(limits["above"], limits["harmed"])))
    assert by_row[q.SINGLE_ROW] == ([q.SINGLE_STEP], [])
    assert by_row[q.HARMED_ROW] == ([60, 70], [60, 70])
    assert by_row[q.SHIFT_ROW] == ([80, 90], [80, 90]) and by_row[q.WITHIN_ROW] == ([], [])

    p = open_tab(tb, page, "view=divergence&run=measured&k=4")
    # One verdict: the first harmed row (an alert) from the route, not a rule of the tab's own.
    headline = p.locator(".gl-q1")
    assert headline.get_attribute("data-verdict") == "harmed"
    assert p.text_content(".gl-first-var") == q.HARMED_ROW and p.text_content(".gl-first-step") == str(q.HARMED_STEP)
    assert "2 of 4 variables are harmed" in headline.text_content()
    # Each shown row's limit: its own dashed step series, in the row's color, from the route.
    figure = chart(p, "rel_l2 per step")
    assert int(figure.get_attribute("data-limits")) == 4
    legend = figure.locator(".gl-legend-name").all_text_contents()
    assert sorted(legend) == sorted(q.MEASURED_ROWS)  # one legend entry per row (its limit hides with it)
    plot = plot_of(figure)
    lo, hi = (math.log10(v) for v in plot["yDomain"])
    for step in (40, 90):  # the limit steps down from 0.06 to 0.018: the dashed line is there at each
        y = plot["y1"] - (plot["y1"] - plot["y0"]) * (math.log10(q.measured_limit(step)) - lo) / (hi - lo)
        column = [px for dy in range(-2, 3) for px in pixels(figure, step_x(plot, step) - 3, y + dy, y + dy + 1)]
        assert any(px[3] > 0 and sum(px[:3]) < 600 for px in column), step
    # The heatmap colors value / the limit AT THAT STEP: one value (0.03), blue while its limit is 0.06,
    # orange once its limit is 0.018.
    heat = chart(p, "variables × steps")
    assert plot_of(heat)["rows"] == 4
    row = q.MEASURED_ROWS.index(q.SHIFT_ROW)  # rows in the record's order
    early, late = heatmap_cell(heat, row, 20), heatmap_cell(heat, row, 90)
    assert early[2] > early[0] + 40 and late[0] > late[2] + 80
    page.assert_clean()


def test_a_single_exceedance_is_shown_as_such_not_as_an_alert(tensorboard, page):
    p = open_tab(tensorboard, page, "view=divergence&run=measured&k=4&step=%d" % q.SINGLE_STEP)
    rows = {r["variable"]: r for r in table_dicts(p, ".gl-sec-gradients table.gl-table")}
    assert rows[q.SINGLE_ROW]["first above"] == str(q.SINGLE_STEP)
    assert rows[q.SINGLE_ROW]["harmed from"] == "never"
    # "× limit" at the marked step uses that step's limit.
    assert rows[q.SINGLE_ROW]["× limit"] == "1.5" and rows[q.SINGLE_ROW]["limit"] == "0.06"
    navigate(page, lambda: p.evaluate("location.hash = 'view=divergence&run=measured&k=4&step=90'"))
    rows = {r["variable"]: r for r in table_dicts(p, ".gl-sec-gradients table.gl-table")}
    assert rows[q.SHIFT_ROW]["limit"] == "0.018" and rows[q.SHIFT_ROW]["× limit"] == "1.7"
    # Restricted to the steps before the harm, the sentence says the one exceedance is no alert.
    navigate(page, lambda: p.evaluate("location.hash = 'view=divergence&run=measured&k=4&smax=50'"))
    headline = p.locator(".gl-q1")
    assert headline.get_attribute("data-verdict") == "above"
    assert p.text_content(".gl-first-var") == q.SINGLE_ROW
    assert "not an alert" in headline.text_content() and "Harmed" not in headline.text_content()
    page.assert_clean()


def test_limits_route_failure_says_so_and_draws_no_limit(tensorboard, page):
    p = page.page
    p.route("**/data/plugin/gradlens/limits?**", lambda r: r.fulfill(status=500, body="boom"))
    p = open_tab(tensorboard, page, "view=divergence&run=measured")
    message = p.text_content(".gl-sec-gradients .gl-limits-error")
    assert "limits" in message and "could not be read" in message
    assert chart(p, "rel_l2 per step").get_attribute("data-limits") == "0"
    # The verdict is the answers route's (the server's), not the tab's: it stands without the limits.
    assert p.get_attribute(".gl-q1", "data-verdict") == "harmed"
    page.errors.clear()  # the failed request (500) is logged by the browser: the test made it fail
    # Without the answers route there is no verdict: the tab makes none of its own, and says why.
    p.route("**/data/plugin/gradlens/answers?**", lambda r: r.fulfill(status=500, body="boom"))
    p.goto("about:blank")  # a new document: nothing the tab read before is kept
    p = open_tab(tensorboard, page, "view=divergence&run=measured&k=3")
    assert p.get_attribute(".gl-q1", "data-verdict") == "unjudged"
    assert "could not be read" in p.text_content(".gl-q2-answer")
    page.errors.clear()


# ---------------------------------------------------------------------------
# Issue 28, one test per item.
# ---------------------------------------------------------------------------


def test_28_1_views_open_on_the_run_that_matters_and_single_steps_show(tensorboard, page):
    p = open_tab(tensorboard, page, "view=gradients")
    assert p.eval_on_selector(".gl-run", "s => s.value") == "nan_dead_unused"  # its NaN: the most severe alert
    p = open_tab(tensorboard, page, "view=divergence")
    assert p.eval_on_selector(".gl-run", "s => s.value") == "mixed_bfloat16"  # not fit_mixed_bfloat16 (first by name)
    p = open_tab(tensorboard, page, "view=compare")
    picked = [p.eval_on_selector(s, "x => x.value") for s in (".gl-runa", ".gl-runb", ".gl-noise")]
    assert picked == ["float32", "mixed_bfloat16", "float32_seed1"]  # B: the 16-bit run trained like A
    # A run with one logged step: its point in the middle of the chart, a visible square.
    p = open_tab(tensorboard, page, "view=gradients&run=float32")
    figure = chart(p, "L2 norm")
    plot = plot_of(figure)
    x = step_x(plot, 0)
    assert plot["x0"] + 50 < x < plot["x1"] - 50
    column = [px for dx in (-2, 0, 2) for px in pixels(figure, x + dx, plot["y0"], plot["y1"])]
    assert sum(close_to(px, (78, 121, 167)) for px in column) >= 9
    page.assert_clean()


def test_28_2_activation_divergence_is_one_plain_sentence_with_details_on_hover(tensorboard, page):
    p = open_tab(tensorboard, page, "view=divergence&run=mixed_bfloat16")
    sentence = p.locator(".gl-act-headline")
    text = sentence.text_content()
    assert len(re.findall(r"[.!?](\s|$)", text)) == 1 and "((" not in text and text.count("(") <= 1
    # Every layer within its limit: none is named (issue 40: "the closest is" named one of equals).
    assert sentence.get_attribute("data-verdict") == "within"
    assert not any(layer in text for layer in q.LAYERS)
    details = sentence.get_attribute("title")
    assert all(layer in details and "limit" in details for layer in q.LAYERS)
    # Not repeated under the heatmap.
    legend = chart(p, "layers (depth order)").locator(".gl-colorlegend").text_content()
    assert "baseline" not in legend and "depth" not in legend
    page.assert_clean()


def test_28_4_every_limit_drawn_says_its_basis_on_hover(tensorboard, page):
    tb = tensorboard
    basis = route(tb, "limits", run="measured", tag=measured_tag(tb))["basis"][0]
    p = open_tab(tb, page, "view=divergence&run=measured&k=4")
    figure = chart(p, "rel_l2 per step")
    plot = plot_of(figure)
    tip = hover(p, figure, step_x(plot, 50), (plot["y0"] + plot["y1"]) / 2)
    assert "limit: " + basis in tip.text_content()
    heat = chart(p, "variables × steps")
    hp = plot_of(heat)
    tip = hover(p, heat, step_x(hp, 50), hp["y0"] + 4)
    assert basis in tip.text_content() and "its limit" in tip.text_content()
    # Updates of float32 weights: why no limit is drawn, said under the chart.
    p = open_tab(tb, page, "view=gradients&run=fit_mixed_bfloat16")
    wait_complete(p)
    note = chart(p, "updates bfloat16 weights would lose").locator(".gl-chart-note").text_content()
    assert "stored in float32" in note and "nothing is lost" in note
    # Weights stored in bfloat16 with the lost_update alert: its threshold line says its basis on hover.
    p = open_tab(tb, page, "view=gradients&run=mixed_bfloat16&row=%s" % q.LOST_ROW)
    wait_complete(p)
    lost = chart(p, "updates bfloat16 weights would lose")
    lp = plot_of(lost)
    tip = hover(p, lost, step_x(lp, q.LOST_STEP + 20), (lp["y0"] + lp["y1"]) / 2)
    assert "lost_update alert" in tip.text_content()
    page.assert_clean()


def test_28_5a_a_reference_under_its_candidate_stays_visible(tensorboard, page):
    p = open_tab(tensorboard, page, "view=compare")
    figure = chart(p, "A and B")
    plot = plot_of(figure)
    # At step 0 the two losses are equal: A (drawn wide and pale under B) shows around B's line.
    column = pixels(figure, step_x(plot, 0) + 2, plot["y0"], plot["y1"])
    pale_a = [px for px in column if px[3] > 0 and px[2] > px[0] + 25]
    assert len(pale_a) >= 2
    page.assert_clean()


def test_28_5b_line_charts_and_heatmap_share_the_step_axis(tensorboard, page):
    p = open_tab(tensorboard, page, "view=divergence&run=mixed_bfloat16")
    line = plot_of(chart(p, "rel_l2 per step"))
    heat = plot_of(chart(p, "variables × steps"))
    for step in (0, 40, 150):
        assert abs(step_x(line, step) - step_x(heat, step)) <= 1, step
    page.assert_clean()


def test_28_5c_zoom_is_shared_by_the_view_and_kept_in_the_url(tensorboard, page):
    p = open_tab(tensorboard, page, "view=divergence&run=mixed_bfloat16")
    navigate(page, lambda: drag(p, chart(p, "rel_l2 per step"), 30, 90))
    zoom = re.search(r"zoom=(\d+)-(\d+)", p.evaluate("location.hash"))
    assert zoom and 25 <= int(zoom.group(1)) <= 35 and 85 <= int(zoom.group(2)) <= 95
    domains = p.eval_on_selector_all(".gl-view:not(.gl-pending) .gl-plot canvas",
                                     "cs => cs.map(c => JSON.parse(c.dataset.plot).domain)")
    assert len(domains) >= 4 and all(d == [int(zoom.group(1)), int(zoom.group(2))] for d in domains)
    # The address opens the same zoom.
    p = open_tab(tensorboard, page, p.evaluate("location.hash").lstrip("#"))
    assert plot_of(chart(p, "relative error of the loss"))["domain"] == [int(zoom.group(1)), int(zoom.group(2))]
    # "Reset zoom" on any chart resets them all.
    navigate(page, lambda: chart(p, "variables × steps").locator(".gl-reset-zoom").click())
    assert "zoom=" not in p.evaluate("location.hash")
    assert plot_of(chart(p, "rel_l2 per step"))["domain"][1] >= 150
    page.assert_clean()


def test_28_5d_zero_on_a_log_axis_is_drawn_and_said(tensorboard, page):
    p = open_tab(tensorboard, page, "view=divergence&run=mixed_bfloat16&k=6&row=%s" % q.ZERO_ROW)
    figure = chart(p, "rel_l2 per step")
    assert "exactly 0" in figure.locator(".gl-legend").text_content()
    plot = plot_of(figure)
    bottom = [px for dx in range(-3, 4) for px in pixels(figure, step_x(plot, 50) + dx, plot["y1"] - 8, plot["y1"] - 1)]
    assert sum(px[3] > 0 and sum(px[:3]) < 600 for px in bottom) >= 3
    page.assert_clean()


def test_28_5e_many_variables_do_not_push_the_histogram_away(tensorboard, page):
    p = open_tab(tensorboard, page, "view=gradients&run=wide")
    wait_complete(p)
    rows = p.locator(".gl-view:not(.gl-pending) table.gl-table tbody tr.gl-var-row")
    assert rows.count() <= 13
    button = p.locator(".gl-show-all")
    assert button.text_content() == "Show all %d rows" % q.WIDE
    button.click()
    assert rows.count() == q.WIDE
    page.assert_clean()


def test_28_6_runs_overlaid_in_tensorboards_colors(tensorboard, page):
    tb_runs = tensorboard.get_json("/data/runs")
    color = {run: TB_PALETTE[i % len(TB_PALETTE)] for i, run in enumerate(tb_runs)}
    p = open_tab(tensorboard, page, "view=divergence&run=mixed_bfloat16&row=%s" % q.FIRST_ROW)
    navigate(page, lambda: p.check(".gl-overlay-run[data-run='fit_mixed_bfloat16']"))
    figure = chart(p, "across runs")
    assert figure.locator(".gl-legend-name").all_text_contents() == ["mixed_bfloat16", "fit_mixed_bfloat16"]
    swatches = figure.locator(".gl-legend-item .gl-swatch").evaluate_all(
        "s => s.map(x => getComputedStyle(x).backgroundColor)")
    assert swatches == ["rgb(%d, %d, %d)" % rgb(color[r]) for r in ("mixed_bfloat16", "fit_mixed_bfloat16")]
    assert int(figure.get_attribute("data-limits")) == 2  # each run's limit, dashed in its color
    # Gradients overlay the same variable across the ticked runs too.
    navigate(page, lambda: p.evaluate("location.hash = 'view=gradients&run=mixed_bfloat16&overlay=float32,"
                                      "fit_mixed_bfloat16'"))
    names = chart(p, "across runs").locator(".gl-legend-name").all_text_contents()
    assert set(names) == {"mixed_bfloat16", "float32", "fit_mixed_bfloat16"}
    page.assert_clean()


def test_28_6_view_settings_are_kept_across_reloads_and_the_url_wins(tensorboard, page):
    p = open_tab(tensorboard, page, "view=divergence&run=mixed_bfloat16")
    navigate(page, lambda: p.eval_on_selector(".gl-smooth", "s => { s.value = '0.7'; "
                                              "s.dispatchEvent(new Event('change')); }"))
    navigate(page, lambda: p.uncheck(".gl-logy"))
    navigate(page, lambda: p.check(".gl-overlay-run[data-run='fit_mixed_bfloat16']"))
    p = open_tab(tensorboard, page, "view=divergence&run=mixed_bfloat16")  # a new visit, without those keys
    assert p.eval_on_selector(".gl-smooth", "s => s.value") == "0.7"
    assert not p.is_checked(".gl-logy")
    assert p.is_checked(".gl-overlay-run[data-run='fit_mixed_bfloat16']")
    assert plot_of(chart(p, "rel_l2 per step"))["yScale"] == "linear"
    p = open_tab(tensorboard, page, "view=divergence&run=mixed_bfloat16&smooth=0.2")
    assert p.eval_on_selector(".gl-smooth", "s => s.value") == "0.2"  # the URL wins
    page.assert_clean()

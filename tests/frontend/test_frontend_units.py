"""The GradLens tab's pure functions, run in Debian's Chromium against Python/NumPy expressions.

The tab's ES modules are served from frontend_static/ through Playwright's
request routing (no server); each test imports what it checks and compares
it with the same formula written here.
"""

import glob
import json
import math
import os
import re

import numpy as np
import pytest

from tb_gradlens import metadata
from tb_gradlens.serving import reading
from tb_gradlens.serving import run_listing
from tests.support.frontend_page import launch, require_browser

pytestmark = [pytest.mark.browser]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATIC = os.path.join(ROOT, "frontend_static")
ORIGIN = "http://gradlens.test"


@pytest.fixture(scope="module")
def js():
    """js(code, *args): evaluate an async arrow function's body with the modules importable from /static/."""
    require_browser()
    from playwright.sync_api import sync_playwright

    def serve(route):
        path = route.request.url[len(ORIGIN):].split("?")[0]
        file = os.path.join(STATIC, path[len("/static/"):])
        if path.startswith("/static/") and not os.path.isfile(file):
            route.fulfill(status=404, body="no such module")  # the import fails, the test does not hang
        elif path.startswith("/static/"):
            with open(file, "rb") as f:
                route.fulfill(status=200, body=f.read(), content_type="text/javascript")
        else:
            route.fulfill(status=200, body="<!DOCTYPE html><html><body></body></html>", content_type="text/html")

    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page()
        page.route(ORIGIN + "/**", serve)
        page.goto(ORIGIN + "/")
        yield lambda code, *args: page.evaluate("async (args) => { %s }" % code, list(args))
        browser.close()


def test_every_module_is_imported_by_index_js():
    """index.js names every module, so the browser fetches them in one round trip."""
    index = open(os.path.join(STATIC, "index.js")).read()
    imported = set(re.findall(r"from '\./([\w/]+\.js)'|import '\./([\w/]+\.js)'", index))
    imported = {a or b for a, b in imported}
    modules = {os.path.relpath(p, STATIC) for p in glob.glob(os.path.join(STATIC, "**", "*.js"), recursive=True)}
    assert modules - {"index.js"} == imported


def test_ticks_are_round_and_log_axes_have_labels(js):
    out = js("""const s = await import('/static/scale.js');
      return {step: [[0, 64], [0, 299], [17, 9999], [1234, 1240]].map(([a, b]) => s.stepTicks(a, b, 5)),
              log: [[1e-4, 1], [0.002, 0.03], [0.0071, 0.0093], [0.5, 80000]].map(([a, b]) => s.logTicks(a, b, 6)),
              text: [1e-5, 2.5e-7, 0.001, 120000, 0.25].map(s.tickText)};""")
    for ticks in out["step"]:
        step = ticks[1] - ticks[0]
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert mantissa in (1, 2, 5) and all(t % step == 0 for t in ticks) and all(float(t).is_integer() for t in ticks)
    assert out["step"][0] == [0, 20, 40, 60]
    assert out["log"][0] == [1e-4, 1e-3, 1e-2, 1e-1, 1]
    assert all(len(t) >= 3 for t in out["log"])  # also inside a single decade
    assert out["text"] == ["1e-5", "2.5e-7", "0.001", "1.2e5", "0.25"]


def test_smoothing_is_tensorboards_debiased_ema(js):
    values = [1.0, 2.0, float("nan"), 3.0, 10.0, -1.0]
    got = js("""const {smooth} = await import('/static/smoothing.js');
      return Array.from(smooth(args[0].map(v => v === null ? NaN : v), 0.6), v => Number.isNaN(v) ? null : v);""",
             [None if math.isnan(v) else v for v in values])
    last, n, want = 0.0, 0, []
    for v in values:
        if math.isnan(v):
            want.append(None)
            continue
        last = 0.6 * last + 0.4 * v
        n += 1
        want.append(last / (1 - 0.6 ** n))
    assert got[2] is None
    np.testing.assert_allclose([g for g in got if g is not None], [w for w in want if w is not None], rtol=1e-12)


def test_the_compare_verdict_is_the_servers(js):
    """The tab shows the run comparison's verdict as the server decided it (no rule of its own)."""
    summary = {"exceeds_noise": True, "first_exceeding_step": 30, "max_abs_rel_difference": 0.4,
               "noise": {"level": 0.01, "ratio": 3.5, "window": 10, "rule": "r"}, "verdict": "beyond ..."}
    got = js("""const {verdict} = await import('/static/views/compare_verdict.js');
      return [verdict(args[0], true), verdict(args[0], false), verdict({...args[0], exceeds_noise: false}, true),
              verdict({...args[0], exceeds_noise: null, noise: null}, true)];""", summary)
    assert [g["kind"] for g in got] == ["beyond", "no-noise", "within", "undecided"]
    assert got[0]["first"] == 30 and got[0]["level"] == 0.01 and got[0]["ratio"] == 3.5 and got[0]["maxB"] == 0.4
    assert got[3]["level"] is None


def test_limits_per_step_verdicts_and_ranking_against_python(js):
    """Each value against the limit at its own step (the route's, at the logged step at or before it);
    "above" and "harmed" are the route's, never the tab's own rule."""
    answer = {"rows": ["a", "b", "c"], "steps": [0, 10, 20, 30], "column": "rel_l2", "rule": "r",
              "limits": [[0.1, 0.1, 0.02, 0.02], [0.1, None, 0.1, 0.1], [0.5, 0.5, 0.5, 0.5]],
              "above": [[20, 30], [10], []], "harmed": [[20, 30], [], []], "measured": [True, True, False],
              "basis": ["6 x stable", "6 x stable", "depth"]}
    values = [[0.05, 0.05, 0.05, 0.05], [0.01, 0.5, 0.02, None], [0.0, 0.1, 0.2, 0.3]]
    series_steps = [0, 5, 10, 20, 25, 30]  # steps of a chart: the limit holds from its comparison on
    got = js("""const l = await import('/static/views/limits.js');
      const r = await import('/static/views/rank.js');
      const lim = l.fromAnswer(args[0], ['c', 'a', 'b', 'missing']);
      const along = (i) => Array.from(l.limitsAlong(lim, i, args[2]), (v) => (Number.isNaN(v) ? null : v));
      const bad = args[1].map((row) => Float64Array.from(row, (v) => (v === null ? NaN : v)));
      const rows = [1, 2, 0];  // a, b, c in lim's order
      const steps = [0, 10, 20, 30];
      const found = r.judged(bad, rows.map((i) => l.limitsAlong(lim, i, steps)),
                             rows.map((i) => l.rowVerdict(lim, i)));
      const ratios = l.ratios(bad, lim, rows, steps).map((x) => Array.from(x, (v) => (Number.isNaN(v) ? null : v)));
      return {along: [0, 1, 2, 3].map(along), verdict: l.rowVerdict(lim, 1, 25, 40), found, ratios,
              worst: r.order(found, 'worst'), first: r.order(found, 'first'),
              basis: l.againstLimit(lim, true, 1, 25, 0.05)};""", answer, values, series_steps)
    # c, a, b, and a row the route does not have (never judged).
    assert got["along"][1] == [0.1, 0.1, 0.1, 0.02, 0.02, 0.02]
    assert got["along"][2] == [0.1, 0.1, None, 0.1, 0.1, 0.1]
    assert got["along"][3] == [None] * 6
    assert got["verdict"] == {"above": [30], "harmed": [30], "firstAbove": 30, "firstHarmed": 30}
    limits = [[0.1, 0.1, 0.02, 0.02], [0.1, None, 0.1, 0.1], [0.5, 0.5, 0.5, 0.5]]
    want = [[None if v is None else (-1 if lim is None else v / lim) for v, lim in zip(row, lrow)]
            for row, lrow in zip(values, limits)]
    for g, w in zip(got["ratios"], want):
        np.testing.assert_allclose([np.nan if x is None else x for x in g], [np.nan if x is None else x for x in w])
    found = got["found"]
    assert [f["firstAbove"] for f in found] == [20, 10, None] and [f["firstHarmed"] for f in found] == [20, None, None]
    np.testing.assert_allclose([f["ratio"] for f in found], [2.5, 0.2, 0.6])  # a: 0.05 / 0.02 at step 20
    assert [f["ratioAt"] for f in found] == [2, 2, 3]
    assert got["worst"] == [1, 0, 2]  # b has a NaN: first; then by value / limit
    assert got["first"] == [0, 1, 2]  # harmed first, then above
    assert got["basis"] == ["2.5× its limit 0.02 at this step", "limit: 6 x stable"]


def test_column_spans_place_steps_by_value(js):
    steps = [0, 10, 20, 30, 35]
    got = js("""const {columnSpans} = await import('/static/heatmap_paint.js');
      const s = columnSpans(args[0], 0, 40, 8, 40); return [Array.from(s.start), Array.from(s.end)];""", steps)
    start, end = got
    for b in range(8):
        lo, hi = b * 5, b * 5 + 5
        inside = [i for i, s in enumerate(steps) if lo <= s < hi]
        held = [max(i for i, s in enumerate(steps) if s < lo)] if not inside and lo > 0 else []
        assert list(range(start[b], end[b])) == (inside or held), b


def test_the_shared_zoom_reads_and_writes_the_url_key(js):
    got = js("""const a = await import('/static/shared_axis.js');
      return [a.parseZoom('40-120'), a.parseZoom('120-40'), a.parseZoom('x'), a.parseZoom(''),
              a.zoomText([40.4, 119.6]), a.zoomText(null)];""")
    assert got == [[40, 120], None, None, None, "40-120", ""]


def test_comparisons_are_labelled_by_variants_bfloat16_vs_float32_first(js):
    side = lambda label, policy, compute, jit=False: {  # noqa: E731
        "label": label, "policy": policy, "compute_dtype": compute, "jit_compile": jit}
    f32, bf16, xla = side("float32", "float32", "float32"), side("mixed_bfloat16", "mixed_bfloat16", "bfloat16"), \
        side("mixed_bfloat16+xla", "mixed_bfloat16", "bfloat16", True)
    tags = [{"tag": "model+xla_vs_model/divergence/e5a50f0b", "kind": "divergence", "rows": ["a"],
             "extras": {"candidate": xla, "reference": bf16}},
            {"tag": "model_vs_float32/loss_comparison/244a978d", "kind": "loss_comparison", "rows": ["loss"],
             "extras": {"candidate": bf16, "reference": f32}},
            {"tag": "model_vs_float32/divergence/a08d0130", "kind": "divergence", "rows": ["a"],
             "extras": {"candidate": bf16, "reference": f32}}]
    for t in tags:  # as the runs route serves them
        t.update(run_listing.tag_json(reading.TagEntry("x", t["tag"], metadata.RecordMetadata(
            kind=t["kind"], rows=t["rows"], columns=[], extras=t["extras"]))))
    got = js("""const r = await import('/static/views/records.js');
      return r.comparisons({run: 'x', tags: args[0]}).map(g => [g.label, g.key, g.divergence && g.divergence.tag,
        g.loss_comparison && g.loss_comparison.tag]);""", tags)
    assert got == [["mixed_bfloat16 vs float32", "model_vs_float32", tags[2]["tag"], tags[1]["tag"]],
                   ["mixed_bfloat16+xla vs mixed_bfloat16", "model+xla_vs_model", tags[0]["tag"], None]]


def test_downloads_spell_nonfinite_and_quote_names(js):
    data = {"series": [{"name": 'a,"b"', "steps": [0, 1, 2], "values": [1.5, None, 2], "none": [0, 0, 1]}]}
    got = js("""const d = await import('/static/download.js');
      const s = args[0].series[0]; s.values = s.values.map(v => v === null ? NaN : v);
      return [d.toCsv(args[0]), d.toJson(args[0], 'n')];""", data)
    assert got[0] == 'name,step,value\n"a,""b""",0,1.5\n"a,""b""",1,NaN\n"a,""b""",2,None\n'
    assert json.loads(got[1])["series"][0]["values"] == [1.5, "NaN", "None"]


def test_alert_target_marks_view_step_and_highlights_the_row(js):
    alert = {"id": "x", "code": "nonfinite", "run": "r", "tag": "t", "step_first": 4, "variables": ["v"],
             "view": {"name": "grad_stats", "run": "r", "tag": "t", "column": "nan_count", "row": "v", "step": 5}}
    got = js("""const {alertTarget} = await import('/static/views/alert_target.js');
      return [alertTarget(args[0]), alertTarget({...args[0], view: {...args[0].view, step: undefined,
        name: 'update_stats'}})];""", alert)
    assert got[0]["view"] == "gradients" and got[0]["step"] == "5" and got[0]["row"] == "v" and got[0]["tag"] == "t"
    assert got[1]["step"] == "4" and got[1]["utag"] == "t" and got[1]["tag"] == "" and got[1]["focus"] == "update_stats"


def test_file_problems_read_as_problems_of_the_runs_files(js):
    """alerts ``errors`` entries with ``tag: null`` (a damaged event file, two
    writers, a logdir note) are listed under their run as the file's problem,
    never as "run / null"."""
    errors = [
        {"run": "r", "tag": None, "file": "r/events.out.1", "error": "data checksum mismatch at record 10"},
        {"run": "", "tag": None, "file": None, "error": "symlink loop skipped: up -> .."},
        {"run": "r", "tag": "g/grad_stats/1", "error": "not UTF-8 JSON"},
    ]
    got = js("""const {problemsSection} = await import('/static/views/problems.js');
      const section = problemsSection(args[0]);
      return [...section.querySelectorAll('.gl-read-error-run')].map((li) => [
        li.querySelector('strong').textContent, [...li.querySelectorAll('li')].map((x) => x.textContent)]);""",
             errors)
    assert got == [
        ["Run r", ["event file r/events.out.1: data checksum mismatch at record 10", "record g/grad_stats/1: not UTF-8 JSON"]],
        ["The logdir", ["logdir: symlink loop skipped: up -> .."]],
    ]


def test_a_right_to_left_override_in_a_name_reorders_nothing_after_it(js):
    """A tag holding an unclosed RIGHT-TO-LEFT OVERRIDE (U+202E): its record label
    and a sentence naming it keep the text after the name in reading order, as
    the browser lays it out (the '(' of "(3 variables)" left of its 'v')."""
    out = js("""const dom = await import('/static/dom.js');
      const records = await import('/static/views/records.js');
      const tag = 'evil\\u202ename/grad_stats/0123abcd';
      const label = records.recordLabel({tag, kind: 'grad_stats', name: args[0], rows: ['a', 'b', 'c']});
      const shown = [dom.el('p', {text: label}), dom.el('p', {}, ['Run ', 'x\\u202ey', ' has no advice.'])];
      const where = (node, text) => {
        const range = document.createRange();
        const at = node.firstChild.textContent.lastIndexOf(text);
        range.setStart(node.firstChild, at);
        range.setEnd(node.firstChild, at + 1);
        return range.getBoundingClientRect().left;
      };
      for (const p of shown) document.body.appendChild(p);
      const result = {label, paren: where(shown[0], '('), v: where(shown[0], 'variables'),
                      h: shown[1].lastChild.textContent.indexOf('has'),
                      has: (() => { const r = document.createRange(); const t = shown[1].lastChild;
                                    const i = t.textContent.indexOf('has'); r.setStart(t, i); r.setEnd(t, i + 1);
                                    return r.getBoundingClientRect().left; })(),
                      no: (() => { const r = document.createRange(); const t = shown[1].lastChild;
                                   const i = t.textContent.indexOf('no'); r.setStart(t, i); r.setEnd(t, i + 1);
                                   return r.getBoundingClientRect().left; })()};
      for (const p of shown) p.remove();
      return result;""", metadata.tag_name("evil\u202ename/grad_stats/0123abcd", "grad_stats"))
    assert "evil\u202ename" in out["label"]
    assert out["paren"] < out["v"], out
    assert out["has"] < out["no"], out


def test_the_answers_numbers_are_written_as_the_tab_writes_them(js):
    """The server's sentences (analysis/sentences.py) and the tab's cells write a number alike."""
    from tb_gradlens.analysis import sentences

    values = [0.64951905, 6.0, 1.02, 0.999, 0.25, 0.0125, 123456.5, 123456.0, 1.2345e-5, -3.25, 0.001, 99999.9,
              1e-4, 2.5e-7, 1.5, 140.4, 0.0]
    out = js("""const f = await import('/static/format.js');
      return {fmt: args[0].map(f.fmt), ratio: args[0].map(f.fmtRatio)};""", values)
    assert out["fmt"] == [sentences.fmt(v) for v in values]
    assert out["ratio"] == [sentences.fmt_ratio(v) for v in values]


def test_a_heatmap_of_up_to_100_named_rows_labels_every_row(js):
    """Issue 40: a heatmap of 60 variables labelled every other row (9 px rows under 12 px labels)."""
    out = js("""const h = await import('/static/heatmap.js');
      return [6, 46, 60, 100, 101, 128].map((n) => [n, h.rowHeightFor(n), h.labelledRows(n, h.rowHeightFor(n), -1).length,
        h.rowHeightFor(n, 560, false)]);""")
    for n, row, labelled, by_ticks in out:
        if n <= 100:
            assert labelled == n, (n, row)
        else:
            assert row == max(2, min(18, 560 // n)) and labelled < n
        assert by_ticks == max(2, min(18, 560 // n))  # rows labelled by ticks (a histogram's bins) keep their height


def test_a_dense_line_keeps_each_pixel_columns_extremes(js):
    """10,000 steps on a 600-pixel chart are drawn one stroke per pixel column (history §21), so a
    one-step spike and a one-step dip must still reach their heights, and the line covers the same
    rows as when every point is drawn (a 600-step series of the same shape)."""
    out = js("""const d = await import('/static/line_draw.js');
      const draw = (n) => {
        const steps = Array.from({length: n}, (_, i) => i);
        const values = steps.map((i) => 1 + 0.1 * Math.sin(i / n * 20));
        values[Math.floor(n * 0.3)] = 3;
        values[Math.floor(n * 0.7)] = -1;
        const canvas = document.createElement('canvas');
        document.body.appendChild(canvas);
        const drawn = d.drawLines(canvas, {series: [{name: 'a', steps, values, color: '#ff0000'}],
                                          hidden: new Set(), yScale: 'linear', smoothing: 0, height: 220}, 600);
        const ctx = canvas.getContext('2d');
        const image = ctx.getImageData(0, 0, canvas.width, canvas.height);
        const red = (x, y) => { const k = 4 * (y * canvas.width + x); const p = image.data;
                                return p[k] > 150 && p[k + 1] < 90 && p[k + 2] < 90; };
        const rows = (step) => { const x = Math.round(drawn.x(step)); const found = [];
          for (let y = 0; y < canvas.height; y++) if (red(x, y)) found.push(y); return found; };
        canvas.remove();
        return {spike: rows(Math.floor(n * 0.3)), dip: rows(Math.floor(n * 0.7)),
                top: Math.round(drawn.y(3)), bottom: Math.round(drawn.y(-1))};
      };
      return {dense: draw(10000), sparse: draw(600)};""")
    for name in ("dense", "sparse"):
        found = out[name]
        assert found["spike"] and min(found["spike"]) <= found["top"] + 2, (name, found)
        assert found["dip"] and max(found["dip"]) >= found["bottom"] - 2, (name, found)

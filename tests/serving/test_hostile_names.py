"""Hostile names: run, tag, variable and layer names with HTML/JS, quotes,
path separators, 10,000 characters, unicode and control characters.

They must be shown literally in the tab (Playwright + Chromium against a
real tensorboard, helpers of tests/support/frontend_page.py) and in the command line
(control characters escaped), travel JSON-escaped through the routes, and
never run as code.  The static route refuses path traversal through a real
tensorboard process.
"""

import http.client
import json
import os
import subprocess
import sys
import urllib.parse

import numpy as np
import pytest

from tests.support.frontend_page import PREFIX
from tests.support.frontend_page import Page
from tests.support.frontend_page import browser  # noqa: F401 - fixture
from tests.support.frontend_page import require_browser
from tests.support.frontend_page import table_rows
from tests.support.frontend_page import wait_drawn

pytestmark = [pytest.mark.slow]  # a real TensorBoard, and Chromium

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = 3
HTML = '<img src=x onerror=alert(1)><script>alert("js")</script>'
QUOTES = "\"quoted\" 'single' `back` );alert(2)//"
PATHS = "../../etc/passwd\\..\\windows/system32"
LONG = "L" * 9990 + "/long/name"  # 10,000 characters
UNICODE = "ünïcødé/日本語/\u202eevil\u202c/😀"
CONTROL = "ctl\x01\x07\tTAB\nNEWLINE\x1b[31mred"
VARIABLES = (HTML, QUOTES, PATHS, LONG, UNICODE, CONTROL)
# Run names are directory names: no '/', at most 255 bytes per component.
RUNS = {
    "html": "<b onmouseover=alert(3)>run</b>",
    "quotes": "run \"with\" 'quotes'",
    "unicode": "rün-日本-😀",
    "control": "run\x07\x1b[2J",
    "nested": os.path.join("outer", "inner & <i>"),
    "long": os.path.join(*["r" * 199] * 18),  # a 3,600-character run name (18 directories)
}
# A right-to-left override left open in a tag must reorder nothing after it.
TAG_NAME = '<svg onload=alert(4)>"tag"\u202eevil'
NAN_VARIABLE = HTML  # its gradient is NaN at step 1: alerts name it


class _Named:
    def __init__(self, path, shape):
        import tensorflow as tf

        self.path, self.shape, self.dtype = path, shape, tf.float32


def gradients_at(step):
    g = [np.full(2, i + 1.0 + step, np.float32) for i in range(len(VARIABLES))]
    if step == 1:
        g[VARIABLES.index(NAN_VARIABLE)][0] = np.nan
    return g


def build_logdir(logdir):
    import tensorflow as tf

    from tb_gradlens import summary

    variables = [_Named(v, (2,)) for v in VARIABLES]
    dtype_map = {
        "layers": [{"path": p, "class": "Dense", "policy": "float32", "compute_dtype": "float32",
                    "variable_dtype": "float32", "output_dtype": "float32"} for p in VARIABLES],
        "variables": [{"path": p, "dtype": "float32"} for p in VARIABLES],
        "model_output_dtype": "float32",
    }
    for run in RUNS.values():
        writer = tf.summary.create_file_writer(os.path.join(logdir, run))
        with writer.as_default():
            for step in range(STEPS):
                summary.gradients([tf.constant(g) for g in gradients_at(step)], variables, step=step, name=TAG_NAME)
                tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
            summary.dtypes(dtype_map, step=0, name=LONG)
        writer.close()
    return logdir


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    return build_logdir(str(tmp_path_factory.mktemp("hostile") / "logs"))


@pytest.fixture(scope="module")
def tensorboard_ready():
    """When conftest.py's ``tensorboard`` on this logdir is ready: every run, every step."""
    return (lambda d: len(d.get("runs", [])) == len(RUNS)
            and all(t["max_step"] == STEPS - 1 for r in d["runs"] for t in r["tags"] if t["kind"] != "dtypes"))


def stats_tag(tb, run):
    runs = tb.get_json(PREFIX + "runs")["runs"]
    return next(t["tag"] for r in runs if r["run"] == run for t in r["tags"] if t["kind"] == "grad_stats")


@pytest.mark.tensorboard
def test_routes_carry_every_name_exactly_and_json_escaped(tensorboard):
    tb = tensorboard
    status, ctype, body = tb.get(PREFIX + "runs")
    assert status == 200 and ctype.startswith("application/json")
    text = body.decode("utf-8")
    # JSON-escaped: no raw control character, quote or backslash breaks the document.
    assert not any(ch in text for ch in "\x01\x07\x1b\n")
    runs = {r["run"]: r for r in json.loads(text)["runs"]}
    assert set(runs) == set(RUNS.values())
    for run in RUNS.values():
        tags = {t["kind"]: t for t in runs[run]["tags"]}
        assert tags["grad_stats"]["rows"] == list(VARIABLES)
        assert tags["grad_stats"]["tag"].startswith(TAG_NAME + "/grad_stats/")
        assert tags["dtypes"]["tag"].startswith(LONG + "/dtypes/")
    run = RUNS["control"]
    tag = stats_tag(tb, run)
    query = urllib.parse.urlencode([("run", run), ("tag", tag), ("row", LONG), ("row", CONTROL), ("columns", "max")])
    series = tb.get_json(PREFIX + "series?" + query)
    assert series["rows"] == [LONG, CONTROL] and series["run"] == run and series["tag"] == tag
    assert series["values"] == [[[1.0 + i + s for s in range(STEPS)] for i in (3, 5)]]  # max = i + 1 + step
    alerts = tb.get_json(PREFIX + "alerts?" + urllib.parse.urlencode({"run": RUNS["html"]}))["alerts"]
    (nonfinite,) = [a for a in alerts if a["code"] == "nonfinite"]
    assert nonfinite["variables"] == [NAN_VARIABLE] and NAN_VARIABLE in nonfinite["explanation"]
    dtypes = tb.get_json(PREFIX + "dtypes?" + urllib.parse.urlencode({"run": RUNS["unicode"]}))
    assert [layer["path"] for layer in dtypes["maps"][0]["map"]["layers"]] == list(VARIABLES)


def _open(tb, page, **state):
    page.page.goto(tb.url + "/data/plugin_entry.html?name=gradlens#" + urllib.parse.urlencode(state))
    wait_drawn(page)
    return page.page


def _no_injection(p, page):
    assert p.evaluate("document.querySelectorAll('img, script:not([type=module]), svg[onload], b, i').length") == 0
    page.assert_clean()


@pytest.mark.browser
@pytest.mark.tensorboard
def test_tab_shows_hostile_names_literally(tensorboard, browser):  # noqa: F811
    require_browser()
    tb = tensorboard
    page = Page(browser)
    try:
        p = _open(tb, page, view="overview")
        shown_runs = [r[0] for r in table_rows(p, ".gl-run-row")]
        assert sorted(shown_runs) == sorted(RUNS.values())
        for key in ("html", "control", "nested"):
            run = RUNS[key]
            p = _open(tb, page, view="gradients", run=run, tag=stats_tag(tb, run))
            rows = [r[0] for r in table_rows(p, ".gl-var-row")]
            assert sorted(rows) == sorted(VARIABLES), key  # every character, 10,000 of them included
            _no_injection(p, page)
        p = _open(tb, page, view="dtypes", run=RUNS["unicode"])
        assert [r[0] for r in table_rows(p, ".gl-layer-row")] == list(VARIABLES)
        _no_injection(p, page)
        # Overview of the run whose variable went NaN names it literally.
        p = _open(tb, page, view="overview")
        assert NAN_VARIABLE in p.text_content("body")
        _no_injection(p, page)
    finally:
        page.close()


def _overflow(p):
    """How many pixels the page is wider than the window (0: nothing off-screen)."""
    return p.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def _tallest_name(p):
    """The height in pixels of the tallest table row or run-name heading part."""
    return p.evaluate("""Math.max(0, ...[...document.querySelectorAll('tr, .gl-run-name, h2, h3, strong')]
        .map((e) => e.getBoundingClientRect().height))""")


@pytest.mark.browser
@pytest.mark.tensorboard
def test_long_names_do_not_push_the_view_off_the_screen(tensorboard, browser):  # noqa: F811
    """A 10,000-character variable and a 3,600-character run name are shown in a
    few lines (in full on hover and in the page's text): no table row or heading
    is taller than five lines, and nothing is wider than the window."""
    require_browser()
    tb = tensorboard
    page = Page(browser)
    try:
        run = RUNS["long"]
        for state in ({"view": "overview"}, {"view": "gradients", "run": run, "tag": stats_tag(tb, run)},
                      {"view": "dtypes", "run": run}, {"view": "compare", "runA": run, "runB": RUNS["html"]}):
            p = _open(tb, page, **state)
            assert _overflow(p) <= 0, state
            assert _tallest_name(p) <= 5 * 20, state
            assert run in p.text_content("body") or state["view"] == "compare", state
    finally:
        page.close()


@pytest.mark.browser
@pytest.mark.tensorboard
def test_variable_filter_with_a_catastrophic_pattern_is_matched_by_the_server(tensorboard, browser):  # noqa: F811
    """The Dtypes view's variable filter is matched by the dtypes route in bounded
    time (tb_gradlens.patterns), never by a backtracking RegExp in the browser:
    ``(L+)+$`` against the 10,000-character name would freeze the tab for good."""
    require_browser()
    tb = tensorboard
    pattern = "(L+)+$|日本"
    query = urllib.parse.urlencode({"run": RUNS["unicode"], "rows": pattern})
    (shown,) = tb.get_json(PREFIX + "dtypes?" + query)["maps"]
    assert [x["path"] for x in shown["map"]["layers"]] == [x["path"] for x in shown["map"]["variables"]] == [UNICODE]
    page = Page(browser)
    try:
        p = _open(tb, page, view="dtypes", run=RUNS["unicode"], filter=pattern)
        assert [r[0] for r in table_rows(p, ".gl-layer-row")] == [UNICODE]
        assert [r[0] for r in table_rows(p, ".gl-variable-row")] == [UNICODE]
        # Python's syntax, as in every other view (a browser RegExp refuses "(?i)").
        p = _open(tb, page, view="dtypes", run=RUNS["unicode"], filter="(?i)LONG/NAME$")
        assert [r[0] for r in table_rows(p, ".gl-layer-row")] == [LONG]
        page.assert_clean()
        # A pattern the server refuses says why, in the view (its 400 is the only console error).
        p = _open(tb, page, view="dtypes", run=RUNS["unicode"], filter="(a)\\1")
        assert "backreferences" in p.text_content(".gl-view")
        assert len(page.errors) == 1 and "400" in page.errors[0]
    finally:
        page.close()


@pytest.mark.browser
@pytest.mark.tensorboard
def test_an_alert_of_every_run_is_one_entry_with_a_button_per_run(tensorboard, browser):  # noqa: F811
    """The same NaN in the same variable of five runs (one alert ``group``) is one
    entry of the Overview, as the CLI groups them; each other run has a button that
    opens its own evidence."""
    require_browser()
    tb = tensorboard
    alerts = tb.get_json(PREFIX + "alerts")["alerts"]
    nonfinite = [a for a in alerts if a["code"] == "nonfinite"]
    assert len(nonfinite) == len(RUNS) and len({a["group"] for a in nonfinite}) == 1
    page = Page(browser)
    try:
        p = _open(tb, page, view="overview")
        groups = len({a["group"] for a in alerts})
        titles = p.eval_on_selector_all(".gl-view h2", "n => n.map(x => x.textContent)")
        assert "Alerts (%d, %d distinct)" % (len(alerts), groups) in titles
        entries = p.eval_on_selector_all(".gl-alert[data-code=nonfinite]", "n => n.map(x => x.dataset.run)")
        assert entries == [nonfinite[0]["run"]]
        others = p.eval_on_selector_all(".gl-alert-other", "n => n.map(x => x.dataset.run)")
        assert others == [a["run"] for a in nonfinite[1:]]
        last = nonfinite[-1]
        p.locator(".gl-alert-other").last.click()
        p.wait_for_function("document.documentElement.dataset.view === 'gradients'")
        wait_drawn(page)
        assert p.eval_on_selector(".gl-run", "s => s.value") == last["run"]
        assert p.text_content(".gl-nan-step") == str(last["step_first"])
        _no_injection(p, page)
    finally:
        page.close()


def test_cli_shows_names_literally_with_control_characters_escaped(logdir):
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    text = subprocess.run([sys.executable, "-m", "tb_gradlens", "report", logdir],
                          capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert text.returncode in (0, 1), text.stderr
    out = text.stdout
    assert "\x1b" not in out and "\x07" not in out and "\x01" not in out
    assert HTML in out and RUNS["html"] in out and RUNS["unicode"] in out
    assert "run\\x07\\x1b[2J" in out  # the control run, escaped
    report = subprocess.run([sys.executable, "-m", "tb_gradlens", "report", logdir, "--json"],
                            capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    data = json.loads(report.stdout)
    assert {r["run"] for r in data["runs"]} == set(RUNS.values())
    (nonfinite,) = [a for a in data["alerts"] if a["code"] == "nonfinite" and a["run"] == RUNS["control"]]
    assert nonfinite["variables"] == [NAN_VARIABLE]


TRAVERSALS = [
    "static/../gradlens_plugin.py",
    "static/%2e%2e/gradlens_plugin.py",
    "static/%2E%2E%2Fgradlens_plugin.py",
    "static/..%2f..%2fsetup.py",
    "static//etc/passwd",
    "static/%2Fetc%2Fpasswd",
    "static/..%5cgradlens_plugin.py",
    "static/views%5c..%5c..%5cgradlens_plugin.py",
    "static/%252e%252e/gradlens_plugin.py",
    "static/index.js%00",
]


@pytest.mark.tensorboard
def test_static_route_refuses_traversal_through_tensorboard(tensorboard):
    host, port = urllib.parse.urlsplit(tensorboard.url).netloc.split(":")
    served = []
    for path in ["static/index.js"] + TRAVERSALS:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("GET", PREFIX + path)  # sent as is: no client-side normalisation
        response = conn.getresponse()
        body = response.read()
        conn.close()
        served.append((path, response.status))
        if path != "static/index.js":
            assert response.status in (400, 404), (path, response.status)
            assert b"import" not in body and b"root:" not in body
    assert served[0] == ("static/index.js", 200)

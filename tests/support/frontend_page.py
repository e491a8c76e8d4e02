"""Driving the GradLens tab in Debian's Chromium (Playwright), for the browser tests.

One browser per test module (module-scoped fixtures in the test files); a
``Page`` records console errors, page errors and dialogs.  Helpers read what
a user sees: table cells, headline sentences, and what a canvas chart has
drawn (its ``data-plot``: plot rectangle, step domain, ticks) and pixels of
it (the rule at a step, a heatmap cell's color).
"""

import json
import math
import os
import urllib.parse

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARTIFACTS = os.path.join(ROOT, "test-artifacts", "frontend")
CHROMIUM = "/usr/bin/chromium"
PREFIX = "/data/plugin/gradlens/"
MAGENTA = (255, 0, 200)
NONE_GREY = (140, 140, 140)
DEAD = (179, 88, 6)
ZERO_GREY = (189, 193, 198)
RULE_LIGHT = (217, 48, 37)


def require_browser():
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


def launch(playwright):
    return playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])


@pytest.fixture(scope="module")
def browser():
    """One Chromium for a test module (import this fixture into the module)."""
    require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture()
def page(browser):
    """A fresh page (its own browser context) for one test."""
    p = Page(browser)
    yield p
    p.close()


class Page:
    """A browser page that records console errors, page errors and dialogs.

    The tab asks the ``limits`` route once and falls back to fixed
    tolerances when TensorBoard answers 404 (a backend without it): that one
    failed request is not an error of the tab.
    """

    def __init__(self, browser, dark=False):
        self.context = browser.new_context(
            viewport={"width": 1280, "height": 900}, color_scheme="dark" if dark else "light",
            accept_downloads=True,
        )
        self.page = self.context.new_page()
        self.errors = []
        self.dialogs = []
        self.requests = []

        def on_console(message):
            if message.type != "error":
                return
            where = (message.location or {}).get("url", "")
            if "/limits?" in where and "404" in message.text:
                return
            self.errors.append(message.text)

        self.page.on("console", on_console)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: PREFIX in r.url and self.requests.append(r.url))

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


def route(tb, name, **params):
    query = urllib.parse.urlencode(params, doseq=True)
    return tb.get_json(PREFIX + name + ("?" + query if query else ""))


def number(v):
    return float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}.get(v, v)) if isinstance(v, str) else float(v)


def shown_close(text, want, rel=5e-4):
    """The 4-significant-digit text on screen equals want (NaN/Inf spelled out)."""
    if math.isnan(want):
        return text == "NaN"
    if math.isinf(want):
        return text == ("+Inf" if want > 0 else "-Inf")
    return math.isclose(float(text), want, rel_tol=rel, abs_tol=1e-12)


def open_tab(tb, page, hash_state=""):
    """Open the tab's own document (what TensorBoard iframes) with a hash state, as a new visit (a page
    already on that document is left first: a new hash alone would only change its state); wait until drawn."""
    document = tb.url + "/data/plugin_entry.html?name=gradlens"
    if page.page.url.split("#")[0] == document:
        page.page.goto("about:blank")
    page.page.goto(document + ("#" + hash_state if hash_state else ""))
    wait_drawn(page.page)
    return page.page


def wait_drawn(frame):
    """Wait until the view is drawn in a Playwright page or frame (or a Page of this module)."""
    frame = frame.page if isinstance(frame, Page) else frame
    frame.wait_for_selector(".gl-view:not(.gl-pending)", timeout=60000)
    frame.wait_for_function("!document.querySelector('.gl-loading')", timeout=60000)
    settle(frame)


def settle(frame):
    """Let two animation frames pass: a chart redrawn when the shared step axis grew
    (shared_axis.js redraws on the next frame) is drawn before the test reads it."""
    frame.evaluate("() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)))")


def wait_complete(frame):
    """The view and its late parts (the histogram) are drawn."""
    wait_drawn(frame)
    frame.wait_for_function("!document.querySelector('.gl-view:not(.gl-pending) [data-loaded=\"0\"]')",
                            timeout=60000)


def navigate(page, action, frame=None):
    """Run action (which changes the view) and wait for the next drawn view."""
    frame = frame or page.page
    before = frame.evaluate("document.documentElement.dataset.ready || ''")
    action()
    frame.wait_for_function(
        "(b) => document.documentElement.dataset.ready && document.documentElement.dataset.ready !== b "
        "&& !document.querySelector('.gl-loading')",
        arg=before,
        timeout=60000,
    )
    settle(frame)


def screenshot(page, name):
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.page.screenshot(path=os.path.join(ARTIFACTS, name + ".png"), full_page=True)


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


def table_dicts(page, table_selector, row_selector="tbody tr"):
    """[{column label: cell text}] of a table."""
    return page.evaluate(
        """([t, r]) => {
          const table = document.querySelector(t);
          const labels = [...table.tHead.rows[0].cells].map(th => th.textContent.replace(/ [▲▼]$/, ''));
          return [...table.querySelectorAll(r)].map(tr => Object.fromEntries(
            [...tr.cells].map((td, i) => [labels[i], td.textContent])));
        }""",
        [table_selector, row_selector],
    )


def tag_of(tb, run, kind, prefix=None):
    runs = route(tb, "runs")["runs"]
    tags = [t for r in runs if r["run"] == run for t in r["tags"] if t["kind"] == kind]
    if prefix:
        tags = [t for t in tags if t["tag"].startswith(prefix + "/")]
    return tags[0]


def chart(page, title):
    """The chart figure whose title contains `title` (a Playwright locator)."""
    return page.locator(".gl-view:not(.gl-pending) figure.gl-chart", has=page.locator(
        ".gl-chart-title", has_text=title)).first


def plot_of(figure):
    """What a chart's canvas drew (its data-plot)."""
    return json.loads(figure.locator("canvas").first.get_attribute("data-plot"))


def step_x(plot, step):
    d0, d1 = plot["domain"]
    return plot["x0"] + (step - d0) / (d1 - d0) * (plot["x1"] - plot["x0"])


def drag(p, figure, s0, s1):
    """Drag across steps s0..s1 on a chart (its canvas in ``p``'s coordinates): the zoom."""
    figure.scroll_into_view_if_needed()
    plot = plot_of(figure)
    box = figure.locator("canvas").first.bounding_box()
    y = box["y"] + (plot["y0"] + plot["y1"]) / 2
    p.mouse.move(box["x"] + step_x(plot, s0), y)
    p.mouse.down()
    p.mouse.move(box["x"] + step_x(plot, (s0 + s1) / 2), y, steps=3)
    p.mouse.move(box["x"] + step_x(plot, s1), y, steps=3)
    p.mouse.up()


def pixels(figure, x, y0, y1):
    """RGBA of the canvas pixels in column x (CSS px) from y0 to y1."""
    return figure.locator("canvas").first.evaluate(
        """(c, [x, y0, y1]) => {
          const r = c.width / c.getBoundingClientRect().width;
          const d = c.getContext('2d').getImageData(Math.round(x * r), Math.round(y0 * r), 1,
            Math.max(1, Math.round((y1 - y0) * r))).data;
          const out = [];
          for (let i = 0; i < d.length; i += 4) out.push([d[i], d[i + 1], d[i + 2], d[i + 3]]);
          return out;
        }""",
        [x, y0, y1],
    )


def close_to(rgba, rgb, tol=40):
    return rgba[3] > 0 and all(abs(a - b) <= tol for a, b in zip(rgba[:3], rgb))


def rule_at(figure, step, color=RULE_LIGHT):
    """True when the chart draws its step rule at `step` (pixels of the rule's color there)."""
    # The plot geometry and the pixels are read in one call, so a redraw cannot fall between them.
    columns = figure.locator("canvas").first.evaluate(
        """(c, step) => {
          const plot = JSON.parse(c.dataset.plot);
          const [d0, d1] = plot.domain;
          const x = plot.x0 + (step - d0) / (d1 - d0) * (plot.x1 - plot.x0);
          const r = c.width / c.getBoundingClientRect().width;
          const columns = [-1, 0, 1].map((dx) => Array.from(c.getContext('2d').getImageData(
            Math.round((x + dx) * r), Math.round(plot.y0 * r), 1,
            Math.max(1, Math.round((plot.y1 - plot.y0) * r))).data));
          return columns;
        }""",
        step,
    )
    column = [c[i:i + 4] for c in columns for i in range(0, len(c), 4)]
    return sum(close_to(p, color) for p in column) >= 5


def heatmap_cell(figure, row, step):
    """RGBA at the center of a heatmap cell (row index, step value)."""
    plot = plot_of(figure)
    row_h = (plot["y1"] - plot["y0"]) / plot["rows"]
    y = plot["y0"] + (row + 0.5) * row_h
    return pixels(figure, step_x(plot, step) + 1, y, y + 1)[0]

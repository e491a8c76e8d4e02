"""The tab names what could not be read: a run with a damaged event file (one
flipped byte: TensorBoard's loader reads nothing after it) and a run written
by two writers at once say so above every view that shows them, and the
Overview lists each file's problem with its message (never "run / null").
Playwright + Chromium against a real tensorboard (helpers of frontend_page.py).
"""

import os

import pytest

from tests.support.frontend_page import browser, open_tab, page, require_browser, route, screenshot  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.tensorboard]  # a real TensorBoard in Chromium


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    """The logdir and the relative path of its file with a flipped byte."""
    require_browser()
    from tests.support import hostile_logs

    path = str(tmp_path_factory.mktemp("problems") / "logs")
    hostile_logs.stats_run(os.path.join(path, "good"), range(20))
    flipped, _ = hostile_logs.flipped_run(os.path.join(path, "flipped"))
    hostile_logs.two_writers_run(os.path.join(path, "two_writers"))
    return path, os.path.relpath(flipped, path)


@pytest.fixture(scope="module")
def logdir(problems):
    return problems[0]


@pytest.fixture(scope="module")
def tensorboard_ready():
    """When conftest.py's ``tensorboard`` on this logdir is ready: both damaged runs named."""
    return lambda d: {r["run"] for r in d.get("runs", []) if r["problems"]} == {"flipped", "two_writers"}


def banner(p):
    return p.eval_on_selector_all(".gl-run-problems", "n => n.map(x => x.textContent)")


def test_file_problems_are_named_in_the_overview_and_above_the_views_of_their_run(tensorboard, problems, page):
    tb = tensorboard
    _, flipped_file = problems
    runs = {r["run"]: r for r in route(tb, "runs")["runs"]}
    (damage,) = runs["flipped"]["problems"]
    (overlap,) = runs["two_writers"]["problems"]
    assert damage["file"] == flipped_file

    p = open_tab(tb, page, "view=overview")
    body = p.text_content(".gl-view")
    assert "null" not in body
    (shown,) = banner(p)
    assert "Run flipped: 1 event file problem(s)" in shown
    assert "event file %s: %s" % (flipped_file, damage["error"]) in shown
    assert "Run two_writers: 1 event file problem(s)" in shown and overlap["error"] in shown
    assert "Run good" not in shown
    screenshot(page, "overview-file-problems")

    p = open_tab(tb, page, "view=gradients&run=flipped")
    (shown,) = banner(p)
    assert shown.startswith("Run flipped: 1 event file problem(s)") and damage["error"] in shown
    assert "two_writers" not in shown
    p = open_tab(tb, page, "view=compare&runA=good&runB=two_writers&noise=none")
    (shown,) = banner(p)
    assert shown.startswith("Run two_writers: 1 event file problem(s)") and "flipped" not in shown
    p = open_tab(tb, page, "view=gradients&run=good")
    assert banner(p) == []
    page.assert_clean()

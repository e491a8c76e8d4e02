"""The tab names what could not be read: a run with a damaged event file (one
flipped byte: TensorBoard's loader reads nothing after it) and a run written
by two writers at once say so above every view that shows them, and the
Overview lists each file's problem with its message (never "run / null").
Playwright + Chromium against a real tensorboard (helpers of frontend_page.py).
"""

import os

import pytest

from frontend_page import PREFIX, browser, open_tab, page, require_browser, route, screenshot  # noqa: F401 (fixtures)
from tb_server import TensorBoardProcess


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    require_browser()
    import hostile_logs

    path = str(tmp_path_factory.mktemp("problems") / "logs")
    hostile_logs.stats_run(os.path.join(path, "good"), range(20))
    flipped, _ = hostile_logs.flipped_run(os.path.join(path, "flipped"))
    hostile_logs.two_writers_run(os.path.join(path, "two_writers"))
    return path, os.path.relpath(flipped, path)


@pytest.fixture(scope="module")
def tensorboard(logdir):
    with TensorBoardProcess(logdir[0], load_fast=False) as tb:
        tb.wait_for(
            lambda d: {r["run"] for r in d.get("runs", []) if r["problems"]} == {"flipped", "two_writers"},
            PREFIX + "runs", timeout=120,
        )
        yield tb


def banner(p):
    return p.eval_on_selector_all(".gl-run-problems", "n => n.map(x => x.textContent)")


def test_file_problems_are_named_in_the_overview_and_above_the_views_of_their_run(tensorboard, logdir, page):
    tb = tensorboard
    _, flipped_file = logdir
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

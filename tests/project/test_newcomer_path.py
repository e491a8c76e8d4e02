"""A newcomer's path (issue 40): the quick start twice with port 6006 taken, each
question asked of the tab and of `report`, and the answers compared.

The demo runs as the README's quick start runs it (``python -m tb_gradlens demo``,
a real training and a real TensorBoard); Debian's Chromium reads the tab as a
user does; `tb-gradlens report --json` answers the same questions without a
browser.  The same comparison runs on the designed logdir of the tab's
question tests (frontend_questions_logs.py), where a run is harmed, NaN, dead.
"""

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from tests.support.frontend_page import Page, browser, drag, navigate, open_tab, wait_drawn  # noqa: F401 (browser)

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.tensorboard]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
URL = re.compile(r"GradLens tab: (http://127\.0\.0\.1:(\d+))/#gradlens")
STEPS = "40"  # 4 comparisons (every 10 steps) and 40 loss steps: every answer has a verdict
QUESTIONS = ("beyond_noise", "diverges_most", "broken", "keep_float32", "over_training")


@contextlib.contextmanager
def port_taken(port):
    """``port`` in use while the block runs: held here, or already taken by another process."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
        s.listen(1)
    except OSError:
        pass  # someone else's: taken all the same
    try:
        yield
    finally:
        s.close()


class Demo:
    """``python -m tb_gradlens demo ARGS`` in the background, its output in a file."""

    def __init__(self, tmp_path, name, *args):
        self.log = tmp_path / ("%s.log" % name)
        env = dict(os.environ)
        env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # what TensorFlow prints, as a user sees it
        with open(self.log, "w") as out:
            self.process = subprocess.Popen([sys.executable, "-m", "tb_gradlens", "demo", *args], stdout=out,
                                            stderr=subprocess.STDOUT, cwd=ROOT, env=env)

    def text(self):
        return self.log.read_text()

    def serving(self, timeout=600):
        """The demo's TensorBoard URL once it serves."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            match = URL.search(self.text())
            if match:
                return match.group(1)
            assert self.process.poll() is None, self.text()[-4000:]
            time.sleep(0.5)
        raise AssertionError("the demo did not serve:\n" + self.text()[-4000:])

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)


class Served:
    """What open_tab needs of a TensorBoard: its URL."""

    def __init__(self, url):
        self.url = url


def report(logdir, *args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "tb_gradlens", "report", logdir, "-q", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, timeout=300)


def answers_of_report(logdir):
    done = report(logdir, "--json")
    assert done.returncode == 0, done.stderr
    return {r["run"]: {a["id"]: a for a in r["answers"]} for r in json.loads(done.stdout)["runs"]}, done


def without_question(p, selector):
    """The answer's text in a view, its question (shown first) left out."""
    node = p.locator(selector).first
    question = node.locator(".gl-question")
    text = node.text_content()
    return text[len(question.text_content()):].strip() if question.count() else text.strip()


def ask_the_tab(tb, page, said, run):
    """Each question of ``run``, asked of the Overview (the run chosen) and of the view that answers it."""
    p = open_tab(tb, page, "view=overview&run=%s" % run)
    on_overview = {q: p.text_content(".gl-answer-item[data-question='%s'] .gl-answer-text" % q).strip()
                   for q in QUESTIONS}
    cells = p.evaluate("""() => { const t = document.querySelector('table.gl-table');
        const labels = [...t.tHead.rows[0].cells].map(th => th.textContent.replace(/ [▲▼]$/, ''));
        const tr = t.querySelector('tr.gl-run-row');
        return Object.fromEntries([...tr.cells].map((td, i) => [labels[i], [td.textContent, td.title]])); }""")
    for q, label in (("beyond_noise", "beyond float32 noise?"), ("diverges_most", "diverges most"),
                     ("keep_float32", "keep in float32"), ("over_training", "over training")):
        assert cells[label] == [said[q]["short"], said[q]["text"]], (run, q)
    in_views = {}
    if said["diverges_most"]["verdict"] not in ("no_comparison", "not_applicable", "advisor_only"):
        p = open_tab(tb, page, "view=divergence&run=%s" % run)
        in_views["diverges_most"] = without_question(p, ".gl-q2-answer")
        if p.locator(".gl-q5-answer").count():
            in_views["over_training"] = without_question(p, ".gl-q5-answer")
    p = open_tab(tb, page, "view=gradients&run=%s" % run)
    if p.locator(".gl-q3").count():
        in_views["broken"] = without_question(p, ".gl-q3")
    if said["keep_float32"]["verdict"] not in ("no_advice", "not_applicable"):
        p = open_tab(tb, page, "view=advisor&run=%s" % run)
        in_views["keep_float32"] = without_question(p, ".gl-q4")
    runs = said["beyond_noise"].get("runs") or {}
    if runs.get("a") and said["beyond_noise"]["verdict"] != "no_loss":
        p = open_tab(tb, page, "view=compare&runB=%s" % run)
        picked = [p.eval_on_selector(s, "x => x.value") for s in (".gl-runa", ".gl-runb", ".gl-noise")]
        assert picked == [runs["a"], run, runs["noise"] or "none"]
        in_views["beyond_noise"] = p.text_content(".gl-verdict").strip()
    return on_overview, in_views


def assert_same_answers(tb, page, logdir, runs):
    said, done = answers_of_report(logdir)
    text = report(logdir).stdout
    for run in runs:
        on_overview, in_views = ask_the_tab(tb, page, said[run], run)
        for q in QUESTIONS:
            assert on_overview[q] == said[run][q]["text"], (run, q)
            assert "  %d. %s %s\n" % (QUESTIONS.index(q) + 1, said[run][q]["question"], said[run][q]["text"]) in text
        for q, shown in in_views.items():
            assert shown == said[run][q]["text"], (run, q)
    page.assert_clean()
    return said


def test_the_quick_start_twice_with_port_6006_taken(tmp_path, browser):  # noqa: F811
    logdir = str(tmp_path / "gradlens_demo")
    demos = []
    try:
        with port_taken(6006):
            first = Demo(tmp_path, "first", "--logdir", logdir, "--steps", STEPS)
            demos.append(first)
            first_url = first.serving()
            out = first.text()
            # Port 6006 found taken before training, and another taken, said in one line.
            note = out.index("tb_gradlens demo: port 6006 is in use")
            assert note < out.index("tb_gradlens demo: training") and "6006" not in first_url
            # The quick start again, while the first demo still serves: its runs replaced, said once.
            second = Demo(tmp_path, "second", "--logdir", logdir, "--steps", STEPS)
            demos.append(second)
            url = second.serving()
            out = second.text()
        assert out.count("replacing its runs of an earlier demo in %s (float32, mixed_bfloat16, float32_seed1, "
                         "fit_mixed_bfloat16)" % logdir) == 1
        # TensorBoard's oneDNN note: once, in words, not TensorFlow's line twice.
        assert "oneDNN custom operations" not in out and out.count("TensorFlow's oneDNN kernels are on.") == 1
        # A port named and taken: said before any training, exit 2.
        taken = subprocess.run([sys.executable, "-m", "tb_gradlens", "demo", "--logdir", str(tmp_path / "other"),
                                "--port", url.rsplit(":", 1)[1]], capture_output=True, text=True, cwd=ROOT,
                               timeout=120)
        assert taken.returncode == 2 and "--port" in taken.stderr and "training" not in taken.stdout
        # Never two writers: the report's gate on unread files passes, and the tab shows no problem.
        gate = report(logdir, "--fail-on", "warning")
        assert gate.returncode == 0, gate.stdout[-3000:] + gate.stderr
        page = Page(browser)
        try:
            p = open_tab(Served(url), page, "view=overview")
            assert p.locator(".gl-run-problems").count() == 0
            said = assert_same_answers(Served(url), page, logdir, ["mixed_bfloat16", "fit_mixed_bfloat16", "float32"])
            # The healthy demo names no part (its layer outputs sit at the same fraction of their limits), and the
            # advisor's one round says what to keep.
            q2 = said["mixed_bfloat16"]["diverges_most"]
            assert q2["verdict"] == "within" and "mlp/" not in q2["text"]
            assert said["mixed_bfloat16"]["keep_float32"]["verdict"] in ("nothing", "keep")
            p = open_tab(Served(url), page, "view=divergence&run=mixed_bfloat16")
            assert p.get_attribute(".gl-act-headline", "data-verdict") == "within"
            assert "mlp/" not in p.text_content(".gl-act-headline")
            page.assert_clean()
        finally:
            page.close()
    finally:
        for demo in demos:
            demo.stop()


@pytest.fixture(scope="module")
def questions(questions_tensorboard):
    return questions_tensorboard


def test_each_question_of_the_tab_and_of_report_on_the_designed_logdir(questions, browser):  # noqa: F811
    page = Page(browser)
    try:
        said = assert_same_answers(questions, page, questions.logdir,
                                   ["mixed_bfloat16", "nan_dead_unused", "measured", "float32", "fit_mixed_bfloat16"])
        assert said["mixed_bfloat16"]["diverges_most"]["verdict"] == "harmed"
        assert said["nan_dead_unused"]["broken"]["verdict"] == "found"
        assert said["mixed_bfloat16"]["beyond_noise"]["verdict"] == "beyond"
    finally:
        page.close()


def test_the_run_selector_holds_up_at_200_runs(tmp_path, browser):  # noqa: F811
    """A filter over the run selector, as TensorBoard's own (a regex, case-insensitive): the list and
    the Overview's table keep the matching runs; the count says how many of how many."""
    from tb_gradlens import metadata
    from tests.support import hostile_logs
    from tests.support.tb_server import TensorBoardProcess

    rows = ["dense/kernel", "dense/bias"]
    names = [("bf16_seed_%03d" if r % 2 else "float32_seed_%03d") % r for r in range(200)]
    for name in names:
        hostile_logs.write_records(str(tmp_path / "logs" / name), [(
            "gradients/grad_stats/abc", hostile_logs.content(metadata.GRAD_STATS, rows), hostile_logs.stats(2, 1.0))],
            steps=range(3), scalars=["loss"])
    page = Page(browser)
    try:
        with TensorBoardProcess(str(tmp_path / "logs"), load_fast=False) as tb:
            tb.wait_for(lambda d: len(d.get("runs", [])) == 200, "/data/plugin/gradlens/runs", timeout=300)
            p = open_tab(tb, page, "view=overview")
            assert p.eval_on_selector(".gl-run", "s => s.options.length") == 201
            assert p.text_content(".gl-run-count") == "200 runs"
            navigate(page, lambda: (p.fill(".gl-run-filter", "BF16_SEED_01"), p.press(".gl-run-filter", "Enter")))
            wanted = sorted(n for n in names if "bf16_seed_01" in n)
            options = p.eval_on_selector(".gl-run", "s => [...s.options].map(o => o.value)")
            assert options == [""] + wanted and p.text_content(".gl-run-count") == "%d of 200 runs" % len(wanted)
            shown = p.eval_on_selector_all("tr.gl-run-row", "rows => rows.map(r => r.cells[0].textContent)")
            assert sorted(shown) == wanted
            # Another view keeps the filter, and the run it shows stays listed.
            navigate(page, lambda: p.click("#gl-tab-gradients"))
            listed = p.eval_on_selector(".gl-run", "s => [...s.options].map(o => o.value)")
            assert set(wanted) <= set(listed) and p.eval_on_selector(".gl-run", "s => s.value") in listed
        page.assert_clean()
    finally:
        page.close()


def test_back_undoes_a_zoom_in_the_tab_and_inside_tensorboard(questions, browser):  # noqa: F811
    from tests.support.frontend_page import chart, plot_of

    page = Page(browser)
    try:
        p = open_tab(questions, page, "view=divergence&run=mixed_bfloat16")
        full = plot_of(chart(p, "rel_l2 per step"))["domain"]
        navigate(page, lambda: drag(p, chart(p, "rel_l2 per step"), 40, 100))
        assert "zoom=40-100" in p.evaluate("location.hash") and plot_of(chart(p, "rel_l2 per step"))["domain"] == [40, 100]
        # The address keeps its document (a bare "#..." went to the document's base, plugin/gradlens/).
        assert p.url.startswith(questions.url + "/data/plugin_entry.html?name=gradlens#")
        navigate(page, lambda: p.evaluate("history.back()"))
        assert "zoom" not in p.evaluate("location.hash") and plot_of(chart(p, "rel_l2 per step"))["domain"] == full
        # Inside TensorBoard (the tab in its iframe): Back unzooms, and TensorBoard's address follows.
        p.goto(questions.url + "/#gradlens&p.gradlens.view=divergence&p.gradlens.run=mixed_bfloat16")
        frame = None
        for _ in range(120):
            frame = next((f for f in p.frames if "plugin_entry" in f.url), None)
            if frame is not None and frame.query_selector(".gl-view:not(.gl-pending)"):
                break
            p.wait_for_timeout(500)
        wait_drawn(frame)
        navigate(page, lambda: drag(p, chart(frame, "rel_l2 per step"), 40, 100), frame=frame)
        assert "p.gradlens.zoom=40-100" in p.url
        navigate(page, lambda: frame.evaluate("history.back()"), frame=frame)
        assert "zoom" not in frame.evaluate("location.hash") and "zoom" not in p.url
        assert plot_of(chart(frame, "rel_l2 per step"))["domain"] == full
        page.assert_clean()
    finally:
        page.close()


def test_every_divergence_column_and_metric_says_what_it_is_on_hover(questions, browser):  # noqa: F811
    """Issue 40 item 7: the 17 columns of the Divergence table and the Metric choices, each one line on
    hover, as the runs route serves them with the contract (no copy in the tab)."""
    from tb_gradlens.metadata import explanations
    from tests.support.frontend_page import route

    served = route(questions, "runs")["explanations"]
    assert served == explanations.contract()
    page = Page(browser)
    try:
        p = open_tab(questions, page, "view=divergence&run=measured")
        heads = p.eval_on_selector_all(".gl-sec-gradients table.gl-table th button",
                                       "bs => bs.map(b => [b.textContent.replace(/ [▲▼]$/, ''), b.title])")
        assert len(heads) == 17 and all(title for _, title in heads), heads
        titles = dict(heads)
        assert titles["half_batch_rel_l2"] == explanations.DIVERGENCE["half_batch_rel_l2"]
        assert titles["limit"] == explanations.TABLE["limit"] and titles["× limit"] == explanations.TABLE["ratio"]
        metrics = p.eval_on_selector_all(".gl-metric option", "os => os.map(o => [o.value, o.title])")
        assert metrics and all(title == explanations.DIVERGENCE[m] for m, title in metrics)
        p = open_tab(questions, page, "view=divergence&run=mixed_bfloat16")
        layers = p.eval_on_selector_all(".gl-sec-activations table.gl-table th button", "bs => bs.map(b => b.title)")
        assert len(layers) == 7 and all(layers)
        page.assert_clean()
    finally:
        page.close()

"""Runs from different environments (issue 39): each run's environment is
recorded once and shown (report, the Overview); ``compare`` and the Compare
view say when run A, run B and the noise run differ in it, and then give no
precision verdict.  Three real trainings of the tiny MLP: float32, its noise
run (another seed) and a bfloat16 run compiled by XLA (jit_compile differs)."""

import json
import os

import numpy as np
import pytest

from tests.support.frontend_page import browser, open_tab, page, require_browser, route  # noqa: F401 (fixtures)
from tests.support.readback import source_of
from tb_gradlens import analysis
from tb_gradlens import cli
from tb_gradlens.serving import judgment_json

pytestmark = [pytest.mark.slow]  # trains real models; the view's tests start TensorBoard and Chromium

BATCH = 8
STEPS = 8


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    from evaluation import real_models
    from tb_gradlens.keras import GradLensCallback

    path = str(tmp_path_factory.mktemp("environments") / "logs")
    x, y = real_models.digits(STEPS * BATCH, np.random.default_rng(0))
    for run, policy, seed, jit in (("float32", "float32", 0, False), ("float32_seed1", "float32", 1, False),
                                   ("bf16_xla", "mixed_bfloat16", 0, True)):
        model = real_models.mlp(policy, seed=seed)
        model.compile(optimizer="adam", loss=real_models.SPARSE_CE, jit_compile=jit)
        model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
                  callbacks=[GradLensCallback(os.path.join(path, run), gradient_every=1, compare_every=0)])
    return path


@pytest.fixture(scope="module")
def tensorboard_ready():
    return lambda d: {r["run"] for r in d.get("runs", [])} >= {"float32", "float32_seed1", "bf16_xla"}


def test_compare_says_the_environments_differ_and_gives_no_precision_verdict(logdir, capsys):
    args = ["compare", logdir, "float32", "bf16_xla", "--noise-floor", "float32_seed1", "-q"]
    assert cli.main(args + ["--fail-on", "beyond-noise"]) == cli.EXIT_OK
    text = capsys.readouterr().out
    assert "environment of A: device CPU" in text and "jit_compile False" in text.split("environment of B")[0]
    assert "jit_compile True" in text.split("environment of B")[1].split("\n")[0]
    verdict = [line for line in text.splitlines() if line.startswith("verdict: ")][0]
    assert verdict.startswith("verdict: not a precision verdict: the runs' environments differ "
                              "(jit_compile: A False, B True, noise False)")
    assert cli.main(args + ["--json"]) == cli.EXIT_OK
    answer = json.loads(capsys.readouterr().out)
    assert answer["summary"]["exceeds_noise"] is None
    assert [d["field"] for d in answer["environment_differences"]] == ["jit_compile"]
    # the same environment: compared as before, no difference said
    same = judgment_json.run_comparison_json(analysis.compare_runs(source_of(logdir), "float32", "float32_seed1"))
    assert same["environment_differences"] == [] and "not a precision verdict" not in same["summary"]["verdict"]


def test_the_report_shows_each_runs_environment(logdir, capsys):
    assert cli.main(["report", logdir, "-q"]) == cli.EXIT_OK
    text = capsys.readouterr().out
    blocks = {b.split("\n", 1)[0][4:]: b for b in text.split("\n\n") if b.startswith("run ")}
    assert "jit_compile True" in blocks["bf16_xla"] and "jit_compile False" in blocks["float32"]
    for block in blocks.values():
        assert "environment: device CPU" in block and "replicas 1" in block and "TensorFlow 2." in block


@pytest.mark.browser
@pytest.mark.tensorboard
def test_the_compare_view_says_the_environments_differ(tensorboard, page):
    require_browser()
    answer = route(tensorboard, "compare", run_a="float32", run_b="bf16_xla", noise_run="float32_seed1")
    assert answer["summary"]["exceeds_noise"] is None
    p = open_tab(tensorboard, page, "view=compare&runA=float32&runB=bf16_xla&noise=float32_seed1")
    p.wait_for_selector(".gl-environment-differs", timeout=60000)
    said = p.text_content(".gl-environment-differs")
    assert "jit_compile: A False, B True, noise False" in said and "not a precision verdict" in said
    assert p.get_attribute(".gl-verdict", "data-kind") == "undecided"
    p = open_tab(tensorboard, page, "view=overview")
    p.wait_for_selector(".gl-environment", timeout=60000)
    notes = p.eval_on_selector_all(".gl-environment", "n => n.map(x => x.textContent)")
    assert any(n.startswith("Run bf16_xla: trained on device CPU") and "jit_compile True" in n for n in notes)
    page.assert_clean()

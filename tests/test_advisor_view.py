"""The Advisor view of the GradLens tab in a real browser (Chromium via Playwright)
against a real `tensorboard` process serving an advice written by
``tb_gradlens.advise`` on a model with one bad bfloat16 layer.

A user opening the view sees the bad layer first in the attribution chart,
marked as recommended, the divergence before -> after as the route serves it,
and the code that applies the recommendation.
"""

import numpy as np
import pytest

import real_models
import tb_gradlens
from tb_server import TensorBoardProcess
from test_frontend import PREFIX
from test_frontend import Page
from test_frontend import browser  # noqa: F401 (the fixture)
from test_frontend import open_tab
from test_frontend import screenshot


@pytest.fixture(scope="module")
def advised(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("advisor_view")
    workload = real_models.FAULT_ZOO["advisor_mlp"]
    model = real_models.advisor_mlp("mixed_bfloat16")
    model.compile("sgd", workload.loss)
    result = tb_gradlens.advise(model, workload.data(32, np.random.default_rng(0)),
                                log_dir=str(logdir / "bf16"), step=3)
    return str(logdir), result


def test_the_view_shows_the_bad_layer_first_and_the_code_to_apply(advised, browser):  # noqa: F811
    logdir, result = advised
    page = Page(browser)
    try:
        with TensorBoardProcess(logdir, load_fast=False) as tb:
            answer = tb.wait_for(lambda d: d.get("latest") is not None, PREFIX + "advice?run=bf16", timeout=120)
            p = open_tab(tb, page, "view=advisor&run=bf16")
            rows = p.query_selector_all(".gl-advice-row")
            assert [r.get_attribute("data-unit") for r in rows][0] == "naive_norm"
            assert "gl-advice-recommended" in rows[0].get_attribute("class")
            assert p.text_content(".gl-advice-layers") == "naive_norm"
            latest = answer["latest"]
            shown = float(p.text_content(".gl-advice-after"))
            assert shown == pytest.approx(latest["recommendation"]["after"], rel=1e-3)
            assert float(p.text_content(".gl-advice-before")) == pytest.approx(latest["before"], rel=1e-3)
            code = p.text_content(".gl-advice-code")
            assert code == latest["code"] == result.code()
            assert 'model.get_layer("naive_norm").dtype_policy = "float32"' in code
            screenshot(page, "advisor")
        page.assert_clean()
    finally:
        page.close()

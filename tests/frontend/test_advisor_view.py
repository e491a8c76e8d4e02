"""The Advisor view of the GradLens tab in a real browser (Chromium via Playwright)
against a real `tensorboard` process serving an advice written by
``tb_gradlens.advise`` on a model with one bad bfloat16 layer.

A user opening the view sees the bad layer first in the attribution chart,
marked as recommended, the harm index before -> after as the route serves it,
the line of code that applies the recommendation with a Copy button, the bars
on a log axis with its ticks and the tolerance labelled; an advice written
before the harm index (metric gradient_rel_l2) still shows; the Overview
says which runs have advice.
"""

import json
import os


import numpy as np
import pytest

from evaluation import real_models
import tb_gradlens
from tests.support.tb_server import TensorBoardProcess
from tests.support.frontend_page import PREFIX
from tests.support.frontend_page import Page
from tests.support.frontend_page import browser  # noqa: F401 (the fixture)
from tests.support.frontend_page import navigate
from tests.support.frontend_page import open_tab
from tests.support.frontend_page import screenshot

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.tensorboard]  # advises on a real model, in Chromium


# An advice as tb_gradlens wrote it before the harm index: judged by the gradient's rel L2.
OLD_ADVICE = {
    "writer": "tb_gradlens.advise", "metric": "gradient_rel_l2", "reference": "float32", "candidate": "mixed_bfloat16",
    "tolerance": 0.1, "tolerance_basis": "low_precision_gradient_rel_l2", "before": 0.84, "loss_rel_error": 0.02,
    "units": [
        {"name": "dense_in", "layers": ["dense_in"], "classes": ["Dense"], "params": 2112, "step": 3,
         "output_row": "dense_in", "reason": None, "leave_one_out": 0.8, "one_at_a_time": 0.01,
         "output_total": 0.01, "output_born": 0.01, "output_inherited": 0.0},
        {"name": "naive_norm", "layers": ["naive_norm"], "classes": ["NaiveVarianceNorm"], "params": 0, "step": 3,
         "output_row": "naive_norm", "reason": None, "leave_one_out": 0.02, "one_at_a_time": 0.83,
         "output_total": 0.9, "output_born": 0.88, "output_inherited": 0.01}],
    "recommendation": {"float32": ["naive_norm"], "layers": ["naive_norm"], "met": True, "verifications": 1,
                       "predicted": 0.02, "after": 0.021, "params_16bit_before": 2762, "params_16bit_after": 2762,
                       "params_total": 2762},
    "not_attributable": [], "cost": {"passes": 9, "seconds": 1.0},
}


@pytest.fixture(scope="module")
def advised(tmp_path_factory):
    import tensorflow as tf

    from tb_gradlens.writing import summary_ops

    logdir = tmp_path_factory.mktemp("advisor_view")
    workload = real_models.FAULT_ZOO["advisor_mlp"]
    model = real_models.advisor_mlp("mixed_bfloat16")
    model.compile("sgd", workload.loss)
    result = tb_gradlens.advise(model, workload.data(32, np.random.default_rng(0)),
                                log_dir=str(logdir / "bf16"), step=3)
    writer = tf.summary.create_file_writer(os.path.join(str(logdir), "old_advice"))
    with writer.as_default():
        summary_ops.advice(json.loads(json.dumps(OLD_ADVICE)), step=3)
    writer.close()
    return str(logdir), result


def test_the_view_shows_the_bad_layer_first_and_the_code_to_apply(advised, browser):  # noqa: F811
    logdir, result = advised
    page = Page(browser)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    try:
        with TensorBoardProcess(logdir, load_fast=False) as tb:
            answer = tb.wait_for(lambda d: d.get("latest") is not None, PREFIX + "advice?run=bf16", timeout=120)
            tb.wait_for(lambda d: d.get("latest") is not None, PREFIX + "advice?run=old_advice", timeout=120)
            latest = answer["latest"]
            assert latest["metric"] == "harm_index"
            p = open_tab(tb, page, "view=advisor&run=bf16")
            rows = p.query_selector_all(".gl-advice-row:not(.gl-advice-axis)")
            assert [r.get_attribute("data-unit") for r in rows][0] == "naive_norm"
            assert "gl-advice-recommended" in rows[0].get_attribute("class")
            # The bars are each unit's harm index alone in 16 bits, as the route serves it.
            naive = next(u for u in latest["units"] if u["name"] == "naive_norm")
            assert float(rows[0].get_attribute("data-value")) == pytest.approx(naive["harm_alone"])
            # naive_norm and the Dense whose bfloat16 output it reads (values of mean 30 held to 0.125)
            assert p.text_content(".gl-advice-layers") == "naive_norm, dense_in"
            shown = float(p.text_content(".gl-advice-after"))
            assert shown == pytest.approx(latest["recommendation"]["after"], rel=1e-3)
            assert float(p.text_content(".gl-advice-before")) == pytest.approx(latest["before"], rel=1e-3)
            # The row worst off before and after, by name.
            before_line = p.text_content(".gl-advice-before-line")
            assert latest["worst_before"]["row"] in before_line
            assert latest["recommendation"]["worst_after"]["row"] in p.text_content(".gl-advice-met")
            # The bars have an axis: a label per power of ten, and the tolerance's tick labelled.
            ticks = p.locator(".gl-advice-axis .gl-advice-tick:not(.gl-advice-tolerance-label)").all_text_contents()
            assert len(ticks) >= 3 and "100" in ticks
            assert p.text_content(".gl-advice-tolerance-label") == "tolerance 1"
            # The one line that applies it, and a Copy button that copies it.
            line = p.text_content(".gl-advice-code")
            assert line == 'tb_gradlens.keep_in_float32(model, ["naive_norm", "dense_in"])' and line in latest["code"]
            assert latest["code"] == result.code()
            p.click(".gl-copy")
            assert p.evaluate("navigator.clipboard.readText()") == line
            assert 'model.get_layer("naive_norm").dtype_policy = "float32"' in p.text_content(".gl-advice-code-all")
            screenshot(page, "advisor")
            # Older advice (gradient rel L2) still shows, said in its own metric.
            p = open_tab(tb, page, "view=advisor&run=old_advice")
            assert "gradient rel L2" in p.text_content(".gl-advice-met")
            assert p.text_content(".gl-advice-layers") == "naive_norm"
            assert p.text_content(".gl-advice-tolerance-label") == "tolerance 0.1"
            # The Overview says which runs have advice, and opens it.
            p = open_tab(tb, page, "view=overview")
            entry = p.locator(".gl-advice-run[data-run='bf16']")
            assert entry.text_content() == "bf16: keep naive_norm, dense_in in float32"  # the fourth answer, in a few words
            navigate(page, lambda: entry.click())
            assert p.eval_on_selector(".gl-tabs [aria-selected=true]", "b => b.textContent") == "Advisor"
        page.assert_clean()
    finally:
        page.close()

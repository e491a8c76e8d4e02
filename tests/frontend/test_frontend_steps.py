"""The tab on the steps of issues 26 and 27, in Chromium against a real
tensorboard: a float16 run's loss scale and skipped updates beside its
gradient charts (info, not an error), where the optimizer's own step falls
behind, the replay verdict of a NaN step, and a step offset said in the
Overview; every number as the routes give it."""

import os

import numpy as np
import pytest

from tests.support.frontend_page import browser, open_tab, page, require_browser, route, screenshot  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.tensorboard]  # trains real models, in Chromium

BATCH = 8


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    require_browser()
    import keras

    from evaluation import real_models
    from tb_gradlens.keras import GradLensCallback

    path = str(tmp_path_factory.mktemp("steps") / "logs")
    model = real_models.vit("mixed_float16")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    x, y = real_models.unnormalized_images(10 * BATCH)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
              callbacks=[GradLensCallback(os.path.join(path, "fp16"), gradient_every=2, compare_every=0)])

    rng = np.random.default_rng(0)
    x = rng.normal(size=(5 * BATCH, 4, 16)).astype(np.float32)
    x[3 * BATCH:4 * BATCH] *= 300.0
    y = rng.integers(0, 3, 5 * BATCH).astype(np.int32)
    model = real_models.unscaled_attention_logits("mixed_float16")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
              callbacks=[GradLensCallback(os.path.join(path, "nan"), gradient_every=1, compare_every=0)])

    for seed in (0, 1):  # two trainings in one directory: the second continues its steps
        keras.utils.set_random_seed(seed)
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3, name="dense")], name="net")
        model.compile(optimizer="sgd", loss="mse")
        model.fit(np.ones((8, 6), np.float32), np.ones((8, 3), np.float32), batch_size=4, verbose=0,
                  callbacks=[GradLensCallback(os.path.join(path, "offset"), gradient_every=1, compare_every=0)])
    return path


@pytest.fixture(scope="module")
def tensorboard_ready():
    """When conftest.py's ``tensorboard`` on this logdir is ready: the three runs."""
    return lambda d: {r["run"] for r in d.get("runs", [])} >= {"fp16", "nan", "offset"}


def _tag(tb, run, kind):
    runs = {r["run"]: r for r in route(tb, "runs")["runs"]}
    (tag,) = [t["tag"] for t in runs[run]["tags"] if t["kind"] == kind]
    return tag


def test_loss_scale_skips_and_the_optimizer_step_are_shown_beside_the_gradients(tensorboard, page):
    tb = tensorboard
    series = route(tb, "series", run="fp16", tag=_tag(tb, "fp16", "optimizer_step"))
    columns = series["columns"]
    value = {c: [float(v) for v in series["values"][columns.index(c)][0]] for c in columns}
    steps = series["steps"]
    skips = [s for s, k in zip(steps, value["skipped"]) if k == 1]
    assert skips  # the unnormalized pixels overflow float16 at the start
    alerts = route(tb, "alerts", run="fp16")["alerts"]
    assert [a for a in alerts if a["severity"] == "error"] == []

    p = open_tab(tb, page, "view=gradients&run=fp16")
    p.wait_for_selector(".gl-loss-scale", timeout=60000)
    text = p.text_content(".gl-loss-scale")
    assert text.startswith("Loss scale: 32768 → %s;" % ("%g" % value["next_loss_scale"][-1]))
    assert "%d skipped update(s) at steps %s" % (len(skips), ", ".join(map(str, skips))) in text
    assert "info, not an error" in text
    lag = p.text_content(".gl-step-lag")
    behind = [s for s, i in zip(steps, value["iteration"]) if s != i]
    assert behind, (steps, value["iteration"])  # a record after the skip
    assert "falls behind from step %d" % behind[0] in lag
    assert "step %d is optimizer step %d." % (steps[-1], value["iteration"][-1]) in lag
    assert p.locator("figure.gl-chart", has=p.locator(".gl-chart-title", has_text="loss scale")).count() == 1
    screenshot(page, "gradients-loss-scale")

    p = open_tab(tb, page, "view=overview&run=fp16")
    codes = p.eval_on_selector_all(".gl-alert .gl-alert-code", "n => n.map(x => x.textContent)")
    assert "loss_scale_skip" in codes and "nonfinite" not in codes
    page.assert_clean()


def test_the_replay_verdict_of_a_nan_step_is_shown(tensorboard, page):
    tb = tensorboard
    alerts = route(tb, "alerts", run="nan")["alerts"]
    (replay,) = [a for a in alerts if a["code"] == "nonfinite" and a["view"]["name"] == "nonfinite_replay"]
    detail = replay["details"][0]["replay"]
    assert detail["verdict"] == "precision" and detail["layer"] == "attention_logits"

    p = open_tab(tb, page, "view=gradients&run=nan")
    p.wait_for_selector(".gl-replay-verdict", timeout=60000)
    assert p.text_content(".gl-replay-step") == str(replay["step_first"])
    assert p.text_content(".gl-replay-verdict") == "16-bit precision: float32 is finite here"
    assert "the output of attention_logits" in p.text_content(".gl-replay-where")
    screenshot(page, "gradients-nan-replay")

    p = open_tab(tb, page, "view=overview&run=nan")
    texts = p.eval_on_selector_all(".gl-alert .gl-alert-text", "n => n.map(x => x.textContent)")
    assert any("16-bit precision: float32 is finite here" in t and "attention_logits" in t for t in texts)
    page.assert_clean()


def test_a_step_offset_is_said_in_the_overview(tensorboard, page):
    tb = tensorboard
    (headline,) = [h for h in route(tb, "overview")["runs"] if h["run"] == "offset"]
    (offset,) = headline["step_offsets"]
    p = open_tab(tb, page, "view=overview")
    notes = p.eval_on_selector_all(".gl-step-offset", "n => n.map(x => x.textContent)")
    assert notes == ["Run offset: from step %d the records are at train step + %d (the optimizer restarted "
                     "below steps this run already holds, so the run's steps continue)." % (offset["step"],
                                                                                            offset["offset"])]
    page.assert_clean()

"""Every GradLens route through a real `tensorboard` process, Python loader and Rust data server."""

import json
import urllib.parse

import numpy as np
import pytest

import gradlens_logs as logs
from tb_server import TensorBoardProcess

PREFIX = "/data/plugin/gradlens/"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    return logs.write_logdir(str(tmp_path_factory.mktemp("e2e") / "logs"))


def url(route, **params):
    return PREFIX + route + ("?" + urllib.parse.urlencode(params) if params else "")


def number(v):
    return float(v) if not isinstance(v, str) else float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[v])


@pytest.mark.parametrize("load_fast", [False, True], ids=["python_loader", "rust_data_server"])
def test_every_route_through_tensorboard(logdir, load_fast):
    with TensorBoardProcess(logdir, load_fast=load_fast) as tb:
        listing = tb.wait_for(lambda d: "gradlens" in d, "/data/plugins_listing")
        assert listing["gradlens"]["enabled"] is True
        assert listing["gradlens"]["tab_name"] == "GradLens"
        # Wait until every run is loaded in full.
        runs = tb.wait_for(
            lambda d: {r["run"]: max((t["max_step"] or 0) for t in r["tags"]) for r in d["runs"]}
            == {"f32": 5, "bf16": 7, "noise": 5},
            url("runs"),
        )["runs"]
        f32 = {t["kind"]: t for t in next(r for r in runs if r["run"] == "f32")["tags"]}
        assert f32[None]["tag"] == logs.FUTURE_TAG and "newer" in f32[None]["error"]

        # series: every step (samples_per_plugin raised by the loader), values vs NumPy.
        series = tb.get_json(url("series", run="f32", tag=f32["grad_stats"]["tag"], columns="max_abs,nan_count"))
        assert series["steps"] == logs.F32_STEPS
        for s, step in enumerate(logs.F32_STEPS):
            kernel, bias, _ = logs.gradients_at("f32", step)
            want = np.abs(kernel.astype(np.float64)).max()
            assert number(series["values"][0][0][s]) == pytest.approx(want, rel=1e-6)
            assert number(series["values"][1][1][s]) == float(np.isnan(bias).sum())
        status, ctype, body = tb.get(url("series", run="f32", tag=logs.FUTURE_TAG))
        assert status == 400 and ctype.startswith("text/plain") and b"upgrade" in body
        assert tb.get(url("series", run="nope", tag="x"))[0] == 404

        dtypes = tb.get_json(url("dtypes", run="f32"))
        assert dtypes["maps"][0]["map"] == logs.DTYPE_MAP

        scalars = tb.get_json(url("scalars", run="f32", tag="loss"))
        np.testing.assert_allclose(
            scalars["values"], [np.float32(logs.loss_at("f32", s)) for s in logs.F32_STEPS], rtol=1e-7
        )

        alerts = tb.get_json(url("alerts"))
        codes = {(a["run"], a["code"]): a for a in alerts["alerts"]}
        assert codes[("f32", "nonfinite")]["step_first"] == logs.NAN_STEP
        assert codes[("f32", "bf16_divergence")]["step_first"] == 3
        assert [e["tag"] for e in alerts["errors"]] == [logs.FUTURE_TAG]

        overview = {r["run"]: r for r in tb.get_json(url("overview"))["runs"]}
        assert overview["f32"]["first_nonfinite_step"] == logs.NAN_STEP
        worst = max(float(logs.divergence_at(step)[0, 0]) for step in logs.F32_STEPS)
        assert overview["f32"]["worst_divergence"]["value"] == pytest.approx(worst, rel=1e-6)

        compare = tb.get_json(url("compare", run_a="f32", run_b="bf16", noise_run="noise", kind="scalar", tag="loss"))
        a = np.array([np.float32(logs.loss_at("f32", s)) for s in logs.F32_STEPS], np.float64)
        b = np.array([np.float32(logs.loss_at("bf16", s)) for s in logs.F32_STEPS], np.float64)
        np.testing.assert_allclose(compare["rel_difference"], (b - a) / np.abs(a), rtol=1e-9)
        assert compare["only_in_b"] == [6, 7] and compare["summary"]["exceeds_noise"] is True

        status, ctype, body = tb.get(PREFIX + "static/index.js")
        assert status == 200 and "javascript" in ctype
        status, _, body = tb.get(url("compare", run_a="f32"))
        assert status == 400 and b"Traceback" not in body
        json.loads(tb.get(url("runs"))[2])  # still serving

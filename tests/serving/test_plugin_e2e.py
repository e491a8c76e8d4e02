"""Every GradLens route through a real `tensorboard` process, Python loader and Rust data server."""

import json
import urllib.parse

import numpy as np
import pytest

from tests.support import gradlens_logs as logs
from tests.support.tb_server import TensorBoardProcess

pytestmark = [pytest.mark.slow, pytest.mark.tensorboard]  # real TensorBoard processes

PREFIX = "/data/plugin/gradlens/"


@pytest.fixture(scope="module")
def logdir(gradlens_logdir):
    return gradlens_logdir  # conftest.py: written once per session


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
        assert compare["only_in_b"] == [6, 7] and compare["summary"]["exceeds_noise"] is None  # too few steps

        status, ctype, body = tb.get(PREFIX + "static/index.js")
        assert status == 200 and "javascript" in ctype
        status, _, body = tb.get(url("compare", run_a="f32"))
        assert status == 400 and b"Traceback" not in body
        json.loads(tb.get(url("runs"))[2])  # still serving


@pytest.fixture(scope="module")
def long_names_logdir(tmp_path_factory):
    from tests.support import hostile_logs

    logdir = tmp_path_factory.mktemp("hostile_regex") / "logs"
    tag = hostile_logs.long_names_run(str(logdir / "long"))
    return str(logdir), tag


@pytest.mark.parametrize("load_fast", [False, True], ids=["python_loader", "rust_data_server"])
def test_a_hostile_rows_pattern_does_not_block_the_server(long_names_logdir, load_fast):
    """``^(\\w+)+!`` against 62-character names backtracks 2^62 times in Python's
    ``re`` and, holding the GIL, froze every route of the server.  Each request
    below must come back before its client gives up (60 s; a request to a free
    server takes well under a second): the hostile one with its true answer
    (no name has a '!'), and the others sent while it runs."""
    import threading

    from tests.support import hostile_logs

    logdir, tag = long_names_logdir
    with TensorBoardProcess(logdir, load_fast=load_fast) as tb:
        tb.wait_for(lambda d: [r["run"] for r in d["runs"]] == ["long"], url("runs"), timeout=90)
        answers = {}

        def hostile():
            answers["hostile"] = tb.get(url("series", run="long", tag=tag, rows=hostile_logs.HOSTILE_PATTERN,
                                            columns="count"), timeout=60)

        thread = threading.Thread(target=hostile)
        thread.start()
        others = [tb.get(url(route), timeout=60) for route in ("runs", "overview", "alerts")]
        thread.join(120)
        assert not thread.is_alive() and "hostile" in answers
        status, _, body = answers["hostile"]
        assert status == 200 and json.loads(body)["rows"] == [], body[:300]
        assert [s for s, _, _ in others] == [200, 200, 200]
        # A match is still found (linear time), and an absurd count is a clear 400, not an HTML 500.
        found = tb.get_json(url("series", run="long", tag=tag, rows=r"^(\w+)+3_k", columns="count"))
        assert found["rows"] == [hostile_logs.LONG_NAMES[3]]
        status, ctype, body = tb.get(url("series", run="long", tag=tag, rows="a{99999999999}"))
        assert status == 400 and ctype.startswith("text/plain") and b"too large" in body

"""GradLens routes over a Werkzeug test client on TensorBoardWSGI with a real data provider."""

import json

import numpy as np
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tests.support import gradlens_logs as logs
from tb_gradlens import analysis
from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.serving import gradlens_plugin
from tb_gradlens.serving import health
from tb_gradlens.serving import json_encoding
from tb_gradlens.serving import routes_impl
from tb_gradlens.serving import run_listing
from tests.support.plugin_client import PREFIX
from tests.support.plugin_client import CountingProvider
from tests.support.plugin_client import client  # noqa: F401 - fixture
from tests.support.plugin_client import get
from tests.support.plugin_client import get_json
from tests.support.plugin_client import logdir  # noqa: F401 - fixture
from tests.support.plugin_client import make_provider
from tests.support.plugin_client import number
from tests.support.plugin_client import provider  # noqa: F401 - fixture
from tests.support.plugin_client import tag_of


def test_runs_lists_kinds_errors_and_scalars(client):
    runs = {r["run"]: r for r in get_json(client, "runs")["runs"]}
    assert sorted(runs) == ["bf16", "f32", "noise"]
    f32 = {t["tag"]: t for t in runs["f32"]["tags"]}
    kinds = sorted(t["kind"] for t in f32.values() if t["kind"])
    assert kinds == sorted(["grad_stats", "grad_histogram", "divergence", "update_stats", "dtypes"])
    future = f32[logs.FUTURE_TAG]
    assert future["kind"] is None and "newer" in future["error"] and "upgrade" in future["error"]
    stats = [t for t in f32.values() if t["kind"] == "grad_stats"][0]
    assert stats["rows"] == list(logs.VARIABLES)
    assert stats["max_step"] == logs.F32_STEPS[-1]
    assert runs["f32"]["scalars"] == ["loss"]
    # bf16 gradients give another digest, hence another tag of the same kind.
    assert tag_of(client, "bf16", "grad_stats") != stats["tag"]


def test_runs_tell_the_tab_names_comparisons_and_precisions(client):
    """What the tab is told instead of keeping copies (docs/ROUTES.md): each tag's
    name, each comparison's resolved sides and rank, each run's precision, the
    low-precision dtypes; the health answer's status codes."""
    answer = get_json(client, "runs")
    assert answer["low_precision_dtypes"] == list(float_formats.LOW_PRECISION)
    runs = {r["run"]: r for r in answer["runs"]}
    for run in runs.values():
        for t in run["tags"]:
            assert t["name"] == (metadata.tag_name(t["tag"], t["kind"]) if t["kind"] else t["tag"])
            assert t["kind"] is None or t["tag"] == "%s/%s/%s" % (t["name"], t["kind"], t["tag"].rsplit("/", 1)[1])
            assert ("compared" in t) == (t["kind"] in run_listing.COMPARISON_KINDS)
    divergence = [t for t in runs["f32"]["tags"] if t["kind"] == "divergence"][0]
    info = records.read_comparison(metadata.RecordMetadata("divergence", divergence["rows"], [],
                                                           divergence["extras"]))
    assert divergence["compared"]["reference"] == info.reference.compute_dtype
    assert divergence["compared"]["candidate"] == info.candidate.compute_dtype
    assert divergence["compared"]["low_precision"] is (info.candidate.compute_dtype in float_formats.LOW_PRECISION)
    for run in runs.values():
        assert run["precision"] == run_listing.run_precision(run["run"], run["tags"])
    assert runs["bf16"]["precision"] == "low"
    health_answer = get_json(client, "health", run="f32", tag=tag_of(client, "f32", "grad_stats"))
    assert health_answer["status_codes"] == {"ok": health.OK, "dead": health.DEAD, "none": health.NONE,
                                             "nonfinite": health.NONFINITE}


def test_comparisons_are_ranked_and_runs_told_their_precision():
    rank = run_listing.comparison_rank
    assert [rank("precision", "float32", "bfloat16"), rank("precision", "float32", "float16"),
            rank("precision", "float64", "mixed"), rank("precision", "float64", "float32"),
            rank("precision", "float32", None), rank("replica_vs_mean", "float32", "bfloat16")] == [0, 1, 2, 3, 5, 9]
    low = {"compared": {"low_precision": True}}
    assert [run_listing.run_precision(name, tags) for name, tags in [
        ("a", [low]), ("BF16_run", []), ("half", []), ("fp32", []), ("F32-seed1", []), ("model", []),
        ("f32", [{"compared": None}, {"kind": "grad_stats"}])]] == ["low", "low", "low", "float32", "float32", None,
                                                                     "float32"]
    assert metadata.tag_name("a/b_vs_c/divergence/1234abcd", "divergence") == "a/b_vs_c"
    assert metadata.tag_name("plain", "divergence") == "plain" and metadata.tag_name("x/y/z", None) == "x/y/z"


def test_series_values_match_numpy_float64(client):
    tag = tag_of(client, "f32", "grad_stats")
    data = get_json(client, "series", run="f32", tag=tag)
    assert data["kind"] == "grad_stats"
    assert data["steps"] == logs.F32_STEPS
    assert len(data["wall_times"]) == len(logs.F32_STEPS)
    assert data["columns"] == list(metadata.GRAD_STATS_COLUMNS)
    values = data["values"]  # [column][row][step]
    for s, step in enumerate(logs.F32_STEPS):
        for r, grad in enumerate(logs.gradients_at("f32", step)):
            expected = logs.expected_stats(grad, int(np.prod(logs.SHAPES[r])))
            for c, column in enumerate(data["columns"]):
                got = number(values[c][r][s])
                want = np.float64(np.float32(expected[column]))
                if np.isnan(want):
                    assert np.isnan(got), (step, r, column)
                else:
                    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-30, err_msg=column)
    # The None gradient's value statistics travel as the string "NaN".
    assert values[0][2][0] == "NaN"


def test_series_selection(client):
    tag = tag_of(client, "f32", "grad_stats")
    data = get_json(
        client, "series", run="f32", tag=tag, columns="nan_count,mean", rows="^dense/", step_min=1, step_max=4
    )
    assert data["rows"] == ["dense/kernel", "dense/bias"]
    assert data["columns"] == ["nan_count", "mean"]
    assert data["steps"] == [1, 2, 3, 4]
    nan_counts = [[number(v) for v in row] for row in data["values"][0]]
    assert nan_counts == [[0, 0, 0, 0], [0, 0, 1, 0]]  # bias NaN at step 3
    bias = [logs.gradients_at("f32", s)[1].astype(np.float64) for s in (1, 2, 3, 4)]
    np.testing.assert_allclose(
        [number(v) for v in data["values"][1][1]], [np.nanmean(b) for b in bias], rtol=1e-6
    )
    # Exact names (repeatable) and thinning that keeps the last step.
    status, _, body = get(client, "series", run="f32", tag=tag, row="frozen")
    assert status == 200 and json.loads(body)["rows"] == ["frozen"]
    data = get_json(client, "series", run="f32", tag=tag, max_steps=3, columns="count")
    assert data["steps"][-1] == logs.F32_STEPS[-1] and data["steps"][0] == 0 and len(data["steps"]) == 3
    assert [number(v) for v in data["values"][0][0]] == [6.0, 6.0, 6.0]


@pytest.mark.parametrize(
    "params, status",
    [
        ({"run": "f32"}, 400),  # no tag
        ({"tag": "x"}, 400),  # no run
        ({"run": "nope", "tag": "x"}, 404),
        ({"run": "f32", "tag": "nope"}, 404),
        ({"run": "f32", "tag": logs.FUTURE_TAG}, 400),
        ({"run": "f32", "tag": "GS", "row": "nope"}, 404),
        ({"run": "f32", "tag": "GS", "rows": "("}, 400),
        ({"run": "f32", "tag": "GS", "columns": "nope"}, 400),
        ({"run": "f32", "tag": "GS", "step_min": "x"}, 400),
        ({"run": "f32", "tag": "GS", "max_steps": "0"}, 400),
        ({"run": "f32", "tag": "DT"}, 400),  # a dtypes record is not a series
    ],
)
def test_series_errors_are_400_or_404_text(client, params, status):
    params = dict(params)
    if params.get("tag") == "GS":
        params["tag"] = tag_of(client, "f32", "grad_stats")
    if params.get("tag") == "DT":
        params["tag"] = tag_of(client, "f32", "dtypes")
    code, ctype, body = get(client, "series", **params)
    assert code == status, body
    assert ctype.startswith("text/plain")


@pytest.mark.parametrize(
    "pattern, why",
    [
        ("a{99999999999}", "repetition number is too large"),  # was OverflowError -> HTML 500
        ("(dense)\\1", "backreferences are not supported"),
        ("(?<=dense)/kernel", "lookahead/lookbehind"),
        ("dense/k*+", "possessive"),
        ("(x{60}){90}", "pattern too large"),
        ("x" * 1001, "at most 1000"),
    ],
    ids=["huge_count", "backreference", "lookbehind", "possessive", "too_many_states", "too_long"],
)
def test_refused_rows_patterns_are_a_clear_400(client, pattern, why):
    code, ctype, body = get(client, "series", run="f32", tag=tag_of(client, "f32", "grad_stats"), rows=pattern)
    assert code == 400 and ctype.startswith("text/plain"), body[:300]
    assert why in body and "Traceback" not in body


def test_rows_patterns_keep_python_regex_meaning(client):
    tag = tag_of(client, "f32", "grad_stats")
    for pattern, rows in [("^dense/", ["dense/kernel", "dense/bias"]), ("(?i)KERNEL$", ["dense/kernel"]),
                          (r"\bfro", ["frozen"]), ("^(\\w+)+!", []), ("a|^frozen$", ["dense/bias", "frozen"]),
                          ("dense/(?:b|k)[a-z]{3,5}", ["dense/kernel", "dense/bias"])]:
        assert get_json(client, "series", run="f32", tag=tag, rows=pattern, columns="count")["rows"] == rows, pattern


def test_divergence_series_and_cache(client, provider):
    tag = tag_of(client, "f32", "divergence")
    before = provider.reads
    data = get_json(client, "series", run="f32", tag=tag, columns="rel_l2")
    assert data["extras"]["candidate"] == logs.CANDIDATE
    want = np.array([logs.divergence_at(s)[:, 0] for s in logs.F32_STEPS]).T
    np.testing.assert_array_equal(np.float32([[number(v) for v in row] for row in data["values"][0]]), want)
    get_json(client, "series", run="f32", tag=tag, columns="cosine")
    # At most one read for both requests: the second is served from the cache.
    assert provider.reads - before <= 1


def test_dtypes_and_scalars(client):
    data = get_json(client, "dtypes", run="f32")
    assert data["tag"] == tag_of(client, "f32", "dtypes")
    assert [m["step"] for m in data["maps"]] == [0]
    assert data["maps"][0]["map"] == logs.DTYPE_MAP
    assert get(client, "dtypes", run="bf16")[0] == 404
    assert get(client, "dtypes")[0] == 400
    data = get_json(client, "scalars", run="bf16", tag="loss")
    assert data["steps"] == logs.BF16_STEPS
    np.testing.assert_allclose(
        data["values"], [np.float32(logs.loss_at("bf16", s)) for s in logs.BF16_STEPS], rtol=1e-7
    )
    assert get(client, "scalars", run="bf16", tag="nope")[0] == 404
    assert get(client, "scalars", run="bf16")[0] == 400


def test_alerts_name_run_step_and_variables_and_keep_serving_past_a_bad_tag(client):
    data = get_json(client, "alerts")
    assert {"run": "f32", "tag": logs.FUTURE_TAG} in [
        {"run": e["run"], "tag": e["tag"]} for e in data["errors"]
    ]
    by_code = {}
    for a in data["alerts"]:
        by_code.setdefault((a["run"], a["code"]), a)
        assert a["severity"] in ("error", "warning", "info")
        assert a["explanation"] and a["fix"] and a["view"]["run"] == a["run"]
    nonfinite = by_code[("f32", "nonfinite")]
    assert (nonfinite["step_first"], nonfinite["variables"]) == (logs.NAN_STEP, ["dense/bias"])
    assert nonfinite["severity"] == "error"
    assert by_code[("f32", "none_gradient")]["variables"] == ["frozen"]
    for run in ("bf16", "noise"):
        assert by_code[(run, "none_gradient")]["variables"] == ["frozen"]
    # rel_l2 = 0.2 * step of dense/kernel exceeds its limit 0.53 first at step 3.
    div = by_code[("f32", "bf16_divergence")]
    assert (div["step_first"], div["step_last"], div["variables"]) == (3, 5, ["dense/kernel"])
    assert div["view"] == {"name": "divergence", "run": "f32", "tag": tag_of(client, "f32", "divergence"),
                           "column": "rel_l2", "row": "dense/kernel", "step": 3}
    assert div["limit"] == pytest.approx(BF16_GRADIENT_LIMIT)
    ftz = by_code[("f32", "flush_to_zero")]
    assert (ftz["step_first"], ftz["variables"]) == (4, ["dense/bias"])
    lost = by_code[("f32", "lost_update")]
    # The kernel is stored in bfloat16: its updates are really lost.
    assert (lost["step_first"], lost["variables"], lost["severity"]) == (2, ["dense/kernel"], "warning")
    out = by_code[("f32", "bf16_model_output")]
    assert (out["step_first"], out["variables"]) == (0, ["dense"])
    only = get_json(client, "alerts", run="bf16")
    assert {a["run"] for a in only["alerts"]} == {"bf16"} and only["errors"] == []
    assert get(client, "alerts", run="nope")[0] == 404


def test_overview(client):
    runs = {r["run"]: r for r in get_json(client, "overview")["runs"]}
    f32 = runs["f32"]
    worst = f32["worst_divergence"]
    table = np.array([logs.divergence_at(s)[:, 0] for s in logs.F32_STEPS], np.float32)
    assert worst["value"] == pytest.approx(float(table.max()), rel=1e-7)
    assert (worst["row"], worst["step"], worst["metric"]) == ("dense/kernel", 5, "rel_l2")
    assert worst["candidate"] == logs.CANDIDATE and worst["reference"] == logs.REFERENCE
    assert f32["first_nonfinite_step"] == logs.NAN_STEP
    assert f32["first_nonfinite_variables"] == ["dense/bias"]
    assert f32["disconnected_variables"] == ["frozen"]
    assert f32["alert_counts"]["error"] == 1
    assert runs["bf16"]["worst_divergence"] is None and runs["bf16"]["first_nonfinite_step"] is None


def test_compare_scalar_loss_with_noise_floor(client):
    data = get_json(client, "compare", run_a="f32", run_b="bf16", noise_run="noise", kind="scalar", tag="loss")
    assert data["steps"] == logs.F32_STEPS
    assert data["only_in_a"] == [] and data["only_in_b"] == [6, 7]
    a = np.array([np.float32(logs.loss_at("f32", s)) for s in logs.F32_STEPS], np.float64)
    b = np.array([np.float32(logs.loss_at("bf16", s)) for s in logs.F32_STEPS], np.float64)
    n = np.array([np.float32(logs.loss_at("noise", s)) for s in logs.F32_STEPS], np.float64)
    np.testing.assert_allclose(data["a"], a, rtol=1e-12)
    np.testing.assert_allclose(data["difference"], b - a, rtol=1e-9)
    np.testing.assert_allclose(data["ratio"], b / a, rtol=1e-9)
    np.testing.assert_allclose(data["rel_difference"], (b - a) / np.abs(a), rtol=1e-9)
    np.testing.assert_allclose(data["noise"]["rel_difference"], (n - a) / np.abs(a), rtol=1e-6)
    summary = data["summary"]
    assert summary["max_abs_rel_difference"] == pytest.approx(np.max(np.abs((b - a) / a)), rel=1e-9)
    # Six steps logged by all three runs: too few for the windowed rule (3
    # windows of 10 logged steps), so no verdict rests on them.
    assert summary["exceeds_noise"] is None and summary["noise"]["window"] == 10
    assert summary["verdict"].startswith("cannot be judged against the noise floor: 6 step(s)")


def test_compare_record_statistic_across_digests(client):
    data = get_json(client, "compare", run_a="f32", run_b="bf16", kind="grad_stats", row="dense/bias", column="mean")
    assert data["quantity"]["tags"]["a"] == tag_of(client, "f32", "grad_stats")
    assert data["quantity"]["tags"]["b"] == tag_of(client, "bf16", "grad_stats")
    mean = lambda run, s: np.nanmean(logs.gradients_at(run, s)[1].astype(np.float64))  # noqa: E731
    a = np.array([mean("f32", s) for s in logs.F32_STEPS])
    b = np.array([mean("bf16", s) for s in logs.F32_STEPS])
    np.testing.assert_allclose(data["a"], a, rtol=1e-6)
    np.testing.assert_allclose(data["b"], b, rtol=1e-6)
    # The NaN step: f32's mean is over its one finite element, bf16's over two.
    rel = [number(v) for v in data["rel_difference"]]
    assert rel[logs.NAN_STEP] == pytest.approx(0.5)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = (b - a) / np.abs(a)
    np.testing.assert_array_equal(np.isnan(rel), np.isnan(want))
    np.testing.assert_allclose(np.nan_to_num(rel), np.nan_to_num(want), atol=1e-6)


@pytest.mark.parametrize(
    "params, status",
    [
        ({"run_a": "f32"}, 400),
        ({"run_a": "f32", "run_b": "bf16", "kind": "scalar", "tag": "nope"}, 404),
        ({"run_a": "f32", "run_b": "nope", "kind": "scalar", "tag": "loss"}, 404),
        ({"run_a": "f32", "run_b": "bf16", "kind": "grad_stats"}, 400),  # no row
        ({"run_a": "f32", "run_b": "bf16", "kind": "grad_stats", "row": "nope"}, 404),
        ({"run_a": "f32", "run_b": "bf16", "kind": "grad_stats", "row": "frozen", "column": "x"}, 400),
        ({"run_a": "f32", "run_b": "bf16", "kind": "divergence", "row": "dense/bias"}, 404),
        ({"run_a": "f32", "run_b": "bf16", "kind": "bogus", "row": "x"}, 400),
    ],
)
def test_compare_errors(client, params, status):
    code, ctype, body = get(client, "compare", **params)
    assert code == status, body
    assert ctype.startswith("text/plain")


def test_compare_defaults_to_the_training_loss_without_kind_or_tag(client):
    """The route, the CLI and the README agree: no quantity means the loss scalar."""
    for params in ({}, {"kind": "scalar"}, {"kind": "scalar", "tag": ""}):
        data = get_json(client, "compare", run_a="f32", run_b="bf16", **params)
        assert data["quantity"]["tag"] == "loss" and data["note"] is None
        assert data["steps"] == logs.F32_STEPS


# The limit of the 2 gradient rows of the f32 run's bfloat16-vs-float32 record.
BF16_GRADIENT_LIMIT = max(0.1, analysis.DEFAULT_THRESHOLDS.gradient_rounding * 2.0**-8 * np.sqrt(2))


def test_limits_route_gives_the_tolerance_of_each_row(client):
    tag = tag_of(client, "f32", "divergence")
    data = get_json(client, "limits", run="f32", tag=tag)
    assert (data["run"], data["tag"], data["kind"], data["column"]) == ("f32", tag, "divergence", "rel_l2")
    assert data["rows"] == list(logs.DIV_ROWS)
    # Two gradient rows of a bfloat16 candidate written without a stable-rounding pass (format
    # version 1): the depth formula, max(floor 0.1, C u sqrt(2)), u = 2^-8, at every step.
    n_steps = len(data["steps"])
    assert data["limits"] == [[pytest.approx(BF16_GRADIENT_LIMIT)] * n_steps] * 2
    assert data["measured"] == [False, False]
    assert all("bfloat16 rounding" in b for b in data["basis"]) and data["rule"]
    # The alerts use the same limit, and their steps are those the route says are harmed.
    alert = next(a for a in get_json(client, "alerts", run="f32")["alerts"] if a["code"] == "bf16_divergence")
    assert alert["limit"] == data["limits"][0][0]
    row = data["rows"].index(alert["variables"][0])
    assert data["harmed"][row][0] == alert["step_first"]
    for params, status in (({"run": "f32", "tag": "nope"}, 404), ({"run": "nope", "tag": tag}, 404),
                           ({"run": "f32", "tag": tag_of(client, "f32", "grad_stats")}, 400),
                           ({"run": "f32"}, 400)):
        code, ctype, body = get(client, "limits", **params)
        assert code == status, body
        assert ctype.startswith("text/plain")


def test_static_route_refuses_traversal(client):
    assert client.get(PREFIX + "static/index.js").status_code == 200
    for path in ("static/../gradlens_plugin.py", "static/%2e%2e/setup.py", "static//etc/passwd"):
        assert client.get(PREFIX + path).status_code == 404


def test_series_follow_a_growing_logdir(tmp_path):
    import tensorflow as tf

    from tb_gradlens import summary

    variable = tf.Variable([1.0, 2.0], name="w")
    writer = tf.summary.create_file_writer(str(tmp_path / "run"))

    def write(steps):
        with writer.as_default():
            for s in steps:
                summary.gradients([tf.constant([float(s), 0.0])], [variable], step=s, histogram=False)
        writer.flush()

    write(range(3))
    multiplexer, provider = make_provider(str(tmp_path))
    context = base_plugin.TBContext(data_provider=provider, logdir=str(tmp_path))
    c = werkzeug_test.Client(application.TensorBoardWSGI([gradlens_plugin.GradLensPlugin(context)]))
    tag = tag_of(c, "run", "grad_stats")
    assert get_json(c, "series", run="run", tag=tag)["steps"] == [0, 1, 2]
    write(range(3, 5))
    multiplexer.Reload()
    data = get_json(c, "series", run="run", tag=tag, columns="max")
    assert data["steps"] == [0, 1, 2, 3, 4]
    assert [number(v) for v in data["values"][0][0]] == [0.0, 1.0, 2.0, 3.0, 4.0]
    writer.close()


@pytest.mark.parametrize(
    "array",
    [
        np.array([0.1, -2.5e-38, 3.4e38, 1e-45, -0.0, 7.0], np.float32),
        np.array([[np.nan, np.inf], [-np.inf, 1.5]], np.float32),
        np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 7.0,
        np.zeros((2, 0), np.float32),
        np.array(np.nan),
    ],
)
def test_encode_array_round_trips_and_spells_nonfinite(array):
    text = json_encoding.encode_array(array)
    decoded = json.loads(text)

    def to_number(x):
        return [to_number(v) for v in x] if isinstance(x, list) else number(x)

    got = np.array(to_number(decoded), np.float64).reshape(array.shape).astype(array.dtype)
    np.testing.assert_array_equal(got, array)  # exact round trip, NaN == NaN here
    assert "NaN" not in text.replace('"NaN"', "")
    assert "Infinity" not in text.replace('"Infinity"', "").replace('"-Infinity"', "")


# ---------------------------------------------------------------------------
# What one request may cost (issue 16): steps thinned by default, a ceiling
# on max_steps, a cap on the numbers of one answer, one cache entry per logdir.
# ---------------------------------------------------------------------------

LONG_STEPS = 2500


@pytest.fixture(scope="module")
def long_run(tmp_path_factory):
    from tests.support import hostile_logs

    logdir = str(tmp_path_factory.mktemp("long") / "logs")
    hostile_logs.stats_run(logdir + "/long", range(LONG_STEPS), tag="gradients/grad_stats/long")
    multiplexer, inner = make_provider(logdir)
    provider = CountingProvider(inner)
    context = base_plugin.TBContext(data_provider=provider, logdir=logdir)
    return werkzeug_test.Client(application.TensorBoardWSGI([gradlens_plugin.GradLensPlugin(context)])), provider


def test_a_plain_series_request_is_thinned_to_the_default_max_steps(long_run):
    client, _ = long_run
    data = get_json(client, "series", run="long", tag="gradients/grad_stats/long", columns="l2_norm")
    steps = data["steps"]
    assert len(steps) == routes_impl.DEFAULT_MAX_STEPS and data["sampled"] is True
    assert steps[0] == 0 and steps[-1] == LONG_STEPS - 1 and steps == sorted(set(steps))
    assert [number(v) for v in data["values"][0][0]] == [float(s) for s in steps]  # value = step
    full = get_json(client, "series", run="long", tag="gradients/grad_stats/long", columns="l2_norm",
                    max_steps=LONG_STEPS)
    assert full["steps"] == list(range(LONG_STEPS)) and full["sampled"] is False


def test_max_steps_has_a_ceiling_and_an_answer_has_a_size_cap(long_run, monkeypatch):
    client, _ = long_run
    monkeypatch.setattr(routes_impl, "MAX_STEPS", 1000)
    data = get_json(client, "series", run="long", tag="gradients/grad_stats/long", columns="l2_norm",
                    max_steps=10**9)
    assert len(data["steps"]) == 1000 and data["sampled"] is True
    monkeypatch.setattr(routes_impl, "MAX_VALUES", 5000)
    status, ctype, body = get(client, "series", run="long", tag="gradients/grad_stats/long")  # 14 x 1 x 1000
    assert status == 400 and ctype.startswith("text/plain")
    assert "14000 values (1 rows x 14 columns x 1000 steps)" in body and "max_steps=" in body
    assert get(client, "series", run="long", tag="gradients/grad_stats/long", columns="l2_norm")[0] == 200


def test_experiment_ids_of_one_logdir_share_one_cache_entry(long_run):
    client, provider = long_run
    query = {"run": "long", "tag": "gradients/grad_stats/long", "columns": "max", "max_steps": 10}
    before = provider.reads
    for experiment in ("a", "b", "c", ""):
        prefix = ("/experiment/%s" % experiment if experiment else "") + PREFIX
        response = client.get(prefix + "series", query_string=query)
        assert response.status_code == 200, response.get_data(as_text=True)
    assert provider.reads - before <= 1  # read once (or already cached), whatever the URL prefix

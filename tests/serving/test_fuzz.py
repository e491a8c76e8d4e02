"""Property-based fuzzing (hypothesis) of the metadata parser and of the
routes' query parameters.

Properties: parse_plugin_content returns a RecordMetadata or raises
FormatError, nothing else; every route answers 200, 400 or 404 (never a 500)
to any query.  Each test prints how many inputs it tried (visible with -s,
and in the junit XML through record_property).
"""

import json

import pytest
from hypothesis import HealthCheck
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from tests.support import gradlens_logs as logs
from tests.support.plugin_client import PREFIX
from tb_gradlens import metadata

# Fixtures of tests/support/plugin_client.py (a real provider over gradlens_logs' logdir).
from tests.support.plugin_client import client  # noqa: F401
from tests.support.plugin_client import logdir  # noqa: F401
from tests.support.plugin_client import provider  # noqa: F401

pytestmark = [pytest.mark.slow]  # hypothesis: thousands of generated inputs

PARSER_EXAMPLES = 600
ROUTE_EXAMPLES = 150
FUZZ_SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True), st.text(max_size=12)
)
json_value = st.recursive(
    json_leaf, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)
names = st.lists(st.one_of(st.text(max_size=8), json_leaf), max_size=4)
known_columns = st.sampled_from([list(c) for c in metadata.KIND_COLUMNS.values()])
# Near-valid records (then perturbed) reach the deeper checks of validate().
near_valid = st.sampled_from(metadata.KINDS).flatmap(
    lambda kind: st.fixed_dictionaries(
        {
            "version": st.one_of(st.just(metadata.FORMAT_VERSION), st.integers(-1, 3)),
            "kind": st.just(kind),
            "rows": st.one_of(st.lists(st.text(max_size=8), max_size=4), names),
            "columns": st.one_of(st.just(list(metadata.KIND_COLUMNS[kind])), known_columns, names),
        },
        optional={"reference": json_value},
    )
)
record_objects = near_valid | st.fixed_dictionaries(
    {},
    optional={
        "version": st.one_of(st.integers(-2, 3), json_leaf),
        "kind": st.one_of(st.sampled_from(metadata.KINDS), json_leaf),
        "rows": st.one_of(names, json_value),
        "columns": st.one_of(known_columns, names, json_value),
        "reference": json_value,
    },
)


def _check_parse(content):
    try:
        record = metadata.parse_plugin_content(content, tag="t")
    except metadata.FormatError as e:
        assert str(e).startswith("gradlens record 't': ")
        return False
    assert record.kind in metadata.KINDS and record.version <= metadata.FORMAT_VERSION
    metadata.validate(record)
    return True


def test_parser_on_arbitrary_bytes_and_json_objects(record_property):
    tried = {"bytes": 0, "json": 0, "accepted": 0}

    @settings(max_examples=PARSER_EXAMPLES, **FUZZ_SETTINGS)
    @given(st.binary(max_size=200))
    def on_bytes(content):
        tried["bytes"] += 1
        tried["accepted"] += _check_parse(content)

    @settings(max_examples=PARSER_EXAMPLES, **FUZZ_SETTINGS)
    @given(record_objects)
    def on_json(obj):
        tried["json"] += 1
        content = json.dumps(obj, allow_nan=True).encode()
        if _check_parse(content):
            tried["accepted"] += 1
            assert json.loads(metadata.serialize_content(metadata.parse_plugin_content(content)))["kind"] == obj["kind"]

    on_bytes()
    on_json()
    print("\nfuzz parse_plugin_content: %(bytes)d byte strings, %(json)d JSON objects, %(accepted)d accepted" % tried)
    record_property("fuzz_parser_inputs", tried["bytes"] + tried["json"])
    assert tried["bytes"] >= PARSER_EXAMPLES // 2 and tried["json"] >= PARSER_EXAMPLES // 2
    assert tried["accepted"] > 0  # the JSON strategy reaches valid records too


ROUTE_PARAMS = {
    "series": ("run", "tag", "rows", "row", "columns", "step_min", "step_max", "max_steps"),
    "dtypes": ("run", "tag"),
    "scalars": ("run", "tag"),
    "alerts": ("run",),
    "overview": (),
    "runs": (),
    "compare": ("run_a", "run_b", "noise_run", "kind", "tag", "row", "column"),
}
_known_values = ["f32", "bf16", "noise", "loss", "grad_stats", "divergence", "scalar", "l2_norm", "dense/bias",
                 logs.FUTURE_TAG, "-1", "0", "3", "99999999999999999999999999", "1e3", ".*", "(", "[", "\\", "%00"]


def _value():
    return st.one_of(st.sampled_from(_known_values), st.text(max_size=16), st.integers(-(2**64), 2**64).map(str))


@st.composite
def queries(draw):
    route = draw(st.sampled_from(sorted(ROUTE_PARAMS)))
    keys = draw(st.lists(st.sampled_from(ROUTE_PARAMS[route] + ("junk",)), max_size=6))
    params = [(k, draw(_value())) for k in keys]
    return route, params


def test_routes_never_answer_500(client, record_property):  # noqa: F811
    statuses = {}
    # Real tag names make the fuzzer reach the reading code, not only the 404s.
    runs = json.loads(client.get(PREFIX + "runs").get_data(as_text=True))["runs"]
    _known_values.extend(t["tag"] for r in runs for t in r["tags"])

    @settings(max_examples=ROUTE_EXAMPLES * len(ROUTE_PARAMS), **FUZZ_SETTINGS)
    @given(queries())
    def check(query):
        route, params = query
        response = client.get(PREFIX + route, query_string=params)
        status = response.status_code
        statuses[status] = statuses.get(status, 0) + 1
        assert status in (200, 400, 404), (route, params, response.get_data(as_text=True)[:500])
        if status == 200:
            json.loads(response.get_data(as_text=True))
        else:
            assert response.headers["Content-Type"].startswith("text/plain")

    check()
    total = sum(statuses.values())
    print("\nfuzz routes: %d queries, statuses %s" % (total, dict(sorted(statuses.items()))))
    record_property("fuzz_route_queries", total)
    assert total >= ROUTE_EXAMPLES * len(ROUTE_PARAMS) // 2
    assert statuses.get(200, 0) > 0 and statuses.get(400, 0) > 0 and statuses.get(404, 0) > 0


@pytest.mark.parametrize("path", ["static/%2e%2e/gradlens_plugin.py", "static/..%2fgradlens_plugin.py",
                                  "static/%2Fetc%2Fpasswd", "static/..%5c..%5cgradlens_plugin.py",
                                  "static/.%00./x", "static/index.js%00.css"])
def test_static_traversal_variants_are_404(client, path):  # noqa: F811
    assert client.get(PREFIX + path).status_code == 404


def test_static_route_fuzzed_paths(client, record_property):  # noqa: F811
    tried = []
    segment = st.one_of(st.sampled_from(["..", ".", "", "%2e%2e", "%2f", "%5c", "\\", "index.js", "views", "/etc"]),
                        st.text(alphabet="abc./%\\2efc5", max_size=8))

    @settings(max_examples=300, **FUZZ_SETTINGS)
    @given(st.lists(segment, min_size=1, max_size=5))
    def check(parts):
        path = "/".join(parts)
        tried.append(path)
        response = client.get(PREFIX + "static/" + path)
        assert response.status_code in (200, 404), path
        if response.status_code == 200:
            # Only files of the tab's own directory are ever served.
            assert not any(p in ("..", "%2e%2e") for p in parts)

    check()
    print("\nfuzz static paths: %d paths" % len(tried))
    record_property("fuzz_static_paths", len(tried))
    assert len(tried) >= 150


# ---------------------------------------------------------------------------
# Name patterns: tb_gradlens.patterns against Python's re, on generated
# patterns (Python regex syntax) and names.
# ---------------------------------------------------------------------------

PATTERN_EXAMPLES = 1500
_pattern_atoms = st.sampled_from([
    "a", "b", "k", "/", "_", ".", "\\w", "\\W", "\\d", "\\s", "[ab]", "[^a/]", "[a-k]", "[\\d_]", "\\b", "\\B",
    "^", "$", "\\A", "\\Z", "(?i:A)", "\\n", "\\.", "é", "日",
])
generated_patterns = st.recursive(
    _pattern_atoms,
    lambda inner: st.one_of(
        st.tuples(inner, inner).map("".join),
        st.tuples(inner, inner).map(lambda t: "(?:%s|%s)" % t),
        st.tuples(inner, st.sampled_from(["*", "+", "?", "*?", "+?", "??", "{2}", "{0,3}", "{1,}"])).map(
            lambda t: "(%s)%s" % t),
    ),
    max_leaves=8,
)
pattern_names = st.text(alphabet="abkAB/_1 \n.é日", max_size=12)


def test_patterns_agree_with_python_re(record_property):
    import re

    from tb_gradlens import patterns

    tried = {"patterns": 0, "names": 0, "matched": 0}

    @settings(max_examples=PATTERN_EXAMPLES, **FUZZ_SETTINGS)
    @given(generated_patterns, st.sampled_from(["", "(?i)", "(?m)", "(?s)", "(?a)"]), st.lists(pattern_names, max_size=6))
    def check(body, flags, names):
        pattern = flags + body
        expected = re.compile(pattern)  # the generator writes only valid, supported syntax
        got = patterns.compile(pattern).filter(names)
        tried["patterns"] += 1
        tried["names"] += len(names)
        tried["matched"] += len(got)
        assert got == [i for i, n in enumerate(names) if expected.search(n)], (pattern, names)

    check()
    print("\nfuzz patterns vs re: %(patterns)d patterns, %(names)d names, %(matched)d matches" % tried)
    record_property("fuzz_patterns", tried["patterns"])
    assert tried["patterns"] >= PATTERN_EXAMPLES // 2 and tried["matched"] > 0


def test_arbitrary_pattern_text_is_matched_or_refused(record_property):
    """Any text as a pattern: a PatternError (a 400 in the routes) or an answer, never another exception."""
    from tb_gradlens import patterns

    outcomes = {"accepted": 0, "refused": 0}

    @settings(max_examples=PATTERN_EXAMPLES, **FUZZ_SETTINGS)
    @given(st.text(alphabet=st.sampled_from(list("()[]{}?*+|^$\\.-:=!<>PaibdwsZAB0123,x")), max_size=24),
           st.lists(pattern_names, max_size=3))
    def check(pattern, names):
        try:
            patterns.filter_names(pattern, names)
            outcomes["accepted"] += 1
        except patterns.PatternError:
            outcomes["refused"] += 1

    check()
    print("\nfuzz pattern text: %s" % outcomes)
    record_property("fuzz_pattern_text", outcomes)
    assert outcomes["accepted"] > 0 and outcomes["refused"] > 0


# ---------------------------------------------------------------------------
# Record contents: generated metadata extras, dtype maps and lens statuses.
# Readers either accept them or raise the format's error; written into a
# real event file beside a healthy record, no route answers 500 and the
# healthy record is still analysed.
# ---------------------------------------------------------------------------

RECORD_EXAMPLES = 600
ROUTE_RECORD_EXAMPLES = 120
_dtype_names = st.sampled_from(["float32", "bfloat16", "float16", "float64", "mixed", "none", "int8", ""])
_leafish = st.one_of(json_leaf, _dtype_names)
_variants = st.one_of(
    json_value,
    st.fixed_dictionaries({}, optional={k: _leafish for k in ("label", "policy", "compute_dtype", "variable_dtype",
                                                               "device", "jit_compile", "replica")}),
)
_extras = {
    "grad_stats": st.fixed_dictionaries({}, optional={
        "variable_dtypes": st.one_of(st.lists(_leafish, max_size=4), json_value),
        "gradient_dtypes": st.one_of(st.lists(_leafish, max_size=4), json_value),
        "skipped": st.one_of(st.lists(st.fixed_dictionaries({}, optional={k: _leafish for k in ("row", "dtype",
                                                                                             "reason")}),
                                      max_size=3), json_value)}),
    "grad_histogram": st.fixed_dictionaries({}, optional={
        "min_exponent": _leafish,
        "dtype_exponent_limits": st.one_of(json_value, st.dictionaries(_dtype_names, st.dictionaries(
            st.sampled_from(["min_subnormal", "min_normal", "max"]), _leafish, max_size=3), max_size=3))}),
    "update_stats": st.fixed_dictionaries({}, optional={
        "variable_dtypes": st.one_of(st.lists(_leafish, max_size=4), json_value)}),
    "divergence": st.fixed_dictionaries({}, optional={
        "reference": _variants, "candidate": _variants,
        "comparison": st.one_of(st.sampled_from(["precision", "replica_vs_mean"]), json_value),
        "floor_fraction": _leafish, "row_dtypes": st.one_of(st.lists(_leafish, max_size=4), json_value)}),
}
_extras["activation_divergence"] = _extras["divergence"]
_extras["loss_comparison"] = _extras["divergence"]
_layer = st.fixed_dictionaries({}, optional={k: _leafish for k in
                                             ("path", "class", "policy", "compute_dtype", "variable_dtype",
                                              "output_dtype")})
dtype_maps = st.one_of(
    json_value,
    st.fixed_dictionaries({}, optional={
        "layers": st.one_of(st.lists(_layer, max_size=3), json_value),
        "variables": st.one_of(st.lists(st.fixed_dictionaries({}, optional={"path": _leafish, "dtype": _leafish}),
                                        max_size=3), json_value),
        "model_output_dtype": _leafish}),
)
_expectation = st.fixed_dictionaries({}, optional={"kind": st.one_of(st.sampled_from(metadata.KINDS), _leafish),
                                                   "name": _leafish, "every": _leafish, "start": _leafish,
                                                   "stop": _leafish})
lens_statuses = st.one_of(
    json_value,
    st.fixed_dictionaries({"writer": _leafish}, optional={
        "expected": st.one_of(st.lists(_expectation, max_size=3), json_value),
        "unsupported": st.one_of(st.lists(st.fixed_dictionaries({}, optional={
            "what": _leafish, "kinds": st.one_of(st.lists(_leafish, max_size=2), json_value),
            "reason": _leafish, "step": _leafish}), max_size=2), json_value)}),
)
float_kinds = st.sampled_from(sorted(_extras))


@st.composite
def float_records(draw):
    kind = draw(float_kinds)
    rows = draw(st.lists(st.text(max_size=6), min_size=1, max_size=3, unique=True))
    version = draw(st.integers(1, metadata.FORMAT_VERSION))
    content = {"version": version, "kind": kind, "rows": rows,
               "columns": list(metadata.kind_columns(kind, version))}
    content.update(draw(_extras[kind]))
    return content


def test_record_readers_accept_or_raise_the_format_error(record_property):
    from tb_gradlens import records

    tried = {"records": 0, "records_ok": 0, "maps": 0, "maps_ok": 0, "statuses": 0, "statuses_ok": 0}

    @settings(max_examples=RECORD_EXAMPLES, **FUZZ_SETTINGS)
    @given(float_records(), dtype_maps, lens_statuses)
    def check(content, dtype_map, status):
        record = metadata.parse_plugin_content(json.dumps(content).encode(), "t")
        tried["records"] += 1
        try:
            records.validate(record, "t")
            tried["records_ok"] += 1
        except metadata.FormatError as e:
            assert str(e).startswith("gradlens record 't': ")
        for key, reader, payload in (("maps", records.read_dtype_map, dtype_map),
                                     ("statuses", records.read_lens_status, status)):
            tried[key] += 1
            try:
                reader(json.loads(json.dumps(payload)))
                tried[key + "_ok"] += 1
            except ValueError:
                pass

    check()
    print("\nfuzz record contents: %s" % tried)
    record_property("fuzz_record_contents", tried)
    assert all(tried[k] > 0 for k in ("records_ok", "maps_ok", "statuses_ok"))
    assert tried["records_ok"] < tried["records"] and tried["maps_ok"] < tried["maps"]


def test_generated_records_in_real_event_files_never_break_the_routes(tmp_path, record_property):
    import numpy as np

    from tests.support import hostile_logs
    from tests.support.plugin_client import client_for

    statuses = {}
    counter = [0]
    healthy = ("g/grad_stats/ok", hostile_logs.content(metadata.GRAD_STATS, ["w"]),
               lambda step: hostile_logs.stats(1, np.nan if step == 1 else 1.0))

    @settings(max_examples=ROUTE_RECORD_EXAMPLES, **FUZZ_SETTINGS)
    @given(st.one_of(
        float_records().map(lambda c: (c, np.zeros((len(c["rows"]), len(c["columns"])), np.float32))),
        float_records().map(lambda c: (c, np.zeros((len(c["rows"]) + 1, 2), np.float32))),
        st.tuples(st.sampled_from(["dtypes", "lens_status"]), st.one_of(dtype_maps, lens_statuses)).map(
            lambda t: (hostile_logs.content(t[0], []), hostile_logs.json_tensor(t[1]))),
        st.binary(max_size=40).map(lambda b: (hostile_logs.content("dtypes", []), np.array(b, dtype=object))),
    ))
    def check(generated):
        content, tensor = generated
        counter[0] += 1
        logdir = tmp_path / ("l%d" % counter[0])
        hostile_logs.write_records(str(logdir / "run"), [("x/%s/gen" % content["kind"], content, tensor), healthy],
                                   steps=range(2))
        _, client = client_for(str(logdir))
        answers = [client.get(PREFIX + route) for route in ("runs", "alerts", "overview", "dtypes?run=run")]
        answers.append(client.get(PREFIX + "series", query_string={"run": "run", "tag": "x/%s/gen" % content["kind"]}))
        for response in answers:
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            assert response.status_code in (200, 400, 404), response.get_data(as_text=True)[:500]
        alerts = json.loads(answers[1].get_data(as_text=True))["alerts"]
        assert any(a["code"] == "nonfinite" and a["tag"] == "g/grad_stats/ok" for a in alerts)

    check()
    total = sum(statuses.values())
    print("\nfuzz record contents through the routes: %d examples, statuses %s" % (counter[0], statuses))
    record_property("fuzz_record_routes", counter[0])
    assert counter[0] >= ROUTE_RECORD_EXAMPLES // 2 and statuses.get(400, 0) > 0 and total > 0

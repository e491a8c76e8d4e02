"""The routes' JSON encoder: the C fast path and the Python walk agree."""

import json

import numpy as np
import pytest

from tb_gradlens.serving import json_encoding


def _walk(obj):
    parts = []
    json_encoding._encode(obj, parts)
    return "".join(parts)


CASES = [
    {"alerts": [{"run": "a", "step_first": np.int64(3), "value": np.float32(0.1), "ok": np.bool_(True),
                 "rows": ["x", "y\u00e9\"<>"], "ids": np.arange(4, dtype=np.int32)}], "errors": []},
    {"values": np.array([[1.5, np.nan], [np.inf, -np.inf]], np.float32), "n": 2},
    [1, 2.5, None, True, "s", b"bytes", {"k": [float("nan")]}],
    {"deep": [[[[-0.0, 1e-45, 3.4e38]]]], "big": 2**70},
]


@pytest.mark.parametrize("obj", CASES)
def test_fast_and_walk_parse_to_the_same_value(obj):
    fast, walk = json_encoding.encode_json(obj), _walk(obj)
    assert json.loads(fast) == json.loads(walk)
    assert "NaN" not in fast.replace('"NaN"', "")  # non-finite values only as strings
    assert "Infinity" not in fast.replace('"Infinity"', "").replace('"-Infinity"', "")


def test_non_finite_become_strings():
    got = json.loads(json_encoding.encode_json({"a": float("nan"), "b": [np.float64(-np.inf)]}))
    assert got == {"a": "NaN", "b": ["-Infinity"]}


def test_unencodable_is_a_type_error():
    with pytest.raises(TypeError):
        json_encoding.encode_json({"x": object()})

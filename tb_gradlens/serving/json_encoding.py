"""JSON text for gradlens answers: the HTTP routes and ``tb-gradlens --json``.

NaN, +Inf and -Inf become the strings "NaN", "Infinity", "-Infinity" (the
routes' contract, docs/ROUTES.md, as TensorBoard's json_util.Cleanse does
for Python floats); NumPy arrays are formatted in bulk (a single %-format
over all finite values instead of json.dumps of a list).
TensorFlow-free.
"""

import json

import numpy as np

_NONFINITE_TOKENS = ('"NaN"', '"Infinity"', '"-Infinity"')


def _float_token(x):
    if x != x:
        return _NONFINITE_TOKENS[0]
    if x in (float("inf"), float("-inf")):
        return _NONFINITE_TOKENS[1] if x > 0 else _NONFINITE_TOKENS[2]
    return repr(x)


def _nest(tokens, shape):
    """Join a flat list of tokens into nested JSON arrays of ``shape``."""
    for size in reversed(shape[1:]):
        tokens = [",".join(tokens[i : i + size]) for i in range(0, len(tokens), size)]
        tokens = ["[" + t + "]" for t in tokens]
    return "[" + ",".join(tokens) + "]"


def encode_array(array):
    """JSON text of a NumPy array (nested lists), non-finite values as strings.

    float32 (and narrower) values are written with 9 significant digits,
    which round-trips every float32 exactly; float64 with ``repr``.
    """
    array = np.asarray(array)
    if array.dtype.kind == "f":
        if array.ndim == 0:
            return _float_token(float(array))
        if array.size == 0:
            return json.dumps(array.tolist())
        fmt = "%.9g" if array.dtype.itemsize <= 4 else "%r"
        flat = array.ravel()
        finite = np.isfinite(flat)
        if finite.all():
            tokens = [fmt] * flat.size
            values = flat.tolist()
        else:
            token_array = np.full(flat.size, fmt, dtype=object)
            token_array[np.isnan(flat)] = _NONFINITE_TOKENS[0]
            token_array[np.isposinf(flat)] = _NONFINITE_TOKENS[1]
            token_array[np.isneginf(flat)] = _NONFINITE_TOKENS[2]
            tokens = token_array.tolist()
            values = flat[finite].tolist()
        return _nest(tokens, array.shape) % tuple(values)
    if array.dtype.kind in "iub":
        return json.dumps(array.tolist())
    return encode_json(array.tolist())


class EncodedJson(bytes):
    """UTF-8 JSON text, sized for a cache (``nbytes``)."""

    @property
    def nbytes(self):
        return len(self)


def encode_json(obj):
    """JSON text of dicts/lists/str/numbers/None/NumPy arrays and scalars.

    Answers without a non-finite float (most alert and listing answers) go
    through the standard library's C encoder instead of the Python walk
    below, which handles NaN and +-Inf.
    """
    try:
        return _STRICT_ENCODER.encode(obj)
    except (ValueError, TypeError):
        parts = []
        _encode(obj, parts)
        return "".join(parts)


def _plain(obj):
    """json ``default`` hook: NumPy values and bytes as Python values."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "iub":
            raise TypeError("float arrays: the bulk formatter (9 digits for float32)")
        return obj.tolist()
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    raise TypeError("cannot encode %s as JSON" % type(obj).__name__)


# allow_nan=False: a NaN or Inf raises, and the Python walk writes it as a string.
_STRICT_ENCODER = json.JSONEncoder(allow_nan=False, separators=(",", ":"), default=_plain)


def _encode(obj, out):
    if obj is None or obj is True or obj is False:
        out.append({None: "null", True: "true", False: "false"}[obj])
    elif isinstance(obj, str):
        out.append(json.dumps(obj))
    elif isinstance(obj, (bool, np.bool_)):
        out.append("true" if obj else "false")
    elif isinstance(obj, (int, np.integer)):
        out.append(str(int(obj)))
    elif isinstance(obj, (float, np.floating)):
        out.append(_float_token(float(obj)))
    elif isinstance(obj, np.ndarray):
        out.append(encode_array(obj))
    elif isinstance(obj, dict):
        out.append("{")
        for i, (key, value) in enumerate(obj.items()):
            if i:
                out.append(",")
            out.append(json.dumps(str(key)))
            out.append(":")
            _encode(value, out)
        out.append("}")
    elif isinstance(obj, (list, tuple)):
        out.append("[")
        for i, value in enumerate(obj):
            if i:
                out.append(",")
            _encode(value, out)
        out.append("]")
    elif isinstance(obj, bytes):
        out.append(json.dumps(obj.decode("utf-8", "replace")))
    else:
        raise TypeError("cannot encode %s as JSON" % type(obj).__name__)

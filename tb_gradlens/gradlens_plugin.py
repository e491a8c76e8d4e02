"""The GradLens TensorBoard plugin: serves the tab's static files and data.

TensorFlow-free.  Reads only through ``context.data_provider``, so it works
with the Rust data server (``--load_fast=true``) and the Python loader.
"""

import json
import mimetypes
import os
import posixpath

from tensorboard import errors
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
import numpy as np
from werkzeug import wrappers

from tb_gradlens import analysis
from tb_gradlens import metadata
from tb_gradlens import reading

_STATIC_PREFIX = "/static/"
_CONTENT_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".html": "text/html",
    ".svg": "image/svg+xml",
    ".json": "application/json",
}


def static_dir():
    """Directory of the tab's static files.

    Installed: ``tb_gradlens/frontend_static`` (package data); from a source
    checkout: ``<repo>/frontend_static``.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (
        os.path.join(here, "frontend_static"),
        os.path.join(os.path.dirname(here), "frontend_static"),
    ):
        if os.path.isfile(os.path.join(candidate, "index.js")):
            return candidate
    raise RuntimeError("tb_gradlens: frontend_static/ not found beside %s" % here)


def safe_static_path(root, relative):
    """Absolute path of ``relative`` inside ``root``, or None if it escapes.

    Refuses absolute paths, backslashes, '..' segments (also after URL
    decoding, which Werkzeug has done) and anything that is not a file.
    """
    if not relative or "\\" in relative or "\x00" in relative:
        return None
    if relative.startswith("/") or posixpath.isabs(relative):
        return None
    parts = relative.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return None
    path = os.path.realpath(os.path.join(root, *parts))
    root_real = os.path.realpath(root)
    if os.path.commonpath([path, root_real]) != root_real or not os.path.isfile(path):
        return None
    return path


# ---------------------------------------------------------------------------
# JSON encoding: NumPy arrays are formatted in bulk (a single %-format over
# all finite values, about 4x faster than json.dumps of a list), and
# NaN/+Inf/-Inf become the strings "NaN", "Infinity", "-Infinity", as
# TensorBoard's json_util.Cleanse does for Python floats.
# ---------------------------------------------------------------------------

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


def encode_json(obj):
    """JSON text of dicts/lists/str/numbers/None/NumPy arrays and scalars."""
    parts = []
    _encode(obj, parts)
    return "".join(parts)


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


def respond_json(request, obj):
    return http_util.Respond(request, encode_json(obj), "application/json")


# ---------------------------------------------------------------------------
# Request parameters.
# ---------------------------------------------------------------------------


def _arg(request, name, required=False):
    value = request.args.get(name)
    if value is None or value == "":
        if required:
            raise errors.InvalidArgumentError("missing parameter %r" % name)
        return None
    return value


def _int_arg(request, name, minimum=None):
    value = _arg(request, name)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise errors.InvalidArgumentError(
            "parameter %r must be an integer, not %r" % (name, value)
        ) from None
    if minimum is not None and number < minimum:
        raise errors.InvalidArgumentError("parameter %r must be >= %d" % (name, minimum))
    return number


class GradLensPlugin(base_plugin.TBPlugin):
    """Serves the GradLens tab: static files and the JSON routes of docs/ROUTES.md."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context, thresholds=analysis.DEFAULT_THRESHOLDS):
        self._data_provider = context.data_provider
        self._static_dir = static_dir()
        self._cache = reading.Cache()
        self._thresholds = thresholds

    def get_plugin_apps(self):
        return {
            "/static/*": self._serve_static,
            "/runs": self._serve_runs,
            "/series": self._serve_series,
            "/dtypes": self._serve_dtypes,
            "/scalars": self._serve_scalars,
            "/alerts": self._serve_alerts,
            "/overview": self._serve_overview,
            "/compare": self._serve_compare,
        }

    def is_active(self):
        return False  # data_plugin_names + TensorBoard's listing suffice

    def data_plugin_names(self):
        return (metadata.PLUGIN_NAME,)

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(
            es_module_path="/static/index.js", tab_name="GradLens"
        )

    def _source(self, request):
        return reading.Source.from_request(self._data_provider, request, self._cache)

    @wrappers.Request.application
    def _serve_static(self, request):
        relative = request.path.split(_STATIC_PREFIX, 1)[-1]
        path = safe_static_path(self._static_dir, relative)
        if path is None:
            raise errors.NotFoundError("no static file %r" % relative)
        ext = os.path.splitext(path)[1]
        content_type = _CONTENT_TYPES.get(ext) or (
            mimetypes.guess_type(path)[0] or "application/octet-stream"
        )
        with open(path, "rb") as f:
            body = f.read()
        return http_util.Respond(request, body, content_type)

    @wrappers.Request.application
    def _serve_runs(self, request):
        source = self._source(request)
        scalars = source.scalar_listing()
        body = {
            "runs": [
                {
                    "run": run,
                    "tags": [entry.to_json() for entry in source.entries(run)],
                    "scalars": sorted(scalars.get(run, {})),
                }
                for run in source.runs()
            ]
        }
        return respond_json(request, body)

    @wrappers.Request.application
    def _serve_series(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag", required=True)
        columns_arg = _arg(request, "columns")
        step_min = _int_arg(request, "step_min")
        step_max = _int_arg(request, "step_max")
        max_steps = _int_arg(request, "max_steps", minimum=1)
        series = self._source(request).series(run, tag)
        record = series.record
        rows = reading.select_rows(
            record.rows, _arg(request, "rows"), request.args.getlist("row")
        )
        columns = reading.select_columns(
            record.columns,
            [c.strip() for c in columns_arg.split(",") if c.strip()] if columns_arg else None,
        )
        steps = reading.select_steps(series.steps, step_min, step_max, max_steps)
        index = np.ix_(steps, np.asarray(rows, np.intp), np.asarray(columns, np.intp))
        values = series.values[index]  # [steps, rows, columns]
        body = {
            "run": run,
            "tag": tag,
            "kind": record.kind,
            "rows": [record.rows[i] for i in rows],
            "columns": [record.columns[i] for i in columns],
            "extras": record.extras,
            "sampled": series.sampled,
            "steps": series.steps[steps],
            "wall_times": series.wall_times[steps],
            "values": np.ascontiguousarray(values.transpose(2, 1, 0)),
        }
        return respond_json(request, body)

    @wrappers.Request.application
    def _serve_dtypes(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag")
        source = self._source(request)
        if tag is None:
            entries = source.entries_of_kind(run, metadata.DTYPES)
            if not entries:
                raise errors.NotFoundError("run %r has no dtypes record" % run)
        else:
            entries = [source.entry(run, tag)]
        maps = []
        for entry in entries:
            for m in source.dtype_maps(run, entry.tag):
                maps.append(dict(m, tag=entry.tag))
        maps.sort(key=lambda m: (m["step"], m["wall_time"]))
        latest = max(entries, key=lambda e: (e.max_step or 0, e.last_wall_time or 0))
        return respond_json(request, {"run": run, "tag": latest.tag, "maps": maps})

    @wrappers.Request.application
    def _serve_scalars(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag", required=True)
        steps, wall_times, values = self._source(request).scalars(run, tag)
        return respond_json(
            request,
            {"run": run, "tag": tag, "steps": steps, "wall_times": wall_times, "values": values},
        )

    @wrappers.Request.application
    def _serve_alerts(self, request):
        run = _arg(request, "run")
        source = self._source(request)
        if run is not None:
            source.entries(run)  # 404 for an unknown run
        alerts, problems = analysis.run_alerts(
            source, None if run is None else [run], self._thresholds
        )
        return respond_json(
            request, {"alerts": [a.to_json() for a in alerts], "errors": problems}
        )

    @wrappers.Request.application
    def _serve_overview(self, request):
        runs = analysis.overview(self._source(request), self._thresholds)
        return respond_json(request, {"runs": runs})

    @wrappers.Request.application
    def _serve_compare(self, request):
        run_a = _arg(request, "run_a", required=True)
        run_b = _arg(request, "run_b", required=True)
        quantity = analysis.Quantity(
            kind=_arg(request, "kind") or analysis.SCALAR,
            tag=_arg(request, "tag"),
            row=_arg(request, "row"),
            column=_arg(request, "column"),
        )
        body = analysis.compare(
            self._source(request), run_a, run_b, quantity, _arg(request, "noise_run")
        )
        return respond_json(request, body)

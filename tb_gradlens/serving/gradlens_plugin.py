"""The GradLens TensorBoard plugin: serves the tab's static files and data.

TensorFlow-free.  Reads only through ``context.data_provider``, so it works
with the Rust data server (``--load_fast=true``) and the Python loader.
"""

import mimetypes
import os
import posixpath
import re

from tensorboard import errors
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
import numpy as np
from werkzeug import wrappers

from tb_gradlens import analysis
from tb_gradlens import metadata
from tb_gradlens.analysis import advice as advice_analysis
from tb_gradlens.analysis import runs as runs_analysis
from tb_gradlens.serving import filtered_source
from tb_gradlens.serving import health
from tb_gradlens.serving import live_tail
from tb_gradlens.serving import logdir_monitor
from tb_gradlens.serving import reading
from tb_gradlens.serving import run_listing
from tb_gradlens.serving.json_encoding import encode_json

_STATIC_PREFIX = "/static/"

# What one ``series`` answer may hold.  Steps are evenly thinned to
# ``max_steps`` (default DEFAULT_MAX_STEPS, at most MAX_STEPS; the answer
# says ``sampled: true``); more than MAX_VALUES numbers (rows x columns x
# steps) is a 400 that says what to narrow.  A full answer of MAX_VALUES
# float32 numbers is ~40 MB of JSON.
DEFAULT_MAX_STEPS = 2000
MAX_STEPS = 10000
MAX_VALUES = 4_000_000
# Steps of a log2 histogram read for the tab when it names none (histograms route).
HISTOGRAM_STEPS = 500
MAX_HISTOGRAM_STEPS = 5000
# Buckets of steps of the health route (about one per pixel column of the tab's heatmap).
HEALTH_BUCKETS = 1000
MAX_HEALTH_BUCKETS = 5000
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
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tb_gradlens/
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


def respond_json(request, obj):
    return http_util.Respond(request, encode_json(obj), "application/json")


def series_answer(series, rows, columns, steps):
    """The JSON-ready answer of the series and histograms routes: rows,
    columns and steps (index lists) of a Series, ``values[column][row][step]``."""
    record = series.record
    index = np.ix_(steps, np.asarray(rows, np.intp), np.asarray(columns, np.intp))
    values = series.values[index]  # [steps, rows, columns]
    return {
        "run": series.run,
        "tag": series.tag,
        "kind": record.kind,
        "rows": [record.rows[i] for i in rows],
        "columns": [record.columns[i] for i in columns],
        "extras": record.extras,
        "sampled": series.sampled,
        "steps": series.steps[steps],
        "wall_times": series.wall_times[steps],
        "values": np.ascontiguousarray(values.transpose(2, 1, 0)),
    }


def filter_dtype_maps(maps, pattern):
    """The dtype maps with only the layers and variables whose path matches
    ``pattern`` (the ``rows`` pattern of ``series``: bounded time, 400 when
    refused).  The maps are not changed (they are the cache's)."""
    keys = ("layers", "variables")
    paths = sorted({
        item["path"] for m in maps for key in keys for item in (m.get("map") or {}).get(key, ())
    })
    keep = {paths[i] for i in reading.select_rows(paths, pattern)}
    out = []
    for m in maps:
        if m.get("map"):
            shown = {key: [x for x in m["map"].get(key, ()) if x["path"] in keep] for key in keys}
            m = dict(m, map=dict(m["map"], **shown))
        out.append(m)
    return out


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


_PLAIN_INT = re.compile(r"-?[0-9]+")


def _int_arg(request, name, minimum=None):
    value = _arg(request, name)
    if value is None:
        return None
    try:
        if not _PLAIN_INT.fullmatch(value):  # int() also takes "1_000", " 5", "５"
            raise ValueError(value)
        number = int(value)
    except ValueError:
        raise errors.InvalidArgumentError(
            "parameter %r must be a plain integer (ASCII digits), not %r" % (name, value[:100])
        ) from None
    if minimum is not None and number < minimum:
        raise errors.InvalidArgumentError("parameter %r must be >= %d" % (name, minimum))
    return number


def _check_answer_size(n_rows, n_columns, n_steps):
    """InvalidArgumentError when rows x columns x steps exceeds MAX_VALUES."""
    n_values = n_rows * n_columns * n_steps
    if n_values > MAX_VALUES:
        raise errors.InvalidArgumentError(
            "this answer would hold %d values (%d rows x %d columns x %d steps), more than the "
            "%d one answer may hold: ask for fewer rows (rows=, row=), columns (columns=) or "
            "steps (max_steps=, step_min=, step_max=)"
            % (n_values, n_rows, n_columns, n_steps, MAX_VALUES)
        )


class GradLensPlugin(base_plugin.TBPlugin):
    """Serves the GradLens tab: static files and the JSON routes of docs/ROUTES.md."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context, thresholds=analysis.DEFAULT_THRESHOLDS):
        self._data_provider = context.data_provider
        self._static_dir = static_dir()
        self._cache = reading.Cache()
        self._thresholds = thresholds
        logdir = getattr(context, "logdir", None)
        local = bool(logdir) and os.path.isdir(logdir)
        self._monitor = logdir_monitor.LogdirMonitor(logdir) if local else None
        # Growing tags of a local logdir are read incrementally, unless TensorBoard
        # keeps only a sample of the steps (--samples_per_plugin=gradlens=N).
        samples = getattr(getattr(context, "flags", None), "samples_per_plugin", None)
        sampled = isinstance(samples, dict) and samples.get(metadata.PLUGIN_NAME, 0) not in (0, "0", None)
        self._tails = live_tail.LiveTails(logdir) if local and not sampled else None

    def get_plugin_apps(self):
        return {
            "/static/*": self._serve_static,
            "/runs": self._serve_runs,
            "/series": self._serve_series,
            "/histograms": self._serve_histograms,
            "/health": self._serve_health,
            "/dtypes": self._serve_dtypes,
            "/scalars": self._serve_scalars,
            "/alerts": self._serve_alerts,
            "/overview": self._serve_overview,
            "/compare": self._serve_compare,
            "/limits": self._serve_limits,
            "/advice": self._serve_advice,
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
        return reading.Source.from_request(self._data_provider, request, self._cache, self._tails)

    def _filtered_source(self, request, rows=True):
        """The source seen through the tab's filters: ``rows`` (regex, when
        ``rows``), ``step_min``, ``step_max`` (filtered_source.py)."""
        source = self._source(request)
        pattern = _arg(request, "rows") if rows else None
        step_min, step_max = _int_arg(request, "step_min"), _int_arg(request, "step_max")
        if not filtered_source.is_filtered(pattern, step_min, step_max):
            return source
        return filtered_source.FilteredSource(source, pattern, step_min, step_max)  # 400 for a refused regex

    def _file_problems(self):
        """{run: [{"file", "error"}]}: damaged event files and overlapping
        writers of the logdir (``logdir_monitor.LogdirMonitor``, a bounded
        amount of checking per request); {} for a non-local logdir."""
        if self._monitor is None:
            return {}
        try:
            return self._monitor.problems()
        except OSError:
            return {}

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
        return respond_json(request, run_listing.runs_answer(self._source(request), self._file_problems()))

    @wrappers.Request.application
    def _serve_series(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag", required=True)
        columns_arg = _arg(request, "columns")
        step_min = _int_arg(request, "step_min")
        step_max = _int_arg(request, "step_max")
        max_steps = _int_arg(request, "max_steps", minimum=1)
        max_steps = min(DEFAULT_MAX_STEPS if max_steps is None else max_steps, MAX_STEPS)
        series = self._source(request).series(run, tag)
        record = series.record
        rows = reading.select_rows(
            record.rows, _arg(request, "rows"), request.args.getlist("row")
        )
        columns = reading.select_columns(
            record.columns,
            [c.strip() for c in columns_arg.split(",") if c.strip()] if columns_arg else None,
        )
        in_range = reading.select_steps(series.steps, step_min, step_max)
        steps = in_range[reading.thin_indices(len(in_range), max_steps)]
        _check_answer_size(len(rows), len(columns), len(steps))
        body = series_answer(series, rows, columns, steps)
        body["sampled"] = bool(series.sampled or len(steps) < len(in_range))
        return respond_json(request, body)

    @wrappers.Request.application
    def _serve_histograms(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag", required=True)
        max_steps = min(
            _int_arg(request, "max_steps", minimum=1) or HISTOGRAM_STEPS, MAX_HISTOGRAM_STEPS
        )
        source = self._source(request)
        if source.entry(run, tag).kind != metadata.GRAD_HISTOGRAM:
            raise errors.InvalidArgumentError("tag %r is not a grad_histogram record" % tag)
        series = source.sampled_series(run, tag, max_steps)
        rows = reading.select_rows(
            series.record.rows, _arg(request, "rows"), request.args.getlist("row")
        )
        columns = list(range(len(series.record.columns)))
        steps = reading.select_steps(
            series.steps, _int_arg(request, "step_min"), _int_arg(request, "step_max")
        )
        _check_answer_size(len(rows), len(columns), len(steps))
        return respond_json(request, series_answer(series, rows, columns, steps))

    @wrappers.Request.application
    def _serve_health(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag", required=True)
        buckets = min(_int_arg(request, "buckets", minimum=1) or HEALTH_BUCKETS, MAX_HEALTH_BUCKETS)
        series = self._source(request).series(run, tag)
        record = series.record
        if record.kind != metadata.GRAD_STATS:
            raise errors.InvalidArgumentError("tag %r is not a grad_stats record" % tag)
        rows = reading.select_rows(record.rows, _arg(request, "rows"), request.args.getlist("row"))
        steps = reading.select_steps(
            series.steps, _int_arg(request, "step_min"), _int_arg(request, "step_max")
        )
        _check_answer_size(len(rows), 2, min(buckets, len(steps)))  # status, nonfinite
        if len(rows) == len(record.rows) and len(steps) == len(series.steps):
            columns = {c: series.column(c) for c in health.COLUMNS}  # views: no copy of a live run's steps
        else:
            index = np.ix_(steps, np.asarray(rows, np.intp))
            columns = {c: series.column(c)[index] for c in health.COLUMNS}
        body = health.gradient_health(series.steps[steps], columns, buckets)
        body.update(run=run, tag=tag, rows=[record.rows[i] for i in rows])
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
        pattern = _arg(request, "rows")
        if pattern is not None:
            maps = filter_dtype_maps(maps, pattern)
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
        source = self._filtered_source(request)
        if run is not None:
            source.entries(run)  # 404 for an unknown run
        runs = None if run is None else [run]
        alerts, problems = analysis.run_alerts(source, runs, self._thresholds)
        problems = problems + source.point_errors(runs) + [
            {"run": file_run, "tag": None, "file": p["file"], "error": p["error"]}
            for file_run, found in sorted(self._file_problems().items())
            if run is None or file_run == run
            for p in found
        ]
        return respond_json(
            request, {"alerts": [a.to_json() for a in alerts], "errors": problems}
        )

    @wrappers.Request.application
    def _serve_overview(self, request):
        runs = analysis.overview(self._filtered_source(request), self._thresholds)
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
        # The verdict is the whole runs'; the step range only cuts what is shown.
        self._filtered_source(request, rows=False)  # 400 for a bad step range
        body = analysis.compare_runs(self._source(request), run_a, run_b, quantity, _arg(request, "noise_run"),
                                     self._thresholds)
        body = runs_analysis.restrict_to_steps(body, _int_arg(request, "step_min"), _int_arg(request, "step_max"))
        return respond_json(request, body)

    @wrappers.Request.application
    def _serve_limits(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag", required=True)
        body = analysis.limits(self._source(request), run, tag, self._thresholds)
        return respond_json(request, body)

    @wrappers.Request.application
    def _serve_advice(self, request):
        run = _arg(request, "run", required=True)
        return respond_json(request, advice_analysis.run_advice(self._source(request), run))

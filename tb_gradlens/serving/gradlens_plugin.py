"""The GradLens TensorBoard plugin: serves the tab's static files and data.

TensorFlow-free.  Reads only through ``context.data_provider``, so it works
with the Rust data server (``--load_fast=true``) and the Python loader.
The route handlers read a request's parameters and call the ``*_impl``
functions of ``routes_impl`` (and ``run_listing``, ``analysis``), which
select, read and shape the answer.
"""

import gzip
import io
import mimetypes
import os
import posixpath
import re

from tensorboard import errors
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

from tb_gradlens import analysis
from tb_gradlens import file_system
from tb_gradlens import metadata
from tb_gradlens.serving import filtered_source
from tb_gradlens.serving import live_tail
from tb_gradlens.serving import logdir_monitor
from tb_gradlens.serving import reading
from tb_gradlens.serving import routes_impl
from tb_gradlens.serving import run_listing
from tb_gradlens.serving.json_encoding import EncodedJson
from tb_gradlens.serving.json_encoding import encode_json

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


def static_file(root, relative):
    """(bytes, content type) of the static file ``relative`` inside ``root``;
    NotFoundError when there is none (or the path escapes ``root``)."""
    path = safe_static_path(root, relative)
    if path is None:
        raise errors.NotFoundError("no static file %r" % relative)
    ext = os.path.splitext(path)[1]
    content_type = _CONTENT_TYPES.get(ext) or (
        mimetypes.guess_type(path)[0] or "application/octet-stream"
    )
    with open(path, "rb") as f:
        return f.read(), content_type


def respond_json(request, obj):
    return http_util.Respond(request, encode_json(obj), "application/json")


def respond_tag_answer(request, source, run, tag, compute, query):
    """The JSON answer ``compute()`` of a request about one tag, encoded once
    per version of the tag: the clients watching a live run ask for the same
    answer at the same version, and wait for one computation of it.  Kept
    under the route and ``query``, the parameters the route reads as it reads
    them (parsed; others, such as a cache-busting one, key nothing), in the
    cache's ``answers`` pool, whose size counts the keys too."""
    route = request.path.rsplit("/", 1)[-1]  # (any experiment prefix: the source's location keys the logdir)
    entry = source.entry(run, tag)
    body = source.cached(("answer", route, query), entry,
                         lambda: EncodedJson(encode_json(compute()).encode("utf-8")), "answers")
    if "gzip" not in request.headers.get("Accept-Encoding", ""):
        return http_util.Respond(request, body, "application/json")
    # A browser asks for gzip: compressed once per version too, as TensorBoard would compress it.
    packed = source.cached(("answer gzip", route, query), entry, lambda: EncodedJson(_gzip(body)), "answers")
    return http_util.Respond(request, packed, "application/json", content_encoding="gzip")


def _gzip(data):
    """``data`` gzip-compressed as ``http_util.Respond`` compresses an answer (level 3, mtime 0)."""
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=3, mtime=0) as f:
        f.write(data)
    return out.getvalue()


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


def _list_arg(request, name):
    """A comma list parameter (None when absent or empty)."""
    value = _arg(request, name)
    return [c.strip() for c in value.split(",") if c.strip()] if value else None


def _rows(request, record):
    """The rows of ``record`` the request selects: ``rows`` (pattern), ``row`` (names)."""
    return reading.select_rows(record.rows, _arg(request, "rows"), request.args.getlist("row"))


def _selection(request):
    """What ``_rows`` and ``_steps`` read, parsed: the part of an answer's cache key they decide."""
    return (_arg(request, "rows"), tuple(request.args.getlist("row")), _int_arg(request, "step_min"),
            _int_arg(request, "step_max"))


def _steps(request, series):
    """The steps of ``series`` (indices) within the request's ``step_min``, ``step_max``."""
    return reading.select_steps(series.steps, _int_arg(request, "step_min"), _int_arg(request, "step_max"))


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
        remote = bool(logdir) and file_system.is_remote(logdir)  # checked alike; its tags not tailed
        self._monitor = logdir_monitor.LogdirMonitor(logdir) if local or remote else None
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
            "/compare": self._serve_run_comparison,
            "/limits": self._serve_limits,
            "/advice": self._serve_advice,
            "/answers": self._serve_answers,
        }

    def is_active(self):
        return False  # data_plugin_names + TensorBoard's listing suffice

    def data_plugin_names(self):
        return (metadata.PLUGIN_NAME,)

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(es_module_path="/static/index.js", tab_name="GradLens")

    def _source(self, request):
        self._notice_changes()
        return reading.Source.from_request(self._data_provider, request, self._cache, self._tails)

    def _notice_changes(self):
        """Drop what was read of runs whose event files changed on disk (truncated, rewritten,
        replaced: ``file_identity``), so they are read afresh, never mixed with what they held."""
        if self._monitor is None or self._monitor.remote:  # a bucket's objects are not followed: no listing here
            return
        try:
            self._monitor.refresh()  # the listing, at most every second: no new bytes checked here
        except OSError:
            return
        for run in self._monitor.take_changed():
            self._cache.forget_run(run)
            if self._tails is not None:
                self._tails.forget(run)

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
        amount of checking per request); {} without a logdir, or where its
        listing cannot be read (``file_system.CannotRead``)."""
        if self._monitor is None:
            return {}
        try:
            return self._monitor.problems()
        except OSError:
            return {}

    @wrappers.Request.application
    def _serve_static(self, request):
        body, content_type = static_file(self._static_dir, request.path.split(_STATIC_PREFIX, 1)[-1])
        return http_util.Respond(request, body, content_type)

    @wrappers.Request.application
    def _serve_runs(self, request):
        return respond_json(request, run_listing.runs_answer(self._source(request), self._file_problems()))

    @wrappers.Request.application
    def _serve_series(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag", required=True)
        columns = _list_arg(request, "columns")
        step_min, step_max = _int_arg(request, "step_min"), _int_arg(request, "step_max")
        max_steps = _int_arg(request, "max_steps", minimum=1)
        source = self._source(request)

        def answer():
            series = source.series(run, tag)
            return routes_impl.series_impl(series, _rows(request, series.record), columns, step_min, step_max,
                                           max_steps)
        query = ("columns", tuple(columns or ()), max_steps) + _selection(request)
        return respond_tag_answer(request, source, run, tag, answer, query)

    @wrappers.Request.application
    def _serve_histograms(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag", required=True)
        max_steps = _int_arg(request, "max_steps", minimum=1)
        source = self._source(request)

        def answer():
            series = routes_impl.histogram_series(source, run, tag, max_steps)
            return routes_impl.histograms_impl(series, _rows(request, series.record), _steps(request, series))
        return respond_tag_answer(request, source, run, tag, answer, (max_steps,) + _selection(request))

    @wrappers.Request.application
    def _serve_health(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag", required=True)
        buckets = routes_impl.health_buckets(_int_arg(request, "buckets", minimum=1))
        source = self._source(request)

        def answer():
            series = routes_impl.grad_stats_series(source, run, tag)
            rows, steps = _rows(request, series.record), _steps(request, series)
            return routes_impl.health_impl(source, series, rows, steps, buckets)
        return respond_tag_answer(request, source, run, tag, answer, (buckets,) + _selection(request))

    @wrappers.Request.application
    def _serve_dtypes(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag")
        return respond_json(request, routes_impl.dtypes_impl(self._source(request), run, tag, _arg(request, "rows")))

    @wrappers.Request.application
    def _serve_scalars(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag", required=True)
        return respond_json(request, routes_impl.scalars_impl(self._source(request), run, tag))

    @wrappers.Request.application
    def _serve_alerts(self, request):
        run = _arg(request, "run")
        source = self._filtered_source(request)
        return respond_json(request, routes_impl.alerts_impl(source, run, self._thresholds, self._file_problems))

    @wrappers.Request.application
    def _serve_overview(self, request):
        return respond_json(request, routes_impl.overview_impl(self._filtered_source(request), self._thresholds))

    @wrappers.Request.application
    def _serve_run_comparison(self, request):
        """The run comparison (``analysis.compare_runs``) of ``run_a`` and ``run_b``."""
        run_a = _arg(request, "run_a", required=True)
        run_b = _arg(request, "run_b", required=True)
        quantity = analysis.Quantity(kind=_arg(request, "kind") or analysis.SCALAR, tag=_arg(request, "tag"),
                                     row=_arg(request, "row"), column=_arg(request, "column"))
        # The verdict is the whole runs'; the step range only cuts what is shown.
        self._filtered_source(request, rows=False)  # 400 for a bad step range
        noise_runs = [r for r in request.args.getlist("noise_run") if r] or None  # the parameter may repeat
        body = routes_impl.run_comparison_impl(self._source(request), run_a, run_b, quantity, noise_runs,
                                        self._thresholds, _int_arg(request, "step_min"), _int_arg(request, "step_max"))
        return respond_json(request, body)

    @wrappers.Request.application
    def _serve_limits(self, request):
        run = _arg(request, "run", required=True)
        tag = _arg(request, "tag", required=True)
        return respond_json(request, routes_impl.limits_impl(self._source(request), run, tag, self._thresholds))

    @wrappers.Request.application
    def _serve_answers(self, request):
        """The five answers of every run (or of ``run``), through the tab's filters."""
        run = _arg(request, "run")
        return respond_json(request, routes_impl.answers_impl(self._filtered_source(request), run, self._thresholds))

    @wrappers.Request.application
    def _serve_advice(self, request):
        run = _arg(request, "run", required=True)
        return respond_json(request, routes_impl.advice_impl(self._source(request), run))

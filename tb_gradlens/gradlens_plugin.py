"""The GradLens TensorBoard plugin: serves the tab's static files and data.

TensorFlow-free.  Reads only through ``context.data_provider``, so it works
with the Rust data server (``--load_fast=true``) and the Python loader.
"""

import mimetypes
import os
import posixpath

from tensorboard import errors
from tensorboard.backend import http_util
from tensorboard.plugins import base_plugin
from werkzeug import wrappers

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


class GradLensPlugin(base_plugin.TBPlugin):
    """Serves the GradLens tab."""

    plugin_name = metadata.PLUGIN_NAME

    def __init__(self, context):
        self._data_provider = context.data_provider
        self._static_dir = static_dir()

    def get_plugin_apps(self):
        return {
            "/static/*": self._serve_static,
            "/runs": self._serve_runs,
        }

    def is_active(self):
        return False  # data_plugin_names + TensorBoard's listing suffice

    def data_plugin_names(self):
        return (metadata.PLUGIN_NAME,)

    def frontend_metadata(self):
        return base_plugin.FrontendMetadata(
            es_module_path="/static/index.js", tab_name="GradLens"
        )

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
        ctx, experiment = reading.request_context(request)
        runs = reading.list_records(self._data_provider, ctx, experiment)
        body = {
            "runs": [
                {"run": run, "tags": [entry.to_json() for entry in entries]}
                for run, entries in sorted(runs.items())
            ]
        }
        return http_util.Respond(request, body, "application/json")

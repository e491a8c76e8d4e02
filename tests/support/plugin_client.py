"""GradLens routes over a Werkzeug test client on TensorBoardWSGI with a real data
provider: the provider (``make_provider``, ``CountingProvider``), the module-scoped
fixtures over gradlens_logs' logdir (``logdir``, ``provider``, ``client``) and the
requests (``get``, ``get_json``, ``tag_of``, ``number``) the route tests share."""

import json

import pytest
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider as mux_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradlens import metadata
from tb_gradlens.serving import gradlens_plugin

PREFIX = "/data/plugin/gradlens/"


def make_provider(logdir):
    """(multiplexer, TensorBoard's MultiplexerDataProvider over ``logdir``), every gradlens sample kept."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={metadata.PLUGIN_NAME: 0}
    )
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    return multiplexer, mux_provider.MultiplexerDataProvider(multiplexer, logdir)


class CountingProvider:
    """Wraps a provider and counts read_tensors calls (cache checks)."""

    def __init__(self, inner):
        self.inner = inner
        self.reads = 0

    def read_tensors(self, *args, **kwargs):
        self.reads += 1
        return self.inner.read_tensors(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def client_for(logdir):
    """(multiplexer, a Werkzeug client of the plugin over a fresh provider of ``logdir``)."""
    multiplexer, provider = make_provider(logdir)
    context = base_plugin.TBContext(data_provider=provider, logdir=logdir)
    return multiplexer, werkzeug_test.Client(application.TensorBoardWSGI([gradlens_plugin.GradLensPlugin(context)]))


class RereadProvider:
    """A data provider read afresh from disk at ``reread()``: what a loader that re-reads a changed run
    gives.  The plugin over it must answer as a plugin built afresh: nothing it kept (its cache, live
    tails, file checks) may mix what a file held before into what it holds now."""

    def __init__(self, logdir):
        self.logdir = logdir
        self.reread()

    def reread(self):
        self.inner = make_provider(self.logdir)[1]

    def __getattr__(self, name):
        return getattr(self.inner, name)


def plugin_over(provider, logdir):
    """A Werkzeug client of a plugin over ``provider`` that lists the logdir at every request
    (``client.plugin``: the plugin)."""
    plugin = gradlens_plugin.GradLensPlugin(base_plugin.TBContext(data_provider=provider, logdir=logdir))
    plugin._monitor.interval = 0  # list the logdir at every request (deterministic)
    client = werkzeug_test.Client(application.TensorBoardWSGI([plugin]))
    client.plugin = plugin
    return client


@pytest.fixture(scope="module")
def logdir(gradlens_logdir):
    return gradlens_logdir  # conftest.py: written once per session


@pytest.fixture(scope="module")
def provider(logdir):
    return CountingProvider(make_provider(logdir)[1])


@pytest.fixture(scope="module")
def client(logdir, provider):
    context = base_plugin.TBContext(data_provider=provider, logdir=logdir)
    app = application.TensorBoardWSGI([gradlens_plugin.GradLensPlugin(context)])
    return werkzeug_test.Client(app)


def get(client, route, **params):
    response = client.get(PREFIX + route, query_string=params)
    return response.status_code, response.headers.get("Content-Type", ""), response.get_data(as_text=True)


def get_json(client, route, **params):
    status, ctype, body = get(client, route, **params)
    assert status == 200, body
    assert ctype.startswith("application/json")
    return json.loads(body)


def number(v):
    """What the frontend does: Number(v)."""
    return float(v) if not isinstance(v, str) else float({"NaN": "nan", "Infinity": "inf", "-Infinity": "-inf"}[v])


def tag_of(client, run, kind):
    runs = {r["run"]: r for r in get_json(client, "runs")["runs"]}
    found = [t["tag"] for t in runs[run]["tags"] if t["kind"] == kind]
    assert len(found) == 1, found
    return found[0]

"""What one request may cost (issue 31): the pattern budget of a request,
crafted event files, many runs.

Routes run over a Werkzeug client on TensorBoardWSGI with TensorBoard's own
data provider over a real logdir (written with TensorBoard's TF-free writer).
"""

import json
import os

from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

import hostile_logs
from test_plugin_routes import make_provider
from tb_gradlens import gradlens_plugin
from tb_gradlens import metadata
from tb_gradlens import patterns

PREFIX = "/data/plugin/gradlens/"


def client_of(logdir):
    context = base_plugin.TBContext(data_provider=make_provider(logdir)[1], logdir=logdir)
    return werkzeug_test.Client(application.TensorBoardWSGI([gradlens_plugin.GradLensPlugin(context)]))


def get(client, route, **params):
    response = client.get(PREFIX + route, query_string=params)
    return response.status_code, response.get_data(as_text=True)


def names_run(logdir, run, count=40, prefix=None):
    """A run whose grad_stats tag has ``count`` distinct 60-character variable
    names (starting with ``prefix``, default the run's name)."""
    rows = ["%s/layer_%03d/" % (prefix or run, i) + "k" * 40 for i in range(count)]
    rows = [r[:60] for r in rows]
    hostile_logs.write_records(os.path.join(logdir, run), [
        ("gradients/grad_stats/%s" % run, hostile_logs.content(metadata.GRAD_STATS, rows),
         hostile_logs.stats(len(rows), 1.0))])
    return rows


def matching_steps(pattern, names):
    """The fewest matching steps ``patterns`` needs for ``names`` (bisected)."""
    low, high = 1, 10**7
    while low < high:
        middle = (low + high) // 2
        try:
            patterns.filter_names(pattern, names, middle)
            high = middle
        except patterns.PatternTooComplex:
            low = middle + 1
    return low


def test_rows_pattern_budget_is_one_per_request_not_one_per_tag(tmp_path, monkeypatch):
    """README: at most one budget of matching steps per request.  Six runs whose
    rows each cost well under the budget, together twice over it: /overview and
    /alerts refuse the pattern (400, naming the budget) instead of spending the
    budget six times; the same pattern on one run is answered, and so it is on
    six runs of the same variables (each distinct name is matched once)."""
    logdir = str(tmp_path / "logs")
    all_rows = [names_run(logdir, "run_%d" % i) for i in range(6)]
    pattern = "(?:[a-z_0-9/]?){30}!"
    per_tag = matching_steps(pattern, all_rows[0])
    monkeypatch.setattr(patterns, "DEFAULT_BUDGET", int(per_tag * 3))
    client = client_of(logdir)
    for route in ("overview", "alerts"):
        status, body = get(client, route, rows=pattern)
        assert status == 400, (route, body[:300])
        assert "matching steps" in body and str(int(per_tag * 3)) in body
    status, body = get(client, "alerts", rows=pattern, run="run_0")
    assert status == 200, body[:300]
    same = str(tmp_path / "same")
    for i in range(6):
        names_run(same, "seed_%d" % i, prefix="model")
    status, body = get(client_of(same), "overview", rows=pattern)
    assert status == 200 and len(json.loads(body)["runs"]) == 6, body[:300]

"""Shared pytest setup: quiet TensorFlow logs, the import paths, the markers and the
fixtures more than one test module uses.

Imports: the repository root is first on ``sys.path`` (``tb_gradlens`` is the
source tree), so the helpers import as ``tests.support.<module>``, the model zoo
and the judges as ``evaluation.<module>`` and a benchmark as
``benchmarks.<module>``.  No test module imports another: what several share is
in tests/support/.

Markers (``pytest --strict-markers`` knows them): ``browser`` needs Chromium,
``tensorboard`` starts a real TensorBoard process, ``slow`` takes more than about
10 s or trains real models.  The fast lane is ``pytest -m "not slow"``
(BUILD_NOTES.md has its time); ``bash .ci/run`` runs everything.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[:1] != [ROOT]:
    sys.path.insert(0, ROOT)


import pytest  # noqa: E402

MARKERS = {
    "browser": "needs Chromium (Playwright drives the tab)",
    "tensorboard": "starts a real TensorBoard process",
    "slow": "takes more than about 10 s or trains real models; the fast lane is -m 'not slow'",
}
RUNS_ROUTE = "/data/plugin/gradlens/runs"


def pytest_configure(config):
    for name, meaning in MARKERS.items():
        config.addinivalue_line("markers", "%s: %s" % (name, meaning))


def serve(logdir, ready, timeout=120):
    """A real `tensorboard` (the Python loader) on ``logdir``, yielded once ``ready``
    (a predicate on the plugin's runs answer) holds; stopped after."""
    from tests.support.tb_server import TensorBoardProcess

    with TensorBoardProcess(logdir, load_fast=False) as tb:
        tb.wait_for(ready, RUNS_ROUTE, timeout=timeout)
        yield tb


@pytest.fixture(scope="module")
def tensorboard(logdir, tensorboard_ready):
    """The module's TensorBoard: one process per test module, serving the module's
    ``logdir`` fixture once the module's ``tensorboard_ready`` predicate holds."""
    yield from serve(logdir, tensorboard_ready)


@pytest.fixture(scope="session")
def gradlens_logdir(tmp_path_factory):
    """tests/support/gradlens_logs.py's logdir (known answers for every route), written
    once per session: the route, fuzz and end-to-end modules read it, none writes to it."""
    from tests.support import gradlens_logs

    return gradlens_logs.write_logdir(str(tmp_path_factory.mktemp("gradlens") / "logs"))


@pytest.fixture(scope="session")
def cli_logdir(tmp_path_factory):
    """tests/support/cli_logs.py's training logdir (a healthy and a broken run), written once per
    session: test_cli.py and test_cli_gate.py read it, none writes to it."""
    from tests.support.cli_logs import write_training_logdir

    path = str(tmp_path_factory.mktemp("cli") / "logs")
    write_training_logdir(path)
    return path


@pytest.fixture(scope="session")
def questions_tensorboard(tmp_path_factory):
    """A real `tensorboard` serving frontend_questions_logs.py's logdir (one per session: the browser
    test modules that ask the tab's questions share it)."""
    from tests.support import frontend_questions_logs as q
    from tests.support.frontend_page import require_browser

    require_browser()
    logdir = q.write_logdir(str(tmp_path_factory.mktemp("questions") / "logs"))
    yield from serve(
        logdir,
        lambda d: {r["run"] for r in d.get("runs", [])} == q.RUNS
        and all(t["max_step"] == q.TRAIN_STEPS - 1 for r in d["runs"] if r["run"] == "nan_dead_unused"
                for t in r["tags"])
        and len(next(r for r in d["runs"] if r["run"] == "mixed_bfloat16")["tags"]) == 7,
    )


@pytest.fixture
def fresh_safety():
    """The failure policy's state reset around a test (what was reported, strict mode);
    modules whose tests count failures use it with ``pytestmark``."""
    from tb_gradlens import safety

    safety.reset()
    safety.set_strict(None)
    yield
    safety.reset()
    safety.set_strict(None)

"""Shared pytest setup: quiet TensorFlow logs, make the source tree importable."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
TESTS = os.path.dirname(os.path.abspath(__file__))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def questions_tensorboard(tmp_path_factory):
    """A real `tensorboard` serving frontend_questions_logs.py's logdir (one per session: the browser
    test modules that ask the tab's questions share it)."""
    import frontend_questions_logs as q
    from frontend_page import require_browser
    from tb_server import TensorBoardProcess

    require_browser()
    logdir = q.write_logdir(str(tmp_path_factory.mktemp("questions") / "logs"))
    with TensorBoardProcess(logdir, load_fast=False) as tb:
        tb.wait_for(
            lambda d: {r["run"] for r in d.get("runs", [])} == q.RUNS
            and all(t["max_step"] == q.TRAIN_STEPS - 1 for r in d["runs"] if r["run"] == "nan_dead_unused"
                    for t in r["tags"])
            and len(next(r for r in d["runs"] if r["run"] == "mixed_bfloat16")["tags"]) == 7,
            "/data/plugin/gradlens/runs", timeout=120,
        )
        yield tb


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


"""A non-editable ``pip install .`` into a fresh venv, without TensorFlow, gives a
TensorBoard that lists the plugin and serves its frontend and data."""

import os
import subprocess
import sys
import venv

import numpy as np
import pytest
import tensorflow as tf

from tb_gradlens import summary
from tb_server import TensorBoardProcess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    """A venv with only ``pip install <repo>`` (no TensorFlow) in it."""
    where = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True, clear=True).create(str(where))
    python = os.path.join(where, "bin", "python")
    source = tmp_path_factory.mktemp("src")
    # Install from a copy of the tracked files, as a user's checkout would be.
    subprocess.run(
        "git ls-files -z | xargs -0 cp --parents -t %s" % source,
        shell=True, check=True, cwd=ROOT,
    )
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(source)],
        check=True,
        timeout=900,
    )
    return python


def _write_logdir(logdir):
    variables = [tf.Variable(np.ones((4, 3), np.float32), name="dense/kernel")]
    writer = tf.summary.create_file_writer(os.path.join(logdir, "bf16"))
    with writer.as_default():
        for step in range(3):
            summary.gradients([tf.fill((4, 3), float(step))], variables, step=step)
    writer.close()


def test_fresh_venv_has_no_tensorflow_and_a_working_entry_point(fresh_venv):
    no_tf = subprocess.run([fresh_venv, "-c", "import tensorflow"], capture_output=True)
    assert no_tf.returncode != 0, "the fresh venv must not have TensorFlow"
    out = subprocess.run(
        [fresh_venv, "-c",
         "import importlib.metadata as m, tb_gradlens.gradlens_plugin as p, os;"
         "print([e.value for e in m.entry_points(group='tensorboard_plugins') if e.name == 'gradlens']);"
         "print(p.static_dir().startswith(os.path.dirname(p.__file__)))"],
        capture_output=True, text=True, check=True, cwd="/",
    ).stdout.split("\n")
    assert out[0] == "['tb_gradlens.loader:GradLensLoader']"
    assert out[1] == "True"  # the frontend ships inside the installed package


@pytest.mark.parametrize("load_fast", [False, True])
def test_installed_tensorboard_lists_plugin_and_serves_tab(fresh_venv, tmp_path, load_fast):
    logdir = str(tmp_path / "logs")
    _write_logdir(logdir)
    tb = TensorBoardProcess(logdir, load_fast=load_fast, python=fresh_venv, cwd="/")
    with tb:
        listing = tb.wait_for(lambda d: "gradlens" in d, "/data/plugins_listing")
        entry = listing["gradlens"]
        assert entry["enabled"] is True
        assert entry["tab_name"] == "GradLens"
        module_path = entry["loading_mechanism"]["module_path"]
        status, content_type, body = tb.get(module_path)
        assert status == 200 and content_type.startswith("text/javascript")
        assert b"export async function render" in body or b"export function render" in body
        runs = tb.wait_for(lambda d: d["runs"], "/data/plugin/gradlens/runs")
        assert [r["run"] for r in runs["runs"]] == ["bf16"]
        kinds = sorted(t["kind"] for t in runs["runs"][0]["tags"])
        assert kinds == ["grad_histogram", "grad_stats"]
        status, _, _ = tb.get("/data/plugin/gradlens/static/..%2F..%2Fsetup.py")
        assert status == 404

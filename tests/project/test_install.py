"""A non-editable ``pip install .`` into a fresh venv, without TensorFlow, gives a
TensorBoard that lists the plugin and serves its frontend and data; installed
where no C or C++ compiler can be found, the lens works through TensorFlow,
and the compiled kernel is built on first use once one can."""

import json
import os
import site
import subprocess
import sys
import venv

import numpy as np
import pytest
import tensorflow as tf

from tb_gradlens import summary
from tests.support.tb_server import TensorBoardProcess

pytestmark = [pytest.mark.slow]  # builds fresh venvs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KERNEL_SETTING = "TB_GRADLENS_KERNEL"  # kernel.ENV_KERNEL, not imported: the test must not build it here


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    """A venv with only ``pip install <repo>`` (no TensorFlow) in it."""
    where = tmp_path_factory.mktemp("venv")
    venv.EnvBuilder(with_pip=True, clear=True).create(str(where))
    python = os.path.join(where, "bin", "python")
    source = tmp_path_factory.mktemp("src")
    _tracked_copy(source)  # a copy of the tracked files, as a user's checkout would be
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
         "import importlib.metadata as m, tb_gradlens, tb_gradlens.serving.gradlens_plugin as p, os;"
         "print([e.value for e in m.entry_points(group='tensorboard_plugins') if e.name == 'gradlens']);"
         "print(p.static_dir().startswith(os.path.dirname(tb_gradlens.__file__)))"],
        capture_output=True, text=True, check=True, cwd="/",
    ).stdout.split("\n")
    assert out[0] == "['tb_gradlens.serving.loader:GradLensLoader']"
    assert out[1] == "True"  # the frontend ships inside the installed package


@pytest.mark.tensorboard
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


def _tracked_copy(destination):
    subprocess.run("git ls-files -z | xargs -0 cp --parents -t %s" % destination, shell=True, check=True, cwd=ROOT)


@pytest.fixture(scope="module")
def venv_installed_without_compiler(tmp_path_factory):
    """A fresh venv that sees this interpreter's packages (TensorFlow, Keras,
    tensorboard) through a .pth file, with ``pip install <repo>`` run where
    no compiler can be found: PATH holds no cc/gcc/c++, $CC and $CXX fail."""
    where = tmp_path_factory.mktemp("venv_no_cc")
    venv.EnvBuilder(with_pip=True, clear=True).create(str(where))
    python = os.path.join(where, "bin", "python")
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(purelib, "zz_test_packages.pth"), "w") as f:  # after the venv's own packages
        f.write("\n".join(p for p in site.getsitepackages() if os.path.isdir(p)) + "\n")
    source = tmp_path_factory.mktemp("src_no_cc")
    _tracked_copy(source)
    empty_bin = tmp_path_factory.mktemp("no_compilers")
    env = _without_compiler(empty_bin, tmp_path_factory.mktemp("cache_install"))
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(source)],
                   check=True, timeout=900, env=env, cwd="/")
    return python, empty_bin


def _without_compiler(empty_bin, cache):
    env = dict(os.environ, PATH=str(empty_bin), CC="/bin/false", CXX="/bin/false",
               TB_GRADLENS_CACHE=str(cache), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONPATH", None)
    env.pop(KERNEL_SETTING, None)
    return env


def _run_lens(python, env, logdir):
    out = subprocess.run([python, os.path.join(ROOT, "tests", "support", "install_check_lens.py"), str(logdir)],
                         capture_output=True, text=True, env=env, cwd="/", timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_installed_without_a_compiler_the_lens_runs_on_tensorflow(venv_installed_without_compiler, tmp_path):
    python, empty_bin = venv_installed_without_compiler
    for name in ("cc", "gcc", "c++", "g++", "clang"):
        assert not os.path.exists(os.path.join(empty_bin, name))
    result = _run_lens(python, _without_compiler(empty_bin, tmp_path / "cache"), tmp_path / "logs" / "run")
    assert result["package"].startswith(os.path.dirname(os.path.dirname(python))), result["package"]
    assert result["status"].startswith("no compiled kernel, TensorFlow ops instead"), result["status"]
    assert result["backend"] == "xla" and result["compiled"] == []
    assert result["steps"] == [0, 1, 2] and len(result["rows"]) == 4, result
    assert result["deviation"] < 1e-5, result


def test_installed_copy_builds_and_uses_the_kernel_once_a_compiler_exists(venv_installed_without_compiler, tmp_path):
    python, _ = venv_installed_without_compiler
    env = dict(os.environ, TB_GRADLENS_CACHE=str(tmp_path / "cache"), TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONPATH", None)
    env.pop(KERNEL_SETTING, None)
    result = _run_lens(python, env, tmp_path / "logs" / "run")
    assert result["status"].startswith("compiled kernel as TensorFlow ops"), result["status"]
    assert result["backend"] == "kernel" and len(result["compiled"]) == 2, result
    assert result["steps"] == [0, 1, 2] and result["deviation"] < 1e-5, result
    print("kernel built on first use in %.1f s" % result["status_seconds"])

"""test_cli.py's training logdir (``write_training_logdir``: a healthy and a broken
run) and the command line run as users run it (``run_cli``, the installed console
script), shared by the command-line test modules and conftest.py's ``cli_logdir``."""

import os
import shutil
import subprocess

import numpy as np
import tensorflow as tf

from tb_gradlens import summary

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAN_STEP = 6
STEPS = 10
HOSTILE = "evil\x1b[31m<img src=x onerror=alert(1)>/kernel"


def console_script():
    """The installed console script (CI installs the package non-editable)."""
    path = shutil.which("tb-gradlens")
    assert path, "tb-gradlens is not on PATH: pip install the package first"
    return [path]


def run_cli(*args, script=None):
    env = dict(os.environ, PYTHONIOENCODING="utf-8")
    return subprocess.run(
        (script or console_script()) + [str(a) for a in args],
        capture_output=True, text=True, timeout=300, env=env, cwd=ROOT,
    )


def step_gradients(step):
    """The (kernel, bias) gradients written at ``step`` (the bias NaN at NAN_STEP)."""
    rng = np.random.default_rng(step)
    w = rng.normal(size=(3, 2)).astype(np.float32)
    b = np.array([0.5, np.nan if step == NAN_STEP else -0.5], np.float32)
    return [w, b]


def write_training_logdir(logdir):
    """Two runs written by tb_gradlens.summary: 'healthy' and 'broken' (NaN at NAN_STEP,
    a disconnected variable with a hostile name), each with a loss scalar."""
    for run in ("healthy", "broken"):
        variables = [
            tf.Variable(np.ones((3, 2), np.float32), name="dense/kernel"),
            tf.Variable(np.zeros(2, np.float32), name="dense/bias"),
            tf.Variable(np.ones(2, np.float32), name=HOSTILE),
        ]
        writer = tf.summary.create_file_writer(os.path.join(logdir, run))
        with writer.as_default():
            for step in range(STEPS):
                w, b = step_gradients(step)
                if run == "healthy":
                    b = np.nan_to_num(b, nan=0.25)
                summary.gradients([tf.constant(w), tf.constant(b), None], variables, step=step)
                loss = 1.0 / (step + 1) + (0.01 * step if run == "broken" else 0.0)
                tf.summary.scalar("loss", loss, step=step)
        writer.close()

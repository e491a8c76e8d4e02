"""No TensorFlow or AutoGraph plea to report a bug may come from our code.

A user who trains with the lens sees everything TensorFlow prints; a
"Please report this to the TensorFlow team" or "AutoGraph could not
transform" sends them to file a bug against TensorFlow for our code.
``tf_warnings_run.py`` trains real models with the lens in a fresh process
(TensorFlow's C++ logs not silenced); its stdout and stderr are searched.

Nor may TensorFlow call our functions "excessive retracing": each callback
(and each comparison) traces its own functions once, and TensorFlow counts
traces per function source, so the second model trained in one process
made it warn about the lens's record writers.
"""

import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow]  # trains real models in a fresh process

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
PLEAS = ("report this to the tensorflow team", "autograph could not transform", "file a bug", "please report")


def _pleas(tmp_path, *flags):
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    env["PYTHONPATH"] = os.path.dirname(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, os.path.join(HERE, "support", "tf_warnings_run.py"), str(tmp_path)] + list(flags),
                          capture_output=True, text=True, env=env, timeout=900)
    output = done.stdout + done.stderr
    assert done.returncode == 0 and "tf_warnings_run: done" in done.stdout, output[-4000:]
    lines = output.splitlines()
    return [line for line in lines if any(plea in line.lower() for plea in PLEAS)], output


def _our_retracing(output):
    """TensorFlow's retracing warnings about functions that are not Keras'
    own (its train function retraces per model; the script defines none)."""
    return [line for line in output.splitlines()
            if "triggered tf.function retracing" in line and "TensorFlowTrainer._make_function" not in line]


def test_training_with_the_lens_prints_no_plea_to_report_a_bug(tmp_path):
    """fit with the callback (Transformer with Dropout, XLA off and on; an
    LSTM) and compare_keras inside tf.function (LSTM, GRU)."""
    found, output = _pleas(tmp_path)
    assert found == [], output[-6000:]
    assert _our_retracing(output) == [], output[-6000:]


def test_the_search_sees_autograph_pleas(tmp_path):
    """Control: a tf.function AutoGraph cannot convert is seen by the search."""
    found, _ = _pleas(tmp_path / "control", "--control")
    assert any("autograph could not transform" in line.lower() for line in found)


def test_the_readmes_custom_loop_prints_nothing_tensorflow_says_of_our_code(tmp_path):
    """Issue 40: tb_gradlens.summary.gradients under the README's `if step % 10 == 0:` (a tf.cond)
    made Grappler print "Skipping loop optimization for Merge node with control input" (our own
    conditional around the writes, lowered inside the user's)."""
    env = dict(os.environ)
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    env["PYTHONPATH"] = os.path.dirname(HERE) + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, os.path.join(HERE, "support", "readme_custom_loop.py"), str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "readme_custom_loop: steps [0, 10, 20]" in done.stdout, output[-4000:]
    ours = [line for line in output.splitlines()
            if "loop_optimizer" in line or "Skipping loop optimization" in line or "tb_gradlens" in line]
    assert ours == [], output[-4000:]

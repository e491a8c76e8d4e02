"""Non-finite forensics where bfloat16 is trained (issue 39): under XLA, as
Keras' ``jit_compile="auto"`` compiles on a GPU machine, and with several
replicas (MirroredStrategy over two logical CPUs).  Every step is checked
and the first one in trouble replayed with the right verdict; training is
bit-identical with and without the lens.  Real models, tiny sizes."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tests.support import other_hardware
from evaluation import real_models
from tests.support.readback import source_of
from tests.support.twin_step import model_state
from tb_gradlens import analysis
from tb_gradlens import safety
from tb_gradlens.analysis import replays
from tb_gradlens.keras import GradLensCallback

pytestmark = [pytest.mark.usefixtures("fresh_safety"), pytest.mark.slow]  # trains Keras models under XLA

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
BATCH = 8


def _overflow():
    """One outlier batch (step 3, inputs 300x larger) overflows float16 in q.k^T."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6 * BATCH, 4, 16)).astype(np.float32)
    x[3 * BATCH:4 * BATCH] *= 300.0
    y = rng.integers(0, 3, 6 * BATCH).astype(np.int32)
    return (lambda: real_models.unscaled_attention_logits("mixed_float16")), x, y


def _negative():
    """log(x + 1) of a negative input at step 2, in bfloat16 and in float32 alike."""
    x, y = real_models.digits(6 * BATCH, np.random.default_rng(0))
    x = x.copy()
    x[2 * BATCH + 1] = -5.0
    return (lambda: real_models.log_input_mlp("mixed_bfloat16")), x, y


FAULTS = {"overflow": (_overflow, 3, replays.PRECISION, "attention_logits"),
          "negative": (_negative, 2, replays.NOT_PRECISION, "log_inputs")}


def _compiled(build, jit):
    model = build()
    if jit == "auto":
        with other_hardware.auto_jit_sees("GPU"):  # as Keras resolves it on a GPU machine
            model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    else:
        model.compile(optimizer="adam", loss=real_models.SPARSE_CE, jit_compile=True)
    assert model.jit_compile is True
    return model


@pytest.mark.parametrize("jit", ["auto", True])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_nonfinite_step_under_xla_is_replayed_with_its_verdict(tmp_path, fault, jit):
    make, step, verdict, layer = FAULTS[fault]
    build, x, y = make()
    models, losses = [], []
    for callbacks in ([], [GradLensCallback(str(tmp_path / "run"), gradient_every=4, compare_every=0)]):
        model = _compiled(build, jit)
        losses.append(model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
                                callbacks=callbacks).history["loss"])
        models.append(model)
    np.testing.assert_array_equal(losses[0], losses[1])  # (NaN equals NaN here)
    for a, b in zip(model_state(models[0]), model_state(models[1])):
        np.testing.assert_array_equal(a, b)
    source = source_of(str(tmp_path))
    (found,) = replays.run_replays(source, "run")
    assert (found["step"], found["verdict"], found["layer"]) == (step, verdict, layer)
    assert found["candidate_label"].endswith("+xla")  # replayed as the step ran: compiled by XLA
    alerts, problems = analysis.run_alerts(source)
    assert problems == []
    (nonfinite,) = [a for a in alerts if a.code == analysis.NONFINITE and a.step_first == step]
    assert replays.VERDICT_TEXT[verdict].format(ref="float32").split(":")[0] in nonfinite.explanation
    assert analysis.coverage(source, "run")["unsupported"] == []


def test_stop_on_nonfinite_under_xla_takes_the_update_back_and_stops(tmp_path):
    """The compiled step cannot be held back from inside: its update is
    taken back after it (weights and optimizer state), and fit stops."""
    build, x, y = _negative()
    lensed = _compiled(build, True)
    with pytest.warns(safety.GradLensWarning, match="stop_on_nonfinite"):
        lensed.fit(x, y, batch_size=BATCH, epochs=1, verbose=0, shuffle=False,
                   callbacks=[GradLensCallback(str(tmp_path / "run"), gradient_every=0, compare_every=0,
                                               stop_on_nonfinite=True)])
    plain = _compiled(build, True)
    plain.fit(x[:2 * BATCH], y[:2 * BATCH], batch_size=BATCH, epochs=1, verbose=0, shuffle=False)
    for a, b in zip(plain.trainable_variables + plain.optimizer.variables,
                    lensed.trainable_variables + lensed.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert int(lensed.optimizer.iterations.numpy()) == 2
    assert [f["step"] for f in replays.run_replays(source_of(str(tmp_path)), "run")] == [2]


def test_a_nonfinite_step_under_mirrored_strategy_is_replayed_with_its_verdict(tmp_path):
    """Two replicas agree on every step (one small all-reduce of the
    check); the replay runs on the global batch (each replica keeps its
    share): a NaN in replica 1's share is found."""
    env = dict(os.environ, TB_GRADLENS_STRICT="1", TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-m", "tests.support.mirrored_nonfinite",
                           str(tmp_path / "logs"), str(tmp_path / "out.json")],
                          capture_output=True, text=True, env=env, timeout=600, cwd=os.path.dirname(HERE))
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads((tmp_path / "out.json").read_text())
    for fault, (_, step, verdict, layer) in FAULTS.items():
        got = found[fault]
        assert got["replicas"] == 2 and got["jit_compile"] == [False, False]  # "auto" under a strategy: no XLA
        assert got["bit_identical"], fault
        assert [(r["step"], r["verdict"], r["layer"]) for r in got["replays"]] == [(step, verdict, layer)], fault
        assert "nonfinite" in got["alerts"] and got["problems"] == [] and got["unsupported"] == []


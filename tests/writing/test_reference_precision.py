"""The lens on the hardware bfloat16 is trained on (issue 39): what float32
is, measured, and a reference that is IEEE float32 or better where it is
not; the environment of a run, recorded and compared.

TF32 (NVIDIA Ampere and newer) and oneDNN's fpmath mode (AMX/Graviton CPUs)
cannot be seen on this CPU; TF32 is emulated (``other_hardware``: the
float32 inputs of matmul and conv ops rounded to 11 significand bits while
TensorFlow's TF32 switch is on).
"""

import json
import os
import subprocess
import sys

import keras
import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from tests.support import other_hardware
from tests.support.readback import read_records
from tests.support.readback import source_of
from tb_gradlens import analysis
from tb_gradlens import cli
from tb_gradlens.analysis import codes
from tb_gradlens import compare
from tb_gradlens import demo
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis import environments
from tb_gradlens.serving import routes_impl
from tb_gradlens.compare import float32_probe
from tb_gradlens.keras import GradLensCallback
from tb_gradlens.serving import judgment_json

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OPS = list(records.PROBED_OPS)


def test_the_probe_says_float32_is_ieee_on_this_cpu_with_and_without_xla():
    for jit in (False, True):
        found = float32_probe.probe(jit_compile=jit)
        assert found["ops"] == {op: 24 for op in OPS} and found["bits"] == 24, jit
        assert found["cause"] is None and found["jit_compile"] is jit
        assert records.measured_text(found) == "IEEE float32, 24 bits"


def test_the_emulation_rounds_as_bfloat16_does_at_8_bits():
    """The test hook itself, against ml_dtypes' bfloat16 (round to nearest even)."""
    x = (np.random.default_rng(0).normal(size=4096) * 10.0 ** np.arange(-8, 8).repeat(256)).astype(np.float32)
    got = other_hardware.round_significand(tf.constant(x), 8).numpy()
    np.testing.assert_array_equal(got, x.astype(ml_dtypes.bfloat16).astype(np.float32))


@pytest.mark.parametrize("bits", [11, 8])
def test_an_emulated_reduced_float32_is_found_by_the_probe_in_every_op_and_labelled(bits):
    with other_hardware.emulated_reduced_float32(bits):
        for jit in (False, True):
            found = float32_probe.probe(jit_compile=jit)
            assert found["ops"] == {op: bits for op in OPS}, (jit, found)
        if bits == 11:
            assert found["cause"] == "TF32"
            assert records.precision_text(found) == "float32 reference: TF32 in matmul/conv, 11 bits"
        tf.config.experimental.enable_tensor_float_32_execution(False)
        try:  # the switch off: IEEE again (TF32 only rounds while it is on)
            assert float32_probe.probe()["bits"] == 24
        finally:
            tf.config.experimental.enable_tensor_float_32_execution(True)


def test_the_probe_reads_onednn_fpmath_variables_in_a_fresh_process():
    """oneDNN's fpmath mode changes nothing on this AMD CPU (24 bits), and
    the probe records the variables that ask for it."""
    code = ("from tb_gradlens.compare import float32_probe; import json; "
            "print(json.dumps([float32_probe.probe(), float32_probe.probe(jit_compile=True)]))")
    env = dict(os.environ, TF_SET_ONEDNN_FPMATH_MODE="BF16", ONEDNN_DEFAULT_FPMATH_MODE="BF16",
               TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    for found in json.loads(done.stdout.strip().splitlines()[-1]):
        assert found["bits"] == 24
        assert found["fpmath"] == {"TF_SET_ONEDNN_FPMATH_MODE": "BF16", "ONEDNN_DEFAULT_FPMATH_MODE": "BF16"}


def _demo_fit(logdir, emulated, ieee_reference, steps=4, batch=32):
    """The README demo's MLP in mixed_float16, a comparison at every other step."""
    x, y = demo.load_digits_784()
    x, y = x[:steps * batch], y[:steps * batch]
    keras.utils.set_random_seed(0)
    model = demo.build_mlp("mixed_float16")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    callback = GradLensCallback(str(logdir), gradient_every=0, compare_every=2, ieee_reference=ieee_reference)
    if emulated:
        with other_hardware.emulated_reduced_float32(11):
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    else:
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[callback])


def _gradient_divergence(logdir, run):
    (record, data), = [v for v in read_records(str(logdir))[run].values() if v[0].kind == metadata.DIVERGENCE]
    return record, np.stack([d.numpy[:, 0] for d in data])


@pytest.fixture(scope="module")
def tf32_logdir(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("tf32")
    for run, emulated, ieee in (("unemulated", False, True), ("tf32_ieee", True, True), ("tf32", True, False)):
        _demo_fit(logdir / run, emulated, ieee)
    return logdir


@pytest.mark.slow
def test_the_ieee_reference_measures_float16_as_on_ieee_hardware_where_float32_is_tf32(tf32_logdir):
    """Under emulated TF32 the float32 reference's matmul inputs carry the
    float16 candidate's 10 bits: the float16 matmul error falls out of the
    comparison.  The IEEE reference (float64 there) keeps the divergence
    within 1% of the unemulated one; without it the divergence shrinks."""
    _, want = _gradient_divergence(tf32_logdir, "unemulated")
    record, ieee = _gradient_divergence(tf32_logdir, "tf32_ieee")
    np.testing.assert_allclose(ieee, want, rtol=0.01)
    precision = record.extras["reference"]["precision"]
    assert (precision["bits"], precision["cause"], precision["computed_in"]) == (11, "TF32", "float64")
    record, degraded = _gradient_divergence(tf32_logdir, "tf32")
    assert record.extras["reference"]["precision"]["computed_in"] == "float32"
    assert np.median(degraded / want) < 0.8  # the float16 matmuls' own error is gone from it
    _, plain = _gradient_divergence(tf32_logdir, "unemulated")
    assert _gradient_divergence(tf32_logdir, "unemulated")[0].extras["reference"]["precision"]["bits"] == 24
    assert plain.shape == degraded.shape


@pytest.mark.slow
def test_the_report_says_what_the_reference_was_and_where_the_run_trained(tf32_logdir, capsys):
    assert cli.main(["report", str(tf32_logdir), "-q"]) == cli.EXIT_OK
    text = capsys.readouterr().out
    runs = {block.split("\n", 1)[0][4:]: block for block in text.split("\n\n") if block.startswith("run ")}
    assert "float32 reference: TF32 in matmul/conv, 11 bits" in runs["tf32"]
    assert ("float32 reference: IEEE (computed in float64; float32 here is TF32 in matmul/conv, 11 bits)"
            in runs["tf32_ieee"])
    assert "float32 reference: IEEE float32, 24 bits" in runs["unemulated"]
    for block in runs.values():
        assert "environment: device CPU" in block and "TF32 switch on" in block and "jit_compile False" in block
    assert "float32 where the references run: TF32 in matmul/conv, 11 bits (measured without XLA)" in runs["tf32"]
    source = source_of(str(tf32_logdir))
    # every limit basis of the comparison says what the reference was
    for entry in source.entries_of_kind("tf32", metadata.DIVERGENCE):
        basis = routes_impl.limits_impl(source, "tf32", entry.tag)["basis"]
        assert basis and all(b.endswith("; float32 reference: TF32 in matmul/conv, 11 bits") for b in basis)
    (headline,) = [h for h in judgment_json.overview_json(analysis.overview(source)) if h["run"] == "tf32_ieee"]
    assert headline["environment"]["float32"]["bits"] == 11
    assert headline["environment"]["environment"]["tensorflow"] == tf.__version__


def _mlp_batches(steps, batch=16):
    from evaluation import real_models

    x, y = real_models.digits(steps * batch, np.random.default_rng(0))
    return [(tf.constant(x[i * batch:(i + 1) * batch]), tf.constant(y[i * batch:(i + 1) * batch]))
            for i in range(steps)]


def test_a_comparison_whose_sides_round_alike_computes_its_reference_twice(tmp_path):
    """Nothing to round between two float32 sides: the stable-rounding
    column is the reference computed again, exactly 0 where float32 repeats
    itself (this CPU), and the limits are the depth formula's as before."""
    from evaluation import real_models

    model = real_models.mlp("float32")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    (x, y), = _mlp_batches(1)
    result = compare.compare_keras(model, x, y, reference="float32", candidate=compare.Variant(None, jit_compile=True))
    stable = result.gradient_divergence.numpy()[:, metadata.DIVERGENCE_COLUMNS.index(metadata.STABLE_REL_L2)]
    assert (stable == 0).all()
    assert (result.gradient_divergence.numpy()[:, 0] > 0).any()  # XLA rounds otherwise than the graph


def test_where_float32_does_not_repeat_itself_a_float32_difference_is_judged_against_its_repeat(tmp_path):
    """Emulated non-repeatable float32 (every matmul moved by up to 1% at
    random at every run, as GPU kernels that are not deterministic, much
    exaggerated): float32 against float32 differs by about 1%, beyond the
    depth formula's float32 floor; the reference computed twice differs as
    much, and the limit is never below that repeat: no alert."""
    from evaluation import real_models
    from tb_gradlens.keras import GradLens

    model = real_models.mlp("float32")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    lens = GradLens(str(tmp_path / "run"), compare_every=1)
    with other_hardware.emulated_nondeterministic_float32(1e-2):
        for step, (x, y) in enumerate(_mlp_batches(6)):
            lens.compare_keras(model, x, y, step, reference="float32", candidate="float32", activations=False)
    lens.flush()
    source = source_of(str(tmp_path))
    (entry,) = source.entries_of_kind("run", metadata.DIVERGENCE)
    series = source.series("run", entry.tag)
    values = series.column("rel_l2")
    repeat = series.column(metadata.STABLE_REL_L2)
    assert (values > codes.DEFAULT_THRESHOLDS.float32_rel_l2).any()  # above the formula's float32 floor
    assert (repeat > 0).all()  # the reference computed twice differs
    limits = np.asarray(routes_impl.limits_impl(source, "run", entry.tag)["limits"], np.float64)
    assert (limits.T >= codes.DEFAULT_THRESHOLDS.stable_factor * repeat - 1e-12).all()
    alerts, problems = analysis.run_alerts(source)
    assert problems == [] and [a for a in alerts if a.code.endswith("divergence")] == []

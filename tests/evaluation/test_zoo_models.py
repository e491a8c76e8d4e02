"""The zoo beyond real_models (evaluation/zoo_models.py, zoo_faults.py): every model trains a step.

What a user of the zoo needs: each healthy model builds under mixed_bfloat16,
computes in bfloat16 with a float32 output, and one ``train_on_batch`` with
its loss is finite; each fault builds under its policy, trains a step, and
has the layer or variable its ``row`` names (a row that names nothing would
make its alert "missed" whatever the lens does), with a code the analysis
knows.  The steps run eagerly: keras.applications models trace for 15-45 s
each on 2 cores, an eager step takes 1-25 s (ConvNeXtTiny's grouped
convolutions compile with XLA at each call).
"""

import json
import re

import keras
import numpy as np
import pytest

from tb_gradlens.analysis import codes
from tb_gradlens.writing import keras_private

from evaluation import real_models

from evaluation import alert_zoo
from evaluation import zoo_faults
from evaluation import zoo_models

pytestmark = [pytest.mark.slow]  # trains keras.applications models

BATCH = 4


def _one_step(workload, policy):
    model = workload.build(policy)
    built_before = model.built
    model.compile(optimizer="adam", loss=workload.loss, run_eagerly=True)
    x, y = workload.data(BATCH, np.random.default_rng(0))
    loss = float(model.train_on_batch(x, y))
    # The output a forward pass really returns: a functional model's symbolic
    # output spec skips the input cast of a custom layer built with
    # dtype="float32" and says bfloat16 where the layer returns float32.
    output = model(x, training=False)
    return model, built_before, loss, keras.backend.standardize_dtype(output.dtype)


def _paths(model):
    layers = keras_private.flatten_layers(model)[1:]
    return [getattr(layer, "path", None) or layer.name for layer in layers] + [v.path for v in model.variables]


@pytest.mark.parametrize("name", sorted(zoo_models.HEALTHY))
def test_a_healthy_model_trains_a_step_in_bfloat16_with_a_float32_output(name):
    model, built_before, loss, output_dtype = _one_step(zoo_models.HEALTHY[name], "mixed_bfloat16")
    assert np.isfinite(loss)
    assert output_dtype == "float32"
    assert any(layer.compute_dtype == "bfloat16" for layer in keras_private.flatten_layers(model))
    if name == "rmsnorm_swiglu":
        assert not built_before, "the subclassed model must be built by its first batch"


@pytest.mark.filterwarnings("ignore:Gradients do not exist")  # the unused_scale fault's own warning
@pytest.mark.parametrize("name", sorted(zoo_faults.FAULTS))
def test_a_fault_trains_a_step_and_has_the_row_it_names(name):
    fault = zoo_faults.FAULTS[name]
    model, _, _, output_dtype = _one_step(fault.workload, fault.policy)
    assert fault.code in codes.CODES + (alert_zoo.TRANSIENT,)
    assert [p for p in _paths(model) if re.search(fault.row, p)], "%r names no layer or variable" % fault.row
    expected = "bfloat16" if fault.code == codes.BF16_MODEL_OUTPUT else "float32"
    assert output_dtype == expected


@pytest.mark.parametrize("name", ["encoder_decoder_step", "decoder_bf16_output"])
def test_the_model_output_is_what_a_sub_model_train_step_ends_with(name, tmp_path):
    """A custom train_step that calls an encoder and a decoder, never the model
    (issue 38 item 4): the model output's dtype and layer are those of the
    decoder's last layer, not of the last layer Keras lists (the encoder's,
    listed after the decoder's); a float32 output raises no
    bf16_model_output, a bfloat16 one names the decoder's softmax."""
    from tb_gradlens import analysis
    from tb_gradlens.keras import GradLensCallback
    from tests.support.readback import read_records
    from tests.support.readback import source_of

    fault = zoo_faults.FAULTS.get(name)
    workload = fault.workload if fault else zoo_models.HEALTHY[name]
    model = workload.build("mixed_bfloat16")
    listed = [layer.name for layer in keras_private.flatten_layers(model)[1:]]
    assert listed.index("predictions") < listed.index("enc_code")  # listing != forward order
    model.compile(optimizer="adam", loss=workload.loss)
    x, y = workload.data(2 * BATCH, np.random.default_rng(0))
    model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0,
              callbacks=[GradLensCallback(str(tmp_path / "run"), compare_every=0)])
    (maps,) = [data for record, data in read_records(str(tmp_path))["run"].values() if record.kind == "dtypes"]
    dtype_map = json.loads(maps[-1].numpy.item())
    softmax = model.decoder.layers[-1]
    output = getattr(softmax, "path", None) or softmax.name  # as the map names its layers
    assert output in [layer["path"] for layer in dtype_map["layers"]]
    expected = "bfloat16" if fault else "float32"
    assert (dtype_map["model_output_dtype"], dtype_map.get("model_output_layer")) == (expected, output)
    alerts, problems = analysis.run_alerts(source_of(str(tmp_path)))
    assert problems == []
    found = [a.variables for a in alerts if a.code == codes.BF16_MODEL_OUTPUT]
    assert found == ([[output]] if fault else [])


def test_the_split_is_ten_and_ten_of_new_models_and_faults_split_by_class():
    assert sorted(zoo_models.SPLIT) == sorted(zoo_models.HEALTHY)
    assert sorted(zoo_models.SPLIT.values()) == ["calibration"] * 10 + ["held_out"] * 10
    old = set(real_models.ZOO) | set(real_models.FAULT_ZOO)
    assert not old & (set(zoo_models.HEALTHY) | set(zoo_faults.FAULTS))
    assert sorted(zoo_faults.FAULT_SPLIT) == sorted(zoo_faults.FAULTS)
    calibration = {n for n, s in zoo_faults.FAULT_SPLIT.items() if s == "calibration"}
    assert calibration == set(zoo_faults.FAULT_CALIBRATION)

"""The zoo beyond real_models (benchmarks/zoo_models.py, zoo_faults.py): every model trains a step.

What a user of the zoo needs: each healthy model builds under mixed_bfloat16,
computes in bfloat16 with a float32 output, and one ``train_on_batch`` with
its loss is finite; each fault builds under its policy, trains a step, and
has the layer or variable its ``row`` names (a row that names nothing would
make its alert "missed" whatever the lens does), with a code the analysis
knows.  The steps run eagerly: keras.applications models trace for 15-45 s
each on 2 cores, an eager step takes 1-25 s (ConvNeXtTiny's grouped
convolutions compile with XLA at each call).
"""

import re

import keras
import numpy as np
import pytest

from tb_gradlens.analysis import codes
from tb_gradlens.writing import keras_private

from tests.support import real_models

import zoo_faults  # benchmarks/ (tests/conftest.py puts it on sys.path)
import zoo_models  # benchmarks/ (tests/conftest.py puts it on sys.path)

pytestmark = [pytest.mark.slow]  # trains keras.applications models

BATCH = 4


def _one_step(workload, policy):
    model = workload.build(policy)
    built_before = model.built
    model.compile(optimizer="adam", loss=workload.loss, run_eagerly=True)
    x, y = workload.data(BATCH, np.random.default_rng(0))
    loss = float(model.train_on_batch(x, y))
    output = model.compute_output_spec(keras.KerasTensor(x.shape, x.dtype))
    return model, built_before, loss, output.dtype


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
    assert fault.code in codes.CODES
    assert [p for p in _paths(model) if re.search(fault.row, p)], "%r names no layer or variable" % fault.row
    expected = "bfloat16" if fault.code == codes.BF16_MODEL_OUTPUT else "float32"
    assert output_dtype == expected


def test_the_split_is_seven_and_seven_of_new_models():
    assert sorted(zoo_models.SPLIT) == sorted(zoo_models.HEALTHY)
    assert sorted(zoo_models.SPLIT.values()) == ["calibration"] * 7 + ["held_out"] * 7
    old = set(real_models.ZOO) | set(real_models.FAULT_ZOO)
    assert not old & (set(zoo_models.HEALTHY) | set(zoo_faults.FAULTS))

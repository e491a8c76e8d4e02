"""The verdict zoo's subset (evaluation/verdict_zoo.py): models nobody tuned the limits on.

What a user needs (issue 25): healthy models the limits were not calibrated on
raise no warning and no error; each injected fault raises its code on the
layer or variable that has it from its first logged step; and the alerts and
the precision advisor never contradict each other on one batch: when a 16-bit
divergence alert fires, the advisor on that batch recommends layers that bring
every row within its limit, the faulty one among them; when it recommends
nothing, no such alert fires.  The full table is BENCHMARKS.md's.
"""

import re

import numpy as np
import pytest

import tb_gradlens

from tests.support.readback import alerts_of_two_comparisons

from evaluation import alert_zoo
from evaluation import verdict_zoo
from evaluation import zoo_faults
from evaluation import zoo_models

pytestmark = [pytest.mark.slow]  # trains real models

CONFIGS = {c.name: c for c in verdict_zoo.quick_configs()}
DIVERGENCE_CODES = ("bf16_divergence", "f16_divergence")


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_verdict_zoo_configuration(name, tmp_path):
    config = CONFIGS[name]
    (result,) = alert_zoo.run([config], str(tmp_path), log=lambda *a, **k: None)
    _, alerts, problems, _, headlines = result
    assert problems == []
    ok, why = alert_zoo.verdict(config, alerts, problems, headlines)
    assert ok, "%s: %s (alerts: %s)" % (name, why, sorted({(a.code, tuple(a.variables)) for a in alerts}))


def _alerts_then_advice(workload, policy, tmp_path):
    """Two comparisons of one batch (an alert needs two in a row), their divergence alerts, and
    the advisor on the same batch, traced as the comparisons are."""
    model = workload.build(policy)
    model.compile(optimizer="adam", loss=workload.loss)
    x, y = workload.data(16, np.random.default_rng(0))
    found = alerts_of_two_comparisons(model, x, y, tmp_path)
    advice = tb_gradlens.advise(model, (x, y), traced=True).advice
    return [a for a in found if a.code in DIVERGENCE_CODES], advice


@pytest.mark.parametrize("name", ["naive_std_bilstm", "unscaled_attention", "gru_text", "rmsnorm_swiglu",
                                  "timestamp_normalization", "bf16_embedding_distance", "two_towers"])
def test_the_alerts_and_the_advisor_agree_on_a_batch(name, tmp_path):
    fault = zoo_faults.FAULTS.get(name)
    workload, policy = (fault.workload, fault.policy) if fault else (zoo_models.HEALTHY[name], "mixed_bfloat16")
    alerts, advice = _alerts_then_advice(workload, policy, tmp_path)
    rec = advice.recommendation
    assert bool(alerts) == bool(fault), [a.variables for a in alerts]
    assert bool(alerts) == bool(rec["float32"]), (advice.before, rec)
    if alerts:
        # The recommendation is verified within every row's limit and names the faulty layer
        # itself (the deep models' share of parameters left in 16 bits: BENCHMARKS.md).
        assert rec["met"] and rec["after"] <= advice.tolerance < advice.before
        assert any(re.search(zoo_faults.advised_layers(fault), layer) for layer in rec["layers"]), rec["layers"]
    else:
        assert advice.before <= advice.tolerance and rec["met"]

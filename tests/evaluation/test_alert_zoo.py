"""The alert zoo's subset (evaluation/alert_zoo.py --tiny): real trainings, real alerts.

What a user needs: the README demo's MLP in the recommended mixed_bfloat16 setup
(and in float32) raises no warning and no error; each injected fault raises its
code on the variable or layer that has it, from the step it starts (within one
logging interval).  The full table (MobileNetV2, ResNet50, the Transformer, an
LSTM, a BatchNorm+Dropout CNN) is the benchmark's: BENCHMARKS.md.
"""

import pytest

from evaluation import alert_zoo

pytestmark = [pytest.mark.slow]  # trains real models

CONFIGS = {c.name: c for c in alert_zoo.all_configs(tiny=True)}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_alert_zoo_configuration(name, tmp_path):
    config = CONFIGS[name]
    (result,) = alert_zoo.run([config], str(tmp_path), log=lambda *a, **k: None)
    _, alerts, problems, _, headlines = result
    assert problems == []
    loud = sorted({(a.severity, a.code, tuple(a.variables)) for a in alerts if a.severity != "info"})
    if config.expect is None:
        assert loud == [], "false alerts on a healthy model"
        return
    ok, why = alert_zoo.verdict(config, alerts, problems, headlines)
    assert ok, "%s: %s (alerts: %s)" % (name, why, loud)
    # The code is raised on the variable or layer that has the fault, and the
    # alert points the tab at it from its first step.
    found = [a for a in alerts if a.code == config.expect.code]
    assert all(a.view["step"] == a.step_first for a in found)


def test_the_table_names_every_code_and_verdict(tmp_path):
    none = CONFIGS["fault_none_numpy"]
    results = alert_zoo.run([none], str(tmp_path), log=lambda *a, **k: None)
    table = alert_zoo.table(results)
    header = table.splitlines()[0]
    for code in alert_zoo.CODES:
        assert code.replace("_", " ") in header
    assert "| fault_none_numpy | gradient of 'numpy' is None | 20 | W |" in table
    assert "ok: caught at step 0" in table

"""The advisor and the alerts on one batch of every zoo model: do they agree?

For each configuration (every fault of ``zoo_faults`` and the bfloat16 healthy
models of ``zoo_models``): two lens comparisons of one batch (an alert needs
two in a row) judged by the analysis the tab and the CLI share, then
``tb_gradlens.advise`` on the same batch, traced as the comparisons are.  A
row of the table holds the 16-bit divergence alerts, the advisor's harm
index before and after its recommendation, the layers it names, the share
of parameters it leaves in 16 bits, and whether the two agree:

* an alert fired -> a non-empty recommendation, verified within every row's
  limit (harm index after <= tolerance), naming the fault's layer itself;
* no alert -> no recommendation.

Run (from the repository root)::

    python -m evaluation.advisor_zoo                 # everything (long on 2 cores)
    python -m evaluation.advisor_zoo --only 'naive'  # a regex on configuration names
"""

import argparse
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from evaluation import zoo_faults  # noqa: E402
from evaluation import zoo_models  # noqa: E402

DIVERGENCE_CODES = ("bf16_divergence", "f16_divergence")
BATCH = 16


def alerts_then_advice(workload, policy, log_dir):
    """The 16-bit divergence alerts of two comparisons of one batch and the
    advice on that batch (traced)."""
    import tensorflow as tf

    import tb_gradlens
    from tb_gradlens import analysis
    from tb_gradlens.keras import GradLens
    from tests.support.readback import source_of

    model = workload.build(policy)
    model.compile(optimizer="adam", loss=workload.loss)
    x, y = workload.data(BATCH, np.random.default_rng(0))
    as_tensors = lambda a: tf.nest.map_structure(tf.constant, a)  # noqa: E731
    lens = GradLens(log_dir, compare_every=1)
    for step in range(2):
        lens.compare_keras(model, as_tensors(x), as_tensors(y), step=step)
    lens.flush()
    found, problems = analysis.run_alerts(source_of(log_dir))
    start = time.perf_counter()
    advice = tb_gradlens.advise(model, (x, y), traced=True).advice
    return [a for a in found if a.code in DIVERGENCE_CODES], problems, advice, time.perf_counter() - start


def agreement(alerts, advice, fault_row):
    """``(ok, why)``: do the alerts and the advice agree (see the module)?"""
    rec = advice.recommendation or {}
    layers = rec.get("layers") or []
    if not alerts:
        return (not rec.get("float32"), "no alert, nothing recommended" if not rec.get("float32")
                else "no alert, yet %s recommended" % layers)
    if not rec.get("float32"):
        return False, "an alert, nothing recommended"
    if not rec.get("met"):
        return False, "recommended, not verified within the limits (%.3g)" % rec.get("after")
    if fault_row and not any(re.search(fault_row, layer) for layer in layers):
        return False, "the fault's layer is not named"
    return True, "verified within the limits"


def configs(only):
    out = [(name, f.workload, f.policy, zoo_faults.advised_layers(f)) for name, f in zoo_faults.FAULTS.items()]
    out += [(name, w, "mixed_bfloat16", None) for name, w in zoo_models.HEALTHY.items()]
    return [c for c in out if not only or re.search(only, c[0])]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="regex on configuration names")
    args = parser.parse_args(argv)
    rows, start = [], time.perf_counter()
    print("| configuration | split | alerts (16-bit divergence) | harm before | recommended | harm after | "
          "params in 16 bits | passes | seconds | agree |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, workload, policy, fault_row in configs(args.only):
        try:
            with tempfile.TemporaryDirectory() as log_dir:
                alerts, problems, advice, seconds = alerts_then_advice(workload, policy, log_dir)
        except Exception as e:  # noqa: BLE001 - one configuration's failure is a row of the table
            print("| %s | - | - | - | - | - | - | - | - | FAIL: %s: %s |" % (name, type(e).__name__, e), flush=True)
            rows.append(False)
            continue
        rec = advice.recommendation or {}
        ok, why = agreement(alerts, advice, fault_row)
        ok = ok and not problems
        share = rec.get("params_16bit_after", 0) / max(1.0, rec.get("params_total", 1) or 1)
        split = "fault" if fault_row else zoo_models.SPLIT.get(name, "-")
        print("| %s | %s | %s | %.3g | %s | %.3g | %.0f%% | %s | %.0f | %s: %s |" % (
            name, split, ", ".join(sorted({"%s %s" % (a.code, a.variables[0]) for a in alerts}))[:80] or "-",
            advice.before if advice.before is not None else float("nan"), ", ".join(rec.get("layers") or []) or "-",
            rec.get("after", float("nan")), 100 * share, advice.cost.get("passes"), seconds,
            "ok" if ok else "FAIL", why), flush=True)
        rows.append(ok)
    print("\n%d configurations, %d agree (%.0f s)" % (len(rows), sum(rows), time.perf_counter() - start))
    return 0 if all(rows) else 1


if __name__ == "__main__":
    sys.exit(main())

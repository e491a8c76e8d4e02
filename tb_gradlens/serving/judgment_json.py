"""The JSON of the analysis' judgments, shaped once for the routes and the command line.

TensorFlow-free.  ``analysis`` returns typed judgments (``tolerances.TagLimits``,
``advice.RunAdvice``); the functions here turn each into the JSON-ready dict
the plugin's route answers (docs/ROUTES.md) and ``tb-gradlens`` prints with
``--json``: one shape for one judgment, whoever asks.
"""

from typing import Any
from typing import Dict
from typing import List
from typing import Optional

import numpy as np

from tb_gradlens.analysis import advice as advice_analysis
from tb_gradlens.analysis import tolerances


def limits_json(found: tolerances.TagLimits) -> Dict[str, Any]:
    """The tolerances route: ``{"run", "tag", "kind", "column", "rows", "steps",
    "limits", "above", "harmed", "basis", "measured", "rule"}`` (``limits[r][s]``,
    null where a row is not judged at a step; ``above`` and ``harmed``: the
    steps at which each row is above its limit, and harmed)."""
    judgement, steps = found.judgement, found.steps
    n_rows = len(found.rows)
    return {
        "run": found.run,
        "tag": found.tag,
        "kind": found.kind,
        "column": judgement.column,
        "rows": list(found.rows),
        "steps": [int(s) for s in steps],
        "limits": row_limits_json(judgement),
        "above": [[int(steps[i]) for i in np.nonzero(judgement.above[:, r])[0]] for r in range(n_rows)],
        "harmed": [[int(steps[i]) for i in np.nonzero(judgement.hit[:, r])[0]] for r in range(n_rows)],
        "basis": list(judgement.basis),
        "measured": [bool(m) for m in judgement.measured],
        "rule": judgement.rule,
    }


def row_limits_json(judgement: tolerances.Judgement) -> List[List[Optional[float]]]:
    """[R][S] limits, JSON-ready (None where a row is not judged at a step)."""
    return [[None if not np.isfinite(v) else float(v) for v in judgement.limits[:, r]]
            for r in range(judgement.limits.shape[1])]


def advice_json(found: advice_analysis.RunAdvice) -> Dict[str, Any]:
    """The advice route: ``{"run", "latest": {..., "step", "tag", "code"} or
    null, "history": [{"step", "metric", "units": {name: alone}}], "errors": [text]}``."""
    return {
        "run": found.run,
        "latest": latest_advice_json(found.latest),
        "history": [{"step": step, "metric": advice.metric,
                     "units": {u["name"]: advice_analysis.alone_in_16_bits(u, advice) for u in advice.units}}
                    for step, advice in found.history],
        "errors": list(found.errors),
    }


def latest_advice_json(latest: Optional[advice_analysis.LatestAdvice]) -> Optional[Dict[str, Any]]:
    """A run's latest advice as the advice route and ``report --json`` give it (None: none)."""
    if latest is None:
        return None
    advice = latest.advice
    return {"writer": advice.writer, "metric": advice.metric, "reference": advice.reference,
            "candidate": advice.candidate, "tolerance": advice.tolerance,
            "gradient_before": advice.gradient_before, "worst_before": advice.worst_before,
            "tolerance_basis": advice.tolerance_basis, "before": advice.before,
            "loss_rel_error": advice.loss_rel_error, "units": [dict(u) for u in advice.units],
            "ranking": advice_analysis.ranked_units(advice), "recommendation": advice.recommendation,
            "named": advice_analysis.named(advice), "not_attributable": list(advice.not_attributable),
            "cost": dict(advice.cost), "float32": advice.float32,
            "float32_text": advice_analysis.float32_text(advice),
            "step": latest.step, "tag": latest.tag, "code": latest.code}

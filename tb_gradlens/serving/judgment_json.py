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

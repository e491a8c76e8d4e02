"""The JSON of the analysis' judgments, shaped once for the routes and the command line.

TensorFlow-free.  ``analysis`` returns typed judgments (``tolerances.TagLimits``,
``advice.RunAdvice``, ``overview.RunHeadline``, ``runs.RunComparison``); the
functions here turn each into the JSON-ready dict the plugin's route answers
(docs/ROUTES.md) and ``tb-gradlens`` prints with ``--json``: one shape for
one judgment, whoever asks.
"""

from typing import Any
from typing import Dict
from typing import List
from typing import Optional

import numpy as np

from tb_gradlens.analysis import advice as advice_analysis
from tb_gradlens.analysis.overview import RunHeadline
from tb_gradlens.analysis.overview import WorstDivergence
from tb_gradlens.analysis.run_verdict import ComparisonSummary
from tb_gradlens.analysis.runs import RunComparison
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


def overview_json(headlines: List[RunHeadline]) -> List[Dict[str, Any]]:
    """The headlines of the overview route (its ``runs``) and of ``report --json``."""
    return [headline_json(h) for h in headlines]


def headline_json(headline: RunHeadline) -> Dict[str, Any]:
    """One run's headline: ``{"run", "worst_divergence", "no_comparison",
    "first_nonfinite_step", "first_nonfinite_variables", "disconnected_variables",
    "zero_gradient_variables", "alert_counts", "step_offsets", "nonfinite_replay",
    "optimizer_steps", "environment"}``."""
    return dict(headline._asdict(), worst_divergence=worst_divergence_json(headline.worst_divergence))


def worst_divergence_json(worst: Optional[WorstDivergence]) -> Optional[Dict[str, Any]]:
    """``{"verdict", "above_steps", "harmed_steps", "verdict_text", "metric", "value",
    "row", "step", "tag", "kind", "reference", "candidate", "limit", "ratio",
    "nonfinite"}`` of a run's worst divergence, or None."""
    return None if worst is None else worst._asdict()


def run_comparison_json(comparison: RunComparison) -> Dict[str, Any]:
    """The compare route and ``tb-gradlens compare --json``: ``{"quantity": {"kind",
    "tag", "row", "column", "tags": {"a", "b", "noise"}}, "note", "run_a", "run_b",
    "noise_run", "noise_runs", "steps", "a", "b", "difference", "ratio",
    "rel_difference", "only_in_a", "only_in_b", "noise": {"steps",
    "rel_difference"} or null, "summary", "environments", "environment_differences"}``
    (the long sequences NumPy arrays)."""
    q = comparison.quantity
    noise = None
    if comparison.noise_steps is not None:
        noise = {"steps": comparison.noise_steps, "rel_difference": comparison.noise_rel_difference}
    return {
        "quantity": {"kind": q.kind, "tag": q.tag, "row": q.row, "column": q.column, "tags": dict(comparison.tags)},
        "note": comparison.note,
        "run_a": comparison.run_a,
        "run_b": comparison.run_b,
        "noise_run": comparison.noise_run,
        "noise_runs": list(comparison.noise_runs),
        "steps": comparison.steps,
        "a": comparison.a,
        "b": comparison.b,
        "difference": comparison.difference,
        "ratio": comparison.ratio,
        "rel_difference": comparison.rel_difference,
        "only_in_a": comparison.only_in_a,
        "only_in_b": comparison.only_in_b,
        "noise": noise,
        "summary": comparison_summary_json(comparison.summary),
        "environments": dict(comparison.environments),
        "environment_differences": comparison.environment_differences,
    }


def comparison_summary_json(summary: ComparisonSummary) -> Dict[str, Any]:
    """``{"max_abs_rel_difference", "noise", "exceeds_noise", "first_exceeding_step",
    "nonfinite"[, "shared_steps", "needed_steps"], "verdict"}`` (the step counts
    only when too few steps were logged by all runs to judge)."""
    out = {
        "max_abs_rel_difference": summary.max_abs_rel_difference,
        "noise": summary.noise,
        "exceeds_noise": summary.exceeds_noise,
        "first_exceeding_step": summary.first_exceeding_step,
        "nonfinite": summary.nonfinite,
    }
    if summary.shared_steps is not None:
        out.update(shared_steps=summary.shared_steps, needed_steps=summary.needed_steps)
    out["verdict"] = summary.verdict
    return out

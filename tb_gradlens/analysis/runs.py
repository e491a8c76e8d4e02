"""Run comparison (``compare_runs``): one quantity of two runs, step by step.

TensorFlow-free.  "compare" alone is the precision comparison of one step
(``tb_gradlens.compare``); this compares two whole runs (e.g. a float32 run
and a bfloat16 run), optionally against a noise-floor run.  The default
quantity is the training loss (the ``loss`` scalar); a run without one falls
back to the loss its comparisons logged, and says so.  NaN and Inf win: a
run that became non-finite exceeds any noise floor from that step.
"""

import dataclasses
from typing import Any
from typing import Dict
from typing import Optional
from typing import Tuple

import numpy as np
from tensorboard import errors

from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import environments
from tb_gradlens.analysis import harm
from tb_gradlens.analysis.record_source import RecordSource

SCALAR = "scalar"
LOSS_TAG = "loss"


@dataclasses.dataclass(frozen=True)
class Quantity:
    """What to compare: a scalar tag, or (kind, row, column) of a record.

    ``tag`` is the scalar tag for kind ``scalar`` (default ``loss``); for a
    record kind it is an optional tag prefix (e.g. ``gradients``) choosing
    among records of the same kind.  Records of a kind differ between runs
    only by the digest in their tag, so they are found by kind and row.
    """

    kind: str = SCALAR
    tag: Optional[str] = None
    row: Optional[str] = None
    column: Optional[str] = None


DEFAULT_QUANTITY = Quantity(SCALAR, LOSS_TAG)


def quantity_series(source: RecordSource, run: str, quantity: Quantity) -> Tuple[np.ndarray, np.ndarray, str]:
    """(steps int64, values float64, tag) of ``quantity`` in ``run``.

    Raises NotFoundError when the run lacks it, InvalidArgumentError when
    the quantity is ill-formed.
    """
    if quantity.kind == SCALAR:
        steps, _, values = source.scalars(run, quantity.tag or LOSS_TAG)
        return steps, values, quantity.tag or LOSS_TAG
    if quantity.kind not in metadata.KINDS or quantity.kind in metadata.JSON_KINDS:
        raise errors.InvalidArgumentError(
            "kind must be 'scalar' or a float record kind, not %r" % (quantity.kind,)
        )
    entries = source.entries_of_kind(run, quantity.kind)
    if quantity.tag:
        prefix = quantity.tag.rstrip("/") + "/"
        entries = [e for e in entries if e.tag == quantity.tag or e.tag.startswith(prefix)]
    if not entries:
        raise errors.NotFoundError(
            "run %r has no %s record%s" % (
                run, quantity.kind, " under %r" % quantity.tag if quantity.tag else "")
        )
    row = quantity.row
    if row is None:
        single = {e.record.rows[0] for e in entries if len(e.record.rows) == 1}
        if len(single) == 1 and all(len(e.record.rows) == 1 for e in entries):
            row = single.pop()
        else:
            raise errors.InvalidArgumentError("row is required for kind %r" % quantity.kind)
    entries = [e for e in entries if row in e.record.rows]
    if not entries:
        raise errors.NotFoundError("run %r has no %s record with row %r" % (run, quantity.kind, row))
    column = quantity.column or codes.DEFAULT_COLUMN.get(quantity.kind)
    if column is None:
        raise errors.InvalidArgumentError("column is required for kind %r" % quantity.kind)
    if column not in metadata.KIND_COLUMNS[quantity.kind]:
        raise errors.InvalidArgumentError("kind %r has no column %r" % (quantity.kind, column))
    entry = max(entries, key=lambda e: (e.max_step if e.max_step is not None else -1, e.tag))
    series = source.series(run, entry.tag)
    values = series.values[:, series.record.rows.index(row), series.record.columns.index(column)]
    return series.steps, values.astype(np.float64), entry.tag


def resolve_quantity(source, runs, quantity):
    """(quantity, note): ``quantity`` with its defaults, or the training loss
    from the comparisons when a run has no ``loss`` scalar (``note`` says so;
    None otherwise).  NotFoundError, naming what the run has, when neither
    exists."""
    if quantity.kind != SCALAR or (quantity.tag and quantity.tag != LOSS_TAG):
        return quantity, None
    listing = source.scalar_listing()
    lacking = [r for r in runs if LOSS_TAG not in listing.get(r, {})]
    if not lacking:
        return Quantity(SCALAR, LOSS_TAG), None
    name = _loss_comparison_name(source, runs)
    if name is None:
        run = lacking[0]
        scalars = sorted(listing.get(run, {}))
        raise errors.NotFoundError(
            "run %r has no %r scalar (its scalars: %s) and no loss_comparison record to take the "
            "training loss from; choose a quantity (CLI: --kind/--tag/--row/--column, route: kind=, "
            "tag=, row=, column=), e.g. --kind grad_stats --row VARIABLE"
            % (run, LOSS_TAG, ", ".join(scalars) if scalars else "none")
        )
    note = (
        "run %s has no %r scalar: comparing the training loss the comparisons logged instead "
        "(loss_comparison %s, candidate column), at the comparison steps only"
        % (", ".join(repr(r) for r in lacking), LOSS_TAG, name)
    )
    return Quantity(metadata.LOSS_COMPARISON, name, "loss", "candidate"), note


def _loss_comparison_name(source, runs):
    """A loss_comparison tag name every run has, preferring a float32 reference
    (the default comparison: its candidate is the training step's loss)."""
    common = None
    for run in runs:
        try:
            entries = source.entries_of_kind(run, metadata.LOSS_COMPARISON)
        except errors.NotFoundError:
            return None
        names = {}
        for e in entries:
            label = records.read_variant(e.record.extras.get("reference")).label
            names[metadata.parse_tag(e.tag).name] = label
        common = names if common is None else {k: v for k, v in common.items() if k in names}
    if not common:
        return None
    return sorted(common, key=lambda k: (common[k] != "float32", k))[0]


def last_per_step(steps, values):
    """(unique steps, value logged last at each) for series with repeated steps."""
    steps = np.asarray(steps)
    if len(steps) < 2 or np.all(np.diff(steps) > 0):
        return steps, values
    reverse = steps[::-1]
    uniq, index = np.unique(reverse, return_index=True)
    return uniq, values[::-1][index]


def relative_difference(a, b):
    """(b - a) / |a| elementwise (a = 0: +-inf, or NaN if b = 0 too)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return (b - a) / np.abs(a)


def align(steps_a, values_a, steps_b, values_b):
    """(common steps, a at them, b at them, steps only in a, steps only in b)."""
    steps_a, values_a = last_per_step(steps_a, values_a)
    steps_b, values_b = last_per_step(steps_b, values_b)
    common, ia, ib = np.intersect1d(steps_a, steps_b, assume_unique=True, return_indices=True)
    return (
        common,
        values_a[ia],
        values_b[ib],
        np.setdiff1d(steps_a, steps_b, assume_unique=True),
        np.setdiff1d(steps_b, steps_a, assume_unique=True),
    )


def max_abs_rel(rel, a, b):
    """max |rel| where a and b are finite (0/0 ignored), None when nothing is
    left; NaN (or Inf) when a or b is NaN (or infinite) at some step: the
    non-finite value wins."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    values = np.concatenate([a, b])
    if np.isnan(values).any():
        return float("nan")
    if np.isinf(values).any():
        return float("inf")
    x = np.abs(np.asarray(rel, np.float64))
    x = x[~np.isnan(x)]
    return float(x.max()) if len(x) else None


def first_nonfinite_step(steps, values):
    """(first step where ``values`` is NaN or infinite, "NaN"/"infinite"), or (None, None)."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return None, None
    i = int(np.argmax(bad))
    return int(steps[i]), "NaN" if np.isnan(values[i]) else "infinite"


def compare_runs(source: RecordSource, run_a: str, run_b: str, quantity: Quantity = DEFAULT_QUANTITY,
                 noise_run: Optional[str] = None,
                 thresholds: codes.Thresholds = codes.DEFAULT_THRESHOLDS) -> Dict[str, Any]:
    """The run comparison: ``quantity`` of two runs of one logdir, step-aligned.

    At the steps both runs logged: a, b, difference b - a, ratio b / a and
    relative difference (b - a) / |a|.  Steps logged by one run only are
    listed, never dropped silently.  With ``noise_run`` (e.g. the reference
    precision with another seed), its relative difference to run A is the
    noise floor, and the verdict rests on sustained evidence: over windows
    of logged steps (at least ``thresholds.run_noise_window``, about 20 per
    run) B's mean |rel diff| against the noise run's in the same window;
    ``summary.exceeds_noise`` is True from the first of
    ``run_noise_windows`` windows in a row above ``run_noise_factor`` x (or
    where B is non-finite while A is not), ``summary.first_exceeding_step``
    its first step, ``summary.noise`` the one noise figure (the noise run's
    mean there, the ratio, the window and the rule) and ``summary.verdict``
    says it in words.  How it was checked on float32 runs
    of many seeds: docs/benchmarks-history.md.

    Runs whose recorded environments differ (device, TF32, op determinism,
    XLA, oneDNN, replicas, versions: ``environments``) are not compared for
    precision: ``environment_differences`` lists where, ``summary.verdict``
    says it is not a precision verdict and ``exceeds_noise`` is None.

    Returns a JSON-ready dict whose long sequences are NumPy arrays;
    ``note`` is set when the default quantity fell back (``resolve_quantity``).
    """
    runs = [run_a, run_b] + ([noise_run] if noise_run is not None else [])
    quantity, note = resolve_quantity(source, runs, quantity)
    steps_a, values_a, tag_a = quantity_series(source, run_a, quantity)
    steps_b, values_b, tag_b = quantity_series(source, run_b, quantity)
    common, a, b, only_a, only_b = align(steps_a, values_a, steps_b, values_b)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = b / a
    rel = relative_difference(a, b)
    noise = tag_noise = None
    if noise_run is not None:
        steps_n, values_n, tag_noise = quantity_series(source, noise_run, quantity)
        n_common, na, nn, _, _ = align(steps_a, values_a, steps_n, values_n)
        noise = {"steps": n_common, "rel_difference": relative_difference(na, nn), "a": na, "values": nn}
    summary = _summary(common, a, b, rel, noise, thresholds)
    differing = environments.differences(source, {"A": run_a, "B": run_b, "noise": noise_run})
    if differing:
        summary = _not_a_verdict(summary, differing)
    if noise is not None:
        noise = {"steps": noise["steps"], "rel_difference": noise["rel_difference"]}
    column = quantity.column if quantity.kind == SCALAR else (
        quantity.column or codes.DEFAULT_COLUMN.get(quantity.kind))
    return {
        "quantity": {"kind": quantity.kind, "tag": quantity.tag, "row": quantity.row, "column": column,
                     "tags": {"a": tag_a, "b": tag_b, "noise": tag_noise}},
        "note": note,
        "run_a": run_a,
        "run_b": run_b,
        "noise_run": noise_run,
        "steps": common,
        "a": a,
        "b": b,
        "difference": b - a,
        "ratio": ratio,
        "rel_difference": rel,
        "only_in_a": only_a,
        "only_in_b": only_b,
        "noise": noise,
        "summary": summary,
        "environments": {label: environments.run_environment(source, run)["text"]
                         for label, run in (("a", run_a), ("b", run_b), ("noise", noise_run)) if run is not None},
        "environment_differences": differing,
    }


def _not_a_verdict(summary, differing):
    """``summary`` of runs whose environments differ: no precision verdict
    (``exceeds_noise`` None), what the numbers alone say kept in words."""
    out = dict(summary, exceeds_noise=None, first_exceeding_step=None)
    out["verdict"] = "%s; the numbers alone: %s" % (
        environments.NOT_A_VERDICT % environments.differences_text(differing), summary["verdict"])
    return out


def restrict_run_comparison(result: Dict[str, Any], step_min: Optional[int] = None,
                            step_max: Optional[int] = None) -> Dict[str, Any]:
    """A ``compare_runs`` answer with its step-aligned sequences cut to
    ``[step_min, step_max]`` (a display filter: the summary, decided on
    the whole runs, stays as it is)."""
    if step_min is None and step_max is None:
        return result

    def keep(steps):
        steps = np.asarray(steps)
        lo = -np.inf if step_min is None else step_min
        hi = np.inf if step_max is None else step_max
        return (steps >= lo) & (steps <= hi)

    out = dict(result)
    index = keep(result["steps"])
    for key in ("steps", "a", "b", "difference", "ratio", "rel_difference"):
        out[key] = np.asarray(result[key])[index]
    for key in ("only_in_a", "only_in_b"):
        out[key] = np.asarray(result[key])[keep(result[key])]
    if result["noise"] is not None:
        index = keep(result["noise"]["steps"])
        out["noise"] = {k: np.asarray(v)[index] for k, v in result["noise"].items()}
    return out


def _summary(common, a, b, rel, noise, thresholds):
    """The verdict of a run comparison (see ``compare_runs``)."""
    out = {
        "max_abs_rel_difference": max_abs_rel(rel, a, b),
        "noise": None,
        "exceeds_noise": None,
        "first_exceeding_step": None,
        "nonfinite": {},
    }
    a_step, a_what = first_nonfinite_step(common, a)
    b_step, b_what = first_nonfinite_step(common, b)
    out["nonfinite"] = {"a": a_step, "b": b_step, "noise": None}
    if noise is None:
        out["verdict"] = _plain_verdict(common, rel, out["max_abs_rel_difference"], a_step, a_what,
                                        b_step, b_what)
        return out
    n_steps, n_rel = noise["steps"], noise["rel_difference"]
    out["nonfinite"]["noise"] = first_nonfinite_step(n_steps, noise["values"])[0]
    shared, ib, inn = np.intersect1d(common, n_steps, assume_unique=True, return_indices=True)
    b_bad = ~np.isfinite(b[ib]) & np.isfinite(a[ib])
    if b_bad.any():
        i = int(np.argmax(b_bad))
        out["exceeds_noise"], out["first_exceeding_step"] = True, int(shared[i])
        out["verdict"] = "beyond the noise floor from step %d: run B is %s there" % (
            shared[i], "NaN" if np.isnan(b[ib][i]) else "infinite")
        return out
    out.update(_windowed(shared, rel[ib], n_rel[inn], thresholds))
    return out


def _windowed(steps, rel_b, rel_n, thresholds):
    """The sustained-evidence verdict: windows of logged steps, B's mean
    |(B-A)/|A|| against the noise run's in the same window (``harm``)."""
    width = harm.window_width(len(steps), thresholds.run_noise_window)
    need = width * thresholds.run_noise_windows
    rule = ("beyond when B's mean |(B-A)/|A|| is above %g x the noise run's in %d windows of %d logged steps "
            "in a row" % (thresholds.run_noise_factor, thresholds.run_noise_windows, width))
    if len(steps) < need:
        return {"noise": {"rule": rule, "window": width, "level": None, "ratio": None},
                "verdict": "cannot be judged against the noise floor: %d step(s) logged by all three runs, "
                           "the rule needs %d (%s)" % (len(steps), need, rule)}
    mb, mn = harm.window_means(rel_b, width), harm.window_means(rel_n, width)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratios = np.where(mn > 0, mb / mn, np.where(mb > 0, np.inf, 0.0))
    ratios = np.nan_to_num(ratios, nan=0.0)
    first = harm.sustained_window(ratios, thresholds.run_noise_factor, thresholds.run_noise_windows)
    w = first if first is not None else int(np.argmax(ratios))
    span = "steps %d-%d" % (steps[w * width], steps[(w + 1) * width - 1])
    noise = {"rule": rule, "window": width, "level": float(mn[w]), "ratio": float(ratios[w])}
    if first is None:
        return {"noise": noise, "exceeds_noise": False,
                "verdict": "within the noise floor: B's mean |(B-A)/|A|| is at most %.3gx the noise run's "
                           "(%.3g against %.3g over %s; %s)" % (ratios[w], mb[w], mn[w], span, rule)}
    return {"noise": noise, "exceeds_noise": True, "first_exceeding_step": int(steps[w * width]),
            "verdict": "beyond the noise floor from step %d: B's mean |(B-A)/|A|| is %.3g over %s, %.3gx the "
                       "noise run's %.3g (%s)" % (steps[w * width], mb[w], span, ratios[w], mn[w], rule)}


def _plain_verdict(common, rel, largest, a_step, a_what, b_step, b_what):
    if not len(common):
        return "no step logged by both runs"
    if b_step is not None or a_step is not None:
        parts = []
        if b_step is not None:
            parts.append("run B is %s from step %d" % (b_what, b_step))
        if a_step is not None:
            parts.append("run A is %s from step %d" % (a_what, a_step))
        return "; ".join(parts)
    if largest is None:
        return "no comparable step"
    finite = np.where(np.isnan(rel), -np.inf, np.abs(rel))
    return "max |(B-A)/|A|| %.3g at step %d (no noise-floor run to judge it against)" % (
        largest, int(common[int(np.argmax(finite))]))

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
from typing import Sequence
from typing import Tuple
from typing import Union

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
        kinds = [SCALAR] + [k for k in metadata.KINDS if k not in metadata.JSON_KINDS]
        raise errors.InvalidArgumentError(
            "kind must be one of %s, not %r%s" % (", ".join(kinds), quantity.kind, did_you_mean(quantity.kind, kinds))
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
    rows = sorted({r for e in entries for r in e.record.rows})
    entries = [e for e in entries if row in e.record.rows]
    if not entries:
        raise errors.NotFoundError("run %r has no %s record with row %r%s; its rows: %s" % (
            run, quantity.kind, row, did_you_mean(row, rows), choices(rows)))
    column = quantity.column or codes.DEFAULT_COLUMN.get(quantity.kind)
    columns = list(metadata.KIND_COLUMNS[quantity.kind])
    if column is None:
        raise errors.InvalidArgumentError("column is required for kind %r; its columns: %s" % (
            quantity.kind, choices(columns)))
    if column not in columns:
        raise errors.InvalidArgumentError("kind %r has no column %r%s; its columns: %s" % (
            quantity.kind, column, did_you_mean(column, columns), choices(columns)))
    entry = max(entries, key=lambda e: (e.max_step if e.max_step is not None else -1, e.tag))
    series = source.series(run, entry.tag)
    values = series.values[:, series.record.rows.index(row), series.record.columns.index(column)]
    return series.steps, values.astype(np.float64), entry.tag


def did_you_mean(given, valid):
    """" (did you mean 'x'?)" for the closest of ``valid`` to a mistyped
    ``given`` (difflib), else ""."""
    import difflib

    close = difflib.get_close_matches(str(given), [str(v) for v in valid], n=1, cutoff=0.6)
    return " (did you mean %r?)" % close[0] if close else ""


def choices(valid, limit=20):
    """The valid choices, the first ``limit`` and how many more."""
    valid = [str(v) for v in valid]
    return (", ".join(valid[:limit]) + (" and %d more" % (len(valid) - limit) if len(valid) > limit else "")) or "none"


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
                 noise_run: Union[None, str, Sequence[str]] = None,
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
    says it in words.  Several noise runs (float32 with other seeds): a
    window's floor is the largest of their means (one seed can track A
    closely by chance).  Runs whose recorded environments differ get no
    precision verdict (``environments.not_a_verdict``).  Checked on float32
    runs of many seeds: docs/benchmarks-history.md.

    Returns a JSON-ready dict whose long sequences are NumPy arrays;
    ``note`` is set when the default quantity fell back (``resolve_quantity``).
    """
    noise_runs = [noise_run] if isinstance(noise_run, str) else list(noise_run or [])
    runs = [run_a, run_b] + noise_runs
    quantity, note = resolve_quantity(source, runs, quantity)
    steps_a, values_a, tag_a = quantity_series(source, run_a, quantity)
    steps_b, values_b, tag_b = quantity_series(source, run_b, quantity)
    common, a, b, only_a, only_b = align(steps_a, values_a, steps_b, values_b)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = b / a
    rel = relative_difference(a, b)
    noises, tag_noise = [], None
    for run in noise_runs:
        steps_n, values_n, tag = quantity_series(source, run, quantity)
        tag_noise = tag_noise or tag
        n_common, na, nn, _, _ = align(steps_a, values_a, steps_n, values_n)
        noises.append({"steps": n_common, "rel_difference": relative_difference(na, nn), "a": na, "values": nn})
    summary = _summary(common, a, b, rel, noises, thresholds)
    labels: Dict[str, Optional[str]] = {"A": run_a, "B": run_b}
    labels.update({("noise" if len(noise_runs) == 1 else "noise %d" % (k + 1)): run for k, run in enumerate(noise_runs)})
    differing = environments.differences(source, labels)
    if differing:
        summary = environments.not_a_verdict(summary, differing)
    noise = None
    if noises:
        noise = {"steps": noises[0]["steps"], "rel_difference": noises[0]["rel_difference"]}
    column = quantity.column if quantity.kind == SCALAR else (
        quantity.column or codes.DEFAULT_COLUMN.get(quantity.kind))
    return {
        "quantity": {"kind": quantity.kind, "tag": quantity.tag, "row": quantity.row, "column": column,
                     "tags": {"a": tag_a, "b": tag_b, "noise": tag_noise}},
        "note": note,
        "run_a": run_a,
        "run_b": run_b,
        "noise_run": noise_runs[0] if noise_runs else None,
        "noise_runs": noise_runs,
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
                         for label, run in [("a", run_a), ("b", run_b)] + [
                             ("noise" if k == 0 else "noise %d" % (k + 1), r) for k, r in enumerate(noise_runs)]},
        "environment_differences": differing,
    }


def _summary(common, a, b, rel, noises, thresholds):
    """The verdict of a run comparison (see ``compare_runs``); ``noises``: one
    ``{"steps", "rel_difference", "values"}`` per noise run."""
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
    if not noises:
        out["verdict"] = _plain_verdict(common, rel, out["max_abs_rel_difference"], a_step, a_what,
                                        b_step, b_what)
        return out
    firsts = [first_nonfinite_step(n["steps"], n["values"])[0] for n in noises]
    out["nonfinite"]["noise"] = min((s for s in firsts if s is not None), default=None)
    shared = common
    for n in noises:
        shared = np.intersect1d(shared, n["steps"], assume_unique=True)
    ib = np.searchsorted(common, shared)
    n_rel = np.stack([n["rel_difference"][np.searchsorted(n["steps"], shared)] for n in noises])
    b_bad = ~np.isfinite(b[ib]) & np.isfinite(a[ib])
    if b_bad.any():
        i = int(np.argmax(b_bad))
        out["exceeds_noise"], out["first_exceeding_step"] = True, int(shared[i])
        out["verdict"] = "beyond the noise floor from step %d: run B is %s there" % (
            shared[i], "NaN" if np.isnan(b[ib][i]) else "infinite")
        return out
    out.update(_windowed(shared, rel[ib], n_rel, thresholds))
    return out


def _windowed(steps, rel_b, rel_n, thresholds):
    """The sustained-evidence verdict: windows of logged steps, B's mean
    |(B-A)/|A|| against the noise runs' in the same window, the largest of
    them (``rel_n`` [noise runs, steps]; ``harm``)."""
    width = harm.window_width(len(steps), thresholds.run_noise_window)
    need = width * thresholds.run_noise_windows
    rule = ("beyond when B's mean |(B-A)/|A|| is above %g x the noise run's in %d windows of %d logged steps "
            "in a row" % (thresholds.run_noise_factor, thresholds.run_noise_windows, width))
    if len(steps) < need:
        return {"noise": {"rule": rule, "window": width, "level": None, "ratio": None},
                "shared_steps": int(len(steps)), "needed_steps": int(need),
                "verdict": "cannot be judged against the noise floor: %d step(s) logged by all three runs, "
                           "the rule needs %d (%s)" % (len(steps), need, rule)}
    mb = harm.window_means(rel_b, width)
    mn = np.fmax.reduce([harm.window_means(r, width) for r in np.atleast_2d(rel_n)], axis=0)
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

"""The limit each compared row is judged against, step by step.

TensorFlow-free.  Every row of a ``divergence``, ``activation_divergence``
or ``loss_comparison`` record is judged by one of two rules:

* **measured** (``harm.measured_limits``, whose module states the rule):
  the record holds the stable-rounding pass's divergence and the candidate
  rounds more than its reference;
* **depth formula** (``rounding_budget``): elsewhere (older records, two
  sides that round alike, ``compare_fn``), with its early-baseline and
  reference-noise rules.

Harmed: beyond the limit for ``held_comparisons`` logged comparisons in a
row, or ``immediate_factor`` x beyond it at one.  Judged on the whole
record (``judge_entry`` restricts it to a filtered source's rows and steps
afterwards): a display filter never changes a limit or a verdict.
"""

import collections
import dataclasses
from typing import NamedTuple
from typing import Tuple

import numpy as np
from tensorboard import errors

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import harm
from tb_gradlens.analysis import rounding_budget
from tb_gradlens.analysis.rounding_budget import precision_bits

# One judged divergence-like series; arrays are [S, R] or [R]: values, limits (NaN: not judged
#   there), above (value > limit), hit (harmed: held, or far above), noise (a reference at its own
#   rounding noise), stable (the stable pass's divergence; NaN: not measured), between (born between
#   layers: the stable pass reproduces it); per row basis, codes, dtypes, depths and measured.
Judgement = collections.namedtuple(
    "Judgement",
    ("column", "values", "hit", "above", "noise", "limits", "basis", "codes", "dtypes", "depths", "measured",
     "rule", "stable", "between"),
)

# What a comparison's records state, for every record of it (metadata only).
ComparisonContext = collections.namedtuple(
    "ComparisonContext", ("activation_dtypes", "gradient_dtypes", "depth")
)

REPLICA_RULE = "Replicas see different examples: their disagreement is not judged (NaN/Inf only)."
STABLE_COLUMN = {
    metadata.DIVERGENCE: metadata.STABLE_REL_L2,
    metadata.ACTIVATION_DIVERGENCE: metadata.STABLE_REL_L2,
    metadata.LOSS_COMPARISON: metadata.STABLE_REL_ERROR,
}
# The sampling noise of a row (gradients and the loss only).
HALF_BATCH_COLUMN = {
    metadata.DIVERGENCE: metadata.HALF_BATCH_REL_L2,
    metadata.LOSS_COMPARISON: metadata.HALF_BATCH_REL_ERROR,
}


def is_replica_disagreement(record):
    """A tf.distribute replica-vs-mean record: replicas see other examples (gradient noise, not precision)."""
    return records.read_comparison(record).comparison == records.REPLICA_VS_MEAN


def least_precise(dtypes):
    """The least precise known dtype of ``dtypes`` (None if none is known)."""
    known = [d for d in dtypes if precision_bits(d) is not None]
    return min(known, key=precision_bits) if known else None


def comparison_key(entry):
    """Records of one comparison share it: tag name, reference and candidate."""
    extras = entry.record.extras
    name = metadata.parse_tag(entry.tag).name
    return (name, repr(extras.get("reference")), repr(extras.get("candidate")))


def comparison_contexts(entries):
    """{comparison_key: ComparisonContext} of a run's readable entries."""
    found = collections.defaultdict(dict)
    for entry in entries:
        if entry.kind not in codes.DIVERGENCE_KINDS:
            continue
        try:
            info = records.read_comparison(entry.record, entry.tag)
        except metadata.FormatError:
            continue
        found[comparison_key(entry)][entry.kind] = records.row_compute_dtypes(info, len(entry.record.rows))
    out = {}
    for key, kinds in found.items():
        acts = kinds.get(metadata.ACTIVATION_DIVERGENCE, [])
        grads = kinds.get(metadata.DIVERGENCE, [])
        out[key] = ComparisonContext(tuple(acts), tuple(grads), max(1, len(acts) or len(grads)))
    return out


def _row_dtypes(kind, info, n_rows, context):
    """(candidate, reference) effective dtype per row."""
    own = records.row_compute_dtypes(info, n_rows)
    whole = least_precise(
        list(context.activation_dtypes) + list(context.gradient_dtypes) + own
        + [info.candidate.compute_dtype]
    )
    if kind == metadata.ACTIVATION_DIVERGENCE:
        cand = [least_precise(own[: i + 1]) or (whole if own[i] is None else None) for i in range(n_rows)]
    else:
        cand = [whole] * n_rows
    ref = info.reference.compute_dtype
    if precision_bits(ref) is None:
        same_side = info.reference.policy == info.candidate.policy
        return cand, list(cand) if same_side else [None] * n_rows
    return cand, [ref] * n_rows


def _row_depths(kind, n_rows, context):
    if kind == metadata.ACTIVATION_DIVERGENCE:
        return list(range(1, n_rows + 1))
    return [context.depth] * n_rows


def _stable_scale(series, kind, output_stable):
    """[S, R] the stable-rounding divergence of each row (NaN: not measured)."""
    column = STABLE_COLUMN[kind]
    if column not in series.record.columns:
        return np.full((len(series.steps), len(series.record.rows)), np.nan)
    stable = series.column(column).astype(np.float64)
    if kind == metadata.LOSS_COMPARISON and output_stable is not None:
        stable = harm.loss_scale(stable, np.asarray(output_stable, np.float64)[:, None])
    return stable


def _half_batch(series, kind):
    """[S, R] the sampling noise of each row (NaN: not measured or none)."""
    column = HALF_BATCH_COLUMN.get(kind)
    if column is None or column not in series.record.columns:
        return np.full((len(series.steps), len(series.record.rows)), np.nan)
    return series.column(column).astype(np.float64)


def _measured_limits(kind, values, stable, half_batch, u, thresholds):
    """([S, R] limits, [S, R] between, ``basis(row, dtype)``) of the rows a
    stable-rounding pass measured (``harm.measured_limits``)."""
    fraction, factor, window = thresholds.half_batch_fraction, thresholds.stable_factor, thresholds.stable_window
    limits, between, by_noise = harm.measured_limits(
        values, stable, half_batch, u, factor=factor, fraction=fraction, window=window,
        boundary_factor=thresholds.boundary_factor if kind == metadata.ACTIVATION_DIVERGENCE else None,
        loss=kind == metadata.LOSS_COMPARISON)

    def basis(row, dtype):
        if by_noise[:, row].any():
            return ("%g x its sampling noise (the half batch's loss against the batch's), the largest of the last "
                    "%d logged comparisons; at least %g roundings (%.3g): a loss further from float32 than another "
                    "batch moves it changes what the training follows, wherever the rounding happened"
                    % (fraction, window, factor, factor * u[row]))
        noise_part = ("; at least %g x its sampling noise (the half batch's distance from the batch)" % fraction
                      if kind in HALF_BATCH_COLUMN else "")
        boundary = ("; the stable divergence counted up to %g x what the layers before carry (more is damage born "
                    "at this layer's boundary)" % thresholds.boundary_factor
                    if kind == metadata.ACTIVATION_DIVERGENCE else "")
        return ("%g x the stable-rounding divergence (%s rounding between layers), taken as at least one rounding "
                "(u = %.3g)%s%s; the largest of the last %d logged comparisons within their limit" % (
                    factor, dtype, u[row], boundary, noise_part, window))

    return limits, between, basis


def judge(series, context, thresholds=codes.DEFAULT_THRESHOLDS, output_stable=None):
    """The Judgement of a divergence-like Series (see the module doc).

    ``output_stable`` ([S], loss records only): the stable divergence of the
    model output at the same steps, the least the loss's scale is.
    """
    record = series.record
    kind = record.kind
    info = records.read_comparison(record, series.tag)
    column = codes.DEFAULT_COLUMN[kind]
    values = series.column(column).astype(np.float64)
    n_steps, n_rows = values.shape
    cand, ref = _row_dtypes(kind, info, n_rows, context)
    depths = _row_depths(kind, n_rows, context)
    nothing = np.zeros((n_steps, n_rows), bool)
    if info.comparison == records.REPLICA_VS_MEAN:
        unknown = np.full((n_steps, n_rows), np.nan)
        return Judgement(column, values, nothing, nothing, nothing, unknown,
                         [REPLICA_RULE] * n_rows, [codes.DIVERGENCE] * n_rows, cand, depths,
                         np.zeros(n_rows, bool), REPLICA_RULE, unknown, nothing)
    rules = [rounding_budget.row_rule(kind, cand[r], ref[r], depths[r], thresholds) for r in range(n_rows)]
    stable = _stable_scale(series, kind, output_stable)
    measured = np.isfinite(stable).any(axis=0) & np.array(
        [c is not None and (precision_bits(r) is None or precision_bits(c) < precision_bits(r))
         for c, r in zip(cand, ref)], dtype=bool)
    limits = np.tile(np.array([rule.limit for rule in rules], np.float64), (n_steps, 1))
    basis = [rule.basis for rule in rules]
    between = nothing
    if measured.any():
        u = np.array([float_formats.unit_roundoff(c) if m else np.nan for c, m in zip(cand, measured)])
        scaled, between, basis_of = _measured_limits(kind, values, stable, _half_batch(series, kind), u, thresholds)
        use = measured[None, :] & np.isfinite(scaled)
        limits = np.where(use, scaled, limits)
        between = between & measured[None, :]
        for r in np.nonzero(measured)[0]:
            basis[r] = basis_of(r, cand[r])
    # Sides that round alike: the stable column is the reference computed twice, its repeat.  Where float32
    # does not repeat itself (a GPU) no row is judged against less than it (issue 39).
    repeated = ~measured & np.isfinite(stable).any(axis=0)
    if repeated.any():
        floor = thresholds.stable_factor * harm.envelope(stable, thresholds.stable_window)
        limits = np.where(repeated[None, :] & np.isfinite(floor), np.fmax(limits, floor), limits)
        for r in np.nonzero(repeated)[0]:
            basis[r] += "; at least %g x the reference's repeat (computed twice)" % thresholds.stable_factor
    above = harm.exceeds(values, limits)
    hit = harm.harmed(values, limits, thresholds.held_comparisons, thresholds.immediate_factor) & measured[None, :]
    formula = ~measured
    with np.errstate(invalid="ignore"):
        formula_hit = (values > limits) & formula[None, :]
    if kind == metadata.ACTIVATION_DIVERGENCE and formula.any():
        formula_hit = rounding_budget.with_rise(values, series.steps, rules, thresholds, formula_hit, limits,
                                                basis, formula)
    noise, levels = rounding_budget.noise(kind, values, series, [r if f else None for r, f in zip(rules, formula)],
                                          cand, ref, thresholds)
    hit = hit | (formula_hit & ~noise)
    above &= ~noise
    counts = noise.sum(axis=0)
    for r in np.nonzero(counts * 2 > n_steps)[0]:
        basis[r] = ("reference at the rounding noise of its own computation (rel_l2 >= %.3g) at %d of %d "
                    "steps: true gradient 0, not judged there" % (levels[r], counts[r], n_steps))
        limits[:, r] = np.nan
    rule = (harm.MEASURED_RULE % dict(dataclasses.asdict(thresholds), column=column) if measured.all()
            else rounding_budget.FORMULA_RULES[kind])
    said = records.precision_text(info.reference.precision)  # what the reference was, where recorded
    basis = [b + "; " + said for b in basis] if said else basis
    return Judgement(column, values, hit, above, noise, limits, basis, [rule_.code for rule_ in rules], cand,
                     depths, measured, rule, stable, between)


class _Cached:
    """A Judgement in the source's cache (sized for its LRU)."""

    def __init__(self, judgement):
        self.judgement = judgement
        self.nbytes = 4096 + 4 * judgement.values.nbytes


def _output_stable(source, entry):
    """[S] the stable divergence of the model output (the last layer output
    row of the same comparison's activation record) at the loss record's
    steps, or None."""
    key = comparison_key(entry)
    for other in source.entries_of_kind(entry.run, metadata.ACTIVATION_DIVERGENCE):
        if other.record is None or comparison_key(other) != key:
            continue
        if metadata.STABLE_REL_L2 not in other.record.columns:
            return None
        acts = source.series(entry.run, other.tag)
        loss = source.series(entry.run, entry.tag)
        out = np.full(len(loss.steps), np.nan)
        where = {int(s): i for i, s in enumerate(acts.steps)}
        column = acts.column(metadata.STABLE_REL_L2)[:, -1]
        for i, s in enumerate(loss.steps):
            if int(s) in where:
                out[i] = column[where[int(s)]]
        return out
    return None


def context_of(source, entry):
    """The ComparisonContext of a divergence-like entry, from its run's listing."""
    contexts = comparison_contexts(source.entries(entry.run))
    return contexts.get(comparison_key(entry), ComparisonContext((), (), max(1, len(entry.record.rows))))


def judged_reads(source, entry):
    """The other entries a judgement of ``entry`` reads (its cache is keyed by their versions too):
    the records of the same comparison, whose dtypes and depth are its context and whose layer
    outputs scale a loss's limit (the callback writes a step's loss record before them)."""
    base = getattr(source, "unfiltered", None) or source
    key = comparison_key(entry)
    return [e for e in base.entries(entry.run)
            if e.tag != entry.tag and e.kind in codes.DIVERGENCE_KINDS and comparison_key(e) == key]


def judge_entry(source, entry, thresholds=codes.DEFAULT_THRESHOLDS):
    """The Judgement of a divergence-like tag, made on the whole record
    (``source.unfiltered`` when the source is a filtered view) and then
    restricted to the rows and steps ``source`` shows."""
    base = getattr(source, "unfiltered", None) or source
    full = base.entry(entry.run, entry.tag)

    def compute():
        output = _output_stable(base, full) if full.kind == metadata.LOSS_COMPARISON else None
        return _Cached(judge(base.series(full.run, full.tag), context_of(base, full), thresholds, output))

    judgement = base.cached(("judgement", thresholds), full, compute, reads=judged_reads(base, full)).judgement
    if base is source:
        return judgement
    shown = source.series(entry.run, entry.tag)
    rows = [full.record.rows.index(r) for r in shown.record.rows]
    where = {int(s): i for i, s in enumerate(base.series(full.run, full.tag).steps)}
    steps = [where[int(s)] for s in shown.steps]
    return restrict(judgement, rows, steps)


def restrict(judgement, rows, steps):
    """The Judgement of the rows and steps (indices) of a larger one."""
    rows, steps = np.asarray(rows, np.intp), np.asarray(steps, np.intp)

    def cut(array):
        return np.asarray(array)[steps][:, rows]

    def pick(values):
        return [values[r] for r in rows]

    return judgement._replace(
        values=cut(judgement.values), hit=cut(judgement.hit), above=cut(judgement.above),
        noise=cut(judgement.noise), limits=cut(judgement.limits), stable=cut(judgement.stable),
        between=cut(judgement.between), basis=pick(judgement.basis),
        codes=pick(judgement.codes), dtypes=pick(judgement.dtypes), depths=pick(judgement.depths),
        measured=np.asarray(judgement.measured)[rows],
    )


class TagLimits(NamedTuple):
    """The tolerances of one divergence-like tag: its Judgement at each step it logged.

    ``rows`` (the record's) and ``steps`` ([S]) index the judgement's ``[S, R]`` arrays."""

    run: str
    tag: str
    kind: str
    rows: Tuple[str, ...]
    steps: np.ndarray
    judgement: Judgement


def limits(source, run, tag, thresholds=codes.DEFAULT_THRESHOLDS) -> TagLimits:
    """The tolerances of a divergence-like tag: the limit of each row at each
    step, and the steps each row is above it and harmed at (its Judgement;
    the tolerances route shapes it, ``serving.judgment_json.limits_json``).
    NotFoundError for an unknown run or tag, InvalidArgumentError for a kind
    without tolerances (or an unreadable tag).
    """
    entry = source.entry(run, tag)
    if entry.record is None:
        raise errors.InvalidArgumentError(entry.error or "unreadable gradlens record")
    if entry.kind not in codes.DIVERGENCE_KINDS:
        raise errors.InvalidArgumentError(
            "tag %r is a %s record: tolerances exist for %s" % (tag, entry.kind, ", ".join(codes.DIVERGENCE_KINDS))
        )
    judgement = judge_entry(source, entry, thresholds)
    return TagLimits(run, tag, entry.kind, tuple(entry.record.rows), source.series(run, tag).steps, judgement)

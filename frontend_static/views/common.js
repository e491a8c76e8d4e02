// Helpers shared by the views: the runs route's tags, variant labels,
// empty states and per-metric "worse is larger" ordering.

import {el} from '../dom.js';
import {num} from '../format.js';

export const HOW_TO_LOG = {
  any: 'log with tb_gradlens.summary.gradients(grads, variables, step=step) inside '
    + '`with writer.as_default():` (or the GradLens Keras callback), then press Reload',
  divergence: 'log a float32 reference next to the bfloat16 run with the GradLens divergence '
    + 'logger (kind "divergence")',
  activation_divergence: 'log layer activations of both variants (kind "activation_divergence")',
  grad_stats: 'log with tb_gradlens.summary.gradients(grads, variables, step=step)',
  dtypes: 'log the dtype map once with tb_gradlens.summary.dtypes(dtype_map, step=step)',
};

/** Tags of `kind` in a run entry of the runs route (readable ones only). */
export function tagsOfKind(runEntry, kind) {
  return runEntry ? runEntry.tags.filter((t) => t.kind === kind) : [];
}

/** Run entries that have at least one tag of `kind`. */
export function runsWithKind(runs, kind) {
  return runs.filter((r) => tagsOfKind(r, kind).length > 0);
}

/** The run to show: the state's if it has `kind`, else the first that has. */
export function chooseRun(runs, wanted, kind) {
  const entry = runs.find((r) => r.run === wanted);
  if (entry && (!kind || tagsOfKind(entry, kind).length)) return entry;
  if (entry && wanted) return entry;
  return runsWithKind(runs, kind)[0] || runs[0] || null;
}

/** The tag to show: the wanted one if present, else the first. */
export function chooseTag(tags, wanted) {
  return tags.find((t) => t.tag === wanted) || tags[0] || null;
}

/** "label (policy, device, XLA)" of a variant from record extras. */
export function variantText(variant) {
  if (!variant || typeof variant !== 'object') return 'unknown';
  const details = [variant.policy, variant.device, variant.jit_compile ? 'XLA' : null]
    .filter((d) => d !== undefined && d !== null && d !== '' && d !== false);
  const label = variant.label || variant.policy || 'unnamed';
  return details.length ? `${label} (${details.join(', ')})` : String(label);
}

/** Paragraph naming the reference and candidate variants of a record. */
export function variantsLine(extras) {
  const e = extras || {};
  return el('p', {class: 'gl-variants'}, [
    'candidate ', el('b', {class: 'gl-candidate', text: variantText(e.candidate)}),
    ' vs reference ', el('b', {class: 'gl-reference', text: variantText(e.reference)}),
  ]);
}

/** Empty-state block: what is missing and how to log it; optional run buttons. */
export function emptyState(text, otherRuns = [], navigate = null) {
  const box = el('div', {class: 'gl-message gl-empty-state'}, [el('p', {text})]);
  if (otherRuns.length && navigate) {
    const links = el('p', {class: 'gl-runlinks'}, ['Runs that have it: ']);
    for (const r of otherRuns) {
      links.appendChild(el('button', {type: 'button', text: r.run, onclick: () => navigate({run: r.run})}));
    }
    box.appendChild(links);
  }
  return box;
}

/**
 * How bad a metric value is (larger = worse), to rank variables:
 * cosine -> 1 - v, norm_ratio -> |log2 v|, others -> |v|; NaN/Inf -> Infinity.
 */
export function badness(metric, value) {
  const v = num(value);
  if (!Number.isFinite(v)) return Infinity;
  if (metric === 'cosine') return 1 - v;
  if (metric === 'norm_ratio') return v > 0 ? Math.abs(Math.log2(v)) : Infinity;
  return Math.abs(v);
}

/** Label of what the heatmap colors for a metric. */
export function badnessLabel(metric) {
  if (metric === 'cosine') return '1 − cosine';
  if (metric === 'norm_ratio') return '|log2 norm_ratio|';
  return metric;
}

/** Parse an integer state value; fallback when absent or not a number. */
export function intOr(value, fallback) {
  const n = parseInt(value, 10);
  return Number.isFinite(n) ? n : fallback;
}

/** The step-range parameters of the state for series-like routes. */
export function stepParams(state) {
  return {step_min: state.smin, step_max: state.smax};
}

/** values[column][row] of a series answer as arrays of numbers. */
export function seriesColumn(series, column) {
  const byColumn = Array.isArray(series.values)
    ? series.values[series.columns.indexOf(column)]
    : series.values[column];
  if (!byColumn) return series.rows.map(() => new Float64Array(series.steps.length));
  const rows = Array.isArray(byColumn) ? byColumn : series.rows.map((r) => byColumn[r] || []);
  return rows.map((row) => Float64Array.from(row, num));
}

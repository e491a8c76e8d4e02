// The loss and the per-layer activations of one comparison (the
// Divergence view's lower sections): the loss in both variants and its
// relative error against its limit at each step; the layers in depth order
// (input to output) colored by value / the limit at that step, in one plain
// sentence (the details on hover).  Verdicts are the limits route's.

import {getJson} from '../api.js';
import {el, isolate} from '../dom.js';
import {fmt, fmtRatio} from '../format.js';
import {heatmap} from '../heatmap.js';
import * as colorers from '../heatmap_colors.js';
import {lineChart} from '../line_chart.js';
import {table} from '../table.js';
import {emptyState, explained, markedStep, maxSteps, seriesColumn, smoothingOf, stepIndex, stepParams} from './common.js';
import {
  againstLimit, judges, limitAt, limitSeries, limitsAlong, limitsFor, ratios, rowVerdict, stateRange,
} from './limits.js';
import {renderDivergenceOverlay} from './overlay.js';
import {sectionSentence} from './answers.js';
import {badness, badnessLabel, judged} from './rank.js';

/** The loss of both variants and its relative error, with its limit at each step. */
export async function renderLoss(section, {ctx, run, entry, said}) {
  const {state, navigate} = ctx;
  const [limits, series] = await Promise.all([
    limitsFor(run, entry),
    getJson('series', {run, tag: entry.tag, columns: 'reference,candidate,rel_error', ...stepParams(state),
      max_steps: maxSteps()}),
  ]);
  if (!ctx.isCurrent()) return;
  section.appendChild(el('h2', {text: 'Loss: candidate vs reference'}));
  if (!limits.ok) section.appendChild(el('p', {class: 'gl-message gl-error gl-limits-error', text: limits.message}));
  if (!series.steps.length) {
    section.appendChild(emptyState('No steps in this step range.'));
    return;
  }
  const [ref, cand, rel] = ['reference', 'candidate', 'rel_error'].map((c) => seriesColumn(series, c)[0]);
  const byRoute = judges(limits, 'rel_error');
  const range = stateRange(state);
  const r = byRoute ? limits.rows.indexOf('loss') : -1;
  const mark = markedStep(state, series.steps);
  const e = series.extras || {};
  const names = [(e.reference && e.reference.label) || 'reference', (e.candidate && e.candidate.label) || 'candidate'];
  section.appendChild(sectionSentence(said.loss_comparison, 'gl-loss-headline', byRoute ? limits.rule : ''));
  const pick = (s) => navigate({step: s});
  const limit = byRoute ? limitSeries(limits, r, 'rel_error', null, range) : null;
  section.appendChild(el('div', {class: 'gl-grid2'}, [
    lineChart({title: 'loss in both variants', yLabel: 'loss', smoothing: smoothingOf(state), markStep: mark,
      note: 'the reference drawn wide and pale under the candidate: where they coincide both show',
      series: [{name: `reference: ${isolate(names[0])}`, steps: series.steps, values: ref, under: true},
        {name: `candidate: ${isolate(names[1])}`, steps: series.steps, values: cand}], onClick: pick}),
    lineChart({title: 'relative error of the loss', yLabel: 'rel_error', yScale: state.logy === '0' ? 'linear' : 'log',
      note: limit ? 'dashed: its limit at each step (hover for its basis)' : '', markStep: mark,
      smoothing: smoothingOf(state),
      series: [{name: 'rel_error', steps: series.steps, values: rel}, ...(limit ? [limit] : [])], onClick: pick}),
  ]));
}

/** Activation divergence per layer, rows in depth order, colored against each layer's limit at each step. */
export async function renderActivations(section, {ctx, run, metric, entry, said}) {
  const {state, navigate} = ctx;
  const column = entry.columns.includes(metric) ? metric : 'rel_l2';
  const [limits, series] = await Promise.all([
    limitsFor(run, entry),
    getJson('series', {run, tag: entry.tag, columns: column, ...stepParams(state), max_steps: maxSteps()}),
  ]);
  if (!ctx.isCurrent()) return;
  section.appendChild(el('h2', {text: `Activations: ${column} per layer, input to output`}));
  if (!limits.ok) section.appendChild(el('p', {class: 'gl-message gl-error gl-limits-error', text: limits.message}));
  if (!series.steps.length) {
    section.appendChild(emptyState('No steps in this step range.'));
    return;
  }
  const values = seriesColumn(series, column);
  const bad = values.map((row) => row.map((v) => badness(column, v)));
  const byRoute = judges(limits, column);
  const rowIndex = series.rows.map((name) => (byRoute ? limits.rows.indexOf(name) : -1));
  const range = stateRange(state);
  const found = judged(bad, byRoute ? rowIndex.map((i) => limitsAlong(limits, i, series.steps)) : null,
    byRoute ? rowIndex.map((i) => rowVerdict(limits, i, ...range)) : null);
  section.appendChild(sectionSentence(said.activation_divergence, 'gl-act-headline'));
  const selected = series.rows.indexOf(state.row);
  const mark = markedStep(state, series.steps);
  const colored = byRoute ? ratios(bad, limits, rowIndex, series.steps) : null;
  section.appendChild(heatmap({
    title: `${badnessLabel(column)}: layers (depth order) × steps`, rows: series.rows, steps: series.steps,
    values: colored || bad, shown: values, colors: colored ? colorers.limitRatio() : colorers.relative(bad, 'log'),
    legendTitle: badnessLabel(column), selectedRow: selected, markStep: mark,
    describe: (r, i, v) => [`depth ${r + 1}`, `step ${series.steps[i]}`, `${column} ${fmt(v)}`,
      ...againstLimit(limits, byRoute, rowIndex[r], series.steps[i], bad[r][i])],
    onSelect: (r, i) => navigate({row: series.rows[r], step: series.steps[i], focus: 'activation_divergence'}),
  }));
  if (selected >= 0) {
    const limit = byRoute ? limitSeries(limits, rowIndex[selected], series.rows[selected], null, range) : null;
    section.appendChild(lineChart({title: `${column} of layer ${isolate(series.rows[selected])}`, yLabel: column,
      yScale: state.logy === '0' ? 'linear' : 'log', markStep: mark, smoothing: smoothingOf(state),
      highlight: series.rows[selected], note: limit ? 'dashed: its limit at each step (hover for its basis)' : '',
      series: [{name: series.rows[selected], steps: series.steps, values: values[selected]}, ...(limit ? [limit] : [])],
      onClick: (s) => navigate({step: s})}));
  }
  const i = stepIndex(series.steps, mark);
  const never = (v) => (v === null ? 'never' : String(v));
  section.appendChild(table({
    caption: `Layers at step ${series.steps[i]}`,
    columns: explained([{key: 'depth', label: 'depth', numeric: true}, {key: 'layer', label: 'layer'},
      {key: 'value', label: column, numeric: true,
        title: (((ctx.explanations || {}).columns || {}).activation_divergence || {})[column]},
      {key: 'ratio', label: '× limit', numeric: true, format: (v) => (v === null ? '–' : fmtRatio(v))},
      {key: 'limit', label: 'limit', numeric: true, format: (v) => (v === null ? 'none' : fmt(v))},
      {key: 'first', label: 'first above', numeric: true, format: never},
      {key: 'harmed', label: 'harmed from', numeric: true, format: never}], ctx.explanations,
    'activation_divergence'),
    rows: layerRows(series, {values, bad, found, limits, byRoute, rowIndex, i, selected: state.row}),
    maxRows: 12,
    showAll: true,
    rowKey: (row) => row.layer,
    rowClass: (row) => `gl-layer-row${row.layer === state.row ? ' gl-selected' : ''}`,
    cellTitle: (row, key) => (key === 'limit' && byRoute ? limits.basis[rowIndex[row.depth - 1]] || '' : ''),
    onSelect: (row) => navigate({row: row.layer, focus: 'activation_divergence'}),
  }));
  if (selected >= 0) {
    await renderDivergenceOverlay(section, {ctx, run, cmp: {label: comparisonOf(entry)}, kind: 'activation_divergence',
      row: series.rows[selected], column});
  }
}

/**
 * The layers at step index i, in depth order; with many layers the table
 * shows 12 first: the harmed or above their limit, then the closest to it,
 * the selected one always among them (the rest by "Show all").
 */
function layerRows(series, {values, bad, found, limits, byRoute, rowIndex, i, selected}) {
  const rows = series.rows.map((layer, r) => {
    const limit = byRoute ? limitAt(limits, rowIndex[r], series.steps[i]) : NaN;
    return {depth: r + 1, layer, value: values[r][i], limit: limit > 0 ? limit : null,
      ratio: limit > 0 ? bad[r][i] / limit : null, first: found[r].firstAbove, harmed: found[r].firstHarmed};
  });
  if (rows.length <= 12) return rows;
  const key = (row) => [row.layer === selected ? 0 : 1, row.harmed ?? Infinity, row.first ?? Infinity,
    -(found[row.depth - 1].ratio || 0)];
  const first = [...rows].sort((a, b) => {
    const ka = key(a);
    const kb = key(b);
    for (let k = 0; k < ka.length; k++) if (ka[k] !== kb[k]) return ka[k] - kb[k];
    return a.depth - b.depth;
  }).slice(0, 12);
  const shown = new Set(first);
  return [...first.sort((a, b) => a.depth - b.depth), ...rows.filter((row) => !shown.has(row))];
}

/** The label of a record's comparison ("mixed_bfloat16 vs float32"). */
function comparisonOf(entry) {
  const e = entry.extras || {};
  const side = (v) => String((v && (v.label || v.policy)) || '?');
  return `${side(e.candidate)} vs ${side(e.reference)}`;
}

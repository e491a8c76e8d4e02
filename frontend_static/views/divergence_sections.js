// The loss and the per-layer activations of one comparison (the
// Divergence view's lower sections): the loss in both variants and its
// relative error against the tolerance; the layers in depth order (input
// to output) colored by value / tolerance, with the layer that exceeded
// first named.

import {getJson} from '../api.js';
import {el, isolate} from '../dom.js';
import {fmt, fmtRatio} from '../format.js';
import {heatmap} from '../heatmap.js';
import * as colorers from '../heatmap_colors.js';
import {lineChart} from '../line_chart.js';
import {table} from '../table.js';
import {emptyState, markedStep, maxSteps, seriesColumn, smoothingOf, stepIndex, stepParams} from './common.js';
import {basisText, columnLimits, limitLines, limitsFor} from './limits.js';
import {badness, badnessLabel, exceedances} from './rank.js';

/** The loss of both variants and its relative error, with the tolerance line. */
export async function renderLoss(section, {ctx, run, alerts, entry}) {
  const {state, navigate} = ctx;
  const [tolerances, series] = await Promise.all([
    limitsFor(run, entry),
    getJson('series', {run, tag: entry.tag, columns: 'reference,candidate,rel_error', ...stepParams(state),
      max_steps: maxSteps()}),
  ]);
  if (!ctx.isCurrent()) return;
  section.appendChild(el('h2', {text: 'Loss: candidate vs reference'}));
  if (!series.steps.length) {
    section.appendChild(emptyState('No steps in this step range.'));
    return;
  }
  const [ref, cand, rel] = ['reference', 'candidate', 'rel_error'].map((c) => seriesColumn(series, c)[0]);
  const limits = columnLimits(tolerances, alerts, entry.tag, 'rel_error', 1) || [null];
  const basis = tolerances.column === 'rel_error' ? tolerances.basis : [];
  const [found] = exceedances([Float64Array.from(rel, (v) => badness('rel_error', v))], limits);
  const mark = markedStep(state, series.steps);
  const e = series.extras || {};
  const names = [(e.reference && e.reference.label) || 'reference', (e.candidate && e.candidate.label) || 'candidate'];
  const p = el('p', {class: 'gl-headline gl-loss-headline'});
  if (found.first >= 0) {
    p.append('The loss differs by more than its tolerance from step ',
      el('strong', {class: 'gl-loss-first', text: String(series.steps[found.first])}),
      ` (relative error ${fmt(found.worst)} = ${fmtRatio(found.ratio)}× tolerance ${fmt(found.limit)} at step `
      + `${series.steps[found.worstAt]}).`);
  } else if (found.limit !== null) {
    p.append(`The loss stays within its tolerance ${fmt(found.limit)} (worst relative error ${fmt(found.worst)}).`);
  } else {
    p.append(`Worst relative error of the loss: ${fmt(found.worst)}.`);
  }
  section.appendChild(p);
  const pick = (s) => navigate({step: s});
  section.appendChild(el('div', {class: 'gl-grid2'}, [
    lineChart({title: 'loss in both variants', yLabel: 'loss', smoothing: smoothingOf(state), markStep: mark,
      series: [{name: `reference: ${isolate(names[0])}`, steps: series.steps, values: ref},
        {name: `candidate: ${isolate(names[1])}`, steps: series.steps, values: cand}], onClick: pick}),
    lineChart({title: 'relative error of the loss', yLabel: 'rel_error', yScale: state.logy === '0' ? 'linear' : 'log',
      note: found.limit !== null ? `tolerance ${basisText(limits, basis)}` : '', markStep: mark,
      smoothing: smoothingOf(state), limits: limitLines(limits, [0]),
      series: [{name: 'rel_error', steps: series.steps, values: rel}], onClick: pick}),
  ]));
}

/** Activation divergence per layer, rows in depth order, colored against the tolerance. */
export async function renderActivations(section, {ctx, run, metric, alerts, entry}) {
  const {state, navigate} = ctx;
  const column = entry.columns.includes(metric) ? metric : 'rel_l2';
  const [tolerances, series] = await Promise.all([
    limitsFor(run, entry),
    getJson('series', {run, tag: entry.tag, columns: column, ...stepParams(state), max_steps: maxSteps()}),
  ]);
  if (!ctx.isCurrent()) return;
  section.appendChild(el('h2', {text: `Activations: ${column} per layer, input to output`}));
  if (!series.steps.length) {
    section.appendChild(emptyState('No steps in this step range.'));
    return;
  }
  const values = seriesColumn(series, column);
  const bad = values.map((row) => row.map((v) => badness(column, v)));
  const limits = columnLimits(tolerances, alerts, entry.tag, column, series.rows.length)
    || series.rows.map(() => null);
  const basis = tolerances.column === column ? tolerances.basis : [];
  const found = exceedances(bad, limits);
  const over = found.filter((f) => f.first >= 0).sort((a, b) => a.first - b.first || a.row - b.row);
  const p = el('p', {class: 'gl-headline gl-act-headline'});
  if (over.length) {
    const f = over[0];
    p.append('First layer above its tolerance: ', el('strong', {class: 'gl-act-first', text: series.rows[f.row]}),
      ` at step ${series.steps[f.first]} (depth ${f.row + 1}; tolerance ${fmt(f.limit)}, worst ${fmt(f.worst)} = `
      + `${fmtRatio(f.ratio)}× at step ${series.steps[f.worstAt]}); ${over.length} of ${series.rows.length} layers exceed.`);
  } else if (limits.some((l) => l > 0)) {
    p.append(`No layer exceeds its tolerance (${basisText(limits, basis)}).`);
  }
  section.appendChild(p);
  const selected = series.rows.indexOf(state.row);
  const mark = markedStep(state, series.steps);
  const colors = limits.some((l) => l > 0) ? colorers.tolerance(limits, bad, basisText(limits, basis))
    : colorers.relative(bad, 'log');
  section.appendChild(heatmap({
    title: `${badnessLabel(column)}: layers (depth order) × steps`, rows: series.rows, steps: series.steps,
    values: bad, shown: values, colors, legendTitle: badnessLabel(column), selectedRow: selected, markStep: mark,
    describe: (r, i, v) => [`depth ${r + 1}`, `step ${series.steps[i]}`, `${column} ${fmt(v)}`,
      limits[r] > 0 ? `${fmtRatio(bad[r][i] / limits[r])}× tolerance ${fmt(limits[r])}` : 'no tolerance'],
    onSelect: (r, i) => navigate({row: series.rows[r], step: series.steps[i], focus: 'activation_divergence'}),
  }));
  if (selected >= 0) {
    section.appendChild(lineChart({title: `${column} of layer ${isolate(series.rows[selected])}`, yLabel: column,
      yScale: state.logy === '0' ? 'linear' : 'log', markStep: mark, smoothing: smoothingOf(state),
      highlight: series.rows[selected], limits: limitLines(limits, [selected]),
      note: limits[selected] > 0 ? `tolerance ${basisText(limits, basis, [selected])}` : '',
      series: [{name: series.rows[selected], steps: series.steps, values: values[selected]}],
      onClick: (s) => navigate({step: s})}));
  }
  const i = stepIndex(series.steps, mark);
  section.appendChild(table({
    caption: `Layers at step ${series.steps[i]}`,
    columns: [{key: 'depth', label: 'depth', numeric: true}, {key: 'layer', label: 'layer'},
      {key: 'value', label: column, numeric: true}, {key: 'ratio', label: '× tolerance', numeric: true, format: (v) => (v === null ? '–' : fmtRatio(v))},
      {key: 'first', label: 'first above', numeric: true, format: (v) => (v === null ? 'never' : String(v))}],
    rows: series.rows.map((layer, r) => ({depth: r + 1, layer, value: values[r][i],
      ratio: limits[r] > 0 ? bad[r][i] / limits[r] : null,
      first: found[r].first >= 0 ? series.steps[found[r].first] : null})),
    rowKey: (row) => row.layer,
    rowClass: (row) => `gl-layer-row${row.layer === state.row ? ' gl-selected' : ''}`,
  }));
}

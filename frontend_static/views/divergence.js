// Divergence: how far a candidate (e.g. mixed_bfloat16) is from its
// reference (float32), against the tolerance.  One comparison at a time
// (picked by its variants, the bfloat16-vs-float32 one first): a sentence
// naming the variable that exceeded its tolerance first and the worst, the
// metric per step for the top-K variables with tolerance lines, a variables
// x steps heatmap colored by value / tolerance, the variables at the marked
// step, then the loss and the per-layer activations (divergence_sections.js).

import {getJson} from '../api.js';
import {el, isolate, labelled, select} from '../dom.js';
import {fmt, fmtRatio} from '../format.js';
import {heatmap} from '../heatmap.js';
import * as colorers from '../heatmap_colors.js';
import {lineChart} from '../line_chart.js';
import {table} from '../table.js';
import {
  HOW_TO_LOG, chartControls, chooseRun, emptyState, filterParams, focusSection, markedStep, maxSteps,
  runsWithKind, seriesColumn, smoothingOf, stepParams, topK,
} from './common.js';
import {renderActivations, renderLoss} from './divergence_sections.js';
import {basisText, columnLimits, limitLines, limitsFor} from './limits.js';
import {badness, badnessLabel, exceedances, order} from './rank.js';
import {COMPARISON_KINDS, chooseComparison, comparisons, sideDetails, sideLabel} from './records.js';

const METRICS = ['rel_l2', 'cosine', 'norm_ratio', 'max_abs', 'max_rel', 'ulp_rms', 'sign_flip',
  'flush_to_zero', 'nonfinite'];

/** The alerts of the state's run, asked for while the runs listing loads. */
export function prefetch(state) {
  if (state.run) getJson('alerts', {run: state.run}).catch(() => null);
}

export async function render(container, ctx) {
  const {state, runs, navigate} = ctx;
  const run = chooseRun(runs, state.run, ...COMPARISON_KINDS);
  if (run) ctx.showRun(run.run);
  const list = comparisons(run);
  if (!list.length) {
    container.appendChild(emptyState(`Run ${run ? isolate(run.run) : ''} has no comparison logged: ${HOW_TO_LOG.divergence}.`,
      runsWithKind(runs, ...COMPARISON_KINDS), navigate));
    return;
  }
  const cmp = chooseComparison(list, state.tag);
  const metric = METRICS.includes(state.metric) ? state.metric : 'rel_l2';
  const first = (g) => (g.divergence || g.activation_divergence || g.loss_comparison).tag;
  container.appendChild(el('div', {class: 'gl-view-controls'}, [
    labelled('Comparison', select(list.map((g) => [first(g), g.label]), first(cmp),
      (v) => navigate({tag: v, row: '', step: '', focus: '', alert: ''}), {class: 'gl-tag'})),
    labelled('Metric', select(METRICS, metric, (v) => navigate({metric: v}), {class: 'gl-metric'})),
    ...chartControls(state, navigate, {rankLabels: [['worst', 'worst ÷ tolerance'], ['first', 'first to exceed']]}),
  ]));
  const e = cmp.extras || {};
  container.appendChild(el('h2', {class: 'gl-cmp-title'}, [
    el('span', {class: 'gl-cmp-label', text: cmp.label}), ' in run ', el('span', {class: 'gl-run-name', text: run.run}),
  ]));
  container.appendChild(el('p', {class: 'gl-variants'}, [
    'candidate ', el('strong', {class: 'gl-candidate', text: sideLabel(e.candidate)}), ` (${sideDetails(e.candidate)})`,
    ' vs reference ', el('strong', {class: 'gl-reference', text: sideLabel(e.reference)}), ` (${sideDetails(e.reference)})`,
  ]));
  const alerts = (await getJson('alerts', {run: run.run})).alerts;
  if (!ctx.isCurrent()) return;
  const sections = {};
  if (cmp.divergence) {
    sections.divergence = el('section', {class: 'gl-section gl-sec-gradients'});
    container.appendChild(sections.divergence);
  }
  if (cmp.loss_comparison) {
    sections.loss_comparison = el('section', {class: 'gl-section gl-sec-loss'});
    container.appendChild(sections.loss_comparison);
  }
  if (cmp.activation_divergence) {
    sections.activation_divergence = el('section', {class: 'gl-section gl-sec-activations'});
    container.appendChild(sections.activation_divergence);
  }
  const args = {ctx, run: run.run, metric, alerts};
  await Promise.all([
    cmp.divergence && renderGradients(sections.divergence, {...args, entry: cmp.divergence}),
    cmp.loss_comparison && renderLoss(sections.loss_comparison, {...args, entry: cmp.loss_comparison}),
    cmp.activation_divergence && renderActivations(sections.activation_divergence,
      {...args, entry: cmp.activation_divergence}),
  ]);
  if (ctx.isCurrent() && sections[state.focus]) focusSection(sections[state.focus]);
}

/** The variables section: headline, chart, heatmap and the table at the marked step. */
async function renderGradients(section, {ctx, run, metric, alerts, entry}) {
  const {state, navigate} = ctx;
  const [tolerances, series, atStep] = await Promise.all([
    limitsFor(run, entry),
    getJson('series', {run, tag: entry.tag, rows: state.filter, columns: metric, ...stepParams(state),
      max_steps: maxSteps()}),
    // Every metric at the marked step (the logged step at or before it; the last one without a mark):
    // max_steps=1 keeps the last step of the range, so this needs no answer of the other request.
    getJson('series', {run, tag: entry.tag, rows: state.filter, step_min: state.smin,
      step_max: state.step !== undefined && state.step !== '' ? state.step : state.smax, max_steps: 1}),
  ]);
  if (!ctx.isCurrent()) return;
  section.appendChild(el('h2', {text: `Gradients: ${metric} per variable`}));
  if (!series.steps.length || !series.rows.length) {
    section.appendChild(emptyState(series.rows.length ? 'No steps in this step range.'
      : 'No variable matches the variable regex.'));
    return;
  }
  const rowIndex = series.rows.map((name) => entry.rows.indexOf(name));
  const allLimits = columnLimits(tolerances, alerts, entry.tag, metric, entry.rows.length);
  const limits = rowIndex.map((i) => (allLimits && i >= 0 ? allLimits[i] : null));
  const basis = rowIndex.map((i) => (i >= 0 && tolerances.column === metric ? tolerances.basis[i] || '' : ''));
  const values = seriesColumn(series, metric);
  const bad = values.map((row) => row.map((v) => badness(metric, v)));
  const found = exceedances(bad, limits);
  const ranked = order(found, state.rank);
  const selected = series.rows.indexOf(state.row);
  const shown = ranked.slice(0, topK(state));
  if (selected >= 0 && !shown.includes(selected)) shown.push(selected);
  const mark = markedStep(state, series.steps);
  section.appendChild(headline(found, series, metric));
  const tolNote = limits.some((l) => l > 0) ? `tolerance ${basisText(limits, basis)}` : 'no tolerance for this metric';
  section.appendChild(lineChart({
    title: `${metric} per step, ${state.rank === 'first' ? 'first' : 'worst'} ${shown.length} of ${series.rows.length} variables`,
    note: tolNote, yLabel: metric, yScale: state.logy === '0' ? 'linear' : 'log',
    series: shown.map((i) => ({name: series.rows[i], steps: series.steps, values: values[i]})),
    limits: limitLines(limits, shown), markStep: mark, highlight: series.rows[selected],
    smoothing: smoothingOf(state), onClick: (s) => navigate({step: s}),
  }));
  const colors = limits.some((l) => l > 0) ? colorers.tolerance(limits, bad, basisText(limits, basis))
    : colorers.relative(bad, 'log');
  section.appendChild(heatmap({
    title: `${badnessLabel(metric)}: variables × steps (click selects a variable and step)`,
    rows: series.rows, steps: series.steps, values: bad, shown: values, colors, legendTitle: badnessLabel(metric),
    selectedRow: selected, markStep: mark,
    describe: (r, i, v) => [`step ${series.steps[i]}`, `${metric} ${fmt(v)}`,
      limits[r] > 0 ? `${fmtRatio(bad[r][i] / limits[r])}× tolerance ${fmt(limits[r])}` : 'no tolerance'],
    onSelect: (r, i) => navigate({row: series.rows[r], step: series.steps[i]}),
  }));
  renderStepTable(section, {ctx, metric, series, found, limits, data: atStep});
}

/** Q1 in one sentence: which variable exceeded its tolerance first, how badly, and the worst. */
function headline(found, series, metric) {
  const withLimit = found.filter((f) => f.limit !== null);
  const over = found.filter((f) => f.first >= 0).sort((a, b) => a.first - b.first || b.ratio - a.ratio);
  const worst = [...found].filter((f) => !Number.isNaN(f.worst)).sort((a, b) => b.ratio - a.ratio)[0];
  const p = el('p', {class: 'gl-headline gl-q1'});
  if (over.length) {
    const f = over[0];
    const v = found[f.row];
    p.append('First above its tolerance: ', el('strong', {class: 'gl-first-var', text: series.rows[f.row]}),
      ` at step `, el('strong', {class: 'gl-first-step', text: String(series.steps[f.first])}),
      ` (tolerance ${fmt(f.limit)}; worst ${fmt(v.worst)} = `, el('strong', {class: 'gl-first-ratio', text: `${fmtRatio(v.ratio)}×`}),
      ` at step ${series.steps[v.worstAt]}). `);
  } else if (withLimit.length) {
    p.append(el('strong', {class: 'gl-within', text: 'No variable exceeds its tolerance'}), '. ');
  }
  if (worst) {
    p.append('Worst: ', el('strong', {class: 'gl-worst-var', text: series.rows[worst.row]}),
      ` ${metric} ${fmt(worst.worst)}${worst.limit !== null ? ` = ${fmtRatio(worst.ratio)}× tolerance ${fmt(worst.limit)}` : ''}`
      + ` at step ${series.steps[worst.worstAt]}. `);
  }
  if (withLimit.length) p.append(`${over.length} of ${found.length} variables exceed their tolerance.`);
  return p;
}

/** The variables at the marked (or last) step: every metric, ranked by value / tolerance. */
function renderStepTable(section, {ctx, metric, series, found, limits, data}) {
  if (!data.steps.length) {
    section.appendChild(emptyState('No record at or before the marked step.'));
    return;
  }
  section.appendChild(el('h3', {class: 'gl-step-title', text: `Variables at step ${data.steps[0]}`}));
  const columns = data.columns.map((c) => seriesColumn(data, c));
  const rows = data.rows.map((name, r) => {
    const i = series.rows.indexOf(name);
    const f = found[i] || {};
    const value = columns[data.columns.indexOf(metric)][r][0];
    const row = {variable: name, tolerance: limits[i] ?? null,
      ratio: limits[i] > 0 ? badness(metric, value) / limits[i] : null,
      first: f.first >= 0 ? series.steps[f.first] : null, worst: f.ratio};
    data.columns.forEach((c, k) => {
      row[c] = columns[k][r][0];
    });
    return row;
  });
  const selected = ctx.state.row;
  const key = (r) => (r.ratio === null ? -1 : Number.isNaN(r.ratio) ? Infinity : r.ratio);
  rows.sort((a, b) => key(b) - key(a));
  const pick = rows.findIndex((r) => r.variable === selected);
  if (pick >= 25) rows.unshift(...rows.splice(pick, 1));
  section.appendChild(table({
    columns: [
      {key: 'variable', label: 'variable'},
      {key: metric, label: metric, numeric: true},
      {key: 'ratio', label: '× tolerance', numeric: true, format: (v) => (v === null ? '–' : fmtRatio(v))},
      {key: 'tolerance', label: 'tolerance', numeric: true, format: (v) => (v > 0 ? fmt(v) : 'none')},
      {key: 'first', label: 'first above', numeric: true, format: (v) => (v === null ? 'never' : String(v))},
      {key: 'worst', label: 'worst × tol', numeric: true, format: (v) => fmtRatio(v)},
      ...data.columns.filter((c) => c !== metric).map((c) => ({key: c, label: c, numeric: true})),
    ],
    rows,
    sortValue: (row, key) => (key === 'ratio' && row.ratio === null ? -1 : row[key]),
    maxRows: 25,
    rowKey: (row) => row.variable,
    rowClass: (row) => `gl-var-row${row.variable === selected ? ' gl-selected' : ''}`,
    onSelect: (row) => ctx.navigate({row: row.variable}),
  }));
}

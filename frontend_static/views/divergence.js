// Divergence: how far a candidate (e.g. mixed_bfloat16) is from its
// reference (float32), against the limit the alert rules measured for each
// row at each step (the `limits` route).  One comparison at a time (picked
// by its variants, the bfloat16-vs-float32 one first): a sentence naming
// the variable harmed first (an alert) or only above its limit, and the
// worst; the metric per step for the top-K variables, each with its limit
// as a dashed step line in its color; a variables x steps heatmap colored
// by value / the limit at that step; the variables at the marked step; the
// same variable across the runs ticked for overlay; then the loss and the
// per-layer activations (divergence_sections.js).  Every verdict is the
// route's: the tab never judges with a rule of its own.

import {getJson} from '../api.js';
import {el, isolate, labelled, message, select} from '../dom.js';
import {fmt, fmtRatio} from '../format.js';
import {heatmap} from '../heatmap.js';
import * as colorers from '../heatmap_colors.js';
import {lineChart} from '../line_chart.js';
import {table} from '../table.js';
import {
  HOW_TO_LOG, chartControls, emptyState, explained, focusSection, markedStep, maxSteps, pickRun, runsWithKind, seriesColumn,
  smoothingOf, stepParams, topK,
} from './common.js';
import {answersFor, byId, comparisonAnswer, runAnswers, sectionSentence, sentence} from './answers.js';
import {renderActivations, renderLoss} from './divergence_sections.js';
import {overlayControls, renderDivergenceOverlay} from './overlay.js';
import {
  againstLimit, alertLimit, judges, limitAt, limitSeries, limitsAlong, limitsFor, ratios, rowVerdict,
  stateRange,
} from './limits.js';
import {badness, badnessLabel, judged, order} from './rank.js';
import {COMPARISON_KINDS, chooseComparison, comparisons, sideDetails, sideLabel} from './records.js';

const METRICS = ['rel_l2', 'cosine', 'norm_ratio', 'max_abs', 'max_rel', 'ulp_rms', 'sign_flip',
  'flush_to_zero', 'nonfinite'];

/** The alerts of the state's run, asked for while the runs listing loads. */
export function prefetch(state) {
  getJson('alerts', state.run ? {run: state.run} : {}).catch(() => null);
}

export async function render(container, ctx) {
  const {state, runs, navigate} = ctx;
  const run = await pickRun(ctx, 'divergence', ...COMPARISON_KINDS);
  if (!ctx.isCurrent()) return;
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
  const metricHelp = (ctx.explanations || {}).metrics || {};
  container.appendChild(el('div', {class: 'gl-view-controls'}, [
    labelled('Comparison', select(list.map((g) => [first(g), g.label]), first(cmp),
      (v) => navigate({tag: v, row: '', step: '', focus: '', alert: ''}), {class: 'gl-tag'})),
    labelled('Metric', select(METRICS.map((m) => [m, m, metricHelp[m]]), metric, (v) => navigate({metric: v}),
      {class: 'gl-metric', title: metricHelp[metric] || ''})),
    ...chartControls(state, navigate, {rankLabels: [['worst', 'worst ÷ limit'], ['first', 'first harmed']]}),
  ]));
  const e = cmp.extras || {};
  const sides = cmp.compared || {};
  container.appendChild(el('h2', {class: 'gl-cmp-title'}, [
    el('span', {class: 'gl-cmp-label', text: cmp.label}), ' in run ', el('span', {class: 'gl-run-name', text: run.run}),
  ]));
  container.appendChild(el('p', {class: 'gl-variants'}, [
    'candidate ', el('strong', {class: 'gl-candidate', text: sideLabel(e.candidate)}), ` (${sideDetails(e.candidate, sides.candidate)})`,
    ' vs reference ', el('strong', {class: 'gl-reference', text: sideLabel(e.reference)}), ` (${sideDetails(e.reference, sides.reference)})`,
  ]));
  const [{alerts}, picker, entryAnswers] = await Promise.all([getJson('alerts', {run: run.run}),
    overlayControls(ctx, run.run, ...COMPARISON_KINDS),
    answersFor(state, run.run).then((data) => runAnswers(data, run.run), (error) => ({error}))]);
  if (!ctx.isCurrent()) return;
  if (picker) container.querySelector('.gl-view-controls').appendChild(picker);
  // The second answer for this comparison (analysis/answers.py), as Overview and `report` say it; for the
  // run's first comparison the fifth too.
  const failed = entryAnswers && entryAnswers.error;
  const said = failed ? {verdict: 'unjudged', sections: {},
    sentence: [{text: `The answer could not be read (${failed.message}).`}]}
    : comparisonAnswer(entryAnswers, first(cmp));
  if (said) container.appendChild(sentence(said, {className: 'gl-headline gl-q2-answer', question: true}));
  const primary = !failed && entryAnswers && (entryAnswers.comparisons || [])[0];
  if (primary && Object.values(primary.tags || {}).includes(first(cmp))) {
    container.appendChild(sentence(byId(entryAnswers).over_training, {className: 'gl-headline gl-q5-answer',
      question: true}));
  }
  const sections = {};
  for (const [kind, cls] of [['divergence', 'gl-sec-gradients'], ['loss_comparison', 'gl-sec-loss'],
    ['activation_divergence', 'gl-sec-activations']]) {
    if (!cmp[kind]) continue;
    sections[kind] = el('section', {class: `gl-section ${cls}`});
    container.appendChild(sections[kind]);
  }
  const args = {ctx, run: run.run, metric, alerts, said: (said && said.sections) || {}};
  // A record that cannot be read costs its own section only (its message there), not the view.
  const guarded = (kind, promise) => promise && promise.catch((error) => {
    if (ctx.isCurrent()) sections[kind].appendChild(message('error', error.message || String(error)));
  });
  await Promise.all([
    guarded('divergence', cmp.divergence && renderGradients(sections.divergence, {...args, entry: cmp.divergence, cmp})),
    guarded('loss_comparison', cmp.loss_comparison && renderLoss(sections.loss_comparison,
      {...args, entry: cmp.loss_comparison})),
    guarded('activation_divergence', cmp.activation_divergence && renderActivations(sections.activation_divergence,
      {...args, entry: cmp.activation_divergence})),
  ]);
  if (ctx.isCurrent() && sections[state.focus]) focusSection(sections[state.focus]);
}

/** The variables section: headline, chart, heatmap, the table at the marked step and the overlay across runs. */
async function renderGradients(section, {ctx, run, metric, alerts, entry, cmp, said}) {
  const {state, navigate} = ctx;
  const [limits, series, atStep] = await Promise.all([
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
  if (!limits.ok) section.appendChild(el('p', {class: 'gl-message gl-error gl-limits-error', text: limits.message}));
  if (!series.steps.length || !series.rows.length) {
    section.appendChild(emptyState(series.rows.length ? 'No steps in this step range.'
      : 'No variable matches the variable regex.'));
    return;
  }
  const rowIndex = series.rows.map((name) => entry.rows.indexOf(name));
  const range = stateRange(state);
  const byRoute = judges(limits, metric);
  // Another column than the route's: the limit of an alert on it (flush_to_zero), the same at every step.
  const constant = byRoute ? null : alertLimit(alerts, entry.tag, metric);
  const limitRows = byRoute ? rowIndex.map((i) => limitsAlong(limits, i, series.steps))
    : constant !== null ? series.rows.map(() => new Float64Array(series.steps.length).fill(constant)) : null;
  const verdicts = byRoute ? rowIndex.map((i) => rowVerdict(limits, i, ...range)) : null;
  const values = seriesColumn(series, metric);
  const bad = values.map((row) => row.map((v) => badness(metric, v)));
  const found = judged(bad, limitRows, verdicts);
  const ranked = order(found, state.rank);
  const selected = series.rows.indexOf(state.row);
  const shown = ranked.slice(0, topK(state));
  if (selected >= 0 && !shown.includes(selected)) shown.push(selected);
  const mark = markedStep(state, series.steps);
  section.appendChild(sectionSentence(said.divergence, 'gl-q1', byRoute ? limits.rule : ''));
  const lines = shown.map((i) => ({name: series.rows[i], steps: series.steps, values: values[i]}));
  const limitLines = byRoute ? shown.map((i) => limitSeries(limits, rowIndex[i], series.rows[i], null, range))
    .filter(Boolean) : [];
  const note = byRoute ? 'dashed: each variable\'s limit at each step, in its color (hover for its basis)'
    : constant !== null ? `the ${metric} alert's threshold ${fmt(constant)}` : `no limit for ${metric}`;
  section.appendChild(lineChart({
    title: `${metric} per step, ${state.rank === 'first' ? 'first' : 'worst'} ${shown.length} of ${series.rows.length} variables`,
    note, yLabel: metric, yScale: state.logy === '0' ? 'linear' : 'log', series: [...lines, ...limitLines],
    limits: constant !== null ? [{value: constant, label: `alert threshold ${fmt(constant)}`,
      basis: `the ${metric} alert's threshold (it also needs the row's own rel_l2 below it, held)`}] : [],
    markStep: mark, highlight: series.rows[selected], smoothing: smoothingOf(state), onClick: (s) => navigate({step: s}),
  }));
  const colored = byRoute ? ratios(bad, limits, rowIndex, series.steps) : null;
  section.appendChild(heatmap({
    title: `${badnessLabel(metric)}: variables × steps (click selects a variable and step)`,
    rows: series.rows, steps: series.steps, values: colored || bad, shown: values,
    colors: colored ? colorers.limitRatio() : colorers.relative(bad, 'log'), legendTitle: badnessLabel(metric),
    selectedRow: selected, markStep: mark,
    describe: (r, i, v) => [`step ${series.steps[i]}`, `${metric} ${fmt(v)}`, ...againstLimit(limits, byRoute,
      rowIndex[r], series.steps[i], bad[r][i])],
    onSelect: (r, i) => navigate({row: series.rows[r], step: series.steps[i]}),
  }));
  renderStepTable(section, {ctx, metric, series, found, limits, byRoute, rowIndex, data: atStep});
  const focus = series.rows[selected >= 0 ? selected : ranked[0]];
  await renderDivergenceOverlay(section, {ctx, run, cmp, kind: 'divergence', row: focus, column: metric});
}

/** Index of a row name in the limits' rows (-1: none). */
function rowOf(limits, name) {
  return limits && limits.ok ? limits.rows.indexOf(name) : -1;
}

/** The variables at the marked (or last) step: every metric, ranked by value / its limit there. */
function renderStepTable(section, {ctx, metric, series, found, limits, byRoute, rowIndex, data}) {
  if (!data.steps.length) {
    section.appendChild(emptyState('No record at or before the marked step.'));
    return;
  }
  const step = data.steps[0];
  section.appendChild(el('h3', {class: 'gl-step-title', text: `Variables at step ${step}`}));
  const columns = data.columns.map((c) => seriesColumn(data, c));
  const rows = data.rows.map((name, r) => {
    const i = series.rows.indexOf(name);
    const f = found[i] || {};
    const value = columns[data.columns.indexOf(metric)][r][0];
    const limit = byRoute && i >= 0 ? limitAt(limits, rowIndex[i], step) : NaN;
    const row = {variable: name, limit: limit > 0 ? limit : null,
      ratio: limit > 0 ? badness(metric, value) / limit : null,
      first: f.firstAbove ?? null, harmed: f.firstHarmed ?? null, worst: f.judged ? f.ratio : null};
    data.columns.forEach((c, k) => {
      row[c] = columns[k][r][0];
    });
    return row;
  });
  const selected = ctx.state.row;
  const key = (r) => (r.ratio === null ? -1 : Number.isNaN(r.ratio) ? Infinity : r.ratio);
  rows.sort((a, b) => key(b) - key(a));
  const pick = rows.findIndex((r) => r.variable === selected);
  if (pick >= 12) rows.unshift(...rows.splice(pick, 1));
  const never = (v) => (v === null ? 'never' : String(v));
  section.appendChild(table({
    columns: explained([
      {key: 'variable', label: 'variable'},
      {key: metric, label: metric, numeric: true},
      {key: 'ratio', label: '× limit', numeric: true, format: (v) => (v === null ? '–' : fmtRatio(v))},
      {key: 'limit', label: 'limit', numeric: true, format: (v) => (v > 0 ? fmt(v) : 'none')},
      {key: 'first', label: 'first above', numeric: true, format: never},
      {key: 'harmed', label: 'harmed from', numeric: true, format: never},
      {key: 'worst', label: 'worst × limit', numeric: true, format: (v) => (v === null ? '–' : fmtRatio(v))},
      ...data.columns.filter((c) => c !== metric).map((c) => ({key: c, label: c, numeric: true})),
    ], ctx.explanations, 'divergence'),
    rows,
    sortValue: (row, k) => (k === 'ratio' && row.ratio === null ? -1 : row[k]),
    maxRows: 12,
    showAll: true,
    rowKey: (row) => row.variable,
    rowClass: (row) => `gl-var-row${row.variable === selected ? ' gl-selected' : ''}`,
    cellTitle: (row, k) => (k === 'limit' && byRoute ? limits.basis[rowOf(limits, row.variable)] || '' : ''),
    onSelect: (row) => ctx.navigate({row: row.variable}),
  }));
}

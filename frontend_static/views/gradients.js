// Gradients: where NaN/Inf started, which variables have dead (all-zero)
// or disconnected (None) gradients, and how the gradients evolve.  A
// sentence answers first (from the alert rules), then a health heatmap of
// every variable x step, L2 norm / max |g| / zero fraction / NaN+Inf count
// (log scale) for the top-K variables, the variables at the marked step,
// the selected variable's log2 |g| histogram (histogram.js) and the
// optimizer's update statistics (updates.js).

import {getJson} from '../api.js';
import {el, labelled, select} from '../dom.js';
import {fmt} from '../format.js';
import {heatmap} from '../heatmap.js';
import * as colorers from '../heatmap_colors.js';
import {lineChart} from '../line_chart.js';
import {table} from '../table.js';
import {
  HOW_TO_LOG, chartControls, chooseRun, emptyState, filterParams, focusSection, markedStep, maxSteps,
  runsWithKind, seriesColumn, smoothingOf, stepIndex, stepParams, tagsOfKind, topK,
} from './common.js';
import {COLUMNS, cellTexts, gradientHealth, rowSizes} from './gradient_health.js';
import {renderHistogram} from './histogram.js';
import {gradientOrder, gradientProblems} from './rank.js';
import {chooseTag, recordLabel} from './records.js';
import {renderUpdates} from './updates.js';

const KIND = 'grad_stats';

export async function render(container, ctx) {
  const {state, runs, navigate} = ctx;
  const run = chooseRun(runs, state.run, KIND);
  if (run) ctx.showRun(run.run);
  const entry = chooseTag(run, KIND, state.tag);
  if (!entry) {
    container.appendChild(emptyState(`Run ${run ? run.run : ''} has no gradient statistics: ${HOW_TO_LOG.grad_stats}.`,
      runsWithKind(runs, KIND), navigate));
    if (tagsOfKind(run, 'update_stats').length) await renderUpdates(container, {ctx, run});
    return;
  }
  container.appendChild(el('div', {class: 'gl-view-controls'}, [
    labelled('Record', select(tagsOfKind(run, KIND).map((t) => [t.tag, recordLabel(t)]), entry.tag,
      (v) => navigate({tag: v, row: '', step: ''}), {class: 'gl-tag'})),
    ...chartControls(state, navigate, {logLabel: 'log y (norms)'}),
  ]));
  container.appendChild(el('h2', {}, ['Gradients in run ', el('span', {class: 'gl-run-name', text: run.run})]));
  const [series, alerts] = await Promise.all([
    getJson('series', {run: run.run, tag: entry.tag, rows: state.filter, columns: COLUMNS.join(','),
      ...stepParams(state), max_steps: maxSteps()}),
    getJson('alerts', {run: run.run, ...filterParams(state)}),
  ]);
  if (!ctx.isCurrent()) return;
  if (!series.steps.length || !series.rows.length) {
    container.appendChild(emptyState(series.rows.length ? 'No steps in this step range.'
      : 'No variable matches the variable regex.'));
    return;
  }
  const col = Object.fromEntries(COLUMNS.map((c) => [c, seriesColumn(series, c)]));
  const health = gradientHealth(col);
  const problems = gradientProblems(health.status, colorers.STATUS);
  const ranked = gradientOrder(problems, rowSizes(health), state.rank);
  let selected = series.rows.indexOf(state.row);
  const shown = ranked.slice(0, topK(state));
  if (selected >= 0 && !shown.includes(selected)) shown.push(selected);
  const mark = markedStep(state, series.steps);
  const highlight = series.rows[selected];
  container.appendChild(headline(alerts.alerts.filter((a) => a.tag === entry.tag)));

  const healthSection = el('section', {class: 'gl-section gl-sec-health'});
  healthSection.appendChild(heatmap({
    title: 'Gradient health: variables × steps (click selects a variable and step)',
    rows: series.rows, steps: series.steps, values: health.status, colors: colorers.status(),
    selectedRow: selected, markStep: mark,
    shown: health.nonfinite,
    describe: (r, i) => [`step ${series.steps[i]}`, cellTexts(health, col, r, i).status,
      `zero fraction ${fmt(col.zero_fraction[r][i])}`],
    onSelect: (r, i) => navigate({row: series.rows[r], step: series.steps[i]}),
  }));
  container.appendChild(healthSection);
  const lines = (values, extra = {}) => shown.map((r) => ({
    name: series.rows[r], steps: series.steps, values: values[r], none: health.none[r],
    flags: extra.flags ? health.partial[r] : undefined,
  }));
  const common = {markStep: mark, highlight, smoothing: smoothingOf(state), onClick: (s) => navigate({step: s})};
  const yScale = state.logy === '0' ? 'linear' : 'log';
  const charts = el('section', {class: 'gl-section gl-sec-charts'}, [el('div', {class: 'gl-grid2'}, [
    lineChart({...common, title: 'L2 norm ‖g‖₂ (finite elements)', yLabel: 'l2_norm', yScale,
      series: lines(health.l2, {flags: true})}),
    lineChart({...common, title: 'max |g|', yLabel: 'max_abs', yScale, series: lines(health.maxAbs, {flags: true})}),
    lineChart({...common, title: 'zero fraction (exact zeros)', yLabel: 'zero_fraction',
      series: lines(health.zero)}),
    lineChart({...common, title: 'NaN + Inf count (log scale)', yLabel: 'elements', yScale: 'count',
      smoothing: 0, series: lines(health.nonfinite)}),
  ])]);
  container.appendChild(charts);
  const at = stepIndex(series.steps, mark);
  if (selected < 0) selected = ranked[0];
  container.appendChild(stepTable(series, col, health, at, series.rows[selected], navigate));
  if (state.focus === 'grad_stats') focusSection(healthSection);
  // The histogram and the updates come after: the view is usable before they are drawn.
  const more = Promise.all([
    renderHistogram(container, {ctx, run, entry, variable: series.rows[selected], mark}),
    tagsOfKind(run, 'update_stats').length ? renderUpdates(container, {ctx, run, entry, alerts: alerts.alerts})
      : null,
  ]);
  const late = {grad_histogram: 0, update_stats: 1}[state.focus];
  if (late !== undefined) {
    const sections = await more;
    if (ctx.isCurrent() && sections[late]) focusSection(sections[late]);
  }
}

/** Q2 and Q3 in sentences, from the alert rules over the shown variables and steps. */
function headline(alerts) {
  const of = (code) => alerts.find((a) => a.code === code);
  const nonfinite = of('nonfinite');
  const none = of('none_gradient');
  const dead = of('zero_gradient');
  const box = el('div', {class: 'gl-headline gl-grad-headline'});
  const line = (cls, parts) => box.appendChild(el('p', {class: cls}, parts));
  const list = (names) => names.slice(0, 6).join(', ') + (names.length > 6 ? ` and ${names.length - 6} more` : '');
  if (nonfinite) {
    line('gl-q2', ['First NaN/Inf: step ', el('b', {class: 'gl-nan-step', text: String(nonfinite.step_first)}),
      ' in ', el('b', {class: 'gl-nan-var', text: list(nonfinite.variables)}),
      ` (non-finite at logged steps up to ${nonfinite.step_last}).`]);
  } else {
    line('gl-q2', ['No NaN/Inf in these gradients.']);
  }
  line('gl-q3-none', none ? ['Disconnected (None gradient): ', el('b', {class: 'gl-none-vars', text: list(none.variables)}),
    '.'] : ['No disconnected (None) gradient.']);
  line('gl-q3-dead', dead ? ['Dead (all-zero gradient for several steps): ',
    el('b', {class: 'gl-dead-vars', text: list(dead.variables)}), ` (from step ${dead.step_first}).`]
    : ['No dead (all-zero) gradient.']);
  return box;
}

/** The variables at one step: status, l2, max |g|, zero fraction, NaN/Inf; None and NaN said in words. */
function stepTable(series, col, health, s, selectedName, navigate) {
  const rows = series.rows.map((name, r) => {
    const t = cellTexts(health, col, r, s);
    return {variable: name, status: t.status, l2_norm: col.l2_norm[r][s], max_abs: col.max_abs[r][s],
      zero_fraction: col.zero_fraction[r][s], nonfinite: health.nonfinite[r][s], count: col.count[r][s], texts: t};
  });
  const text = (key) => (v, row) => row.texts[key] ?? fmt(v);
  return table({
    caption: `Variables at step ${series.steps[s]} (click a step in a chart to move; select a variable for its histogram)`,
    columns: [
      {key: 'variable', label: 'variable'},
      {key: 'status', label: 'status'},
      {key: 'l2_norm', label: 'l2_norm', numeric: true, format: text('l2')},
      {key: 'max_abs', label: 'max |g|', numeric: true, format: text('maxAbs')},
      {key: 'zero_fraction', label: 'zero fraction', numeric: true, format: text('zero')},
      {key: 'nonfinite', label: 'NaN/Inf', numeric: true, format: text('nonfinite')},
      {key: 'count', label: 'elements', numeric: true},
    ],
    rows,
    rowKey: (row) => row.variable,
    rowClass: (row) => `gl-var-row${row.variable === selectedName ? ' gl-selected' : ''}`,
    onSelect: (row) => navigate({row: row.variable}),
  });
}

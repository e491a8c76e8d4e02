// Gradients: where NaN/Inf started, which variables have dead (all-zero)
// or disconnected (None) gradients, and how the gradients evolve.  The
// third answer first (the answers route, as the Overview and `report` say
// it), then a health heatmap of
// every variable x step (the health route: each pixel column keeps its
// worst status, so a single NaN step is never thinned away), L2 norm /
// max |g| / zero fraction / NaN+Inf count (log scale) for the top-K
// variables, the variables at the marked step, the selected variable's log2
// |g| histogram (histogram.js), the optimizer's updates (updates.js), and
// its loss scale, skipped updates and replayed non-finite step
// (optimizer_steps.js).

import {getJson} from '../api.js';
import {el, isolate, labelled, select} from '../dom.js';
import {fmt} from '../format.js';
import {heatmap} from '../heatmap.js';
import * as colorers from '../heatmap_colors.js';
import {lineChart} from '../line_chart.js';
import {table} from '../table.js';
import {
  HOW_TO_LOG, chartControls, emptyState, filterParams, focusSection, markedStep, maxSteps, pickRun,
  runsWithKind, seriesColumn, smoothingOf, stepParams, tagsOfKind, topK,
} from './common.js';
import {answersFor, byId, runAnswers, sentence} from './answers.js';
import {COLUMNS, cellTexts, gradientHealth} from './gradient_health.js';
import {renderHistogram} from './histogram.js';
import {renderOptimizerSteps} from './optimizer_steps.js';
import {overlayControls, renderGradientOverlay} from './overlay.js';
import {gradientOrder, gradientProblems} from './rank.js';
import {chooseTag, recordLabel} from './records.js';
import {renderUpdates} from './updates.js';

const KIND = 'grad_stats';
// The table at the marked step lists this many variables (the most troubled first) until asked for all:
// with 128 variables the histogram under it was 128 rows away.
const TABLE_ROWS = 12;
// What each status of the health route (its status_codes, by name) says.
const STATUS_TEXT = {ok: 'ok', dead: 'dead: all-zero gradient', none: 'None (disconnected)', nonfinite: 'NaN/Inf'};

/** The alerts of the state's run, asked for while the runs listing loads. */
export function prefetch(state) {
  if (state.run) getJson('alerts', {run: state.run, ...filterParams(state)}).catch(() => null);
  else getJson('alerts').catch(() => null);
}

export async function render(container, ctx) {
  const {state, runs, navigate} = ctx;
  const run = await pickRun(ctx, 'gradients', KIND);
  if (!ctx.isCurrent()) return;
  if (run) ctx.showRun(run.run);
  const entry = chooseTag(run, KIND, state.tag);
  if (!entry) {
    container.appendChild(emptyState(`Run ${run ? isolate(run.run) : ''} has no gradient statistics: ${HOW_TO_LOG.grad_stats}.`,
      runsWithKind(runs, KIND), navigate));
    if (tagsOfKind(run, 'update_stats').length) await renderUpdates(container, {ctx, run});
    if (run && (tagsOfKind(run, 'optimizer_step').length || tagsOfKind(run, 'nonfinite_replay').length)) {
      const {alerts} = await getJson('alerts', {run: run.run});
      if (ctx.isCurrent()) await renderOptimizerSteps(container, {ctx, run, alerts});
    }
    return;
  }
  const controls = el('div', {class: 'gl-view-controls'}, [
    labelled('Record', select(tagsOfKind(run, KIND).map((t) => [t.tag, recordLabel(t)]), entry.tag,
      (v) => navigate({tag: v, row: '', step: ''}), {class: 'gl-tag'})),
    ...chartControls(state, navigate, {logLabel: 'log y (norms)'}),
  ]);
  container.appendChild(controls);
  container.appendChild(el('h2', {}, ['Gradients in run ', el('span', {class: 'gl-run-name', text: run.run})]));
  const [health, alerts, picker, said] = await Promise.all([
    getJson('health', {run: run.run, tag: entry.tag, rows: state.filter, ...stepParams(state), buckets: maxSteps()}),
    getJson('alerts', {run: run.run, ...filterParams(state)}),
    overlayControls(ctx, run.run, KIND),
    answersFor(state, run.run).then((data) => byId(runAnswers(data, run.run)).broken, () => null),
  ]);
  if (!ctx.isCurrent()) return;
  if (picker) controls.appendChild(picker);
  if (!health.steps.length || !health.rows.length) {
    container.appendChild(emptyState(health.rows.length ? 'No steps in this step range.'
      : 'No variable matches the variable regex.'));
    return;
  }
  const ranked = gradientOrder(gradientProblems(health), health.max_abs.map((v) => v ?? 0), state.rank);
  const selected = health.rows.indexOf(state.row);
  const shown = ranked.slice(0, topK(state));
  if (selected >= 0 && !shown.includes(selected)) shown.push(selected);
  const last = health.last_steps[health.last_steps.length - 1];
  const mark = markedStep({step: state.step}, [health.steps[0], last]);
  const at = mark ?? last;
  const names = shown.map((r) => health.rows[r]);
  const columns = COLUMNS.join(',');
  const [lines, atStep] = await Promise.all([
    getJson('series', {run: run.run, tag: entry.tag, row: names, columns, ...stepParams(state),
      max_steps: Math.round(maxSteps() / 2)}),
    // The logged step at or before the marked one (max_steps=1 keeps the last step of the range).
    getJson('series', {run: run.run, tag: entry.tag, rows: state.filter, columns, step_min: state.smin, step_max: at,
      max_steps: 1}),
  ]);
  if (!ctx.isCurrent()) return;
  const focused = health.rows[selected >= 0 ? selected : ranked[0]];
  container.appendChild(el('div', {class: 'gl-headline gl-grad-headline'}, [said ? sentence(said, {className: 'gl-q3', question: true})
    : el('p', {class: 'gl-message gl-error', text: 'The answer could not be read: reload.'})]));
  const healthSection = el('section', {class: 'gl-section gl-sec-health'}, [healthMap(health, selected, mark, navigate)]);
  container.appendChild(healthSection);
  container.appendChild(charts(lines, health, shown, {mark, state, navigate}));
  await renderGradientOverlay(container, {ctx, run, entry, row: focused, column: 'l2_norm', label: 'L2 norm ‖g‖₂',
    yScale: state.logy === '0' ? 'linear' : 'log'});
  if (!ctx.isCurrent()) return;
  container.appendChild(stepTable(atStep, focused, navigate, ranked.map((r) => health.rows[r])));
  if (state.focus === 'grad_stats') focusSection(healthSection);
  // The histogram and the updates come after: the view is usable before they are drawn.
  const more = Promise.all([
    renderHistogram(container, {ctx, run, entry, variable: focused, mark}),
    tagsOfKind(run, 'update_stats').length ? renderUpdates(container, {ctx, run, entry, alerts: alerts.alerts})
      : null,
    renderOptimizerSteps(container, {ctx, run, alerts: alerts.alerts}),
  ]);
  const late = {grad_histogram: 0, update_stats: 1, optimizer_step: 2, nonfinite_replay: 2}[state.focus];
  if (late !== undefined) {
    const sections = await more;
    if (ctx.isCurrent() && sections[late]) focusSection(sections[late]);
  }
}

/** Every variable x step: ok, dead, None, NaN/Inf (the worst of each bucket of steps). */
function healthMap(health, selected, mark, navigate) {
  const status = health.status.map((row) => Float64Array.from(row));
  const counts = health.nonfinite.map((row) => Float64Array.from(row, Number));
  const codes = health.status_codes;
  const text = Object.fromEntries(Object.entries(codes).map(([name, code]) => [code, STATUS_TEXT[name]]));
  return heatmap({
    title: 'Gradient health: variables × steps (click selects a variable and step)',
    note: health.steps.length < health.last_steps[health.last_steps.length - 1] - health.steps[0] + 1
      ? 'each column shows the worst of its steps' : '',
    rows: health.rows, steps: health.steps, values: status, shown: counts, colors: colorers.status(codes),
    selectedRow: selected, markStep: mark,
    describe: (r, i, v) => [
      health.steps[i] === health.last_steps[i] ? `step ${health.steps[i]}` : `steps ${health.steps[i]}–${health.last_steps[i]}`,
      text[status[r][i]] || '', status[r][i] === codes.nonfinite ? `up to ${fmt(v)} NaN/Inf elements` : '']
      .filter(Boolean),
    onSelect: (r, i) => navigate({row: health.rows[r], step: health.steps[i]}),
  });
}

/** L2 norm, max |g|, zero fraction (top-K series) and NaN + Inf count (the health route's bucket maxima). */
function charts(series, health, shown, {mark, state, navigate}) {
  const col = Object.fromEntries(COLUMNS.map((c) => [c, seriesColumn(series, c)]));
  const h = gradientHealth(col);
  const highlight = state.row && health.rows.includes(state.row) ? state.row : undefined;
  const common = {markStep: mark, highlight, smoothing: smoothingOf(state), onClick: (s) => navigate({step: s})};
  const yScale = state.logy === '0' ? 'linear' : 'log';
  const order = shown.map((r) => series.rows.indexOf(health.rows[r])).filter((r) => r >= 0); // ranked first
  const lines = (values, flags) => order.map((r) => ({
    name: series.rows[r], steps: series.steps, values: values[r], none: h.none[r], flags: flags ? h.partial[r] : undefined,
  }));
  const counts = shown.map((r) => ({
    name: health.rows[r], steps: health.steps, values: health.nonfinite[r].map(Number),
    none: Uint8Array.from(health.status[r], (c) => (c === health.status_codes.none ? 1 : 0)),
  }));
  return el('section', {class: 'gl-section gl-sec-charts'}, [el('div', {class: 'gl-grid2'}, [
    lineChart({...common, title: 'L2 norm ‖g‖₂ (finite elements)', yLabel: 'l2_norm', yScale, series: lines(h.l2, true)}),
    lineChart({...common, title: 'max |g|', yLabel: 'max_abs', yScale, series: lines(h.maxAbs, true)}),
    lineChart({...common, title: 'zero fraction (exact zeros)', yLabel: 'zero_fraction', series: lines(h.zero)}),
    lineChart({...common, title: 'NaN + Inf count (log scale)', yLabel: 'elements', yScale: 'count', smoothing: 0,
      series: counts}),
  ])]);
}

/**
 * The variables at one step: status, l2, max |g|, zero fraction, NaN/Inf;
 * None and NaN said in words; in `order` (the most troubled first), the
 * first TABLE_ROWS and the selected one until "Show all" is pressed.
 */
function stepTable(series, selectedName, navigate, order) {
  const col = Object.fromEntries(COLUMNS.map((c) => [c, seriesColumn(series, c)]));
  const h = gradientHealth(col);
  const rows = series.rows.map((name, r) => {
    const texts = cellTexts(h, col, r, 0);
    return {variable: name, status: texts.status, l2_norm: col.l2_norm[r][0], max_abs: col.max_abs[r][0],
      zero_fraction: col.zero_fraction[r][0], nonfinite: h.nonfinite[r][0], count: col.count[r][0], texts};
  });
  const rank = new Map(order.map((name, i) => [name, i]));
  const at = (row) => (row.variable === selectedName ? -1 : rank.has(row.variable) ? rank.get(row.variable) : Infinity);
  rows.sort((a, b) => at(a) - at(b));
  const text = (key) => (v, row) => row.texts[key] ?? fmt(v);
  return table({
    caption: `Variables at step ${series.steps[0]} (click a step in a chart to move; select a variable for its histogram)`,
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
    maxRows: TABLE_ROWS,
    showAll: true,
    rowKey: (row) => row.variable,
    rowClass: (row) => `gl-var-row${row.variable === selectedName ? ' gl-selected' : ''}`,
    onSelect: (row) => navigate({row: row.variable}),
  });
}

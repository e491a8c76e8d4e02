// Divergence: how far a candidate (e.g. mixed_bfloat16) is from its
// reference (float32), per variable and step: a line chart of the top-K
// variables, a variables x steps heatmap, the worst variables at the
// selected step, and per-layer activation divergence in depth order.

import {getJson} from '../api.js';
import {checkbox, el, labelled, numberInput, select} from '../dom.js';
import {fmt} from '../format.js';
import {heatmap} from '../heatmap.js';
import {lineChart} from '../line_chart.js';
import {table} from '../table.js';
import {
  HOW_TO_LOG, badness, badnessLabel, chooseRun, chooseTag, emptyState, intOr, runsWithKind,
  seriesColumn, stepParams, tagsOfKind, variantsLine,
} from './common.js';

const KIND = 'divergence';
const DEFAULT_METRIC = 'rel_l2';
const MAX_STEPS = 2000;

export async function render(container, ctx) {
  const {state, runs, navigate} = ctx;
  const run = chooseRun(runs, state.run, KIND);
  if (run) ctx.showRun(run.run);
  const tags = tagsOfKind(run, KIND);
  if (!tags.length) {
    container.appendChild(emptyState(
      `Run ${run ? run.run : ''} has no divergence records: ${HOW_TO_LOG.divergence}.`,
      runsWithKind(runs, KIND), navigate));
    await renderActivations(container, ctx, run);
    return;
  }
  const tag = chooseTag(tags, state.tag);
  const metric = tag.columns.includes(state.metric) ? state.metric
    : tag.columns.includes(DEFAULT_METRIC) ? DEFAULT_METRIC : tag.columns[0];
  const topK = Math.max(1, intOr(state.k, 8));
  const logY = state.logy !== '0';

  container.appendChild(el('div', {class: 'gl-view-controls'}, [
    labelled('Record', select(tags.map((t) => [t.tag, t.tag]), tag.tag, (v) => navigate({tag: v}),
      {class: 'gl-tag'})),
    labelled('Metric', select(tag.columns, metric, (v) => navigate({metric: v}), {class: 'gl-metric'})),
    labelled('Top K', numberInput(topK, 1, (v) => navigate({k: v}), 'gl-topk')),
    el('label', {class: 'gl-field gl-inline'}, [
      checkbox(logY, (on) => navigate({logy: on ? '' : '0'}), 'gl-logy'), el('span', {text: 'log y'}),
    ]),
  ]));
  container.appendChild(el('h2', {}, ['Divergence in run ', el('span', {class: 'gl-run-name', text: run.run})]));
  container.appendChild(variantsLine(tag.extras));

  const series = await getJson('series', {
    run: run.run, tag: tag.tag, rows: state.filter, columns: metric,
    ...stepParams(state), max_steps: MAX_STEPS,
  });
  if (!ctx.isCurrent()) return;
  if (!series.steps.length || !series.rows.length) {
    container.appendChild(emptyState(series.rows.length
      ? 'No steps in this step range.' : 'No variable matches the variable regex.'));
    return;
  }
  const values = seriesColumn(series, metric);
  const worst = values.map((row) => row.reduce((m, v) => Math.max(m, badness(metric, v)), -Infinity));
  const order = series.rows.map((_, i) => i).sort((a, b) => worst[b] - worst[a]);
  let selectedRow = series.rows.indexOf(state.row);
  const top = order.slice(0, topK);
  if (selectedRow >= 0 && !top.includes(selectedRow)) top.push(selectedRow);
  const lastStep = series.steps[series.steps.length - 1];
  const step = series.steps.includes(intOr(state.step, NaN)) ? intOr(state.step, lastStep) : lastStep;

  container.appendChild(lineChart({
    title: `${metric} per step, top ${Math.min(topK, order.length)} variables`,
    yLabel: metric,
    logY,
    series: top.map((i) => ({name: series.rows[i], steps: series.steps, values: Array.from(values[i])})),
    onClick: (s) => navigate({step: s}),
  }));

  const colored = values.map((row) => row.map((v) => badness(metric, v)));
  container.appendChild(heatmap({
    title: `${badnessLabel(metric)}: variables × steps (click selects variable and step)`,
    rows: series.rows,
    steps: series.steps,
    values: colored,
    shown: values,
    legendTitle: badnessLabel(metric),
    selectedRow,
    describe: (r, s, v) => [series.rows[r], `step ${series.steps[s]}`, `${metric} ${fmt(v)}`],
    onSelect: (r, s) => navigate({row: series.rows[r], step: series.steps[s]}),
  }));

  await renderStepTable(container, ctx, {run, tag, metric, step, selected: state.row});
  if (!ctx.isCurrent()) return;
  await renderActivations(container, ctx, run, metric, step);
}

/** The worst variables at one step: every metric, ranked by the chosen one. */
async function renderStepTable(container, ctx, {run, tag, metric, step, selected}) {
  const at = await getJson('series', {
    run: run.run, tag: tag.tag, rows: ctx.state.filter, step_min: step, step_max: step,
  });
  if (!ctx.isCurrent()) return;
  const i = at.steps.indexOf(step);
  container.appendChild(el('h2', {text: `Worst variables at step ${step}`}));
  if (i < 0) {
    container.appendChild(emptyState(`No record at step ${step}.`));
    return;
  }
  const columns = at.columns.map((c) => seriesColumn(at, c));
  const rows = at.rows.map((name, r) => {
    const row = {variable: name};
    at.columns.forEach((c, k) => {
      row[c] = columns[k][r][i];
    });
    return row;
  });
  container.appendChild(table({
    columns: [{key: 'variable', label: 'variable'},
      ...at.columns.map((c) => ({key: c, label: c, numeric: true}))],
    rows,
    sortKey: metric,
    sortValue: (row, key) => (at.columns.includes(key) ? badness(key, row[key]) : row[key]),
    descending: true,
    maxRows: 25,
    rowClass: (row) => `gl-var-row${row.variable === selected ? ' gl-selected' : ''}`,
    onSelect: (row) => ctx.navigate({row: row.variable}),
  }));
}

/** Activation divergence per layer, rows in depth order (as logged). */
async function renderActivations(container, ctx, run, metric = DEFAULT_METRIC, step = null) {
  const tags = tagsOfKind(run, 'activation_divergence');
  if (!tags.length) return;
  const tag = chooseTag(tags, ctx.state.atag);
  const column = tag.columns.includes(metric) ? metric : tag.columns[0];
  const series = await getJson('series', {
    run: run.run, tag: tag.tag, columns: column, ...stepParams(ctx.state), max_steps: MAX_STEPS,
  });
  if (!ctx.isCurrent()) return;
  container.appendChild(el('h2', {text: `Activation divergence per layer (${column}), input to output`}));
  container.appendChild(variantsLine(tag.extras));
  if (tags.length > 1) {
    container.appendChild(labelled('Activation record', select(tags.map((t) => t.tag), tag.tag,
      (v) => ctx.navigate({atag: v}), {class: 'gl-atag'})));
  }
  if (!series.steps.length) {
    container.appendChild(emptyState('No steps in this step range.'));
    return;
  }
  const values = seriesColumn(series, column);
  const i = step !== null && series.steps.includes(step) ? series.steps.indexOf(step) : series.steps.length - 1;
  container.appendChild(heatmap({
    title: `${badnessLabel(column)}: layers (depth order) × steps`,
    rows: series.rows,
    steps: series.steps,
    values: values.map((row) => row.map((v) => badness(column, v))),
    shown: values,
    legendTitle: badnessLabel(column),
    describe: (r, s, v) => [series.rows[r], `depth ${r}`, `step ${series.steps[s]}`, `${column} ${fmt(v)}`],
  }));
  container.appendChild(table({
    caption: `At step ${series.steps[i]}`,
    columns: [{key: 'depth', label: 'depth', numeric: true}, {key: 'layer', label: 'layer'},
      {key: 'value', label: column, numeric: true}],
    rows: series.rows.map((layer, r) => ({depth: r, layer, value: values[r][i]})),
    rowClass: () => 'gl-layer-row',
  }));
}

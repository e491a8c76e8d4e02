// Gradients: per-variable norm, max |g|, zero fraction and NaN/Inf count
// over steps, a per-variable table at the last step, and the selected
// variable's log2-magnitude histogram over steps with the bfloat16 and
// float32 exponent limits drawn as lines.

import {getJson} from '../api.js';
import {checkbox, el, labelled, numberInput, select} from '../dom.js';
import {fmt} from '../format.js';
import {heatmap} from '../heatmap.js';
import {lineChart} from '../line_chart.js';
import {table} from '../table.js';
import {
  HOW_TO_LOG, chooseRun, chooseTag, emptyState, intOr, runsWithKind, seriesColumn, stepParams,
  tagsOfKind,
} from './common.js';

const KIND = 'grad_stats';
const MAX_STEPS = 2000;
const CHART_COLUMNS = ['l2_norm', 'max_abs', 'zero_fraction', 'nan_count', 'posinf_count',
  'neginf_count', 'is_none'];
const SPECIAL = {zero: '0', posinf: '+Inf', neginf: '-Inf', nan: 'NaN'};
const LIMIT_NAMES = {min_subnormal: 'min subnormal', min_normal: 'min normal', max: 'max finite'};
const LIMIT_COLORS = {bfloat16: '#e8710a', float32: '#4285f4', float16: '#34a853'};

export async function render(container, ctx) {
  const {state, runs, navigate} = ctx;
  const run = chooseRun(runs, state.run, KIND);
  if (run) ctx.showRun(run.run);
  const tags = tagsOfKind(run, KIND);
  if (!tags.length) {
    container.appendChild(emptyState(
      `Run ${run ? run.run : ''} has no gradient statistics: ${HOW_TO_LOG.grad_stats}.`,
      runsWithKind(runs, KIND), navigate));
    return;
  }
  const tag = chooseTag(tags, state.tag);
  const topK = Math.max(1, intOr(state.k, 8));
  const logY = state.logy !== '0';
  container.appendChild(el('div', {class: 'gl-view-controls'}, [
    labelled('Record', select(tags.map((t) => t.tag), tag.tag, (v) => navigate({tag: v}), {class: 'gl-tag'})),
    labelled('Variables shown', numberInput(topK, 1, (v) => navigate({k: v}), 'gl-topk')),
    el('label', {class: 'gl-field gl-inline'}, [
      checkbox(logY, (on) => navigate({logy: on ? '' : '0'}), 'gl-logy'), el('span', {text: 'log y (norms)'}),
    ]),
  ]));
  container.appendChild(el('h2', {}, ['Gradients in run ', el('span', {class: 'gl-run-name', text: run.run})]));

  const series = await getJson('series', {
    run: run.run, tag: tag.tag, rows: state.filter, columns: CHART_COLUMNS.join(','),
    ...stepParams(state), max_steps: MAX_STEPS,
  });
  if (!ctx.isCurrent()) return;
  if (!series.steps.length || !series.rows.length) {
    container.appendChild(emptyState(series.rows.length
      ? 'No steps in this step range.' : 'No variable matches the variable regex.'));
    return;
  }
  const col = Object.fromEntries(CHART_COLUMNS.map((c) => [c, seriesColumn(series, c)]));
  const nonfinite = series.rows.map((_, r) => col.nan_count[r].map(
    (v, s) => v + col.posinf_count[r][s] + col.neginf_count[r][s]));
  let selected = series.rows.indexOf(state.row);
  const shown = series.rows.map((_, i) => i).slice(0, topK);
  if (selected >= 0 && !shown.includes(selected)) shown.push(selected);
  const lines = (values) => shown.map((r) => ({
    name: series.rows[r], steps: series.steps, values: Array.from(values[r]),
  }));
  const pick = (s) => navigate({step: s});
  container.appendChild(el('div', {class: 'gl-grid2'}, [
    lineChart({title: 'L2 norm ‖g‖₂', yLabel: 'l2_norm', logY, series: lines(col.l2_norm), onClick: pick}),
    lineChart({title: 'max |g|', yLabel: 'max_abs', logY, series: lines(col.max_abs), onClick: pick}),
    lineChart({title: 'zero fraction', yLabel: 'zero_fraction', series: lines(col.zero_fraction), onClick: pick}),
    lineChart({title: 'NaN + Inf count', yLabel: 'count', series: lines(nonfinite), onClick: pick}),
  ]));

  const last = series.steps.length - 1;
  if (selected < 0) selected = 0;
  container.appendChild(table({
    caption: `Variables at step ${series.steps[last]} (select one for its histogram)`,
    columns: [
      {key: 'variable', label: 'variable'},
      {key: 'l2_norm', label: 'l2_norm', numeric: true},
      {key: 'max_abs', label: 'max |g|', numeric: true},
      {key: 'zero_fraction', label: 'zero fraction', numeric: true},
      {key: 'nonfinite', label: 'NaN/Inf', numeric: true},
      {key: 'disconnected', label: 'disconnected'},
    ],
    rows: series.rows.map((name, r) => ({
      variable: name,
      l2_norm: col.l2_norm[r][last],
      max_abs: col.max_abs[r][last],
      zero_fraction: col.zero_fraction[r][last],
      nonfinite: nonfinite[r][last],
      disconnected: col.is_none[r][last] > 0 ? 'yes (None gradient)' : '',
    })),
    rowClass: (row) => `gl-var-row${row.variable === series.rows[selected] ? ' gl-selected' : ''}`,
    onSelect: (row) => navigate({row: row.variable}),
  }));
  await renderHistogram(container, ctx, run, tag, series.rows[selected]);
}

/** The histogram tag logged beside a grad_stats tag (same name prefix). */
function histogramTag(run, statsTag) {
  const prefix = statsTag.tag.split(`/${KIND}/`)[0];
  const tags = tagsOfKind(run, 'grad_histogram').filter((t) => t.rows.length);
  return tags.find((t) => t.tag.split('/grad_histogram/')[0] === prefix
    && t.rows.length === statsTag.rows.length) || tags[0] || null;
}

async function renderHistogram(container, ctx, run, statsTag, variable) {
  const tag = histogramTag(run, statsTag);
  container.appendChild(el('h2', {}, ['log2 |g| histogram of ', el('span', {class: 'gl-hist-var', text: variable})]));
  if (!tag || !tag.rows.includes(variable)) {
    container.appendChild(emptyState('No log2-magnitude histogram was logged for this variable '
      + '(tb_gradlens.summary.gradients(..., histogram=True)).'));
    return;
  }
  const zoom = ctx.state.hzoom === '1';
  container.appendChild(el('label', {class: 'gl-field gl-inline'}, [
    checkbox(zoom, (on) => ctx.navigate({hzoom: on ? '1' : ''}), 'gl-hzoom'),
    el('span', {text: 'zoom to the exponents present'}),
  ]));
  const hist = await getJson('series', {
    run: run.run, tag: tag.tag, row: variable, ...stepParams(ctx.state), max_steps: MAX_STEPS,
  });
  if (!ctx.isCurrent()) return;
  if (!hist.steps.length) {
    container.appendChild(emptyState('No steps in this step range.'));
    return;
  }
  // Display rows, top to bottom: exponents high to low, then 0, +Inf, -Inf, NaN.
  const exponents = [];
  const specials = [];
  hist.columns.forEach((name, c) => {
    const m = /^2\^(-?\d+)$/.exec(name);
    if (m) exponents.push({c, e: parseInt(m[1], 10)});
    else specials.push({c, name});
  });
  exponents.sort((a, b) => b.e - a.e);
  const counts = hist.columns.map((c) => seriesColumn(hist, c)[0]);
  let shownExp = exponents;
  if (zoom) {
    const present = exponents.filter(({c}) => counts[c].some((v) => v > 0)).map(({e}) => e);
    if (present.length) {
      const hi = Math.max(...present) + 4;
      const lo = Math.min(...present) - 4;
      shownExp = exponents.filter(({e}) => e <= hi && e >= lo);
    }
  }
  const rows = [...shownExp.map(({e}) => `2^${e} ≤ |g| < 2^${e + 1}`),
    ...specials.map(({name}) => SPECIAL[name] || name)];
  const values = [...shownExp.map(({c}) => counts[c]), ...specials.map(({c}) => counts[c])];
  const rowOf = (e) => shownExp.findIndex((x) => x.e === e);
  const yTicks = [];
  shownExp.forEach(({e}, r) => {
    if (e % (zoom ? 4 : 16) === 0 && (zoom || e > -140)) yTicks.push({row: r, label: `2^${e}`});
  });
  if (zoom) {
    specials.forEach(({name}, k) => yTicks.push({row: shownExp.length + k, label: SPECIAL[name] || name}));
  } else if (specials.length) {
    yTicks.push({row: shownExp.length + specials.length / 2, label: '0 ±Inf NaN'});
  }
  container.appendChild(heatmap({
    title: 'count per log2 |g| bin × step',
    rows, steps: hist.steps, values,
    scale: 'log', zeroIsEmpty: true, legendTitle: 'elements',
    yTicks, lines: limitLines(tag.extras, rowOf),
    rowHeight: zoom ? 8 : 2, maxHeight: zoom ? 480 : 600,
    describe: (r, s, v) => [rows[r], `step ${hist.steps[s]}`, `${fmt(v)} elements`],
  }));
}

/**
 * Lines for the dtype exponent limits in a histogram tag's extras
 * (`dtype_exponent_limits`: {dtype: {min_subnormal, min_normal, max}});
 * limits at the same exponent share a line.  A min limit lies under its
 * bin (row + 1), the max limit over it.
 */
export function limitLines(extras, rowOf) {
  const limits = (extras && extras.dtype_exponent_limits) || {};
  const byPosition = new Map();
  for (const dtype of ['bfloat16', 'float32']) {
    for (const [key, e] of Object.entries(limits[dtype] || {})) {
      const r = rowOf(e);
      if (r < 0) continue;
      const position = key === 'max' ? r : r + 1;
      const entry = byPosition.get(position) || {row: position, parts: new Map(), color: LIMIT_COLORS[dtype]};
      const name = `${LIMIT_NAMES[key] || key} 2^${e}`;
      entry.parts.set(name, [...(entry.parts.get(name) || []), dtype]);
      if ([...entry.parts.values()].flat().length > 1) entry.color = '#9aa0a6';
      byPosition.set(position, entry);
    }
  }
  return [...byPosition.values()].map((x) => ({
    row: x.row,
    label: [...x.parts].map(([name, dtypes]) => `${dtypes.join('/')} ${name}`).join(' = '),
    color: x.color,
  }));
}

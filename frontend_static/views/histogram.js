// The selected variable's log2 |g| histogram over steps: one row per
// binary exponent, high to low, then exact zeros, +Inf, -Inf and NaN (those
// three magenta wherever they occur).  By default the rows span the
// exponents the data has (a few binades of margin); the dtype limits
// (bfloat16/float32 smallest subnormal, smallest normal, largest finite)
// are dashed lines where they fall inside, and named below the chart where
// they do not.  Read through the histograms route: at most HIST_STEPS
// steps, sampled as TensorBoard samples its own histograms.

import {getJson} from '../api.js';
import {checkbox, el} from '../dom.js';
import {fmt} from '../format.js';
import {heatmap} from '../heatmap.js';
import {counts} from '../heatmap_colors.js';
import {emptyState, seriesColumn, stepParams} from './common.js';
import {sibling} from './records.js';

export const HIST_STEPS = 500;
const MARGIN = 3;
const SPECIAL = {zero: '0', posinf: '+Inf', neginf: '−Inf', nan: 'NaN'};
const LIMIT_NAMES = {min_subnormal: 'smallest subnormal', min_normal: 'smallest normal', max: 'largest finite'};
const LIMIT_COLORS = {bfloat16: '#e8710a', float32: '#1a73e8'};

/** Exponents (high to low) the rows span: the data's range +- MARGIN, or all of them. */
export function shownExponents(exponents, totals, all) {
  const present = exponents.filter((e) => totals.get(e) > 0);
  if (all || !present.length) return exponents;
  const hi = Math.max(...present) + MARGIN;
  const lo = Math.min(...present) - MARGIN;
  return exponents.filter((e) => e <= hi && e >= lo);
}

/** Dashed lines for the dtype limits inside the rows; the others as text. */
export function limitLines(limits, shown) {
  const lines = new Map();
  const outside = [];
  for (const dtype of ['bfloat16', 'float32']) {
    for (const [key, e] of Object.entries((limits && limits[dtype]) || {})) {
      const r = shown.indexOf(e);
      const name = `${dtype} ${LIMIT_NAMES[key] || key} 2^${e}`;
      if (r < 0) {
        outside.push({e, text: `${dtype} ${LIMIT_NAMES[key] || key}`});
        continue;
      }
      const row = key === 'max' ? r : r + 1; // a min limit under its bin, the max over it
      const line = lines.get(row) || {row, names: [], color: LIMIT_COLORS[dtype]};
      line.names.push(name);
      if (line.names.length > 1) line.color = '#9aa0a6';
      lines.set(row, line);
    }
  }
  return {lines: [...lines.values()].map((l) => ({row: l.row, label: l.names.join(' = '), color: l.color})), outside};
}

/** Labels of the special rows (from `first`): each its own when rows are tall, else "0" and "±Inf NaN", else one. */
export function specialTicks(names, first, rowHeight) {
  if (rowHeight >= 12) return names.map((name, k) => ({row: first + k, label: SPECIAL[name] || name}));
  if (rowHeight * 2 < 12) return [{row: first + (names.length - 1) / 2, label: '0 ±Inf NaN'}];
  const zero = names.indexOf('zero');
  const others = names.map((_, k) => k).filter((k) => k !== zero);
  const ticks = zero >= 0 ? [{row: first + zero, label: '0'}] : [];
  if (others.length) {
    const middle = (others[0] + others[others.length - 1]) / 2;
    ticks.push({row: first + middle, label: '±Inf NaN'});
  }
  return ticks;
}

/** "2^127: bfloat16, float32 largest finite; ...": limits outside the rows, by exponent. */
function outsideText(outside) {
  const byExponent = new Map();
  for (const {e, text} of outside) byExponent.set(e, [...(byExponent.get(e) || []), text]);
  return [...byExponent].sort((a, b) => b[0] - a[0]).map(([e, texts]) => `2^${e} ${texts.join(', ')}`).join('; ');
}

export async function renderHistogram(container, {ctx, run, entry, variable, mark}) {
  const section = el('section', {class: 'gl-section gl-sec-histogram', dataset: {loaded: '0'}});
  container.appendChild(section);
  section.appendChild(el('h2', {}, ['log2 |g| histogram of ', el('span', {class: 'gl-hist-var', text: variable})]));
  const tag = sibling(run, entry, 'grad_histogram');
  if (!tag || !tag.rows.includes(variable)) {
    section.appendChild(emptyState('No log2-magnitude histogram was logged for this variable '
      + '(tb_gradlens.summary.gradients(..., histogram=True)).'));
    section.dataset.loaded = '1';
    return section;
  }
  const all = ctx.state.hrange === 'all';
  section.appendChild(el('label', {class: 'gl-field gl-inline'}, [
    checkbox(all, (on) => ctx.navigate({hrange: on ? 'all' : ''}), 'gl-hrange'),
    el('span', {text: 'show the whole float32 range (2^-149 … 2^127)'}),
  ]));
  const loading = el('p', {class: 'gl-message gl-loading-part', text: 'Loading the histogram…'});
  section.appendChild(loading);
  const hist = await getJson('histograms', {run: run.run, tag: tag.tag, row: variable, ...stepParams(ctx.state),
    max_steps: HIST_STEPS});
  loading.remove();
  section.dataset.loadedAt = performance.now().toFixed(1);
  section.dataset.loaded = '1';
  if (!ctx.isCurrent()) return section;
  if (!hist.steps.length) {
    section.appendChild(emptyState('No steps in this step range.'));
    return section;
  }
  const byExponent = new Map();
  const specials = [];
  hist.columns.forEach((name, c) => {
    const m = /^2\^(-?\d+)$/.exec(name);
    if (m) byExponent.set(parseInt(m[1], 10), c);
    else specials.push({c, name});
  });
  const exponents = [...byExponent.keys()].sort((a, b) => b - a);
  const columns = hist.columns.map((c) => seriesColumn(hist, c)[0]);
  const totals = new Map(exponents.map((e) => [e, columns[byExponent.get(e)].reduce((a, v) => a + (v > 0 ? v : 0), 0)]));
  const shown = shownExponents(exponents, totals, all);
  const rows = [...shown.map((e) => `2^${e} ≤ |g| < 2^${e + 1}`), '', ...specials.map((s) => SPECIAL[s.name] || s.name)];
  const blank = new Float64Array(hist.steps.length);
  const values = [...shown.map((e) => columns[byExponent.get(e)]), blank, ...specials.map((s) => columns[s.c])];
  const special = [...shown.map(() => null), 'blank', ...specials.map((s) => (s.name === 'zero' ? 'zero' : 'nonfinite'))];
  const rowHeight = Math.max(2, Math.min(14, Math.floor(480 / rows.length)));
  const stride = [1, 2, 4, 8, 16, 32, 64].find((k) => k * rowHeight >= 13);
  const yTicks = shown.map((e, r) => ({row: r, label: `2^${e}`})).filter((t, r) => shown[r] % stride === 0);
  yTicks.push(...specialTicks(specials.map((s) => s.name), shown.length + 1, rowHeight).map((t) => ({...t, priority: 1})));
  const {lines, outside} = limitLines(tag.extras && tag.extras.dtype_exponent_limits, shown);
  const sampled = hist.sampled ? ` · ${hist.steps.length} sampled steps` : '';
  section.appendChild(heatmap({
    title: `elements per log2 |g| bin × step${sampled}`,
    note: all ? 'the whole float32 range' : `exponents 2^${shown[shown.length - 1]} … 2^${shown[0]} (the data's range ± ${MARGIN})`,
    rows, steps: hist.steps, values, colors: counts(values, special), legendTitle: 'elements',
    yTicks, lines, rowHeight, markStep: mark,
    describe: (r, i, v) => [`step ${hist.steps[i]}`, `${fmt(v)} elements`],
  }));
  if (outside.length && !all) {
    section.appendChild(el('p', {class: 'gl-note gl-limits-outside',
      text: `Dtype limits outside the rows shown: ${outsideText(outside)}.`}));
  }
  return section;
}

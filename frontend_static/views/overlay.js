// Several runs on one chart, as TensorBoard overlays runs: the Gradients and
// Divergence views draw the same variable (or layer) in every run ticked
// under "Overlay runs", each in its TensorBoard run color; a divergence
// chart draws each run's limit dashed in the run's color.

import {getJson} from '../api.js';
import {el} from '../dom.js';
import {lineChart} from '../line_chart.js';
import {runColors} from '../run_colors.js';
import {markedStep, maxSteps, overlayPicker, overlayRuns, seriesColumn, smoothingOf, stepParams} from './common.js';
import {judges, limitSeries, limitsFor, stateRange} from './limits.js';
import {badness} from './rank.js';
import {COMPARISON_KINDS, comparisons, chooseTag, sibling} from './records.js';

/** The "Overlay runs" picker of a view: the runs that have one of `kinds`, in their TensorBoard colors. */
export async function overlayControls(ctx, run, ...kinds) {
  const names = ctx.runs.filter((r) => r.tags.some((t) => kinds.includes(t.kind))).map((r) => r.run);
  if (names.length < 2) return null;
  const colors = await runColors(ctx.runs.map((r) => r.run));
  return overlayPicker(ctx.state, ctx.navigate, names, colors, run);
}

/** The comparison of `entry` that matches `cmp` (same variants), else its default one. */
function matching(entry, cmp) {
  const list = comparisons(entry);
  return list.find((g) => g.label === cmp.label) || list[0] || null;
}

/**
 * `column` of `row` in the `kind` record of the comparison like `cmp`, in
 * the view's run and every run ticked for overlay (nothing when none is).
 */
export async function renderDivergenceOverlay(section, {ctx, run, cmp, kind, row, column}) {
  const {state, runs} = ctx;
  const names = runs.filter((r) => r.tags.some((t) => COMPARISON_KINDS.includes(t.kind))).map((r) => r.run);
  const others = overlayRuns(state, names).filter((n) => n !== run);
  if (!others.length || !row) return;
  const colors = await runColors(runs.map((r) => r.run));
  const range = stateRange(state);
  const parts = await Promise.all([run, ...others].map(async (name) => {
    const group = matching(runs.find((r) => r.run === name), cmp);
    const entry = group && group[kind];
    if (!entry || !entry.rows.includes(row)) return {name, missing: true};
    const [series, limits] = await Promise.all([
      getJson('series', {run: name, tag: entry.tag, row, columns: column, ...stepParams(state), max_steps: maxSteps()}),
      limitsFor(name, entry),
    ]);
    const values = Float64Array.from(seriesColumn(series, column)[0] || [], (v) => badness(column, v));
    const line = {name, steps: series.steps, values, color: colors.get(name)};
    const limit = judges(limits, column) ? limitSeries(limits, limits.rows.indexOf(row), name, colors.get(name), range)
      : null;
    return {name, lines: limit ? [line, limit] : [line]};
  }));
  if (!ctx.isCurrent()) return;
  section.appendChild(overlayChart(ctx, parts, {
    title: `${column} of ${row} across runs`, yLabel: column, yScale: state.logy === '0' ? 'linear' : 'log',
    note: `${cmp.label} in each run, in its TensorBoard run color; dashed: that run's limit (hover for its basis)`,
  }));
}

/** A gradient statistic of one variable in the view's run and every run ticked for overlay. */
export async function renderGradientOverlay(container, {ctx, run, entry, row, column, label, yScale}) {
  const {state, runs} = ctx;
  const names = runs.filter((r) => r.tags.some((t) => t.kind === entry.kind)).map((r) => r.run);
  const others = overlayRuns(state, names).filter((n) => n !== run.run);
  if (!others.length || !row) return;
  const colors = await runColors(runs.map((r) => r.run));
  const parts = await Promise.all([run.run, ...others].map(async (name) => {
    const other = runs.find((r) => r.run === name);
    const tag = name === run.run ? entry : sibling(other, entry, entry.kind) || chooseTag(other, entry.kind, '');
    if (!tag || !tag.rows.includes(row)) return {name, missing: true};
    const series = await getJson('series', {run: name, tag: tag.tag, row, columns: column, ...stepParams(state),
      max_steps: maxSteps()});
    return {name, lines: [{name, steps: series.steps, values: seriesColumn(series, column)[0] || new Float64Array(0),
      color: colors.get(name)}]};
  }));
  if (!ctx.isCurrent()) return;
  container.appendChild(el('section', {class: 'gl-section gl-sec-overlay'}, [overlayChart(ctx, parts, {
    title: `${label} of ${row} across runs`, yLabel: column, yScale,
    note: 'each run in its TensorBoard run color',
  })]));
}

function overlayChart(ctx, parts, o) {
  const missing = parts.filter((p) => p.missing).map((p) => p.name);
  const figure = lineChart({
    ...o, series: parts.flatMap((p) => p.lines || []), markStep: markedStep(ctx.state, parts.flatMap((p) =>
      (p.lines ? p.lines[0].steps : [])).sort((a, b) => a - b)), smoothing: smoothingOf(ctx.state),
    onClick: (s) => ctx.navigate({step: s}),
  });
  figure.classList.add('gl-overlay-chart');
  if (missing.length) {
    figure.appendChild(el('p', {class: 'gl-note gl-overlay-missing',
      text: `Not in ${missing.join(', ')}: no such ${o.yLabel === 'l2_norm' ? 'variable' : 'row'} logged there.`}));
  }
  return figure;
}

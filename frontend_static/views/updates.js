// The optimizer's updates (update_stats records): the fraction of each
// variable's elements whose update bfloat16 storage would lose (with the
// lost_update alert's threshold as a line when the alert fired, and what the
// numbers mean for weights the model stores in float32) and the update /
// weight ratio, for the variables that lose most.

import {getJson} from '../api.js';
import {el, labelled, select} from '../dom.js';
import {lineChart} from '../line_chart.js';
import {emptyState, markedStep, maxSteps, seriesColumn, smoothingOf, stepParams, tagsOfKind, topK} from './common.js';
import {fmt} from '../format.js';
import {alertLimit} from './limits.js';
import {judged, order} from './rank.js';
import {chooseTag, recordLabel, sibling} from './records.js';

export async function renderUpdates(container, {ctx, run, entry = null, alerts = null}) {
  const {state, navigate} = ctx;
  const section = el('section', {class: 'gl-section gl-sec-updates'});
  container.appendChild(section);
  const tags = tagsOfKind(run, 'update_stats');
  const tag = state.utag ? chooseTag(run, 'update_stats', state.utag) : entry ? sibling(run, entry, 'update_stats') : tags[0];
  section.appendChild(el('h2', {text: 'Optimizer updates'}));
  if (tags.length > 1) {
    section.appendChild(labelled('Update record', select(tags.map((t) => [t.tag, recordLabel(t)]), tag.tag,
      (v) => navigate({utag: v}), {class: 'gl-utag'})));
  }
  const [series, runAlerts] = await Promise.all([
    getJson('series', {run: run.run, tag: tag.tag, rows: state.filter, columns: 'lost_update_bf16,update_ratio',
      ...stepParams(state), max_steps: maxSteps()}),
    alerts ? Promise.resolve({alerts}) : getJson('alerts', {run: run.run}),
  ]);
  if (!ctx.isCurrent()) return section;
  if (!series.steps.length || !series.rows.length) {
    section.appendChild(emptyState(series.rows.length ? 'No steps in this step range.'
      : 'No variable matches the variable regex.'));
    return section;
  }
  const lost = seriesColumn(series, 'lost_update_bf16');
  const ratio = seriesColumn(series, 'update_ratio');
  const threshold = alertLimit(runAlerts.alerts, tag.tag, 'lost_update_bf16');
  const limitRows = threshold === null ? null : series.rows.map(() => new Float64Array(series.steps.length).fill(threshold));
  const ranked = order(judged(lost, limitRows), state.rank);
  const selected = series.rows.indexOf(state.row);
  const shown = ranked.slice(0, topK(state));
  if (selected >= 0 && !shown.includes(selected)) shown.push(selected);
  const common = {markStep: markedStep(state, series.steps), highlight: series.rows[selected],
    smoothing: smoothingOf(state), onClick: (s) => navigate({step: s})};
  const lines = (values) => shown.map((r) => ({name: series.rows[r], steps: series.steps, values: values[r]}));
  const dtypes = (tag.extras && tag.extras.variable_dtypes) || [];
  const stored = shown.map((r) => dtypes[tag.rows.indexOf(series.rows[r])] || 'unknown');
  const low = stored.filter((d) => ctx.lowPrecision.includes(d));
  const note = threshold !== null ? 'dashed: the lost_update alert\'s threshold (hover for its basis)'
    : low.length ? `no lost_update alert on these ${low[0]} weights: no threshold line`
      : stored.every((d) => d === 'float32') ? 'these weights are stored in float32 (mixed precision keeps float32 '
        + 'master weights): nothing is lost; this is what bfloat16 storage would lose, so no alert and no line'
        : 'the weights\' storage dtype is not recorded: no alert and no line';
  section.appendChild(el('div', {class: 'gl-grid2'}, [
    lineChart({...common, title: 'updates bfloat16 weights would lose (fraction of elements)',
      yLabel: 'lost_update_bf16', series: lines(lost), note,
      limits: threshold === null ? [] : [{value: threshold, label: `alert threshold ${fmt(threshold)}`,
        basis: `the lost_update alert fires above ${fmt(threshold)} for weights stored in bfloat16 or float16`}]}),
    lineChart({...common, title: 'update / weight ratio ‖Δw‖/‖w‖', yLabel: 'update_ratio',
      yScale: state.logy === '0' ? 'linear' : 'log', series: lines(ratio)}),
  ]));
  return section;
}

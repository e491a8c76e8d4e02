// The optimizer's updates (update_stats records): the fraction of each
// variable's elements whose update bfloat16 storage would lose (with the
// lost_update alert's tolerance as a line) and the update / weight ratio,
// for the variables that lose most.

import {getJson} from '../api.js';
import {el, labelled, select} from '../dom.js';
import {lineChart} from '../line_chart.js';
import {emptyState, markedStep, maxSteps, seriesColumn, smoothingOf, stepParams, tagsOfKind, topK} from './common.js';
import {basisText, columnLimits, limitLines} from './limits.js';
import {exceedances, order} from './rank.js';
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
  const limits = columnLimits(null, runAlerts.alerts, tag.tag, 'lost_update_bf16', series.rows.length)
    || series.rows.map(() => null);
  const ranked = order(exceedances(lost, limits), state.rank);
  const selected = series.rows.indexOf(state.row);
  const shown = ranked.slice(0, topK(state));
  if (selected >= 0 && !shown.includes(selected)) shown.push(selected);
  const common = {markStep: markedStep(state, series.steps), highlight: series.rows[selected],
    smoothing: smoothingOf(state), onClick: (s) => navigate({step: s})};
  const lines = (values) => shown.map((r) => ({name: series.rows[r], steps: series.steps, values: values[r]}));
  const basis = series.rows.map(() => 'lost_update alert');
  section.appendChild(el('div', {class: 'gl-grid2'}, [
    lineChart({...common, title: 'updates bfloat16 weights would lose (fraction of elements)',
      yLabel: 'lost_update_bf16', series: lines(lost), limits: limitLines(limits, shown),
      note: limits.some((l) => l > 0) ? `tolerance ${basisText(limits, basis)}` : 'no lost_update alert: no tolerance line'}),
    lineChart({...common, title: 'update / weight ratio ‖Δw‖/‖w‖', yLabel: 'update_ratio',
      yScale: state.logy === '0' ? 'linear' : 'log', series: lines(ratio)}),
  ]));
  return section;
}

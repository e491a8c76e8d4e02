// What the optimizer did and the replayed non-finite step, beside the
// gradient charts: the loss scale's history (optimizer_step records, one at
// every logged step and at every skipped update), where the optimizer's own
// step falls behind the train step, and the verdict of the replay of the
// first non-finite step (nonfinite_replay).  Skips, failures and the
// verdict are the alerts' (the same rule as the CLI); the numbers are the
// records'.  User strings go through textContent only (el).

import {getJson} from '../api.js';
import {el} from '../dom.js';
import {fmt} from '../format.js';
import {lineChart} from '../line_chart.js';
import {markedStep, seriesColumn, stepParams, tagsOfKind} from './common.js';

/** Loss scale, skipped updates and the replay verdict of `run` (null when it has none of them). */
export async function renderOptimizerSteps(container, {ctx, run, alerts}) {
  const {state, navigate} = ctx;
  const [steps] = tagsOfKind(run, 'optimizer_step');
  const replayAlert = (alerts || []).find((a) => a.code === 'nonfinite' && a.view && a.view.name === 'nonfinite_replay');
  if (!steps && !replayAlert) return null;
  const section = el('section', {class: 'gl-section gl-sec-optimizer'});
  container.appendChild(section);
  section.appendChild(el('h2', {text: 'Optimizer steps and non-finite steps'}));
  if (replayAlert) section.appendChild(replayText(replayAlert));
  if (!steps) return section;
  const [series, overview] = await Promise.all([
    getJson('series', {run: run.run, tag: steps.tag, ...stepParams(state), max_steps: 10000}),
    getJson('overview', {}),
  ]);
  if (!ctx.isCurrent() || !series.steps.length) return section;
  const head = ((overview.runs || []).find((r) => r.run === run.run) || {}).optimizer_steps;
  const col = (name) => Array.from(seriesColumn(series, name)[0]);
  const scale = col('loss_scale');
  const box = el('div', {class: 'gl-headline gl-optimizer-headline'});
  if (head && head.loss_scale) {
    // One event, one alert: a failure a non-finite loss causes is said by that event's alert (its `also`).
    const failing = (a) => a.code === 'loss_scale_failure' && a.tag === steps.tag;
    const failure = (alerts || []).find((a) => failing(a) || (a.also || []).some(failing));
    const skips = head.skips || [];
    box.appendChild(el('p', {class: 'gl-loss-scale'}, [
      `Loss scale: ${fmt(head.loss_scale[0])} → ${fmt(head.loss_scale[1])}; `,
      el('strong', {class: 'gl-skips', text: `${skips.length} skipped update(s)`}),
      skips.length ? ` at steps ${skips.slice(0, 8).join(', ')}${skips.length > 8 ? ' …' : ''}` : '',
      failure ? ` — error: ${failure.explanation}` : skips.length ? ' (loss-scale overflow: info, not an error).' : '.',
    ]));
  }
  if (head) {
    box.appendChild(el('p', {class: 'gl-step-lag', text: head.differ_from === null
      ? 'Steps count train steps (batches); the optimizer\'s own step advanced with every one.'
      : `Steps count train steps (batches); the optimizer's own step falls behind from step ${head.differ_from}`
        + ` (skipped updates): step ${head.last_step} is optimizer step ${head.last_iteration}.`}));
  }
  section.appendChild(box);
  const common = {markStep: markedStep(state, series.steps), smoothing: 0, onClick: (s) => navigate({step: s})};
  const charts = [lineChart({...common, title: 'skipped updates (1 at a skipped step)', yLabel: 'skipped',
    series: [{name: 'skipped', steps: series.steps, values: col('skipped')}]})];
  if (scale.some(Number.isFinite)) {
    charts.unshift(lineChart({...common, title: 'loss scale (before each logged or skipped step)', yLabel: 'loss_scale',
      yScale: 'log', series: [{name: 'loss scale', steps: series.steps, values: scale}]}));
  }
  section.appendChild(el('div', {class: 'gl-grid2'}, charts));
  return section;
}

/** The replayed first non-finite step: where each side first went non-finite, the verdict. */
function replayText(alert) {
  const detail = ((alert.details || [])[0] || {}).replay || {};
  const where = (side) => (side ? side.where : 'nothing (finite)');
  return el('div', {class: 'gl-headline gl-replay'}, [
    el('p', {}, ['NaN replay at step ', el('strong', {class: 'gl-replay-step', text: String(alert.step_first)}),
      ': ', el('strong', {class: 'gl-replay-verdict', text: detail.text || ''}), '.']),
    el('p', {class: 'gl-replay-where', text: `First non-finite as configured: ${where(detail.candidate)}; `
      + `in the reference: ${where(detail.reference)} (replayed before its update, same weights, batch and `
      + 'random draws).'}),
  ]);
}

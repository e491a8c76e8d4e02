// Advisor: which layers to keep in float32, from the precision advisor's
// records (route `advice`): a bar chart of each unit's attribution (the
// gradient divergence it causes alone in 16 bits, the most harmful first,
// on a log scale with the tolerance marked), the recommendation with the
// divergence before -> after (verified), the code that applies it, what
// could not be attributable, and the attribution over the rounds logged.

import {getJson, RouteError} from '../api.js';
import {el, isolate} from '../dom.js';
import {fmt, num} from '../format.js';
import {table} from '../table.js';
import {chooseRun, emptyState, runsWithKind} from './common.js';

const KIND = 'advice';
const HOW_TO = 'run the precision advisor: tb_gradlens.advise(model, (x, y), log_dir=...) once, or '
  + 'GradLensCallback(..., advisor=tb_gradlens.Advisor((x, y))) during training, then press Reload';

export async function render(container, ctx) {
  const {state, runs, navigate} = ctx;
  const run = chooseRun(runs, state.run, KIND);
  if (run) ctx.showRun(run.run);
  if (!run || !runsWithKind([run], KIND).length) {
    container.appendChild(emptyState(`Run ${run ? isolate(run.run) : ''} has no advice: ${HOW_TO}.`,
      runsWithKind(runs, KIND), navigate));
    return;
  }
  let data;
  try {
    data = await getJson('advice', {run: run.run});
  } catch (error) {
    if (error instanceof RouteError && error.status === 404) {
      container.appendChild(emptyState(`Run ${isolate(run.run)} has no advice: ${HOW_TO}.`));
      return;
    }
    throw error;
  }
  if (!ctx.isCurrent()) return;
  container.appendChild(el('h2', {}, ['Precision advisor for run ', el('span', {class: 'gl-run-name', text: run.run})]));
  for (const error of data.errors || []) {
    container.appendChild(el('p', {class: 'gl-message gl-error', role: 'alert', text: error}));
  }
  const advice = data.latest;
  if (!advice) {
    container.appendChild(emptyState(`Run ${isolate(run.run)} has no readable advice: ${HOW_TO}.`));
    return;
  }
  container.appendChild(el('p', {class: 'gl-variants', text:
    `Step ${advice.step}: gradient rel L2 of ${advice.candidate} against ${advice.reference} `
    + `= ${fmt(advice.before)}; tolerance ${fmt(advice.tolerance)} (${advice.tolerance_basis}).`}));
  for (const n of advice.not_attributable || []) {
    container.appendChild(el('p', {class: 'gl-message gl-warning gl-not-attributable',
      text: `Not attributable: ${n.what}: ${n.reason}`}));
  }
  container.appendChild(recommendation(advice));
  container.appendChild(barChart(advice));
  if (data.history && data.history.length > 1) container.appendChild(history(data.history, advice));
}

function recommendation(advice) {
  const rec = advice.recommendation;
  const box = el('section', {class: 'gl-advice-recommendation', 'aria-label': 'Recommendation'});
  if (!rec) return box;
  if (!rec.float32.length) {
    box.appendChild(el('p', {class: 'gl-message gl-advice-none',
      text: 'Nothing to keep in float32: the divergence is within the tolerance.'}));
    return box;
  }
  const share = num(rec.params_total) > 0 ? num(rec.params_16bit_after) / num(rec.params_total) : NaN;
  box.appendChild(el('h3', {text: 'Recommendation'}));
  box.appendChild(el('p', {class: rec.met ? 'gl-advice-met' : 'gl-message gl-warning'}, [
    'Keep ', el('b', {class: 'gl-advice-layers', text: rec.float32.join(', ')}), ' in float32: gradient rel L2 ',
    el('b', {class: 'gl-advice-before', text: fmt(advice.before)}), ' → ',
    el('b', {class: 'gl-advice-after', text: fmt(rec.after)}),
    ` (${rec.met ? 'within' : 'still above'} the tolerance ${fmt(advice.tolerance)}, verified by `
      + `${rec.verifications} pass${rec.verifications === 1 ? '' : 'es'})`
      + (Number.isFinite(share) ? `; ${(100 * share).toFixed(0)}% of parameters stay in 16 bits.` : '.'),
  ]));
  box.appendChild(el('p', {text: 'To apply it:'}));
  box.appendChild(el('pre', {class: 'gl-advice-code', text: advice.code}));
  return box;
}

function barChart(advice) {
  const units = advice.ranking.map((k) => advice.units[k]);
  const values = units.map((u) => num(u.one_at_a_time)).filter((v) => Number.isFinite(v) && v > 0);
  const tolerance = num(advice.tolerance);
  const all = values.concat(Number.isFinite(tolerance) && tolerance > 0 ? [tolerance] : []);
  const lo = Math.log10(Math.min(...all, 1e-4)), hi = Math.log10(Math.max(...all, 1));
  const position = (v) => (Number.isFinite(v) ? Math.max(0, Math.min(1, (Math.log10(v) - lo) / (hi - lo || 1))) : 1);
  const chart = el('section', {class: 'gl-advice-chart', 'aria-label': 'Attribution per layer'}, [
    el('h3', {text: 'Attribution: gradient rel L2 with only this layer in 16 bits (log scale)'}),
  ]);
  const recommended = new Set((advice.recommendation || {float32: []}).float32);
  for (const u of units) {
    const value = num(u.one_at_a_time);
    const bar = el('div', {class: 'gl-advice-bar-track'});
    if (u.attributable) {
      bar.appendChild(el('div', {class: `gl-advice-bar${num(value) > tolerance ? ' gl-advice-over' : ''}`,
        style: `width: ${(100 * position(value)).toFixed(1)}%`}));
    }
    if (Number.isFinite(tolerance) && tolerance > 0) {
      bar.appendChild(el('div', {class: 'gl-advice-tolerance', title: `tolerance ${fmt(tolerance)}`,
        style: `left: ${(100 * position(tolerance)).toFixed(1)}%`}));
    }
    const detail = u.attributable
      ? `${fmt(value)} alone in 16 bits; ${fmt(u.leave_one_out)} with it alone in float32; output error born `
        + `${fmt(u.output_born)}, inherited ${fmt(u.output_inherited)}`
      : `not attributable: ${u.reason}`;
    chart.appendChild(el('div', {class: `gl-advice-row${recommended.has(u.name) ? ' gl-advice-recommended' : ''}`,
      dataset: {unit: u.name}}, [
      el('span', {class: 'gl-advice-unit', text: u.name}), bar, el('span', {class: 'gl-advice-detail', text: detail}),
    ]));
  }
  return chart;
}

function history(points, advice) {
  const names = advice.ranking.map((k) => advice.units[k].name);
  return table({
    caption: 'Attribution over the rounds logged (gradient rel L2 with only this layer in 16 bits)',
    columns: [{key: 'unit', label: 'layer'}].concat(points.map((p, i) => ({key: `s${i}`, label: `step ${p.step}`,
      numeric: true}))),
    rows: names.map((name) => Object.fromEntries([['unit', name]].concat(
      points.map((p, i) => [`s${i}`, p.units[name] === undefined ? '' : fmt(p.units[name])])))),
    rowClass: () => 'gl-advice-history-row',
  });
}

// Advisor: which layers to keep in float32, from the precision advisor's
// records (route `advice`): the recommendation with the harm index before
// -> after (verified) and the row worst off, the one line of code that
// applies it (with a Copy button), a bar per unit of what it does alone in
// 16 bits on a log axis with its ticks and the tolerance labelled, what
// could not be attributed, and the attribution over the rounds logged.
// Advice is judged by the harm index (value / limit of the alerts' rules,
// tolerance 1); older advice by the gradient's rel L2, shown as such.

import {getJson, RouteError} from '../api.js';
import {el, isolate} from '../dom.js';
import {fmt, num} from '../format.js';
import {logTicks, tickText} from '../scale.js';
import {table} from '../table.js';
import {answersFor, byId, copyButton, runAnswers, sentence} from './answers.js';
import {emptyState, pickRun, runsWithKind} from './common.js';

const KIND = 'advice';
const HARM = 'harm_index';
const HOW_TO = 'run the precision advisor: tb_gradlens.advise(model, (x, y), log_dir=...) once, or '
  + 'GradLensCallback(..., advisor=tb_gradlens.Advisor((x, y))) during training, then press Reload';
const WHERE = {divergence: 'the gradient of', activation_divergence: 'the output of', loss_comparison: 'the'};

export async function render(container, ctx) {
  const {runs, navigate} = ctx;
  const run = await pickRun(ctx, 'advisor', KIND);
  if (!ctx.isCurrent()) return;
  if (run) ctx.showRun(run.run);
  if (!run || !runsWithKind([run], KIND).length) {
    // Named only when the user chose it: the run a view falls back to is no answer.
    const chosen = runs.some((r) => r.run === ctx.state.run);
    container.appendChild(emptyState(chosen ? `Run ${isolate(run.run)} has no precision advice. To measure, ${HOW_TO}.`
      : `No run has precision advice yet. To measure, ${HOW_TO}.`, runsWithKind(runs, KIND), navigate));
    return;
  }
  let data;
  let said = null;
  try {
    [data, said] = await Promise.all([getJson('advice', {run: run.run}),
      answersFor(ctx.state, run.run).then((d) => byId(runAnswers(d, run.run)).keep_float32, () => null)]);
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
  // The fourth answer, as the Overview and `report` say it.
  if (said) container.appendChild(sentence(said, {className: 'gl-headline gl-q4', details: false, question: true}));
  container.appendChild(el('p', {class: 'gl-variants gl-advice-before-line', title: advice.tolerance_basis || ''},
    beforeText(advice)));
  if (advice.float32_text) {  // what "keep in float32" computes on the hardware the advice was measured on
    container.appendChild(el('p', {class: 'gl-message gl-advice-float32', text: `${advice.float32_text}.`}));
  }
  for (const n of advice.not_attributable || []) {
    container.appendChild(el('p', {class: 'gl-message gl-warning gl-not-attributable',
      text: `Not attributable (${n.what}). ${n.reason}`}));
  }
  container.appendChild(recommendation(advice));
  container.appendChild(barChart(advice));
  if (data.history && data.history.length > 1) container.appendChild(history(data.history, advice));
}

/** What the advice measures its passes by: the harm index, or (older advice) the gradient's rel L2. */
export function metricName(advice) {
  return advice.metric === HARM ? 'harm index' : 'gradient rel L2';
}

/** What a unit does alone in 16 bits, in the advice's metric. */
export function alone(unit, advice) {
  return num(advice.metric === HARM ? unit.harm_alone : unit.one_at_a_time);
}

/** What the model does with only the unit in float32, in the advice's metric. */
function without(unit, advice) {
  return num(advice.metric === HARM ? unit.harm_without : unit.leave_one_out);
}

/** "the gradient of dense_in/bias, 841 against its limit 0.771" of a worst row, or ''. */
function worstText(worst) {
  if (!worst) return '';
  return `${WHERE[worst.kind] || worst.kind} ${worst.row}, ${fmt(worst.value)} against its limit ${fmt(worst.limit)}`;
}

/** What the advisor measured, in plain sentences: the harm index, the row worst off, the goal (its basis on hover). */
function beforeText(advice) {
  const subject = `${advice.candidate} against ${advice.reference}`;
  if (advice.metric !== HARM) {
    return `At step ${advice.step} the gradient of ${subject} differs by ${fmt(advice.before)} (rel L2). `
      + `The advisor aims for ${fmt(advice.tolerance)} or less.`;
  }
  const before = num(advice.before);
  const parts = [`At step ${advice.step} the harm index of ${subject} is ${fmt(before)}, `
    + (before > num(advice.tolerance) ? `so some part is ${fmt(before)}× its limit` : 'within every limit')];
  if (advice.worst_before && before > num(advice.tolerance)) {
    parts.push(`. The worst is ${worstText(advice.worst_before)}`);
  }
  if (advice.gradient_before !== null && advice.gradient_before !== undefined) {
    parts.push(`. The gradients differ by ${fmt(advice.gradient_before)} (rel L2)`);
  }
  parts.push(`. The advisor aims for ${fmt(advice.tolerance)} or less, every part within its limit.`);
  return parts.join('');
}

/** The line of code that applies the recommendation (the whole code when it has no such line). */
export function applyLine(code) {
  const line = String(code || '').split('\n').find((l) => l.startsWith('tb_gradlens.keep_in_float32('));
  return line || String(code || '');
}

function recommendation(advice) {
  const rec = advice.recommendation;
  const box = el('section', {class: 'gl-advice-recommendation', 'aria-label': 'Recommendation'});
  if (!rec) return box;
  if (!rec.float32.length) {
    box.appendChild(el('p', {class: 'gl-message gl-advice-none', text: advice.metric === HARM
      ? 'Nothing to keep in float32. Every part is within its limit.'
      : 'Nothing to keep in float32. The divergence is within the goal.'}));
    return box;
  }
  const share = num(rec.params_total) > 0 ? num(rec.params_16bit_after) / num(rec.params_total) : NaN;
  const layers = rec.layers && rec.layers.length ? rec.layers : rec.float32;
  box.appendChild(el('h3', {text: 'Recommendation'}));
  const passes = `${rec.verifications} pass${rec.verifications === 1 ? '' : 'es'}`;
  const sentence = el('p', {class: rec.met ? 'gl-advice-met' : 'gl-message gl-warning'}, [
    'Keep ', el('b', {class: 'gl-advice-layers', text: layers.join(', ')}), ' in float32. ',
    `That brings the ${metricName(advice)} from `, el('b', {class: 'gl-advice-before', text: fmt(advice.before)}),
    ' to ', el('b', {class: 'gl-advice-after', text: fmt(rec.after)}),
    rec.met ? `, within the goal of ${fmt(advice.tolerance)}, checked by ${passes}.`
      : `, still above the goal of ${fmt(advice.tolerance)} (checked by ${passes}).`,
  ]);
  if (advice.metric === HARM && rec.gradient_after !== null && rec.gradient_after !== undefined) {
    sentence.append(` The gradients' rel L2 goes from ${fmt(advice.gradient_before)} to ${fmt(rec.gradient_after)}.`);
  }
  if (rec.worst_after) sentence.append(` The part worst off after is ${worstText(rec.worst_after)}.`);
  sentence.append(Number.isFinite(share) ? ` ${(100 * share).toFixed(0)}% of the parameters stay in 16 bits.` : '');
  box.appendChild(sentence);
  if (String(layers) !== String(rec.float32)) {
    box.appendChild(el('p', {class: 'gl-note', text: `Narrowed inside ${rec.float32.join(', ')} to the layers that `
      + 'matter (one half alone in float32 keeps the verified harm index).'}));
  }
  const line = applyLine(advice.code);
  const code = el('pre', {class: 'gl-advice-code', text: line});
  box.appendChild(el('p', {}, ['To apply it, after building the model (', el('code', {text: 'import tb_gradlens'}),
    '):']));
  box.appendChild(el('div', {class: 'gl-code-row'}, [code, copyButton(line, code)]));
  if (line !== advice.code) {
    box.appendChild(el('details', {class: 'gl-advice-more'}, [el('summary', {text: 'Other ways to apply it'}),
      el('pre', {class: 'gl-advice-code-all', text: advice.code})]));
  }
  return box;
}

/** Log-axis position (0..1) of v within [lo, hi] decades. */
function position(v, lo, hi) {
  if (!(v > 0)) return 0;
  return Math.max(0, Math.min(1, (Math.log10(v) - lo) / (hi - lo || 1)));
}

function barChart(advice) {
  const units = advice.ranking.map((k) => advice.units[k]);
  const values = units.map((u) => alone(u, advice)).filter((v) => Number.isFinite(v) && v > 0);
  const tolerance = num(advice.tolerance);
  const all = values.concat(tolerance > 0 ? [tolerance] : []);
  const least = Math.log10(Math.min(...all, 1));
  const lo = Math.floor(least) - (least - Math.floor(least) < 0.15 ? 1 : 0); // the smallest bar still shows
  const hi = Math.ceil(Math.log10(Math.max(...all, 1)));
  const at = (v) => `${(100 * position(v, lo, hi)).toFixed(1)}%`;
  const harm = advice.metric === HARM;
  const chart = el('section', {class: 'gl-advice-chart', 'aria-label': 'Attribution per layer'}, [
    el('h3', {text: harm ? 'The harm index with only this layer in 16 bits, on a log scale. Past the tolerance '
      + 'line some part is beyond its limit.' : 'The gradient rel L2 with only this layer in 16 bits, on a log '
      + 'scale.'}),
  ]);
  const recommended = new Set((advice.recommendation || {float32: []}).float32);
  const tolTitle = `tolerance ${fmt(tolerance)}: ${advice.tolerance_basis || ''}`;
  for (const u of units) {
    const value = alone(u, advice);
    const bar = el('div', {class: 'gl-advice-bar-track'});
    if (u.attributable) {
      bar.appendChild(el('div', {class: `gl-advice-bar${value > tolerance ? ' gl-advice-over' : ''}`,
        style: `width: ${at(value)}`, title: `${metricName(advice)} ${fmt(value)}`}));
    }
    if (tolerance > 0) {
      bar.appendChild(el('div', {class: 'gl-advice-tolerance', title: tolTitle, style: `left: ${at(tolerance)}`}));
    }
    const detail = u.attributable
      ? `${fmt(value)} alone in 16 bits; ${fmt(without(u, advice))} with it alone in float32`
        + `${harm ? `; gradient rel L2 ${fmt(u.one_at_a_time)} alone` : ''}; output error born ${fmt(u.output_born)}, `
        + `inherited ${fmt(u.output_inherited)}`
      : `not attributable: ${u.reason}`;
    chart.appendChild(el('div', {class: `gl-advice-row${recommended.has(u.name) ? ' gl-advice-recommended' : ''}`,
      dataset: {unit: u.name, value: String(value)}}, [
      el('span', {class: 'gl-advice-unit', text: u.name}), bar, el('span', {class: 'gl-advice-detail', text: detail}),
    ]));
  }
  chart.appendChild(axis(lo, hi, tolerance, tolTitle, at, harm));
  return chart;
}

/** The bars' log axis: a tick and label per power of ten, and the tolerance's tick labelled. */
function axis(lo, hi, tolerance, tolTitle, at, harm) {
  const track = el('div', {class: 'gl-advice-axis-track', role: 'img',
    'aria-label': `log axis from ${tickText(10 ** lo)} to ${tickText(10 ** hi)}`});
  const near = (t) => tolerance > 0 && Math.abs(parseFloat(at(t)) - parseFloat(at(tolerance))) < 8;
  for (const t of logTicks(10 ** lo, 10 ** hi, 8)) {
    if (near(t)) continue; // the tolerance's own label is there
    track.appendChild(el('span', {class: 'gl-advice-tick', style: `left: ${at(t)}`, text: tickText(t)}));
  }
  if (tolerance > 0) {
    track.appendChild(el('span', {class: 'gl-advice-tick gl-advice-tolerance-label', style: `left: ${at(tolerance)}`,
      title: tolTitle, text: `tolerance ${fmt(tolerance)}`}));
  }
  return el('div', {class: 'gl-advice-row gl-advice-axis'}, [
    el('span', {class: 'gl-advice-unit', text: harm ? 'harm index' : 'gradient rel L2'}), track,
    el('span', {class: 'gl-advice-detail'}),
  ]);
}

function history(points, advice) {
  const names = advice.ranking.map((k) => advice.units[k].name);
  return table({
    caption: `Attribution over the rounds logged (${metricName(advice)} with only this layer in 16 bits)`,
    columns: [{key: 'unit', label: 'layer'}].concat(points.map((p, i) => ({key: `s${i}`, label: `step ${p.step}`,
      numeric: true}))),
    rows: names.map((name) => Object.fromEntries([['unit', name]].concat(
      points.map((p, i) => [`s${i}`, p.units[name] === undefined || p.units[name] === null ? '' : fmt(p.units[name])])))),
    rowClass: () => 'gl-advice-history-row',
  });
}

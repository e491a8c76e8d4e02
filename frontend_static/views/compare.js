// Compare runs: is run B (e.g. mixed_bfloat16) different from run A
// (float32) beyond float32-vs-float32 noise (a noise-floor run: float32
// with another seed)?  One quantity - a scalar such as the loss, or one
// cell (row, column) of a record kind - in A and B, |(B - A) / A| against
// the noise floor, and a verdict naming the first step beyond it, in the
// sentence the server made (the first answer says the same of these runs).
// Out of the box B is the 16-bit run trained like A, and A and the noise
// floor are the runs the first answer measures B against.  The pickers
// always stay: a run without the quantity gets a message.

import {RouteError, getJson} from '../api.js';
import {el, isolate, labelled, select} from '../dom.js';
import {fmt, num} from '../format.js';
import {lineChart} from '../line_chart.js';
import {table} from '../table.js';
import {answersFor, byId, runAnswers, sentence} from './answers.js';
import {emptyState, markedStep, smoothingControls, smoothingOf, stepParams} from './common.js';
import {defaultRuns, runPrecision, verdict} from './compare_verdict.js';

const RECORD_KINDS = ['grad_stats', 'divergence', 'activation_divergence', 'loss_comparison', 'update_stats'];

export async function render(container, ctx) {
  const {state, runs, navigate} = ctx;
  const names = runs.map((r) => r.run);
  const scalars = new Map(runs.map((r) => [r.run, r.scalars]));
  const kind0 = state.qkind || 'scalar';
  const hasQuantity = (entry) => (kind0 === 'scalar' ? (scalars.get(entry.run) || []).includes(state.qtag || 'loss')
    : entry.tags.some((t) => t.kind === kind0));
  const defaults = defaultRuns(runs, hasQuantity, await sharedSteps(ctx, runs, hasQuantity, kind0));
  if (!ctx.isCurrent()) return;
  const runB = names.includes(state.runB) ? state.runB : defaults.b;
  // A and the noise floor the first answer measures B by (the server's choice), for the loss.
  const first = !names.includes(state.runA) || !(state.noise === 'none' || names.includes(state.noise))
    ? await answersFor(state, runB).then((data) => (byId(runAnswers(data, runB)).beyond_noise || {}).runs, () => null)
    : null;
  if (!ctx.isCurrent()) return;
  const picked = kind0 === 'scalar' && (state.qtag || 'loss') === 'loss' && first && first.a ? first : null;
  const runA = names.includes(state.runA) ? state.runA : picked ? picked.a : defaults.a;
  const noise = state.noise === 'none' ? '' : names.includes(state.noise) ? state.noise
    : picked ? picked.noise || '' : defaults.noise;
  ctx.showRuns(...[runA, runB, noise].filter(Boolean));
  const entries = [runA, runB].map((n) => runs.find((r) => r.run === n));
  const scalarNames = [...new Set(entries.flatMap((e) => scalars.get(e.run) || []))].sort();
  const kinds = RECORD_KINDS.filter((k) => entries.some((e) => e.tags.some((t) => t.kind === k)));
  const kindOptions = [...(scalarNames.length ? ['scalar'] : []), ...kinds];
  const kind = kindOptions.includes(state.qkind) ? state.qkind : kindOptions[0] || 'scalar';

  const controls = [
    labelled('Run A (reference)', select(names, runA, (v) => navigate({runA: v}), {class: 'gl-runa'})),
    labelled('Run B (candidate)', select(names, runB, (v) => navigate({runB: v}), {class: 'gl-runb'})),
    labelled('Noise-floor run (A with another seed)', select([['none', '(none)'], ...names], noise || 'none',
      (v) => navigate({noise: v}), {class: 'gl-noise'})),
    labelled('Quantity', select(kindOptions.length ? kindOptions : ['scalar'], kind,
      (v) => navigate({qkind: v, qtag: '', qrow: '', qcol: ''}), {class: 'gl-qkind'})),
  ];
  const params = {run_a: runA, run_b: runB, noise_run: noise, kind, ...stepParams(state)};
  let what;
  if (kind === 'scalar') {
    const tag = scalarNames.includes(state.qtag) ? state.qtag
      : scalarNames.includes('loss') ? 'loss' : scalarNames[0] || 'loss';
    controls.push(labelled('Scalar', select(scalarNames.length ? scalarNames : [tag], tag,
      (v) => navigate({qtag: v}), {class: 'gl-qtag'})));
    params.tag = tag;
    what = tag;
  } else {
    const tags = entries.flatMap((e) => e.tags.filter((t) => t.kind === kind));
    const prefixes = [...new Set(tags.map((t) => t.name))];
    const prefix = prefixes.includes(state.qtag) ? state.qtag : prefixes[0];
    const tag = tags.find((t) => t.name === prefix) || tags[0];
    const row = tag.rows.includes(state.qrow) ? state.qrow : tag.rows[0];
    const column = tag.columns.includes(state.qcol) ? state.qcol : tag.columns[0];
    if (prefixes.length > 1) {
      controls.push(labelled('Record', select(prefixes, prefix, (v) => navigate({qtag: v}), {class: 'gl-qtag'})));
    }
    controls.push(
      labelled('Row', select(tag.rows, row, (v) => navigate({qrow: v}), {class: 'gl-qrow'})),
      labelled('Column', select(tag.columns, column, (v) => navigate({qcol: v}), {class: 'gl-qcol'})));
    Object.assign(params, {tag: prefix, row, column});
    what = `${kind} ${column} of ${isolate(row)}`;
  }
  controls.push(...smoothingControls(state, navigate, 'log y (relative difference)'));
  container.appendChild(el('div', {class: 'gl-view-controls'}, controls));
  container.appendChild(el('h2', {}, ['Compare ', el('span', {class: 'gl-cmp-b', text: runB}), ' with ',
    el('span', {class: 'gl-cmp-a', text: runA}), ': ', el('span', {class: 'gl-cmp-what', text: what})]));

  // Asked only of runs that have the quantity: a run without it gets a message, the pickers stay.
  const holds = (name) => {
    const entry = runs.find((r) => r.run === name);
    if (kind === 'scalar') return (scalars.get(name) || []).includes(params.tag);
    return entry.tags.some((t) => t.kind === kind && t.name === params.tag && t.rows.includes(params.row));
  };
  const lacking = [runA, runB, noise].filter((name) => name && !holds(name));
  if (lacking.length) {
    const have = runs.filter((r) => holds(r.run)).map((r) => r.run);
    container.appendChild(emptyState(`${lacking.map((n) => `Run ${isolate(n)}`).join(' and ')} ${lacking.length > 1 ? 'have' : 'has'} `
      + `no ${what}. Pick runs that have it${have.length ? ` (${have.map(isolate).join(', ')})` : ''}, or another quantity.`));
    return;
  }
  let data;
  try {
    data = await getJson('compare', params);
  } catch (error) {
    if (!(error instanceof RouteError) || ![400, 404].includes(error.status)) throw error;
    const have = kind === 'scalar' ? runs.filter((r) => (scalars.get(r.run) || []).includes(params.tag)) : [];
    container.appendChild(emptyState(`${error.message.replace(/^compare: \d+ /, '')}. Pick runs that have `
      + `${what}${have.length ? ` (${have.map((r) => isolate(r.run)).join(', ')})` : ''}, or another quantity.`));
    return;
  }
  if (!ctx.isCurrent()) return;
  renderAnswer(container, ctx, data, {runA, runB, noise, what});
}

/**
 * shared(a, b): how many logged steps of the scalar quantity runs a and b
 * have in common, when B is not chosen yet and several 16-bit runs could be
 * B (else null: the first one is taken).
 */
async function sharedSteps(ctx, runs, hasQuantity, kind) {
  const {state} = ctx;
  const names = runs.map((r) => r.run);
  if (names.includes(state.runB) || kind !== 'scalar') return null;
  const low = runs.filter((r) => runPrecision(r) === 'low' && hasQuantity(r));
  if (low.length < 2) return null;
  const tag = state.qtag || 'loss';
  const steps = new Map(await Promise.all(runs.filter(hasQuantity).map(async (r) => [r.run,
    new Set(await getJson('scalars', {run: r.run, tag}).then((d) => d.steps, () => []))])));
  return (a, b) => {
    const mine = steps.get(a) || new Set();
    let n = 0;
    for (const s of steps.get(b) || []) if (mine.has(s)) n += 1;
    return n;
  };
}

function renderAnswer(container, ctx, data, {runA, runB, noise, what}) {
  const {state, navigate} = ctx;
  const steps = data.steps;
  if (!steps.length) {
    container.appendChild(emptyState('The two runs have no step of this quantity in common in this step range.'));
    return;
  }
  const rel = data.rel_difference.map(num);
  const noiseRel = data.noise ? {steps: data.noise.steps, rel: data.noise.rel_difference.map(num)} : null;
  const v = verdict(data.summary, Boolean(noise));
  container.appendChild(verdictLine(v, data.summary.answer));
  const differing = environmentLine(data);
  if (differing) container.appendChild(differing);
  const mark = markedStep(state, steps) ?? (v.kind === 'beyond' ? v.first : null);
  const abs = (list) => list.map((x) => Math.abs(x));
  const relSeries = [{name: `|(B − A) / A|: ${isolate(runB)} vs ${isolate(runA)}`, steps, values: abs(rel)}];
  if (noiseRel) {
    relSeries.push({name: `noise floor: |(${isolate(noise)} − A) / A|`, steps: noiseRel.steps, values: abs(noiseRel.rel),
      dashed: true, color: '#9aa0a6'});
  }
  const pick = (s) => navigate({step: s});
  container.appendChild(el('div', {class: 'gl-grid2'}, [
    lineChart({title: `${what}: A and B`, yLabel: what, markStep: mark, smoothing: smoothingOf(state), onClick: pick,
      note: 'A drawn wide and pale under B: where they coincide both show',
      series: [{name: `A: ${isolate(runA)}`, steps, values: data.a.map(num), under: true},
        {name: `B: ${isolate(runB)}`, steps, values: data.b.map(num)}]}),
    lineChart({title: 'relative difference |(B − A) / A| against the noise floor', yLabel: '|(B − A) / A|',
      yScale: state.logy === '0' ? 'linear' : 'log', markStep: mark, series: relSeries, onClick: pick,
      limits: v.level > 0 ? [{value: v.level, label: `noise run's mean ${fmt(v.level)}`}] : []}),
  ]));
  const last = steps.length - 1;
  const from = Math.max(0, last - 9);
  container.appendChild(table({
    caption: 'Last common steps',
    columns: [
      {key: 'step', label: 'step', numeric: true}, {key: 'a', label: 'A', numeric: true},
      {key: 'b', label: 'B', numeric: true}, {key: 'difference', label: 'B − A', numeric: true},
      {key: 'rel', label: '(B − A) / |A|', numeric: true},
    ],
    rows: steps.slice(from).map((step, k) => ({step, a: data.a[from + k], b: data.b[from + k],
      difference: data.difference[from + k], rel: data.rel_difference[from + k]})).reverse(),
    rowClass: () => 'gl-cmp-row',
  }));
}

/** The runs' recorded environments where they differ: their difference is not
 * a precision verdict (the server gives none then). */
function environmentLine(data) {
  const found = data.environment_differences || [];
  if (!found.length) return null;
  const parts = found.map((d) => `${d.name}: ${Object.entries(d.values).map(([k, v]) => `${k} ${v}`).join(', ')}`);
  return el('p', {class: 'gl-message gl-environment-differs',
    text: `The runs' environments differ (${parts.join('; ')}): their difference is not a precision verdict.`});
}

/**
 * The verdict in plain sentences, as the server made it (analysis/answers.py
 * `noise_sentence`: the tab never judges), the rule and the numbers on hover.
 */
function verdictLine(v, said) {
  const p = sentence(said || {sentence: [{text: v.text}]}, {className: `gl-headline gl-verdict gl-verdict-${v.kind}`});
  p.dataset.kind = v.kind;
  return p;
}

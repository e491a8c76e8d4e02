// Compare runs: one quantity (a scalar such as the loss, or one cell
// (row, column) of a record kind) in run A and run B, overlaid, with their
// relative difference against an optional noise-floor run (e.g. a second
// float32 run with another seed or reduction order).

import {getJson, scalarTags} from '../api.js';
import {el, labelled, select} from '../dom.js';
import {fmt, num} from '../format.js';
import {lineChart} from '../line_chart.js';
import {table} from '../table.js';

const RECORD_KINDS = ['grad_stats', 'divergence', 'activation_divergence', 'loss_comparison',
  'update_stats'];

export async function render(container, ctx) {
  const {state, runs, navigate} = ctx;
  const names = runs.map((r) => r.run);
  const runA = names.includes(state.runA) ? state.runA : names[0];
  const runB = names.includes(state.runB) ? state.runB : names.find((n) => n !== runA) || runA;
  const noise = names.includes(state.noise) ? state.noise : '';
  const scalarsOf = async (name) => {
    const entry = runs.find((r) => r.run === name);
    if (entry && Array.isArray(entry.scalars)) return entry.scalars;
    return Object.keys((await scalarTags())[name] || {});
  };
  const scalarNames = [...new Set([...(await scalarsOf(runA)), ...(await scalarsOf(runB))])].sort();
  if (!ctx.isCurrent()) return;
  const entryA = runs.find((r) => r.run === runA);
  const kinds = RECORD_KINDS.filter((k) => entryA.tags.some((t) => t.kind === k));
  const kindOptions = [...(scalarNames.length ? ['scalar'] : []), ...kinds];
  const kind = kindOptions.includes(state.qkind) ? state.qkind : kindOptions[0] || 'scalar';

  const controls = [
    labelled('Run A', select(names, runA, (v) => navigate({runA: v}), {class: 'gl-runa'})),
    labelled('Run B', select(names, runB, (v) => navigate({runB: v}), {class: 'gl-runb'})),
    labelled('Noise-floor run', select([['', '(none)'], ...names], noise, (v) => navigate({noise: v}),
      {class: 'gl-noise'})),
    labelled('Quantity', select(kindOptions, kind, (v) => navigate({qkind: v, qtag: '', qrow: '', qcol: ''}),
      {class: 'gl-qkind'})),
  ];
  const params = {run_a: runA, run_b: runB, noise_run: noise, kind};
  let what;
  if (kind === 'scalar') {
    const tag = scalarNames.includes(state.qtag) ? state.qtag
      : scalarNames.includes('loss') ? 'loss' : scalarNames[0] || 'loss';
    controls.push(labelled('Scalar', select(scalarNames.length ? scalarNames : [tag], tag,
      (v) => navigate({qtag: v}), {class: 'gl-qtag'})));
    params.tag = tag;
    what = tag;
  } else {
    const tags = entryA.tags.filter((t) => t.kind === kind);
    const prefixes = [...new Set(tags.map((t) => t.tag.split(`/${kind}/`)[0]))];
    const prefix = prefixes.includes(state.qtag) ? state.qtag : prefixes[0];
    const tag = tags.find((t) => t.tag.split(`/${kind}/`)[0] === prefix) || tags[0];
    const row = tag.rows.includes(state.qrow) ? state.qrow : tag.rows[0];
    const column = tag.columns.includes(state.qcol) ? state.qcol : tag.columns[0];
    if (prefixes.length > 1) {
      controls.push(labelled('Record', select(prefixes, prefix, (v) => navigate({qtag: v}), {class: 'gl-qtag'})));
    }
    controls.push(
      labelled('Row', select(tag.rows, row, (v) => navigate({qrow: v}), {class: 'gl-qrow'})),
      labelled('Column', select(tag.columns, column, (v) => navigate({qcol: v}), {class: 'gl-qcol'})));
    Object.assign(params, {tag: prefix, row, column});
    what = `${kind} ${column} of ${row}`;
  }
  container.appendChild(el('div', {class: 'gl-view-controls'}, controls));
  container.appendChild(el('h2', {}, ['Compare ', el('span', {class: 'gl-cmp-a', text: runA}), ' and ',
    el('span', {class: 'gl-cmp-b', text: runB}), ': ', el('span', {text: what})]));

  const data = await getJson('compare', params);
  if (!ctx.isCurrent()) return;
  const steps = data.steps;
  if (!steps.length) {
    container.appendChild(el('p', {class: 'gl-message gl-empty-state',
      text: 'The two runs have no step of this quantity in common.'}));
    return;
  }
  const summary = data.summary || {};
  const exceeds = summary.exceeds_noise;
  container.appendChild(el('p', {class: 'gl-summary'}, [
    'max |(B − A) / A| = ', el('span', {class: 'gl-num gl-max-rel', text: fmt(summary.max_abs_rel_difference)}),
    data.noise ? ' · noise floor max = ' : '',
    data.noise ? el('span', {class: 'gl-num gl-noise-max', text: fmt(summary.noise_max_abs_rel_difference)}) : '',
    exceeds === true ? ' · exceeds the noise floor' : exceeds === false ? ' · within the noise floor' : '',
    ` · ${steps.length} common steps`,
    data.only_in_a && data.only_in_a.length ? ` · ${data.only_in_a.length} only in A` : '',
    data.only_in_b && data.only_in_b.length ? ` · ${data.only_in_b.length} only in B` : '',
  ]));
  const values = (list) => list.map(num);
  const rel = [{name: `(B − A) / |A|`, steps, values: values(data.rel_difference)}];
  if (data.noise) {
    rel.push({name: `noise floor: ${data.noise_run || noise}`, steps: data.noise.steps,
      values: values(data.noise.rel_difference), dashed: true});
  }
  container.appendChild(el('div', {class: 'gl-grid2'}, [
    lineChart({title: `${what}: A and B`, yLabel: what, series: [
      {name: `A: ${runA}`, steps, values: values(data.a)},
      {name: `B: ${runB}`, steps, values: values(data.b)},
    ]}),
    lineChart({title: 'relative difference', yLabel: '(B − A) / |A|', series: rel}),
  ]));
  const last = steps.length - 1;
  container.appendChild(table({
    caption: 'Last common steps',
    columns: [
      {key: 'step', label: 'step', numeric: true}, {key: 'a', label: 'A', numeric: true},
      {key: 'b', label: 'B', numeric: true}, {key: 'difference', label: 'B − A', numeric: true},
      {key: 'rel', label: '(B − A) / |A|', numeric: true},
    ],
    rows: steps.slice(Math.max(0, last - 9)).map((step, k) => {
      const i = Math.max(0, last - 9) + k;
      return {step, a: data.a[i], b: data.b[i], difference: data.difference[i], rel: data.rel_difference[i]};
    }).reverse(),
    rowClass: () => 'gl-cmp-row',
  }));
}

// Dtypes: the model's layer table (policy, compute, variable and output
// dtype), mixed layers highlighted, the variables' dtypes, and a warning
// when the model output (what the loss sees) is not float32.

import {getJson, RouteError} from '../api.js';
import {el, isolate, labelled, select} from '../dom.js';
import {table} from '../table.js';
import {HOW_TO_LOG, emptyState, focusSection, pickRun, runsWithKind} from './common.js';

const KIND = 'dtypes';

export async function render(container, ctx) {
  const {state, runs, navigate, lowPrecision} = ctx;
  const run = await pickRun(ctx, 'dtypes', KIND);
  if (!ctx.isCurrent()) return;
  if (run) ctx.showRun(run.run);
  if (!runsWithKind([run], KIND).length) {
    container.appendChild(emptyState(`Run ${isolate(run.run)} has no dtype map: ${HOW_TO_LOG.dtypes}.`,
      runsWithKind(runs, KIND), navigate));
    return;
  }
  let data;
  try {
    // The variable regex is matched by the route (Python syntax, bounded time), never here.
    data = await getJson('dtypes', {run: run.run, rows: state.filter});
  } catch (error) {
    if (error instanceof RouteError && error.status === 404) {
      container.appendChild(emptyState(`Run ${isolate(run.run)} has no dtype map: ${HOW_TO_LOG.dtypes}.`));
      return;
    }
    throw error;
  }
  if (!ctx.isCurrent()) return;
  if (!data.maps.length) {
    container.appendChild(emptyState(`Run ${isolate(run.run)} has no dtype map: ${HOW_TO_LOG.dtypes}.`));
    return;
  }
  const steps = data.maps.map((m) => String(m.step));
  const chosen = data.maps.find((m) => String(m.step) === state.dstep) || data.maps[data.maps.length - 1];
  container.appendChild(el('h2', {}, ['Dtypes in run ', el('span', {class: 'gl-run-name', text: run.run})]));
  if (data.maps.length > 1) {
    container.appendChild(el('div', {class: 'gl-view-controls'}, [
      labelled('Dtype map logged at step', select(steps, String(chosen.step), (v) => navigate({dstep: v}),
        {class: 'gl-dstep'})),
    ]));
  } else {
    container.appendChild(el('p', {class: 'gl-variants', text: `Dtype map logged at step ${chosen.step}.`}));
  }
  const map = chosen.map || {};
  const output = map.model_output_dtype;
  if (output && lowPrecision.includes(output)) {
    const warning = el('p', {class: 'gl-message gl-warning gl-output-warning', role: 'alert',
      text: `The model output is ${output}: the loss is computed from ${output} values. Keep the last `
        + 'layer or activation in float32 (dtype="float32"), as the mixed-precision guides advise.'});
    container.appendChild(warning);
    if (state.focus === 'dtypes') focusSection(warning);
  } else if (output) {
    container.appendChild(el('p', {class: 'gl-message gl-output-ok', text: `Model output dtype: ${output}.`}));
  }

  const layers = map.layers || [];
  const mixed = (l) => Boolean(l.compute_dtype && l.variable_dtype && l.compute_dtype !== l.variable_dtype);
  const nMixed = layers.filter(mixed).length;
  container.appendChild(table({
    caption: `Layers (${layers.length}${state.filter ? ' matching the regex' : ''}; ${nMixed} mixed: `
      + 'compute dtype differs from variable dtype)',
    columns: ['path', 'class', 'policy', 'compute_dtype', 'variable_dtype', 'output_dtype', 'mixed']
      .map((k) => ({key: k, label: k.replace('_', ' ')})),
    rows: layers.map((l) => ({...l, mixed: mixed(l) ? 'mixed' : ''})),
    rowKey: (row) => row.path,
    rowClass: (row) => `gl-layer-row${row.mixed ? ' gl-mixed' : ''}${row.path === state.row ? ' gl-selected' : ''}`,
  }));
  const variables = map.variables || [];
  if (variables.length) {
    container.appendChild(table({
      caption: `Variables (${variables.length})`,
      columns: [{key: 'path', label: 'path'}, {key: 'dtype', label: 'dtype'}],
      rows: variables,
      rowClass: () => 'gl-variable-row',
    }));
  }
}

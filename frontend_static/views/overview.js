// Overview: every run's headline (worst divergence and where, first NaN/Inf
// step, disconnected and zero-gradient variables, alert counts) and the
// alerts list; an alert opens the view that shows it.

import {getJson} from '../api.js';
import {el} from '../dom.js';
import {stepRange} from '../format.js';
import {table} from '../table.js';
import {variantText} from './common.js';

const VIEW_NAMES = new Set(['overview', 'divergence', 'gradients', 'dtypes', 'compare']);
const MAX_LISTED = 6;

export async function render(container, ctx) {
  const {state, navigate} = ctx;
  const runFilter = state.run || '';
  const [overview, alerts] = await Promise.all([
    getJson('overview'),
    getJson('alerts', {run: runFilter}),
  ]);
  if (!ctx.isCurrent()) return;
  const runs = overview.runs.filter((r) => !runFilter || r.run === runFilter);

  container.appendChild(el('h2', {text: 'Runs'}));
  container.appendChild(table({
    caption: runFilter ? `Run ${runFilter}` : `${runs.length} run(s) with gradlens data`,
    columns: [
      {key: 'run', label: 'run'},
      {key: 'metric', label: 'worst divergence'},
      {key: 'value', label: 'value', numeric: true},
      {key: 'row', label: 'variable'},
      {key: 'step', label: 'step', numeric: true},
      {key: 'variants', label: 'candidate vs reference'},
      {key: 'first_nonfinite_step', label: 'first NaN/Inf step', numeric: true},
      {key: 'disconnected', label: 'disconnected vars', numeric: true},
      {key: 'zero', label: 'zero-gradient vars', numeric: true},
      {key: 'alerts', label: 'alerts (E/W/I)'},
    ],
    rows: runs.map(headline),
    onSelect: (row) => navigate({view: row.metric ? 'divergence' : 'gradients', run: row.run}),
    rowClass: (row) => `gl-run-row${row.errors ? ' gl-has-errors' : ''}`,
  }));

  container.appendChild(el('h2', {text: `Alerts (${alerts.alerts.length})`}));
  if (!alerts.alerts.length) {
    container.appendChild(el('p', {class: 'gl-message', text: 'No alerts: nothing looks wrong in the logged steps.'}));
  } else {
    const list = el('ul', {class: 'gl-alerts'});
    for (const alert of alerts.alerts) list.appendChild(el('li', {}, [alertButton(alert, navigate)]));
    container.appendChild(list);
  }
  if (alerts.errors && alerts.errors.length) {
    container.appendChild(el('h3', {text: 'Records that could not be read'}));
    const list = el('ul', {class: 'gl-read-errors'});
    for (const e of alerts.errors) list.appendChild(el('li', {text: `${e.run} / ${e.tag}: ${e.error}`}));
    container.appendChild(list);
  }
}

function headline(r) {
  const w = r.worst_divergence;
  const counts = r.alert_counts || {};
  return {
    run: r.run,
    metric: w ? w.metric : '',
    value: w ? w.value : '',
    row: w ? w.row : '',
    step: w ? w.step : '',
    variants: w ? `${variantText(w.candidate)} vs ${variantText(w.reference)}` : '',
    first_nonfinite_step: r.first_nonfinite_step ?? '',
    disconnected: listLength(r.disconnected_variables),
    zero: listLength(r.zero_gradient_variables),
    alerts: `${counts.error || 0} / ${counts.warning || 0} / ${counts.info || 0}`,
  };
}

function listLength(value) {
  if (Array.isArray(value)) return value.length;
  return value ?? '';
}

/** A button that shows the alert and opens its view. */
function alertButton(alert, navigate) {
  const variables = alert.variables || [];
  const listed = variables.slice(0, MAX_LISTED).join(', ')
    + (variables.length > MAX_LISTED ? ` and ${variables.length - MAX_LISTED} more` : '');
  const button = el('button', {
    type: 'button', class: `gl-alert gl-alert-${alert.severity}`,
    dataset: {code: alert.code || ''},
    onclick: () => navigate(alertTarget(alert)),
  }, [
    el('div', {class: 'gl-alert-head'}, [
      el('span', {class: `gl-badge gl-sev-${alert.severity}`, text: alert.severity}),
      el('span', {class: 'gl-alert-code', text: alert.code}),
      ` · run ${alert.run} · step ${stepRange(alert.step_first, alert.step_last)}`,
    ]),
    listed ? el('div', {class: 'gl-alert-vars', text: `variables: ${listed}`}) : null,
    el('div', {class: 'gl-alert-text', text: alert.explanation}),
    alert.fix ? el('div', {class: 'gl-alert-fix', text: `fix: ${alert.fix}`}) : null,
  ]);
  return button;
}

/** The view that shows a record kind (an alert's view.name is the kind of its record). */
const VIEW_OF_KIND = {
  grad_stats: 'gradients', grad_histogram: 'gradients', update_stats: 'gradients',
  divergence: 'divergence', activation_divergence: 'divergence', loss_comparison: 'divergence',
  dtypes: 'dtypes',
};

/** State patch that opens the view an alert points at. */
export function alertTarget(alert) {
  const view = alert.view || {};
  const name = VIEW_NAMES.has(view.name) ? view.name : VIEW_OF_KIND[view.name] || 'overview';
  const patch = {view: name, run: view.run || alert.run};
  const tag = view.tag || alert.tag || '';
  if (view.name === 'activation_divergence') patch.atag = tag;
  else patch.tag = tag;
  if (view.column && name === 'divergence') patch.metric = view.column;
  if (view.row) patch.row = view.row;
  else if (alert.variables && alert.variables.length) patch.row = alert.variables[0];
  if (alert.step_first !== undefined && alert.step_first !== null) patch.step = alert.step_first;
  return patch;
}

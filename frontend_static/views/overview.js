// Overview: every run's headline - the worst divergence against its
// tolerance and which comparison, the first NaN/Inf step and where, the
// disconnected (None) and dead (all-zero) variables by name, alert counts -
// and the alerts list; an alert opens the view that shows its evidence; a
// run with precision advice says what it advises, with a button to the
// Advisor.  The variable regex and step range apply (the routes'
// rows/step_min/step_max).

import {getJson} from '../api.js';
import {el} from '../dom.js';
import {fmt, fmtRatio, num, stepRange} from '../format.js';
import {table} from '../table.js';
import {alertStep, alertTarget} from './alert_target.js';
import {filterParams} from './common.js';
import {problemsSection} from './problems.js';
import {comparisonLabel} from './records.js';

const LISTED = 4;

/** The routes the Overview reads, asked for while the runs listing loads. */
export function prefetch(state) {
  const params = filterParams(state);
  return [getJson('overview', params), getJson('alerts', {run: state.run || '', ...params})]
    .map((p) => p.catch(() => null));
}

export async function render(container, ctx) {
  const {state, navigate, runs: runEntries} = ctx;
  const runFilter = state.run || '';
  const params = filterParams(state);
  const [overview, alerts] = await Promise.all([
    getJson('overview', params),
    getJson('alerts', {run: runFilter, ...params}),
  ]);
  if (!ctx.isCurrent()) return;
  const runs = overview.runs.filter((r) => !runFilter || r.run === runFilter);
  const ratios = runs.map(worstRatio);

  container.appendChild(el('h2', {text: 'Runs'}));
  const scope = [state.filter ? `variables matching /${state.filter}/` : '',
    state.smin || state.smax ? `steps ${state.smin || 'first'}–${state.smax || 'last'}` : ''].filter(Boolean);
  container.appendChild(table({
    caption: `${runFilter ? `Run ${runFilter}` : `${runs.length} run(s) with gradlens data`}`
      + `${scope.length ? ` · ${scope.join(', ')}` : ''} · click a run for its divergence or gradients`,
    columns: [
      {key: 'run', label: 'run'},
      {key: 'worst', label: 'worst divergence'},
      {key: 'comparison', label: 'comparison'},
      {key: 'nonfinite', label: 'first NaN/Inf'},
      {key: 'disconnected', label: 'disconnected (None)'},
      {key: 'dead', label: 'dead (all-zero gradient)'},
      {key: 'alerts', label: 'alerts E/W/I'},
    ],
    rows: runs.map((r, i) => headline(r, ratios[i], runEntries.find((e) => e.run === r.run))),
    onSelect: (row) => navigate({view: row.hasComparison ? 'divergence' : 'gradients', run: row.run,
      tag: '', row: '', step: '', focus: '', alert: ''}),
    rowClass: () => 'gl-run-row',
    cellTitle: (row, key) => row.titles[key],
  }));
  for (const note of stepOffsetNotes(runs)) container.appendChild(note);
  for (const note of environmentNotes(runs)) container.appendChild(note);
  const advised = await adviceSection(runEntries.filter((e) => runs.some((r) => r.run === e.run)), navigate);
  if (!ctx.isCurrent()) return;
  if (advised) container.appendChild(advised);

  const groups = groupAlerts(alerts.alerts);
  const distinct = groups.length < alerts.alerts.length ? `, ${groups.length} distinct` : '';
  container.appendChild(el('h2', {text: `Alerts (${alerts.alerts.length}${distinct})`}));
  if (!alerts.alerts.length) {
    container.appendChild(el('p', {class: 'gl-message gl-no-alerts',
      text: 'No alerts: nothing looks wrong in the logged steps.'}));
  } else {
    const list = el('ul', {class: 'gl-alerts'});
    for (const [first, ...others] of groups) {
      list.appendChild(el('li', {}, [alertButton(first, navigate), others.length ? alsoIn(others, navigate) : null]));
    }
    container.appendChild(list);
  }
  // File problems of the listed runs are named above the view (runProblemsBanner); the rest here.
  ctx.showRuns(...runs.map((r) => r.run));
  const problems = problemsSection((alerts.errors || []).filter((e) => !listedProblem(e, runEntries)));
  if (problems) container.appendChild(problems);
}

/** The worst divergence's limit at its step: {limit} (null when not judged); the overview states it. */
function worstRatio(run) {
  const w = run.worst_divergence;
  return w && Number(w.limit) > 0 ? {limit: Number(w.limit)} : null;
}

/**
 * "Precision advice": for each listed run with advice records, what the
 * advisor advises (the route's latest advice), as a button opening the
 * Advisor view on that run; null when no run has advice.
 */
async function adviceSection(entries, navigate) {
  const advised = entries.filter((e) => e.tags.some((t) => t.kind === 'advice'));
  if (!advised.length) return null;
  const answers = await Promise.all(advised.map((e) => getJson('advice', {run: e.run}).catch(() => null)));
  const list = el('ul', {class: 'gl-advice-runs'});
  advised.forEach((entry, i) => {
    const latest = answers[i] && answers[i].latest;
    list.appendChild(el('li', {}, [el('button', {
      type: 'button', class: 'gl-advice-run', dataset: {run: entry.run}, title: 'Open the Advisor view on this run',
      text: `${entry.run}: ${adviceSummary(latest)}`,
      onclick: () => navigate({view: 'advisor', run: entry.run, tag: '', row: '', step: '', focus: '', alert: ''}),
    })]));
  });
  return el('section', {class: 'gl-advice-overview'}, [el('h2', {text: 'Precision advice'}), list]);
}

/** One line of an advice: which layers to keep in float32, before -> after. */
export function adviceSummary(latest) {
  if (!latest) return 'advice logged but not readable (open the Advisor for why)';
  const rec = latest.recommendation;
  const metric = latest.metric === 'harm_index' ? 'harm index' : 'gradient rel L2';
  if (!rec) return 'no recommendation (open the Advisor for why)';
  if (!rec.float32.length) return `nothing to keep in float32 (${metric} ${fmt(latest.before)})`;
  const layers = rec.layers && rec.layers.length ? rec.layers : rec.float32;
  return `keep ${layers.join(', ')} in float32 (${metric} ${fmt(latest.before)} → ${fmt(rec.after)}`
    + `${rec.met ? '' : ', still above the tolerance'})`;
}

/** "Run r: from step s the records are at train step + n": a training
 * whose optimizer restarted below steps the run holds continues its steps. */
export function stepOffsetNotes(runs) {
  return runs.flatMap((r) => (r.step_offsets || []).map((o) => el('p', {
    class: 'gl-message gl-step-offset', dataset: {run: r.run},
    text: `Run ${r.run}: from step ${o.step} the records are at train step + ${o.offset} `
      + '(the optimizer restarted below steps this run already holds, so the run\'s steps continue).',
  })));
}

/** "Run r trained on: device ...; TF32 switch on; ...": the environment its
 * writers recorded, and what float32 measured to be where its references run. */
export function environmentNotes(runs) {
  return runs.filter((r) => r.environment && (r.environment.text || r.environment.float32_text)).map((r) => {
    const parts = [r.environment.text ? `trained on ${r.environment.text}` : '',
      r.environment.float32_text ? `float32 where the references run: ${r.environment.float32_text}` : ''];
    return el('p', {class: 'gl-message gl-environment', dataset: {run: r.run},
      text: `Run ${r.run}: ${parts.filter(Boolean).join('. ')}.`});
  });
}

/** True for a file problem (tag null) the runs listing names for its run. */
function listedProblem(error, runEntries) {
  if (error.tag !== null && error.tag !== undefined) return false;
  const entry = runEntries.find((e) => e.run === error.run);
  return Boolean(entry && (entry.problems || []).some((p) => p.file === error.file && p.error === error.error));
}

/** Names, the first few and "and N more" (all of them in the cell's title). */
function names(list) {
  if (!list.length) return 'none';
  return list.slice(0, LISTED).join(', ') + (list.length > LISTED ? ` and ${list.length - LISTED} more` : '');
}

function headline(r, tolerance, entry) {
  const w = r.worst_divergence;
  const counts = r.alert_counts || {};
  const kinds = new Set(((entry && entry.tags) || []).map((t) => t.kind));
  const hasComparison = ['divergence', 'activation_divergence', 'loss_comparison'].some((k) => kinds.has(k));
  const hasGradients = kinds.has('grad_stats');
  let worst = hasComparison ? 'no divergence value (only NaN)'
    : `no comparison logged${r.no_comparison ? `: ${r.no_comparison}` : ''}`;
  if (w) {
    const value = num(w.value);
    let against = '';
    if (!Number.isFinite(value)) against = ` (not finite${tolerance ? `; its limit ${fmt(tolerance.limit)}` : ''})`;
    else if (tolerance) against = ` = ${fmtRatio(value / tolerance.limit)}× its limit ${fmt(tolerance.limit)}`;
    worst = `${w.metric} ${fmt(value)}${against} · ${w.row} · step ${w.step}`;
  }
  const firstVars = r.first_nonfinite_variables || [];
  const notLogged = hasGradients ? null : 'no gradients logged';
  return {
    run: r.run,
    hasComparison,
    worst,
    comparison: w ? comparisonLabel({candidate: w.candidate, reference: w.reference})
      : hasComparison ? 'logged' : 'none',
    nonfinite: r.first_nonfinite_step === null || r.first_nonfinite_step === undefined ? 'none'
      : `step ${r.first_nonfinite_step}: ${names(firstVars)}`,
    disconnected: notLogged || names(r.disconnected_variables || []),
    dead: notLogged || names(r.zero_gradient_variables || []),
    alerts: `${counts.error || 0} / ${counts.warning || 0} / ${counts.info || 0}`,
    titles: {
      disconnected: (r.disconnected_variables || []).join('\n'),
      dead: (r.zero_gradient_variables || []).join('\n'),
      nonfinite: firstVars.join('\n'),
    },
  };
}

/**
 * Alerts that say the same thing in several runs (the same `group`: code,
 * record, tag name, variables), as lists in the order of their first alert.
 * Alerts without a group (an older backend) stay alone.
 */
export function groupAlerts(alerts) {
  const groups = new Map();
  alerts.forEach((alert, i) => {
    const key = alert.group ? `g:${alert.group}` : `i:${i}`;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(alert);
  });
  return [...groups.values()];
}

/** "The same in: run b · step 12, ...": a button per other run of a group, opening its evidence. */
function alsoIn(others, navigate) {
  return el('div', {class: 'gl-alert-also'}, ['The same in: ', ...others.map((alert) => el('button', {
    type: 'button', class: 'gl-alert-other', dataset: {run: alert.run || ''},
    text: `run ${alert.run} · step ${stepRange(alertStep(alert) ?? alert.step_first, alert.step_last)}`,
    title: 'Open the chart that shows this in that run',
    onclick: () => navigate(alertTarget(alert)),
  }))]);
}

/** A button that shows the alert and opens the view with its evidence. */
function alertButton(alert, navigate) {
  const variables = alert.variables || [];
  const listed = variables.slice(0, 6).join(', ')
    + (variables.length > 6 ? ` and ${variables.length - 6} more` : '');
  const step = alertStep(alert);
  const limit = alert.limit === null || alert.limit === undefined ? '' : ` · limit ${fmt(alert.limit)}`;
  return el('button', {
    type: 'button', class: `gl-alert gl-alert-${alert.severity}`,
    dataset: {code: alert.code || '', run: alert.run || ''},
    title: 'Open the chart that shows this',
    onclick: () => navigate(alertTarget(alert)),
  }, [
    el('div', {class: 'gl-alert-head'}, [
      el('span', {class: `gl-badge gl-sev-${alert.severity}`, text: alert.severity}),
      el('span', {class: 'gl-alert-code', text: alert.code}),
      ` · run ${alert.run} · step ${stepRange(step ?? alert.step_first, alert.step_last)}${limit}`,
    ]),
    listed ? el('div', {class: 'gl-alert-vars', text: `variables: ${listed}`}) : null,
    el('div', {class: 'gl-alert-text', text: alert.explanation}),
    alert.fix ? el('div', {class: 'gl-alert-fix', text: `fix: ${alert.fix}`}) : null,
  ]);
}

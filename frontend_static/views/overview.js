// Overview: the five answers of the run in focus, first (the answers
// route, analysis/answers.py: what `tb-gradlens report` prints), then every
// run in a row - each answer in a few words (the whole sentence on hover),
// its comparisons, the first NaN/Inf step and where, the disconnected (None)
// and dead (all-zero) variables by name, alert counts - and the alerts; an
// alert opens the view that shows its evidence.  The variable regex and
// step range apply (the routes' rows/step_min/step_max).

import {getJson} from '../api.js';
import {el} from '../dom.js';
import {fmt, stepRange} from '../format.js';
import {table} from '../table.js';
import {alertStep, alertTarget} from './alert_target.js';
import {answerList, answersFor, byId, runAnswers} from './answers.js';
import {filterParams, matchingRuns} from './common.js';
import {problemsSection} from './problems.js';

const LISTED = 4;
const QUESTION_COLUMNS = [
  ['beyond_noise', 'beyond float32 noise?'], ['diverges_most', 'diverges most'],
  ['keep_float32', 'keep in float32'], ['over_training', 'over training'],
];

/** The routes the Overview reads, asked for while the runs listing loads. */
export function prefetch(state) {
  const params = filterParams(state);
  return [getJson('overview', params), getJson('alerts', {run: state.run || '', ...params}), answersFor(state)]
    .map((p) => p.catch(() => null));
}

export async function render(container, ctx) {
  const {state, navigate, runs: runEntries} = ctx;
  const runFilter = state.run || '';
  const params = filterParams(state);
  const [overview, alerts, said] = await Promise.all([
    getJson('overview', params),
    getJson('alerts', {run: runFilter, ...params}),
    answersFor(state),
  ]);
  if (!ctx.isCurrent()) return;
  const listed = new Set(matchingRuns(runEntries, state.runs).map((e) => e.run));
  const runs = overview.runs.filter((r) => (runFilter ? r.run === runFilter : listed.has(r.run)));

  const focus = runFilter || (listed.has(said.focus) ? said.focus : (runs[0] && runs[0].run));
  const focused = runAnswers(said, focus);
  if (focused) {
    container.appendChild(el('h2', {class: 'gl-answers-title'}, ['Answers for run ',
      el('span', {class: 'gl-run-name', text: focus}),
      el('span', {class: 'gl-note', text: runFilter ? '' : ' (pick another run above)'})]));
    container.appendChild(answerList(focused));
  }

  container.appendChild(el('h2', {text: 'Runs'}));
  const scope = [state.filter ? `variables matching /${state.filter}/` : '',
    state.smin || state.smax ? `steps ${state.smin || 'first'}–${state.smax || 'last'}` : ''].filter(Boolean);
  const hidden = overview.runs.length - runs.length;
  container.appendChild(table({
    caption: `${runFilter ? `Run ${runFilter}` : `${runs.length} run(s) with gradlens data`}`
      + `${!runFilter && hidden > 0 ? ` (${hidden} more not matching the run filter)` : ''}`
      + `${scope.length ? ` · ${scope.join(', ')}` : ''} · hover a cell for the whole answer, click a run for its `
      + 'divergence or gradients',
    columns: [
      {key: 'run', label: 'run'},
      ...QUESTION_COLUMNS.slice(0, 2).map(([key, label]) => ({key, label})),
      {key: 'comparison', label: 'comparisons'},
      {key: 'nonfinite', label: 'first NaN/Inf'},
      {key: 'disconnected', label: 'disconnected (None)'},
      {key: 'dead', label: 'dead (all-zero gradient)'},
      ...QUESTION_COLUMNS.slice(2).map(([key, label]) => ({key, label})),
      {key: 'alerts', label: 'alerts E/W/I'},
    ],
    rows: runs.map((r) => headline(r, runEntries.find((e) => e.run === r.run), runAnswers(said, r.run))),
    onSelect: (row) => navigate({view: row.hasComparison ? 'divergence' : 'gradients', run: row.run,
      tag: '', row: '', step: '', focus: '', alert: ''}),
    rowClass: () => 'gl-run-row',
    cellTitle: (row, key) => row.titles[key],
  }));
  for (const note of stepOffsetNotes(runs)) container.appendChild(note);
  for (const note of environmentNotes(runs)) container.appendChild(note);
  const advised = adviceSection(runEntries.filter((e) => runs.some((r) => r.run === e.run)), said, navigate);
  if (advised) container.appendChild(advised);

  const groups = groupAlerts(alerts.alerts);
  const distinct = groups.length < alerts.alerts.length ? `, ${groups.length} distinct` : '';
  container.appendChild(el('h2', {text: `Alerts (${alerts.alerts.length}${distinct})`}));
  if (!alerts.alerts.length) {
    container.appendChild(el('p', {class: 'gl-message gl-no-alerts',
      text: 'No alerts. Nothing looks wrong in the logged steps.'}));
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

/**
 * "Precision advice": each listed run with advice records and its fourth
 * answer (what to keep in float32), as a button opening the Advisor view on
 * that run; null when no run has advice.
 */
function adviceSection(entries, said, navigate) {
  const advised = entries.filter((e) => e.tags.some((t) => t.kind === 'advice'));
  if (!advised.length) return null;
  const list = el('ul', {class: 'gl-advice-runs'});
  for (const entry of advised) {
    const keep = byId(runAnswers(said, entry.run)).keep_float32;
    list.appendChild(el('li', {}, [el('button', {
      type: 'button', class: 'gl-advice-run', dataset: {run: entry.run}, title: keep ? keep.text : '',
      text: `${entry.run}: ${keep ? keep.short : 'advice logged'}`,
      onclick: () => navigate({view: 'advisor', run: entry.run, tag: '', row: '', step: '', focus: '', alert: ''}),
    })]));
  }
  return el('section', {class: 'gl-advice-overview'}, [el('h2', {text: 'Precision advice'}), list]);
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

function headline(r, entry, said) {
  const counts = r.alert_counts || {};
  const kinds = new Set(((entry && entry.tags) || []).map((t) => t.kind));
  const hasComparison = ['divergence', 'activation_divergence', 'loss_comparison'].some((k) => kinds.has(k));
  const hasGradients = kinds.has('grad_stats');
  const answers = byId(said);
  const firstVars = r.first_nonfinite_variables || [];
  const notLogged = hasGradients ? null : 'no gradients logged';
  const compared = ((said && said.comparisons) || []).map((c) => c.label);
  const row = {
    run: r.run,
    hasComparison,
    comparison: compared.length ? compared.join('; ') : 'none',
    nonfinite: r.first_nonfinite_step === null || r.first_nonfinite_step === undefined ? 'none'
      : `step ${r.first_nonfinite_step}: ${names(firstVars)}`,
    disconnected: notLogged || names(r.disconnected_variables || []),
    dead: notLogged || names(r.zero_gradient_variables || []),
    alerts: `${counts.error || 0} / ${counts.warning || 0} / ${counts.info || 0}`,
    titles: {
      disconnected: (r.disconnected_variables || []).join('\n'),
      dead: (r.zero_gradient_variables || []).join('\n'),
      nonfinite: firstVars.join('\n'),
      comparison: ((said && said.comparisons) || []).map((c) => `${c.label}: ${c.answer.text}`).join('\n'),
    },
  };
  for (const [key] of QUESTION_COLUMNS) {
    const a = answers[key];
    row[key] = a ? a.short : '–';
    row.titles[key] = a ? a.text : '';
  }
  return row;
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

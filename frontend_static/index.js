// GradLens tab entry module. TensorBoard imports this file into the plugin
// iframe (base href plugin/gradlens/) and calls render().
//
// The shell: title, view tabs, the controls shared by every view (run,
// variable regex, step range, reload) and the view area.  State lives in
// the URL hash (state.js); TensorBoard's reload is followed (host.js).
// All user-controlled strings are set with textContent, never as HTML.

import * as api from './api.js';
import {el, clear, message} from './dom.js';
import {connectToHost} from './host.js';
import {followTheme} from './theme.js';
import {beginDraw} from './chart_memory.js';
import {beginAxis, parseZoom, zoomText} from './shared_axis.js';
import {forgetRunColors} from './run_colors.js';
import * as state from './state.js';
import {HOW_TO_LOG, matchingRuns} from './views/common.js';
import {runProblemsBanner} from './views/problems.js';
import * as overview from './views/overview.js';
import * as divergence from './views/divergence.js';
import * as gradients from './views/gradients.js';
import * as dtypes from './views/dtypes.js';
import * as compare from './views/compare.js';
import * as advisor from './views/advisor.js';
// Every other module of the tab too, so that the browser fetches them all at
// once instead of discovering them one level of the import graph at a time
// (five round trips to TensorBoard before anything is drawn).
import './axes.js';
import './chart_frame.js';
import './colors.js';
import './download.js';
import './format.js';
import './heatmap.js';
import './heatmap_colors.js';
import './heatmap_paint.js';
import './line_chart.js';
import './line_draw.js';
import './scale.js';
import './settings.js';
import './smoothing.js';
import './table.js';
import './views/alert_target.js';
import './views/answers.js';
import './views/compare_verdict.js';
import './views/divergence_sections.js';
import './views/gradient_health.js';
import './views/histogram.js';
import './views/limits.js';
import './views/optimizer_steps.js';
import './views/overlay.js';
import './views/rank.js';
import './views/records.js';
import './views/updates.js';
import './zoom.js';

export const VIEWS = [
  {name: 'overview', label: 'Overview', module: overview},
  {name: 'divergence', label: 'Divergence', module: divergence},
  {name: 'gradients', label: 'Gradients', module: gradients},
  {name: 'dtypes', label: 'Dtypes', module: dtypes},
  {name: 'compare', label: 'Compare runs', module: compare},
  {name: 'advisor', label: 'Advisor', module: advisor},
];

let app = null;

export async function render() {
  if (app) return;
  loadStyles();
  followTheme();
  state.init(state.readHostState());
  app = buildShell();
  document.body.appendChild(app.root);
  state.subscribe(() => show({quiet: false}));
  connectToHost(() => reload());
  await reload({quiet: false});
}

function loadStyles() {
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = new URL('./gradlens.css', import.meta.url).href;
  document.head.appendChild(link);
}

function buildShell() {
  const status = el('span', {class: 'gl-status', role: 'status', 'aria-live': 'polite'});
  const reloadButton = el('button', {type: 'button', class: 'gl-reload', text: 'Reload',
    title: 'Fetch the data again', onclick: () => reload()});
  const tabs = el('div', {class: 'gl-tabs', role: 'tablist', 'aria-label': 'GradLens views'});
  for (const view of VIEWS) {
    const tab = el('button', {
      type: 'button', role: 'tab', id: `gl-tab-${view.name}`, text: view.label,
      dataset: {view: view.name}, onclick: () => state.update({view: view.name, focus: '', alert: '', zoom: ''}),
    });
    tab.addEventListener('keydown', (event) => {
      const i = VIEWS.indexOf(view);
      const delta = event.key === 'ArrowRight' ? 1 : event.key === 'ArrowLeft' ? -1 : 0;
      if (!delta) return;
      const next = VIEWS[(i + delta + VIEWS.length) % VIEWS.length];
      state.update({view: next.name, focus: '', alert: '', zoom: ''});
      tabs.querySelector(`[data-view="${next.name}"]`).focus();
    });
    tabs.appendChild(tab);
  }
  const controls = el('div', {class: 'gl-controls', role: 'group', 'aria-label': 'Filters'});
  const content = el('main', {class: 'gl-content', role: 'tabpanel', tabindex: -1});
  const root = el('div', {class: 'gradlens'}, [
    el('div', {class: 'gl-header'}, [el('h1', {text: 'GradLens'}), status, reloadButton]),
    tabs, controls, content,
  ]);
  return {root, status, tabs, controls, content, runs: null, lowPrecision: [], explanations: {}, generation: 0,
    loadError: null};
}

/** Refetch everything (Reload button, TensorBoard's reload) and redraw. */
async function reload({quiet = true} = {}) {
  api.clearCache();
  forgetRunColors();
  prefetch();
  const root = document.documentElement;
  root.dataset.reloads = String(Number(root.dataset.reloads || 0) + 1);
  app.status.textContent = 'Loading…';
  try {
    const data = await api.getJson('runs');
    app.runs = data.runs;
    app.lowPrecision = data.low_precision_dtypes;
    app.explanations = data.explanations || {};
    app.loadError = null;
    app.status.textContent = `Loaded ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    app.loadError = error;
    app.status.textContent = 'Load failed';
  }
  await show({quiet});
}

/** Ask for what the current view needs before the runs listing arrives (it does not depend on it). */
function prefetch() {
  const current = state.get();
  const view = VIEWS.find((v) => v.name === current.view) || VIEWS[0];
  if (view.module.prefetch) view.module.prefetch(current);
}

/** Draw the current view; stale draws (the state changed meanwhile) are dropped. */
async function show({quiet}) {
  const generation = ++app.generation;
  const current = state.get();
  const view = VIEWS.find((v) => v.name === current.view) || VIEWS[0];
  for (const tab of app.tabs.children) {
    const selected = tab.dataset.view === view.name;
    tab.setAttribute('aria-selected', String(selected));
    tab.tabIndex = selected ? 0 : -1;
  }
  app.content.setAttribute('aria-labelledby', `gl-tab-${view.name}`);
  document.documentElement.dataset.view = view.name;
  renderControls(current, view);

  if (app.loadError) {
    clear(app.content).appendChild(message('error', `Could not load runs: ${app.loadError.message}`));
    return;
  }
  if (!app.runs) return;
  if (!app.runs.length) {
    clear(app.content).appendChild(message('empty-state', `No gradlens data yet: ${HOW_TO_LOG.any}.`));
    return;
  }
  if (!quiet) clear(app.content).appendChild(message('loading', 'Loading…'));
  beginDraw(current); // the charts keep their hidden series while they show the same data
  beginAxis(parseZoom(current.zoom), (range) => state.update({zoom: zoomText(range)}));
  const next = el('div', {class: `gl-view gl-view-${view.name}`});
  const shownRuns = new Set();
  const context = {
    state: current,
    runs: app.runs,
    // The dtypes the server calls low precision (the runs route's low_precision_dtypes).
    lowPrecision: app.lowPrecision,
    // One line per column and metric (the runs route's explanations: the contract's, no copy here).
    explanations: app.explanations,
    navigate: (patch) => state.update(patch),
    isCurrent: () => generation === app.generation,
    // A view that falls back to another run than the state's says which it shows.
    showRun: (name) => {
      const control = app.controls.querySelector('.gl-run');
      if (control && generation === app.generation) {
        // A run the run filter leaves out is still the one shown: it is listed.
        if (![...control.options].some((o) => o.value === name)) control.appendChild(el('option', {value: name, text: name}));
        control.value = name;
      }
      shownRuns.add(name);
    },
    // The runs a view shows (their event-file problems are named above it).
    showRuns: (...names) => names.forEach((name) => shownRuns.add(name)),
  };
  // Drawn attached but invisible (laid out, so charts know their width); shown when done.
  next.classList.add('gl-pending');
  app.content.appendChild(next);
  try {
    await view.module.render(next, context);
  } catch (error) {
    if (generation !== app.generation) return;
    next.replaceChildren(message('error', error.message || String(error)));
  }
  if (generation !== app.generation) {
    next.remove();
    return;
  }
  const problems = runProblemsBanner(app.runs, [...shownRuns]);
  if (problems) next.prepend(problems);
  for (const child of [...app.content.children]) if (child !== next) child.remove();
  next.classList.remove('gl-pending');
  // When the view became usable (ms since the page started): benchmarks/frontend_views.py reads it.
  document.documentElement.dataset.readyAt = performance.now().toFixed(1);
  document.documentElement.dataset.ready = String(generation);
}

function renderControls(current, view) {
  const runs = app.runs || [];
  // The run filter (state key `runs`, a regex as in TensorBoard's run selector) keeps the list short
  // at hundreds of runs; the run shown stays in the list.
  const listed = matchingRuns(runs, current.runs);
  const runSelect = el('select', {class: 'gl-run', 'aria-label': 'Run'});
  if (view.name === 'overview') {
    runSelect.appendChild(el('option', {value: '', text: listed.length < runs.length
      ? `(the ${listed.length} matching runs)` : '(all runs)'}));
  }
  for (const r of runs) {
    if (!listed.includes(r) && r.run !== current.run) continue;
    runSelect.appendChild(el('option', {value: r.run, text: r.run, selected: r.run === current.run}));
  }
  runSelect.value = current.run && runs.some((r) => r.run === current.run) ? current.run
    : view.name === 'overview' ? '' : (runs[0] ? runs[0].run : '');
  // Another run: what was selected in the old one (record, variable, step, alert) no longer applies.
  runSelect.addEventListener('change', () => state.update({run: runSelect.value, tag: '', utag: '', row: '',
    step: '', focus: '', alert: '', zoom: ''}));

  const runFilter = el('input', {
    type: 'search', class: 'gl-run-filter', 'aria-label': 'Filter runs (regex)',
    placeholder: `filter ${runs.length} runs (regex)`, value: current.runs || '', spellcheck: 'false',
    title: 'Only the runs whose name matches this regular expression (case-insensitive) are listed',
  });
  const applyRunFilter = () => state.update({runs: runFilter.value});
  runFilter.addEventListener('change', applyRunFilter);
  runFilter.addEventListener('keydown', (event) => {
    if (event.key === 'Enter') applyRunFilter();
  });
  const shownCount = el('span', {class: 'gl-run-count',
    text: current.runs ? `${listed.length} of ${runs.length} runs` : `${runs.length} runs`});

  const regex = el('input', {
    type: 'search', class: 'gl-regex', 'aria-label': 'Variable regex',
    placeholder: 'e.g. dense_1|kernel', value: current.filter || '', spellcheck: 'false',
  });
  // The server matches the regex (Python re.search); a bad one comes back as a 400 shown in the view.
  const applyRegex = () => state.update({filter: regex.value});
  regex.addEventListener('change', applyRegex);
  regex.addEventListener('keydown', (event) => {
    if (event.key === 'Enter') applyRegex();
  });
  const stepInput = (key, label) => {
    const input = el('input', {type: 'number', min: 0, step: 1, class: `gl-${key}`,
      'aria-label': label, value: current[key] ?? ''});
    input.addEventListener('change', () => state.update({[key]: input.value}));
    return input;
  };
  const focused = document.activeElement && app.controls.contains(document.activeElement)
    ? document.activeElement.className : null;
  app.controls.replaceChildren(
    view.name === 'compare' ? '' : el('label', {class: 'gl-field'}, [el('span', {text: 'Run'}), runSelect]),
    view.name === 'compare' || runs.length < 2 ? '' : el('label', {class: 'gl-field'}, [
      el('span', {}, ['Filter runs · ', shownCount]), runFilter]),
    view.name === 'compare' ? '' : el('label', {class: 'gl-field'}, [el('span', {text: 'Variable regex'}), regex]),
    el('label', {class: 'gl-field'}, [el('span', {text: 'From step'}), stepInput('smin', 'From step')]),
    el('label', {class: 'gl-field'}, [el('span', {text: 'To step'}), stepInput('smax', 'To step')]),
  );
  if (focused) {
    const again = app.controls.getElementsByClassName(focused)[0];
    if (again) again.focus();
  }
}

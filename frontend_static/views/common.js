// Helpers shared by the views: the runs route's tags, empty states, the
// view controls every chart view has (rank, top K, smoothing, log y) and
// reading series answers.

import {getJson} from '../api.js';
import {checkbox, el, labelled, numberInput, select} from '../dom.js';
import {num} from '../format.js';
import {VIEW_OF_KIND} from './alert_target.js';
import {comparisons} from './records.js';

export const HOW_TO_LOG = {
  any: 'log with tb_gradlens.summary.gradients(grads, variables, step=step) inside '
    + '`with writer.as_default():` (or the GradLens Keras callback), then press Reload',
  divergence: 'compare a bfloat16 step with a float32 reference with the GradLens Keras callback '
    + '(GradLensCallback) or tb_gradlens.keras.GradLens(...).compare_keras(model, x, y, step)',
  grad_stats: 'log with tb_gradlens.summary.gradients(grads, variables, step=step)',
  dtypes: 'log the dtype map with tb_gradlens.keras.GradLens(...).log_dtypes(model, x, step) '
    + '(the Keras callback logs it)',
};

/**
 * The run entries whose name matches the run filter (state key `runs`): a
 * regular expression, case-insensitive, as TensorBoard's own run selector
 * takes it; text that is no regular expression matches as plain text.
 */
export function matchingRuns(runs, pattern) {
  const text = String(pattern || '');
  if (!text) return runs;
  let test;
  try {
    const re = new RegExp(text, 'i');
    test = (name) => re.test(name);
  } catch (error) {
    const lower = text.toLowerCase();
    test = (name) => name.toLowerCase().includes(lower);
  }
  return runs.filter((r) => test(r.run));
}

/** Tags of `kind` in a run entry of the runs route (readable ones only). */
export function tagsOfKind(runEntry, kind) {
  return runEntry ? runEntry.tags.filter((t) => t.kind === kind) : [];
}

/** Run entries that have at least one tag of one of `kinds`. */
export function runsWithKind(runs, ...kinds) {
  return runs.filter((r) => kinds.some((k) => tagsOfKind(r, k).length > 0));
}

/** The run to show: the state's if there is one, else the first that has one of `kinds`. */
export function chooseRun(runs, wanted, ...kinds) {
  const entry = runs.find((r) => r.run === wanted);
  if (entry) return entry;
  return runsWithKind(runs, ...kinds)[0] || runs[0] || null;
}

const SEVERITY = {error: 3, warning: 2, info: 1};

/** The last step a run logged (its tags' largest max_step; -1 for none). */
function lastStep(entry) {
  return Math.max(-1, ...entry.tags.map((t) => (Number.isFinite(t.max_step) ? t.max_step : -1)));
}

/**
 * The run a view opens on when its state names none, among the runs that
 * have one of `kinds`: the one with the most severe alert this view shows
 * (`relevant(alert)`), the most such alerts first; else the one comparing a
 * 16-bit candidate against a float32 reference; then the longest record;
 * then by name.  Not the alphabetically first run.
 */
export function defaultRun(runs, alerts, relevant, ...kinds) {
  const pool = runsWithKind(runs, ...kinds);
  if (!pool.length) return runs[0] || null;
  const worst = new Map(pool.map((r) => [r.run, [0, 0]]));
  for (const a of alerts || []) {
    const seen = worst.get(a.run);
    if (!seen || !relevant(a)) continue;
    const level = SEVERITY[a.severity] || 0;
    if (level > seen[0]) worst.set(a.run, [level, 1]);
    else if (level === seen[0]) seen[1] += 1;
  }
  const rank = (r) => Math.min(9, ...comparisons(r).map((g) => g.rank));
  const key = (r) => [-worst.get(r.run)[0], -worst.get(r.run)[1], rank(r), -lastStep(r)];
  return [...pool].sort((a, b) => {
    const ka = key(a);
    const kb = key(b);
    for (let i = 0; i < ka.length; i++) if (ka[i] !== kb[i]) return ka[i] - kb[i];
    return a.run < b.run ? -1 : a.run > b.run ? 1 : 0;
  })[0];
}

/**
 * The run a view shows: the state's, else defaultRun (reading every run's
 * alerts, which the Overview reads too).  `view` is the view's name.
 */
export async function pickRun(ctx, view, ...kinds) {
  const {state, runs} = ctx;
  const named = runs.find((r) => r.run === state.run);
  if (named) return named;
  let alerts = [];
  try {
    alerts = (await getJson('alerts')).alerts;
  } catch (error) {
    alerts = []; // the alerts are the Overview's to report; the view still opens
  }
  return defaultRun(runs, alerts, (a) => VIEW_OF_KIND[(a.view || {}).name] === view, ...kinds);
}

/** The runs ticked for overlay (state key overlay: comma-separated names) among `names`. */
export function overlayRuns(state, names) {
  const ticked = String(state.overlay || '').split(',').filter(Boolean);
  return names.filter((n) => ticked.includes(n));
}

/**
 * "Overlay runs": a checkbox per run of `names`, in its TensorBoard color
 * (`colors`: run -> CSS color); ticking one overlays it in the view's
 * "across runs" chart.  The ticks are kept across reloads (settings.js).
 */
export function overlayPicker(state, navigate, names, colors, current) {
  const ticked = new Set(overlayRuns(state, names));
  const box = el('fieldset', {class: 'gl-overlay', 'aria-label': 'Overlay runs'}, [
    el('legend', {text: 'Overlay runs'}),
  ]);
  for (const name of names) {
    const input = checkbox(ticked.has(name) || name === current, (on) => {
      const next = new Set(String(state.overlay || '').split(',').filter(Boolean));
      if (on) next.add(name);
      else next.delete(name);
      navigate({overlay: [...next].sort().join(',')});
    }, 'gl-overlay-run');
    input.dataset.run = name;
    if (name === current) input.disabled = true; // the view's run is always drawn
    box.appendChild(el('label', {class: 'gl-overlay-item', title: name === current ? 'the run this view shows'
      : 'overlay this run'}, [input, el('span', {class: 'gl-swatch', style: `background:${colors.get(name)}`}),
      el('span', {class: 'gl-overlay-name', text: name})]));
  }
  return box;
}

/** Empty-state block: what is missing and how to log it; optional run buttons. */
export function emptyState(text, otherRuns = [], navigate = null) {
  const box = el('div', {class: 'gl-message gl-empty-state'}, [el('p', {text})]);
  if (otherRuns.length && navigate) {
    const links = el('p', {class: 'gl-runlinks'}, ['Runs that have it: ']);
    for (const r of otherRuns) {
      links.appendChild(el('button', {type: 'button', text: r.run, onclick: () => navigate({run: r.run})}));
    }
    box.appendChild(links);
  }
  return box;
}

/** Parse an integer state value; fallback when absent or not a number. */
export function intOr(value, fallback) {
  const n = parseInt(value, 10);
  return Number.isFinite(n) ? n : fallback;
}

/** The step-range parameters of the state for the routes. */
export function stepParams(state) {
  return {step_min: state.smin, step_max: state.smax};
}

/** The filter parameters of the state (variable regex and step range). */
export function filterParams(state) {
  return {rows: state.filter, ...stepParams(state)};
}

/** Steps a chart asks for: about one per pixel of the widest chart. */
export function maxSteps() {
  return Math.max(200, Math.min(2000, Math.round((window.innerWidth || 1200) * 0.9)));
}

/** values[column][row] of a series answer as Float64Arrays. */
export function seriesColumn(series, column) {
  const byColumn = series.values[series.columns.indexOf(column)];
  if (!byColumn) return series.rows.map(() => new Float64Array(series.steps.length));
  return byColumn.map((row) => Float64Array.from(row, num));
}

/** The marked step: the state's if it is logged, else null. */
export function markedStep(state, steps) {
  const step = intOr(state.step, NaN);
  return Number.isFinite(step) && steps.length && step >= steps[0] && step <= steps[steps.length - 1] ? step : null;
}

/** Index of the logged step at or just before `step` (the last one when step is null). */
export function stepIndex(steps, step) {
  if (step === null || step === undefined) return steps.length - 1;
  let i = steps.length - 1;
  while (i > 0 && steps[i] > step) i--;
  return i;
}

/** The smoothing slider and the log-y box (state keys smooth, logy). */
export function smoothingControls(state, navigate, logLabel = 'log y') {
  const smoothing = smoothingOf(state);
  const slider = el('input', {type: 'range', min: 0, max: 0.99, step: 0.01, value: smoothing, class: 'gl-smooth',
    'aria-label': 'Smoothing'});
  const shown = el('span', {class: 'gl-smooth-value', text: smoothing.toFixed(2)});
  slider.addEventListener('input', () => {
    shown.textContent = Number(slider.value).toFixed(2);
  });
  slider.addEventListener('change', () => navigate({smooth: Number(slider.value) > 0 ? slider.value : ''}));
  return [
    labelled('Smoothing', el('span', {class: 'gl-inline'}, [slider, shown])),
    el('label', {class: 'gl-field gl-inline'}, [
      checkbox(state.logy !== '0', (on) => navigate({logy: on ? '' : '0'}), 'gl-logy'), el('span', {text: logLabel}),
    ]),
  ];
}

/** The view controls of the chart views: rank, top K, smoothing, log y (state keys rank, k, smooth, logy). */
export function chartControls(state, navigate, {kLabel = 'Variables shown', rankLabels, logLabel = 'log y'} = {}) {
  return [
    labelled('Rank variables by', select(rankLabels || [['worst', 'worst first'], ['first', 'first to go wrong']],
      state.rank === 'first' ? 'first' : 'worst', (v) => navigate({rank: v === 'worst' ? '' : v}), {class: 'gl-rank'})),
    labelled(kLabel, numberInput(topK(state), 1, (v) => navigate({k: v}), 'gl-topk')),
    ...smoothingControls(state, navigate, logLabel),
  ];
}

/** Top K of the state (default 8). */
export function topK(state) {
  return Math.max(1, intOr(state.k, 8));
}

/** Smoothing weight of the state (0 = none). */
export function smoothingOf(state) {
  const w = Number(state.smooth);
  return Number.isFinite(w) && w > 0 && w < 1 ? w : 0;
}

/** Scroll a section into view after the view is shown (an alert's evidence). */
export function focusSection(node) {
  node.classList.add('gl-focus');
  node.dataset.focus = '1';
  requestAnimationFrame(() => requestAnimationFrame(() => node.scrollIntoView({block: 'start'})));
}

/**
 * Table columns with their one-line explanation on hover (the runs route's
 * `explanations`: the record's columns of `kind`, the table's own keys).
 */
export function explained(columns, explanations, kind) {
  const own = ((explanations || {}).columns || {})[kind] || {};
  const table = (explanations || {}).table || {};
  return columns.map((c) => ({...c, title: c.title || own[c.key] || table[c.key] || ''}));
}

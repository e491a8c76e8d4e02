// What of the logged data could not be read, said where it matters: the
// event files of a run that are damaged or written by two writers at once
// (the runs route's `problems`, and the alerts route's `errors` with
// `tag: null`), and records whose contents could not be read (`errors` with
// a tag).  Each message says what TensorBoard does not show because of it.

import {el} from '../dom.js';

/** One line for an alerts `errors` entry or a runs `problems` entry: a file's, the logdir's or a record's. */
export function problemText(problem) {
  if (problem.tag !== null && problem.tag !== undefined) return `record ${problem.tag}: ${problem.error}`;
  return `${problem.file ? `event file ${problem.file}` : 'logdir'}: ${problem.error}`;
}

/** The alerts route's `errors`, per run: [[run, [lines]]] in the order of their first entry. */
export function problemsByRun(errors) {
  const byRun = new Map();
  for (const e of errors || []) {
    const run = e.run || '';
    if (!byRun.has(run)) byRun.set(run, []);
    byRun.get(run).push(problemText(e));
  }
  return [...byRun.entries()];
}

/** The Overview's list of what could not be read, per run (null when nothing). */
export function problemsSection(errors) {
  const groups = problemsByRun(errors);
  if (!groups.length) return null;
  const list = el('ul', {class: 'gl-read-errors'});
  for (const [run, lines] of groups) {
    list.appendChild(el('li', {class: 'gl-read-error-run'}, [
      el('strong', {text: run ? `Run ${run}` : 'The logdir'}),
      el('ul', {}, lines.map((text) => el('li', {text}))),
    ]));
  }
  return el('section', {class: 'gl-problems'}, [el('h3', {text: 'Data that could not be read'}), list]);
}

/** A warning naming the event-file problems of the runs a view shows (runs route), or null. */
export function runProblemsBanner(runEntries, names) {
  const found = names.map((name) => (runEntries || []).find((r) => r.run === name))
    .filter((entry) => entry && Array.isArray(entry.problems) && entry.problems.length);
  if (!found.length) return null;
  return el('div', {class: 'gl-message gl-warning gl-run-problems', role: 'alert'}, found.map((entry) =>
    el('div', {}, [
      el('p', {text: `Run ${entry.run}: ${entry.problems.length} event file problem(s); `
        + 'what this view shows may be incomplete.'}),
      el('ul', {}, entry.problems.map((p) => el('li', {text: problemText(p)}))),
    ])));
}

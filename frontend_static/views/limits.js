// Limits: what a divergence value is judged against, per row AND per step.
// The `limits` route (docs/ROUTES.md) serves, for every row of a
// divergence-like record and every step it logged, the limit the alert
// rules apply (README "Alerts": measured on the step by the stable-rounding
// pass, or the depth formula), where each row is above it and where it is
// harmed (an alert: above for 2 comparisons in a row, or 10x above at one).
// The tab draws and colors with these and takes its verdicts from them: it
// never judges with a rule of its own.  A route that fails gives a message,
// no limit and no verdict.

import {getJson} from '../api.js';
import {fmt, fmtRatio} from '../format.js';
import {lastAtOrBefore} from '../scale.js';

/**
 * The limits of a divergence-like tag entry (runs route):
 *   {ok: true, column, rows, steps, limits: [Float64Array per step] per row (NaN: not judged there),
 *    above: [[step]] per row, harmed: [[step]] per row, measured, basis, rule}
 * or {ok: false, column: null, message} when the route cannot answer.
 */
export async function limitsFor(run, entry) {
  try {
    return fromAnswer(await getJson('limits', {run, tag: entry.tag}), entry.rows);
  } catch (error) {
    return {ok: false, column: null, rows: entry.rows, message: `The limits of this record could not be read `
      + `(${error.message || error}): no limit is drawn and nothing is judged here; the alerts of the Overview `
      + 'still are.'};
  }
}

/** A limits answer for the rows of a tag entry (its order; a row the route lacks is never judged). */
export function fromAnswer(answer, rows = answer.rows) {
  const byRow = new Map(answer.rows.map((row, i) => [row, i]));
  const steps = answer.steps.map(Number);
  const pick = (list, empty) => rows.map((row) => (byRow.has(row) && list ? list[byRow.get(row)] : empty));
  return {
    ok: true, column: answer.column, rows, steps, rule: answer.rule || '',
    limits: pick(answer.limits, null).map((list) => Float64Array.from(list || steps.map(() => null),
      (v) => (v === null || v === undefined ? NaN : Number(v)))),
    above: pick(answer.above, []).map((list) => (list || []).map(Number)),
    harmed: pick(answer.harmed, []).map((list) => (list || []).map(Number)),
    measured: pick(answer.measured, false).map(Boolean),
    basis: pick(answer.basis, '').map((b) => b || ''),
  };
}

/** True when `limits` judge `column` (the route's column: rel_l2, or rel_error for the loss). */
export function judges(limits, column) {
  return Boolean(limits && limits.ok && limits.column === column);
}

/** The limit of row r at `step`: the one of the logged comparison at or before it (NaN: none). */
export function limitAt(limits, r, step) {
  if (!limits || !limits.ok || r < 0 || !limits.limits[r]) return NaN;
  const i = lastAtOrBefore(limits.steps, step);
  return i < 0 ? NaN : limits.limits[r][i];
}

/** Row r's limit at each of `steps` (a Float64Array; NaN where it has none). */
export function limitsAlong(limits, r, steps) {
  return Float64Array.from(steps, (s) => limitAt(limits, r, s));
}

/**
 * The route's verdict on row r within the step range [lo, hi] (a display
 * filter restricts what is shown, never the verdict): the steps above the
 * limit, those harmed, and the first of each (null: none).
 */
export function rowVerdict(limits, r, lo = -Infinity, hi = Infinity) {
  if (!limits || !limits.ok || r < 0) return {above: [], harmed: [], firstAbove: null, firstHarmed: null};
  const inRange = (s) => s >= lo && s <= hi;
  const above = (limits.above[r] || []).filter(inRange);
  const harmed = (limits.harmed[r] || []).filter(inRange);
  return {above, harmed, firstAbove: above.length ? above[0] : null, firstHarmed: harmed.length ? harmed[0] : null};
}

/** The step range [lo, hi] of a view's state (smin, smax). */
export function stateRange(state) {
  const lo = Number.parseInt(state.smin, 10);
  const hi = Number.parseInt(state.smax, 10);
  return [Number.isFinite(lo) ? lo : -Infinity, Number.isFinite(hi) ? hi : Infinity];
}

/**
 * The dashed limit series of a line chart for row r of `limits`, in the
 * color of the row's series, over the logged comparisons within [lo, hi]
 * (a step line: a limit holds from its comparison to the next one).
 */
export function limitSeries(limits, r, name, color, [lo, hi] = [-Infinity, Infinity]) {
  if (!limits || !limits.ok || r < 0) return null;
  const steps = [];
  const values = [];
  limits.steps.forEach((s, i) => {
    if (s < lo || s > hi) return;
    steps.push(s);
    values.push(limits.limits[r][i]);
  });
  if (!values.some((v) => v > 0)) return null;
  return {name: `limit of ${name}`, steps, values: Float64Array.from(values), color, dashed: true, stepped: true,
    limitOf: name, basis: limits.basis[r] || '', smooth: false};
}

/** The value / limit of each row at each step (a heatmap's colors): -1 where a row has no limit at a step. */
export function ratios(values, limits, rowIndex, steps) {
  return values.map((row, r) => {
    const along = limitsAlong(limits, rowIndex[r], steps);
    return Float64Array.from(row, (v, i) => (along[i] > 0 ? v / along[i] : Number.isNaN(v) ? NaN : -1));
  });
}

/** What an exceedance that is not an alert is, in words (the numbers are in the route's rule, on hover). */
export const NOT_AN_ALERT = 'not an alert: the rules alert when a row stays above its limit or goes far above it';

/** The limit of an alert on (tag, column), the same for every row (lost_update), or null. */
export function alertLimit(alerts, tag, column) {
  const alert = (alerts || []).find((a) => a.tag === tag && a.view && a.view.column === column
    && a.limit !== null && Number.isFinite(Number(a.limit)));
  return alert ? Number(alert.limit) : null;
}

/** Tooltip lines: the value against its limit at that step, and the limit's basis. */
export function againstLimit(limits, byRoute, r, step, value) {
  if (!byRoute) return ['no limit for this metric'];
  const limit = limitAt(limits, r, step);
  if (!(limit > 0)) return [`no limit at this step: ${limits.basis[r] || 'not judged'}`];
  return [`${fmtRatio(value / limit)}× its limit ${fmt(limit)} at this step`, `limit: ${limits.basis[r]}`];
}


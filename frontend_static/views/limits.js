// Tolerances: what a divergence value is measured against.  The `limits`
// route gives, per row of a divergence-like record, the tolerance the alert
// rules apply (column rel_l2; rel_error for the loss).  Where the route is
// missing (404: an older backend) the tab falls back to fixed limits by the
// candidate's compute dtype, the alert rules' defaults: bfloat16/float16
// gradients 0.1, bfloat16/float16 values (activations, loss) 0.01, float32
// 0.001.  Other columns (flush_to_zero, lost_update_bf16) get the `limit`
// of an alert on them, when there is one.

import {getJson, RouteError} from '../api.js';
import {fmt} from '../format.js';
import {computeDtype} from './records.js';

export const FALLBACK = {lowGradient: 0.1, lowValue: 0.01, float32: 1e-3};
const LOW = new Set(['bfloat16', 'float16', 'mixed']);

/**
 * Fallback tolerances of a tag entry (runs route): {column, rows, limits, basis, rule, source}.
 * Rows computed in 16 bits (extras.row_dtypes, else extras.candidate's compute dtype) get
 * the low-precision limit of their kind; others the float32 limit.  Replica records: none.
 */
export function fallbackLimits(entry) {
  const extras = entry.extras || {};
  const column = entry.kind === 'loss_comparison' ? 'rel_error' : 'rel_l2';
  const candidate = computeDtype(extras.candidate);
  const rowDtypes = Array.isArray(extras.row_dtypes) ? extras.row_dtypes : [];
  const limits = [];
  const basis = [];
  entry.rows.forEach((_, r) => {
    const dtype = rowDtypes[r] || candidate;
    if (extras.comparison === 'replica_vs_mean') {
      limits.push(null);
      basis.push('replicas see different examples: no tolerance');
    } else if (!dtype || LOW.has(dtype)) {
      const gradient = entry.kind === 'divergence';
      limits.push(gradient ? FALLBACK.lowGradient : FALLBACK.lowValue);
      basis.push(`${dtype && dtype !== 'mixed' ? dtype : '16-bit'} ${gradient ? 'gradients' : 'values'}`);
    } else {
      limits.push(FALLBACK.float32);
      basis.push(dtype);
    }
  });
  return {
    column, rows: entry.rows, limits, basis, source: 'fallback',
    rule: 'Fixed tolerances by compute dtype (bfloat16/float16 gradients 0.1, values 0.01, float32 0.001).',
  };
}

// Set when the backend has no limits route: asked once, then the fallback only.
let routeMissing = false;

/** Tolerances of a divergence-like tag entry: the limits route, or the fallback on 404. */
export async function limitsFor(run, entry) {
  if (routeMissing) return fallbackLimits(entry);
  try {
    const answer = await getJson('limits', {run, tag: entry.tag});
    const byRow = new Map(answer.rows.map((row, i) => [row, i]));
    const pick = (list) => entry.rows.map((row) => (byRow.has(row) ? list[byRow.get(row)] : null));
    return {
      column: answer.column, rows: entry.rows, source: 'route', rule: answer.rule || '',
      limits: pick(answer.limits).map((v) => (v === null || v === undefined ? null : Number(v))),
      basis: pick(answer.basis || []).map((b) => b || ''),
    };
  } catch (error) {
    if (error instanceof RouteError && error.status === 404) {
      // The plugin's own 404s name what is missing ("... gradlens ..."); TensorBoard's do not.
      if (!/gradlens/.test(error.message)) routeMissing = true;
      return fallbackLimits(entry);
    }
    if (error instanceof RouteError && error.status === 400) {
      return {column: null, rows: entry.rows, limits: entry.rows.map(() => null), basis: [], rule: '', source: 'none'};
    }
    throw error;
  }
}

/**
 * Per-row limits of `column` in `tolerances`, or the `limit` of an alert on
 * (tag, column) for every row, or null when nothing gives one.
 */
export function columnLimits(tolerances, alerts, tag, column, nRows) {
  if (tolerances && tolerances.column === column && tolerances.limits.some((v) => v > 0)) {
    return tolerances.limits;
  }
  const alert = (alerts || []).find((a) => a.tag === tag && a.view && a.view.column === column
    && Number.isFinite(Number(a.limit)) && a.limit !== null);
  return alert ? new Array(nRows).fill(Number(alert.limit)) : null;
}

/** "0.1 (bfloat16 gradients), 0.001 (float32)": the distinct tolerances of some rows. */
export function basisText(limits, basis, rows = null) {
  const seen = new Map();
  limits.forEach((limit, r) => {
    if (!(limit > 0) || (rows && !rows.includes(r))) return;
    const key = `${limit}`;
    if (!seen.has(key)) seen.set(key, {limit, basis: basis[r] || ''});
  });
  return [...seen.values()].map(({limit, basis: b}) => (b ? `${fmt(limit)} (${b})` : fmt(limit))).join(', ');
}

/**
 * Tolerance lines of a line chart: one per distinct limit among `rows`,
 * labelled with the value only (the chart's note says where each comes
 * from: a label with its basis ran across the series it marks).
 */
export function limitLines(limits, rows) {
  const seen = new Map();
  for (const r of rows) {
    const limit = limits[r];
    if (!(limit > 0) || seen.has(limit)) continue;
    seen.set(limit, {value: limit, label: `tolerance ${fmt(limit)}`});
  }
  return [...seen.values()];
}

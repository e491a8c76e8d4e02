// Gradient health from grad_stats columns (pure functions): the status of
// each variable at each step - ok, dead (all-zero), None (disconnected),
// NaN/Inf - and the values the charts draw.  A None gradient is never drawn
// as NaN: it has its own flag (grey markers, "None" in tables).  After a
// NaN, statistics over the finite elements (l2 0, zero fraction 0 when no
// element is finite) are not shown as numbers: they would read as a dead
// gradient.  Statuses are named here (status[r][s]: 'ok', 'dead', 'none',
// 'nonfinite'); the health route's numeric codes are its own.

export const COLUMNS = ['l2_norm', 'max_abs', 'zero_fraction', 'nan_count', 'posinf_count', 'neginf_count',
  'is_none', 'count'];

/**
 * Per row and step from columns {name: Float64Array[row]}: status names,
 * non-finite counts, None flags, and the drawn l2 / max |g| / zero fraction
 * (NaN where no element is finite; flags where some are not).
 */
export function gradientHealth(col) {
  const nRows = col.l2_norm.length;
  const out = {status: [], nonfinite: [], none: [], partial: [], l2: [], maxAbs: [], zero: []};
  for (let r = 0; r < nRows; r++) {
    const n = col.l2_norm[r].length;
    const status = new Array(n).fill('ok');
    const nonfinite = new Float64Array(n);
    const none = new Uint8Array(n);
    const partial = new Uint8Array(n);
    const l2 = Float64Array.from(col.l2_norm[r]);
    const maxAbs = Float64Array.from(col.max_abs[r]);
    const zero = Float64Array.from(col.zero_fraction[r]);
    for (let s = 0; s < n; s++) {
      const bad = col.nan_count[r][s] + col.posinf_count[r][s] + col.neginf_count[r][s];
      nonfinite[s] = bad;
      if (col.is_none[r][s] > 0.5) {
        none[s] = 1;
        status[s] = 'none';
      } else if (bad > 0 || Number.isNaN(bad)) {
        status[s] = 'nonfinite';
        partial[s] = 1;
        if (!(bad < col.count[r][s])) { // no finite element: the finite-only statistics are empty
          l2[s] = NaN;
          maxAbs[s] = NaN;
          zero[s] = NaN;
        }
      } else {
        status[s] = col.zero_fraction[r][s] >= 1 ? 'dead' : 'ok';
      }
    }
    out.status.push(status);
    out.nonfinite.push(nonfinite);
    out.none.push(none);
    out.partial.push(partial);
    out.l2.push(l2);
    out.maxAbs.push(maxAbs);
    out.zero.push(zero);
  }
  return out;
}

/** What a table cell says for a variable at step index s. */
export function cellTexts(health, col, r, s) {
  const count = col.count[r][s];
  const bad = health.nonfinite[r][s];
  if (health.none[r][s]) {
    return {status: 'None (disconnected)', l2: 'None', maxAbs: 'None', zero: 'None', nonfinite: 'None'};
  }
  if (bad > 0) {
    const all = !(bad < count);
    return {
      status: `NaN/Inf: ${bad} of ${count} elements`, nonfinite: String(bad),
      l2: all ? 'no finite element' : null, maxAbs: all ? 'no finite element' : null, zero: all ? '–' : null,
    };
  }
  return {status: health.status[r][s] === 'dead' ? 'dead: all-zero gradient' : 'ok',
    l2: null, maxAbs: null, zero: null, nonfinite: '0'};
}

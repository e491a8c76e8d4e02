// Ranking rows (pure functions): which variables a chart shows when it
// cannot show them all.  "worst" puts the largest value relative to its
// limit first; "first" puts the row harmed (an alert), then above its limit,
// at the earliest step first (the limits route's verdict), or for gradients
// the one that went wrong first.

import {num} from '../format.js';

/**
 * How bad a metric value is (larger = worse): cosine -> 1 - v,
 * norm_ratio -> |log2 v|, others -> |v|; +-Inf -> Infinity; NaN stays NaN
 * (a NaN is no distance: it has its own alert and its own color).
 */
export function badness(metric, value) {
  const v = num(value);
  if (Number.isNaN(v)) return NaN;
  if (!Number.isFinite(v)) return Infinity;
  if (metric === 'cosine') return 1 - v;
  if (metric === 'norm_ratio') return v > 0 ? Math.abs(Math.log2(v)) : Infinity;
  return Math.abs(v);
}

/** Label of what a heatmap colors for a metric. */
export function badnessLabel(metric) {
  if (metric === 'cosine') return '1 − cosine';
  if (metric === 'norm_ratio') return '|log2 norm_ratio|';
  return metric;
}

/**
 * Per row: its worst value and where, its worst value / limit (each value
 * against the limit at its own step) and where, and the route's verdict:
 * the first step above its limit and the first harmed one (an alert), null
 * when never.  NaN is never above a limit (it has its own alert); +Inf is.
 * @param {Float64Array[]} values badness[row][stepIndex]
 * @param {Array<Float64Array|null>} limits limit[row][stepIndex] (NaN: none at that step; null: no limit)
 * @param {Array<Object>|null} verdicts per row {firstAbove, firstHarmed, above, harmed} (limits.js rowVerdict)
 */
export function judged(values, limits, verdicts = null) {
  return values.map((row, r) => {
    const along = limits && limits[r];
    let worst = -Infinity;
    let worstAt = -1;
    let ratio = -Infinity;
    let ratioAt = -1;
    for (let i = 0; i < row.length; i++) {
      const v = row[i];
      if (Number.isNaN(v)) continue;
      if (v > worst) {
        worst = v;
        worstAt = i;
      }
      const limit = along ? along[i] : NaN;
      if (limit > 0 && v / limit > ratio) {
        ratio = v / limit;
        ratioAt = i;
      }
    }
    const v = (verdicts && verdicts[r]) || {};
    const judgedRow = ratioAt >= 0;
    return {
      row: r, worst: worstAt < 0 ? NaN : worst, worstAt, judged: judgedRow,
      ratio: judgedRow ? ratio : worstAt < 0 ? NaN : worst, ratioAt: judgedRow ? ratioAt : worstAt,
      limit: judgedRow ? along[ratioAt] : null,
      firstAbove: v.firstAbove ?? null, firstHarmed: v.firstHarmed ?? null,
      nAbove: (v.above || []).length, nHarmed: (v.harmed || []).length,
      nonfinite: row.some((x) => !Number.isFinite(x)),
    };
  });
}

/** Row indices ordered by `rank`: 'worst' (value / limit) or 'first' (harmed, then above its limit, earliest). */
export function order(found, rank) {
  // A NaN/Inf in the comparison is worse than any finite distance.
  const byWorst = (a, b) => Number(b.nonfinite) - Number(a.nonfinite)
    || (Number.isNaN(b.ratio) ? -Infinity : b.ratio) - (Number.isNaN(a.ratio) ? -Infinity : a.ratio) || a.row - b.row;
  const step = (s) => (s === null || s === undefined ? Infinity : s);
  const sorted = [...found];
  if (rank === 'first') {
    sorted.sort((a, b) => step(a.firstHarmed) - step(b.firstHarmed) || step(a.firstAbove) - step(b.firstAbove)
      || byWorst(a, b));
  } else {
    sorted.sort(byWorst);
  }
  return sorted.map((f) => f.row);
}

/**
 * Gradient health per row from the health route: the first step of a
 * NaN/Inf, of a None and of an all-zero gradient (-1: never), a severity
 * (3 NaN/Inf, 2 None, 1 dead at some step, 0 healthy) and the first step of
 * any of them (`start`).
 */
export function gradientProblems(health) {
  const step = (v) => (v === null || v === undefined ? -1 : v);
  return health.rows.map((_, r) => {
    const first = {nonfinite: step(health.first_nonfinite[r]), none: step(health.first_none[r]),
      dead: step(health.first_dead[r])};
    const severity = first.nonfinite >= 0 ? 3 : first.none >= 0 ? 2 : first.dead >= 0 ? 1 : 0;
    const starts = [first.nonfinite, first.none, first.dead].filter((i) => i >= 0);
    return {row: r, first, severity, start: starts.length ? Math.min(...starts) : -1};
  });
}

/**
 * Gradient rows ordered by `rank`: 'worst' by severity (the earliest NaN
 * first) then `size` (the largest max |g|); 'first' by the first step
 * anything went wrong.
 */
export function gradientOrder(problems, size, rank) {
  const byWorst = (a, b) => b.severity - a.severity
    || (a.severity === 3 ? a.first.nonfinite - b.first.nonfinite : 0)
    || (size[b.row] || 0) - (size[a.row] || 0) || a.row - b.row;
  const sorted = [...problems];
  if (rank === 'first') {
    sorted.sort((a, b) => (a.start < 0 ? Infinity : a.start) - (b.start < 0 ? Infinity : b.start) || byWorst(a, b));
  } else {
    sorted.sort(byWorst);
  }
  return sorted.map((p) => p.row);
}

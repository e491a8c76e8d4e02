// Axis scales and ticks (pure functions): round ("nice") numbers on linear
// axes, integer steps on step axes, and enough labels on log axes.

/** Linear map of [d0, d1] onto [r0, r1]; f.invert maps back. */
export function linear(d0, d1, r0, r1) {
  const span = d1 - d0 || 1;
  const f = (v) => r0 + ((v - d0) / span) * (r1 - r0);
  f.invert = (p) => d0 + ((p - r0) / (r1 - r0 || 1)) * span;
  f.domain = [d0, d1];
  f.ticks = (count = 5) => niceTicks(d0, d1, count);
  return f;
}

/** Log10 map of [d0, d1] (both > 0) onto [r0, r1]. */
export function log10(d0, d1, r0, r1) {
  const l0 = Math.log10(d0);
  const l1 = Math.log10(d1);
  const span = l1 - l0 || 1;
  const f = (v) => r0 + ((Math.log10(v) - l0) / span) * (r1 - r0);
  f.invert = (p) => 10 ** (l0 + ((p - r0) / (r1 - r0 || 1)) * span);
  f.domain = [d0, d1];
  f.ticks = (count = 6) => logTicks(d0, d1, count);
  return f;
}

/** The round step (1, 2 or 5 x 10^k) giving about `count` intervals over `span`. */
export function niceStep(span, count = 5) {
  const raw = span / Math.max(count, 1);
  const power = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw * (1 - 1e-9)) || 10 * power;
}

/** About `count` round ticks covering [lo, hi]: multiples of 1, 2 or 5 x 10^k. */
export function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) return [lo];
  const step = niceStep(hi - lo, count);
  const ticks = [];
  for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) {
    const v = k * step;
    ticks.push(Math.abs(v) < step * 1e-9 ? 0 : Number(v.toPrecision(12)));
  }
  return ticks;
}

/** Round integer ticks for a step axis over [lo, hi] (never a fractional step). */
export function stepTicks(lo, hi, count = 5) {
  if (!(hi > lo)) return [Math.round(lo)];
  const step = Math.max(1, niceStep(hi - lo, count));
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi; v += step) ticks.push(Math.round(v));
  return ticks;
}

/**
 * Ticks of a log axis over [lo, hi] (both > 0), at most `count`: powers of
 * ten when the range spans 3 decades or more; else 1, 2, 5 x 10^k; else
 * every integer mantissa; and round linear ticks when even that leaves
 * fewer than 3 (a range inside one decade).
 */
export function logTicks(lo, hi, count = 6) {
  if (!(hi > lo) || !(lo > 0)) return lo > 0 ? [lo] : [];
  const e0 = Math.floor(Math.log10(lo) + 1e-9);
  const e1 = Math.floor(Math.log10(hi) + 1e-9);
  const inRange = (v) => v >= lo * (1 - 1e-9) && v <= hi * (1 + 1e-9);
  const decades = [];
  for (let e = e0; e <= e1; e++) if (inRange(10 ** e)) decades.push(10 ** e);
  if (decades.length >= 3) {
    const every = Math.ceil(decades.length / count);
    return decades.filter((_, i) => i % every === 0).map(round12);
  }
  for (const mantissas of [[1, 2, 5], [1, 2, 3, 4, 5, 6, 7, 8, 9]]) {
    const ticks = [];
    for (let e = e0; e <= e1; e++) for (const m of mantissas) if (inRange(m * 10 ** e)) ticks.push(m * 10 ** e);
    if (ticks.length >= 3) return thin(ticks.map(round12), count);
  }
  return niceTicks(lo, hi, count).filter((v) => v > 0);
}

function thin(ticks, count) {
  const every = Math.ceil(ticks.length / count);
  return ticks.filter((_, i) => i % every === 0);
}

function round12(v) {
  return Number(v.toPrecision(12));
}

/** Short text for an axis tick: 0.001, 250, 1e-5, 2.5e+6. */
export function tickText(v) {
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e-3 && a < 1e5) return String(Number(v.toPrecision(6)));
  return v.toExponential().replace('e+', 'e');
}

/** [lo, hi] of the finite (and, for log, positive) values of arrays. */
export function extent(arrays, positiveOnly = false) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const values of arrays) {
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (!Number.isFinite(v) || (positiveOnly && v <= 0)) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  return lo <= hi ? [lo, hi] : null;
}

/** Index of the last element of sorted `steps` at or before `target` (-1 if none). */
export function lastAtOrBefore(steps, target) {
  let lo = 0;
  let hi = steps.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (steps[mid] <= target) lo = mid + 1;
    else hi = mid;
  }
  return lo - 1;
}

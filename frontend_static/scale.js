// Axis scales and ticks (pure functions).

/** Linear map of [d0, d1] onto [r0, r1]. */
export function linear(d0, d1, r0, r1) {
  const span = d1 - d0 || 1;
  const f = (v) => r0 + ((v - d0) / span) * (r1 - r0);
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
  f.domain = [d0, d1];
  f.ticks = (count = 6) => logTicks(d0, d1, count);
  return f;
}

/** About `count` round ticks covering [lo, hi]: steps of 1, 2 or 5 x 10^k. */
export function niceTicks(lo, hi, count = 5) {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / Math.max(count, 1);
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) || 10 * power;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    ticks.push(Math.abs(v) < step * 1e-9 ? 0 : Number(v.toPrecision(12)));
  }
  return ticks;
}

/** Powers of ten in [lo, hi] (every k-th so that at most `count` remain). */
export function logTicks(lo, hi, count = 6) {
  const e0 = Math.ceil(Math.log10(lo) - 1e-9);
  const e1 = Math.floor(Math.log10(hi) + 1e-9);
  const every = Math.max(1, Math.ceil((e1 - e0 + 1) / count));
  const ticks = [];
  for (let e = e0; e <= e1; e += every) ticks.push(10 ** e);
  return ticks;
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

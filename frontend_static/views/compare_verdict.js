// Compare runs, the pure part: which runs play float32 (A), the
// low-precision candidate (B) and the float32 noise floor by default, and
// the verdict - is B different from A beyond the noise floor, and from
// which step.

import {comparisons, computeDtype} from './records.js';

const LOW = /bf16|bfloat16|f16|float16|half/i;
const F32 = /float32|f32|fp32/i;

/** 'low' for a run that computes in 16 bits, 'float32' for a float32 one, else null. */
export function runPrecision(entry) {
  for (const g of comparisons(entry)) {
    const cand = computeDtype((g.extras || {}).candidate);
    if (['bfloat16', 'float16', 'mixed'].includes(cand) && (g.extras || {}).comparison !== 'replica_vs_mean') return 'low';
  }
  if (LOW.test(entry.run)) return 'low';
  if (F32.test(entry.run)) return 'float32';
  return null;
}

/**
 * Default runs {a, b, noise} among run entries: A a float32 run, B a
 * low-precision run, the noise floor another float32 run; runs that have
 * the quantity (has(entry)) first.
 */
export function defaultRuns(entries, has = () => true) {
  const sorted = [...entries].sort((x, y) => Number(has(y)) - Number(has(x)));
  const f32 = sorted.filter((e) => runPrecision(e) === 'float32');
  const low = sorted.filter((e) => runPrecision(e) === 'low');
  const a = f32[0] || sorted.find((e) => !low.includes(e)) || sorted[0];
  const b = low.find((e) => e !== a) || sorted.find((e) => e !== a) || a;
  const noise = f32.find((e) => e !== a && e !== b) || null;
  return {a: a && a.run, b: b && b.run, noise: noise ? noise.run : ''};
}

function maxAbs(values) {
  let m = null;
  for (const v of values) {
    const a = Math.abs(v);
    if (Number.isNaN(a)) continue;
    if (m === null || a > m) m = a;
  }
  return m;
}

/**
 * The verdict of a compare answer (numbers already converted):
 * {kind: 'beyond' | 'within' | 'no-noise' | 'no-overlap', first, maxB, maxNoise, shared}.
 * Over the steps A, B and the noise run share: B is beyond the noise floor
 * where |(B - A) / |A|| exceeds the largest |(noise - A) / |A||; `first` is
 * the first such step (null when none).  NaN is left out; +-Inf counts.
 */
export function verdict(steps, rel, noise) {
  if (!noise) return {kind: 'no-noise', first: null, maxB: maxAbs(rel), maxNoise: null, shared: steps.length};
  const noiseAt = new Map(noise.steps.map((s, i) => [s, noise.rel[i]]));
  const shared = [];
  steps.forEach((s, i) => {
    if (noiseAt.has(s)) shared.push({step: s, b: rel[i], n: noiseAt.get(s)});
  });
  const maxB = maxAbs(shared.map((x) => x.b));
  const maxNoise = maxAbs(shared.map((x) => x.n));
  if (maxB === null || maxNoise === null) return {kind: 'no-overlap', first: null, maxB, maxNoise, shared: shared.length};
  const over = shared.find((x) => Math.abs(x.b) > maxNoise);
  return {kind: maxB > maxNoise ? 'beyond' : 'within', first: over ? over.step : null, maxB, maxNoise,
    shared: shared.length};
}

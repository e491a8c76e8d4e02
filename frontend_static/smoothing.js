// Smoothing of a series as TensorBoard's scalar cards do it: a debiased
// exponential moving average (weight w in [0, 1); 0 = no smoothing).
// Non-finite points are passed through unsmoothed and do not enter the
// average, so a NaN stays visible where it happened.

/**
 * smoothed[i] = last_i / (1 - w^n_i), last_i = w last_{i-1} + (1 - w) v_i,
 * n_i = finite points so far (TensorBoard's debiasing of the zero start).
 * @param {ArrayLike<number>} values
 * @param {number} weight
 * @returns {Float64Array}
 */
export function smooth(values, weight) {
  const out = Float64Array.from(values);
  const w = Math.min(Math.max(Number(weight) || 0, 0), 0.999);
  if (w === 0) return out;
  let last = 0;
  let n = 0;
  for (let i = 0; i < out.length; i++) {
    const v = out[i];
    if (!Number.isFinite(v)) continue;
    last = last * w + (1 - w) * v;
    n += 1;
    out[i] = last / (1 - w ** n);
  }
  return out;
}

// Compare runs, the pure part: which runs play float32 (A), the
// low-precision candidate (B) and the float32 noise floor by default, and
// the server's verdict - is B different from A beyond the noise floor, and
// from which step - read for display.

/** 'low' for a run that computes in 16 bits, 'float32' for a float32 one, else null (the runs route's
 * `precision`: from the run's comparisons, else its name). */
export function runPrecision(entry) {
  return entry.precision || null;
}

/**
 * Default runs {a, b, noise} among run entries: A a float32 run, B a
 * low-precision run, the noise floor another float32 run; runs that have
 * the quantity (has(entry)) first; among low-precision runs, the one that
 * shares the most logged steps with A (shared(a, b): a count, when known)
 * - the run trained like A, not the alphabetically first.
 */
export function defaultRuns(entries, has = () => true, shared = null) {
  const sorted = [...entries].sort((x, y) => Number(has(y)) - Number(has(x)));
  const f32 = sorted.filter((e) => runPrecision(e) === 'float32');
  const a = f32[0] || sorted.find((e) => runPrecision(e) !== 'low') || sorted[0];
  const low = sorted.filter((e) => runPrecision(e) === 'low');
  if (shared && a) {
    const count = new Map(low.map((e) => [e.run, shared(a.run, e.run)]));
    low.sort((x, y) => Number(has(y)) - Number(has(x)) || count.get(y.run) - count.get(x.run));
  }
  const b = low.find((e) => e !== a) || sorted.find((e) => e !== a) || a;
  const noise = f32.find((e) => e !== a && e !== b) || null;
  return {a: a && a.run, b: b && b.run, noise: noise ? noise.run : ''};
}

/**
 * The verdict of a compare answer, as the server decided it (analysis.runs:
 * the tab, the CLI and the route say the same):
 * {kind: 'beyond' | 'within' | 'undecided' | 'no-noise', first, maxB, level, ratio, text}.
 * `level` is the one noise figure: the noise run's mean |(C - A) / |A|| in
 * the window that decided (or came closest).
 */
export function verdict(summary, hasNoise) {
  const noise = summary.noise || {};
  const maxB = summary.max_abs_rel_difference === null ? null : Number(summary.max_abs_rel_difference);
  const base = {first: summary.first_exceeding_step ?? null, maxB, text: summary.verdict || '',
    level: noise.level === null || noise.level === undefined ? null : Number(noise.level),
    ratio: noise.ratio === null || noise.ratio === undefined ? null : Number(noise.ratio),
    window: noise.window === null || noise.window === undefined ? null : Number(noise.window)};
  if (!hasNoise) return {kind: 'no-noise', ...base};
  if (summary.exceeds_noise === true) return {kind: 'beyond', ...base};
  if (summary.exceeds_noise === false) return {kind: 'within', ...base};
  return {kind: 'undecided', ...base};
}

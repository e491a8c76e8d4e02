// Number formatting. Values arrive from JSON as numbers or as the strings
// "NaN", "Infinity", "-Infinity": num() turns each back into a number.

/** A JSON value as a number ("NaN"/"Infinity" strings included; null -> NaN). */
export function num(v) {
  if (v === null || v === undefined) return NaN;
  return Number(v);
}

/** Convert a (nested) array of JSON values to numbers. */
export function numbers(list) {
  return list.map((v) => (Array.isArray(v) ? numbers(v) : num(v)));
}

/**
 * Short text for a number: NaN, +Inf, -Inf, integers as is, otherwise 4
 * significant digits (exponent notation outside [1e-3, 1e5)).
 */
export function fmt(v) {
  const x = num(v);
  if (Number.isNaN(x)) return 'NaN';
  if (x === Infinity) return '+Inf';
  if (x === -Infinity) return '-Inf';
  if (x === 0) return '0';
  if (Number.isInteger(x) && Math.abs(x) < 1e9) return String(x);
  const a = Math.abs(x);
  if (a >= 1e-3 && a < 1e5) return String(Number(x.toPrecision(4)));
  return x.toExponential(3);
}

/**
 * A ratio (e.g. value / its limit) to 2 significant digits: "0.53", "1.4", "140"; 3 where 2 would
 * round a ratio that is not whole to a whole number ("1.02", not "1": just above its limit).
 */
export function fmtRatio(v) {
  const x = num(v);
  if (!Number.isFinite(x)) return fmt(x);
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (!(a >= 1e-3 && a < 1e5)) return x.toExponential(1);
  const two = Number(x.toPrecision(2));
  return String(Number.isInteger(two) && two !== x && a < 100 ? Number(x.toPrecision(3)) : two);
}

/** Step range text: "12" or "12–40". */
export function stepRange(first, last) {
  if (first === null || first === undefined) return '–';
  return first === last || last === null || last === undefined ? String(first) : `${first}–${last}`;
}

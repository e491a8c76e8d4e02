// How a heatmap colors its cells, each with its legend:
//   relative(values, scale)  viridis over the data's own range (no tolerance known)
//   limitRatio()             value / the limit at its step: blues below, oranges
//                            to red above, the break at the limit itself; an
//                            exact 0 grey (identical, or both sides zero)
//   status(codes)            gradient health: ok, dead (all zero), None, NaN/Inf
//   counts(values, special)  histogram counts (log viridis), 0 empty; special
//                            rows (NaN, +-Inf) magenta, exact zeros their own color
// NaN/Inf is magenta in every one of them.

import {
  DEAD, DEAD_CSS, LUT, NONE, NONE_CSS, NONFINITE, NONFINITE_CSS, TOLERANCE_DECADES, TOLERANCE_LUT,
  ZERO, ZERO_CSS, hexToRgb, lutCss, themeColors, toleranceIndex,
} from './colors.js';
import {el} from './dom.js';
import {fmt} from './format.js';
import {extent} from './scale.js';

function setRgb(out, rgb) {
  out[0] = rgb[0];
  out[1] = rgb[1];
  out[2] = rgb[2];
  out[3] = 255;
  return true;
}

function setLut(out, lut, i) {
  out[0] = lut[i * 3];
  out[1] = lut[i * 3 + 1];
  out[2] = lut[i * 3 + 2];
  out[3] = 255;
  return true;
}

/** The colorbar of `lut` from index `from` to 255 (the part a colorer uses). */
function colorbar(lut, width = 160, from = 0) {
  const bar = el('canvas', {class: 'gl-colorbar', width: 256, height: 10, 'aria-hidden': 'true'});
  bar.style.width = `${width}px`;
  const ctx = bar.getContext('2d');
  for (let i = 0; i < 256; i++) {
    ctx.fillStyle = lutCss(from + Math.round((i * (255 - from)) / 255), lut);
    ctx.fillRect(i, 0, 1, 10);
  }
  return bar;
}

// Histogram counts start at viridis 0.3 (a blue): its dark purple end was
// next to invisible on the dark theme's background, where a one-element
// variable's histogram (every count 1) all sits.
const COUNTS_FROM = 77;

function swatch(css, text, cls = '') {
  return [el('span', {class: `gl-swatch ${cls}`.trim(), style: `background:${css}`}), el('span', {text})];
}

/** Viridis over the finite (positive, for log) range of `values`, or `range`. */
export function relative(values, scale = 'log', range = null) {
  let [lo, hi] = range || extent(values, scale === 'log') || [scale === 'log' ? 1e-6 : 0, 1];
  if (scale === 'log' && hi / lo < 10) lo = hi / 10;
  if (hi === lo) hi = lo + (scale === 'log' ? lo : 1);
  const useLog = scale === 'log';
  const l0 = useLog ? Math.log10(lo) : lo;
  const span = (useLog ? Math.log10(hi) : hi) - l0 || 1;
  return {
    mode: 'relative',
    colorOf(row, v, out) {
      if (v !== v) return setRgb(out, NONFINITE);
      let t = useLog ? (v > 0 ? (Math.log10(v) - l0) / span : 0) : (v - l0) / span;
      t = t < 0 ? 0 : t > 1 ? 1 : t;
      return setLut(out, LUT, Math.round(t * 255));
    },
    legend: (title) => el('div', {class: 'gl-colorlegend'}, [
      el('span', {class: 'gl-legend-title', text: `${title} (${scale} scale, relative to the data: no tolerance known)`}),
      el('span', {class: 'gl-legend-lo', text: `≤${fmt(lo)}`}), colorbar(LUT), el('span', {class: 'gl-legend-hi', text: `≥${fmt(hi)}`}),
      ...swatch(NONFINITE_CSS, 'NaN/Inf'),
    ]),
  };
}

/**
 * Colors of value / limit ratios (limits.js ratios: each value against the
 * limit at its own step): blues below 1, oranges to red above, the break at
 * the limit itself; an exact 0 grey; -1 (no limit at that step) the theme's
 * grid color; NaN/Inf magenta.
 */
export function limitRatio() {
  let unjudged = [218, 220, 224];
  return {
    mode: 'limit',
    refresh() {
      unjudged = hexToRgb(themeColors().grid);
    },
    colorOf(row, v, out) {
      if (v !== v) return setRgb(out, NONFINITE);
      if (v < 0) return setRgb(out, unjudged);
      if (v === 0) return setRgb(out, ZERO);
      return setLut(out, TOLERANCE_LUT, toleranceIndex(v));
    },
    legend: (title) => el('div', {class: 'gl-colorlegend gl-tolerance-legend'}, [
      el('span', {class: 'gl-legend-title', text: `${title} ÷ its limit at that step`}),
      el('span', {text: `≤${fmt(10 ** -TOLERANCE_DECADES.below)}×`}), colorbar(TOLERANCE_LUT, 200),
      el('span', {text: `≥${fmt(10 ** TOLERANCE_DECADES.above)}×`}),
      el('span', {class: 'gl-legend-break', text: '(blue turns to orange at 1× = the limit)'}),
      ...swatch(ZERO_CSS, 'exactly 0'), ...swatch('var(--gl-grid)', 'no limit at that step'),
      ...swatch(NONFINITE_CSS, 'NaN/Inf'),
    ]),
  };
}

/** Gradient health: values are the health route's status codes, `codes` its status_codes
 * ({ok, dead, none, nonfinite}: code); any other value (0: not logged) is not drawn. */
export function status(codes) {
  const colors = {[codes.dead]: DEAD, [codes.none]: NONE, [codes.nonfinite]: NONFINITE};
  return {
    mode: 'status',
    /** Read the theme's "ok" color (called before each draw: dark mode switches live). */
    refresh() {
      colors[codes.ok] = hexToRgb(themeColors().ok);
    },
    colorOf(row, v, out) {
      if (v !== v) return setRgb(out, NONFINITE);
      const rgb = colors[v];
      return rgb ? setRgb(out, rgb) : false;
    },
    legend: () => el('div', {class: 'gl-colorlegend gl-status-legend'}, [
      ...swatch('var(--gl-ok-cell)', 'finite, not all zero'),
      ...swatch(DEAD_CSS, 'dead: all-zero gradient'),
      ...swatch(NONE_CSS, 'None: disconnected'),
      ...swatch(NONFINITE_CSS, 'NaN/Inf'),
    ]),
  };
}

/**
 * Histogram counts: log viridis over the counts of the exponent rows, an
 * empty cell for 0; rows flagged in `special` ('nonfinite' or 'zero') are
 * magenta / grey where their count is above 0.
 */
export function counts(values, special) {
  const plain = values.filter((_, r) => !special[r]);
  const [lo, hi] = extent(plain, true) || [1, 10];
  const top = Math.max(hi, lo * 10);
  const l0 = Math.log10(lo);
  const span = Math.log10(top) - l0 || 1;
  return {
    mode: 'counts',
    colorOf(row, v, out) {
      if (v !== v) return setRgb(out, NONFINITE);
      if (!(v > 0)) return false;
      if (special[row] === 'nonfinite') return setRgb(out, NONFINITE);
      if (special[row] === 'zero') return setRgb(out, ZERO);
      const t = Math.max(0, Math.min(1, (Math.log10(v) - l0) / span));
      return setLut(out, LUT, COUNTS_FROM + Math.round(t * (255 - COUNTS_FROM)));
    },
    legend: (title) => el('div', {class: 'gl-colorlegend'}, [
      el('span', {class: 'gl-legend-title', text: `${title} (log scale)`}),
      el('span', {text: `${fmt(lo)}`}), colorbar(LUT, 160, COUNTS_FROM), el('span', {text: `${fmt(top)}`}),
      el('span', {class: 'gl-swatch gl-empty'}), el('span', {text: 'none'}),
      ...swatch(ZERO_CSS, 'exact zeros'), ...swatch(NONFINITE_CSS, 'NaN/Inf (any count)'),
    ]),
  };
}

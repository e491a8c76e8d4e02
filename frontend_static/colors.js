// Colors: a series palette readable on light and dark backgrounds, the
// colormaps of the heatmaps (viridis for plain values; a diverging map
// anchored at the tolerance), the fixed colors of special values (NaN/Inf,
// None, exact zero) and the theme's colors for canvas drawing.

export const PALETTE = [
  '#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f',
  '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac',
];

/** NaN/Inf: magenta everywhere (cells, markers, legends). */
export const NONFINITE = [255, 0, 200];
export const NONFINITE_CSS = 'rgb(255, 0, 200)';
/** A None (disconnected) gradient: grey, never magenta. */
export const NONE = [140, 140, 140];
export const NONE_CSS = 'rgb(140, 140, 140)';
/** An all-zero (dead) gradient. */
export const DEAD = [179, 88, 6];
export const DEAD_CSS = 'rgb(179, 88, 6)';
/** An exact 0 of a divergence metric (identical, or both sides zero). */
export const ZERO = [189, 193, 198];
export const ZERO_CSS = 'rgb(189, 193, 198)';

// viridis at 9 evenly spaced points (matplotlib's values).
const VIRIDIS = [
  [68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37],
];
// Below the tolerance: blues, light next to it; above: oranges to dark red.
const BELOW = [[8, 48, 107], [33, 102, 172], [107, 174, 214], [198, 219, 239]];
const ABOVE = [[253, 174, 107], [241, 105, 19], [166, 54, 3], [103, 0, 13]];

/** n x RGB colormap as a Uint8Array(3n), interpolated linearly between stops. */
export function colormap(stops = VIRIDIS, n = 256) {
  const lut = new Uint8Array(n * 3);
  for (let i = 0; i < n; i++) {
    const t = (i / (n - 1)) * (stops.length - 1);
    const k = Math.min(Math.floor(t), stops.length - 2);
    const f = t - k;
    for (let c = 0; c < 3; c++) {
      lut[i * 3 + c] = Math.round(stops[k][c] * (1 - f) + stops[k + 1][c] * f);
    }
  }
  return lut;
}

export const LUT = colormap();

/** 256 entries: 0..127 below the tolerance, 128..255 above it. */
export const TOLERANCE_LUT = (() => {
  const lut = new Uint8Array(256 * 3);
  lut.set(colormap(BELOW, 128), 0);
  lut.set(colormap(ABOVE, 128), 128 * 3);
  return lut;
})();

/** Decades shown below and above the tolerance by TOLERANCE_LUT. */
export const TOLERANCE_DECADES = {below: 3, above: 2};

/** Index into TOLERANCE_LUT of a value / tolerance ratio (> 0). */
export function toleranceIndex(ratio) {
  const l = Math.log10(ratio);
  if (ratio <= 1) {
    const t = Math.max(0, Math.min(1, (l + TOLERANCE_DECADES.below) / TOLERANCE_DECADES.below));
    return Math.min(127, Math.round(t * 127));
  }
  const t = Math.max(0, Math.min(1, l / TOLERANCE_DECADES.above));
  return 128 + Math.round(t * 127);
}

/** CSS color of entry i of a LUT. */
export function lutCss(i, lut = LUT) {
  return `rgb(${lut[i * 3]}, ${lut[i * 3 + 1]}, ${lut[i * 3 + 2]})`;
}

/** The theme's colors (CSS custom properties of <html>), for canvas drawing. */
export function themeColors() {
  const style = getComputedStyle(document.documentElement);
  const read = (name, fallback) => style.getPropertyValue(name).trim() || fallback;
  return {
    fg: read('--gl-fg', '#202124'),
    muted: read('--gl-muted', '#5f6368'),
    grid: read('--gl-grid', '#dadce0'),
    bg: read('--gl-bg', '#ffffff'),
    accent: read('--gl-accent', '#f57c00'),
    ok: read('--gl-ok-cell', '#d5e8d4'),
    rule: read('--gl-rule', '#d93025'),
  };
}

/** [r, g, b, 255] of a '#rrggbb' color ([255, 255, 255, 0] if not one). */
export function hexToRgb(color) {
  const m = /^#([0-9a-f]{6})$/i.exec(String(color).trim());
  if (!m) return [255, 255, 255, 0];
  const n = parseInt(m[1], 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255, 255];
}

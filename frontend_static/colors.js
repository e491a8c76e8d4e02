// Colors: a series palette readable on light and dark backgrounds, a
// perceptually ordered colormap (viridis, 256 entries) and theme colors.

export const PALETTE = [
  '#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f',
  '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac',
];

/** Color of NaN/Inf cells and markers. */
export const NONFINITE = [255, 0, 200];
export const NONFINITE_CSS = 'rgb(255, 0, 200)';

// viridis at 9 evenly spaced points (matplotlib's values).
const VIRIDIS = [
  [68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37],
];

/** 256 x RGB colormap as a Uint8Array(768), interpolated linearly between stops. */
export function colormap(stops = VIRIDIS) {
  const lut = new Uint8Array(256 * 3);
  for (let i = 0; i < 256; i++) {
    const t = (i / 255) * (stops.length - 1);
    const k = Math.min(Math.floor(t), stops.length - 2);
    const f = t - k;
    for (let c = 0; c < 3; c++) {
      lut[i * 3 + c] = Math.round(stops[k][c] * (1 - f) + stops[k + 1][c] * f);
    }
  }
  return lut;
}

export const LUT = colormap();

/** CSS color of colormap entry i (0..255). */
export function lutCss(i) {
  return `rgb(${LUT[i * 3]}, ${LUT[i * 3 + 1]}, ${LUT[i * 3 + 2]})`;
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
  };
}

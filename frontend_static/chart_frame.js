// The frame every chart shares, in the manner of TensorBoard's cards: a
// caption, a toolbar (reset zoom, CSV and JSON download), the plot (canvas
// and tooltip) and a legend slot.  The frame redraws its chart when its
// width changes and when the theme changes (dark mode switched live).

import {el} from './dom.js';
import {downloadButtons} from './download.js';
import {onThemeChange} from './theme.js';

/**
 * Build a chart frame.
 * @param {Object} o
 *   title, note (small text under the title), className, label (aria-label)
 *   data(): what CSV/JSON download (download.js); name: file name stem
 *   onReset(): the reset-zoom button (shown while zoomed)
 * @returns {{figure, wrap, canvas, tooltip, legend, draw(fn), setZoomed(bool), redraw()}}
 */
export function chartFrame(o) {
  const figure = el('figure', {class: `gl-chart ${o.className || ''}`.trim()});
  const reset = el('button', {type: 'button', class: 'gl-tool gl-reset-zoom', text: 'Reset zoom',
    title: 'Show every step again (or double-click the plot)', hidden: true, onclick: () => o.onReset && o.onReset()});
  const tools = el('div', {class: 'gl-tools'}, [reset, ...(o.data ? downloadButtons(o.data, o.name || o.title) : [])]);
  const head = el('div', {class: 'gl-chart-head'}, [
    el('figcaption', {}, [el('span', {class: 'gl-chart-title', text: o.title || ''}),
      o.note ? el('span', {class: 'gl-chart-note', text: o.note}) : null]),
    tools,
  ]);
  const wrap = el('div', {class: 'gl-plot'});
  const canvas = el('canvas', {role: 'img', 'aria-label': o.label || o.title || 'chart'});
  const tooltip = el('div', {class: 'gl-tooltip', hidden: true, role: 'status'});
  const brush = el('div', {class: 'gl-brush', hidden: true});
  wrap.append(canvas, brush, tooltip);
  const legend = el('div', {class: 'gl-legend-slot'});
  figure.append(head, wrap, legend);

  let drawFn = null;
  let drawnWidth = -1;
  const redraw = () => {
    if (!drawFn || !wrap.isConnected || wrap.clientWidth <= 0) return;
    drawnWidth = wrap.clientWidth;
    drawFn(drawnWidth);
  };
  const maybe = () => {
    if (wrap.isConnected && wrap.clientWidth > 0 && wrap.clientWidth !== drawnWidth) redraw();
  };
  if (typeof ResizeObserver !== 'undefined') new ResizeObserver(maybe).observe(wrap);
  onThemeChange(figure, redraw);
  return {
    figure, wrap, canvas, tooltip, brush, legend,
    /** Set the draw function (called with the plot's CSS width) and draw now if laid out. */
    draw(fn) {
      drawFn = fn;
      maybe();
    },
    redraw,
    setZoomed(zoomed) {
      reset.hidden = !zoomed;
      figure.classList.toggle('gl-zoomed', zoomed);
    },
  };
}

/** Size a canvas for the device pixel ratio; returns its 2D context in CSS pixels. */
export function sizeCanvas(canvas, width, height) {
  const ratio = window.devicePixelRatio || 1;
  canvas.width = Math.round(width * ratio);
  canvas.height = Math.round(height * ratio);
  canvas.style.width = `${width}px`;
  canvas.style.height = `${height}px`;
  const ctx = canvas.getContext('2d');
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  return ctx;
}

/** Show a tooltip near (x, y) inside `wrap`, kept within its width. */
export function placeTooltip(tooltip, wrap, x, y) {
  tooltip.hidden = false;
  const width = tooltip.offsetWidth;
  const left = x + 14 + width > wrap.clientWidth ? Math.max(0, x - 14 - width) : x + 14;
  tooltip.style.left = `${left}px`;
  tooltip.style.top = `${Math.max(0, y - 10)}px`;
}

/** Tooltip content: a title line and further lines (all text). */
export function fillTooltip(tooltip, title, lines) {
  tooltip.replaceChildren(el('div', {class: 'gl-tip-title', text: title}),
    ...lines.map((line) => (line instanceof Node ? line : el('div', {text: line}))));
}

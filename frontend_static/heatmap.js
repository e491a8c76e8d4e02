// A canvas heatmap of rows (variables, layers, exponent bins) x steps.
//
// Cells are written straight into an ImageData at one pixel per (row,
// column bin) and scaled onto the plot: 200 rows x 10,000 steps draw in
// well under a second.  When there are more steps than pixels, a pixel
// column shows the largest value of its steps (spikes stay visible) and
// NaN/Inf wins over any number.  Color: log-10 (default) or linear scale
// on the viridis colormap, with a legend; NaN/Inf in magenta.  Hover (or
// the arrow keys) shows row, step and value; click (or Enter) selects.

import {LUT, NONFINITE, NONFINITE_CSS, lutCss, themeColors} from './colors.js';
import {el} from './dom.js';
import {fmt} from './format.js';
import {extent, linear} from './scale.js';
import {observeWidth, placeTooltip, sizeCanvas} from './line_chart.js';

/**
 * Color range of the values: [lo, hi] of finite values (positive for log).
 * @returns {[number, number]|null}
 */
export function colorRange(values, scale) {
  const range = extent(values, scale === 'log');
  if (!range) return null;
  let [lo, hi] = range;
  if (scale === 'log' && hi / lo < 10) lo = hi / 10;
  if (hi === lo) hi = lo + (scale === 'log' ? lo : 1);
  return [lo, hi];
}

/**
 * Paint rows x steps into an ImageData of `columns` x rows.length pixels.
 * Pixel column b covers steps [floor(b n / columns), floor((b+1) n / columns)).
 * @param {Array<Float64Array|number[]>} values values[row][stepIndex]
 */
export function paintImage(values, columns, lo, hi, scale, empty, zeroIsEmpty = false) {
  const nRows = values.length;
  const nSteps = nRows ? values[0].length : 0;
  const image = new ImageData(Math.max(columns, 1), Math.max(nRows, 1));
  const data = image.data;
  const binOf = new Int32Array(nSteps);
  for (let s = 0; s < nSteps; s++) binOf[s] = Math.min(columns - 1, Math.floor((s * columns) / nSteps));
  const best = new Float64Array(columns);
  const bad = new Uint8Array(columns);
  const useLog = scale === 'log';
  const l0 = useLog ? Math.log10(lo) : lo;
  const span = (useLog ? Math.log10(hi) : hi) - l0 || 1;
  for (let r = 0; r < nRows; r++) {
    const row = values[r];
    best.fill(-Infinity);
    bad.fill(0);
    for (let s = 0; s < nSteps; s++) {
      const v = row[s];
      const b = binOf[s];
      if (v > best[b]) best[b] = v;
      else if (v !== v || v === Infinity || v === -Infinity) bad[b] = 1;
    }
    let offset = r * columns * 4;
    for (let b = 0; b < columns; b++, offset += 4) {
      const v = best[b];
      let color;
      if (bad[b] || v === Infinity) {
        color = NONFINITE;
      } else if (v === -Infinity || (zeroIsEmpty && v === 0) || (useLog && v <= 0 && zeroIsEmpty)) {
        color = empty;
      } else {
        let t = useLog ? (v > 0 ? (Math.log10(v) - l0) / span : 0) : (v - l0) / span;
        t = t < 0 ? 0 : t > 1 ? 1 : t;
        const i = Math.round(t * 255) * 3;
        data[offset] = LUT[i];
        data[offset + 1] = LUT[i + 1];
        data[offset + 2] = LUT[i + 2];
        data[offset + 3] = 255;
        continue;
      }
      data[offset] = color[0];
      data[offset + 1] = color[1];
      data[offset + 2] = color[2];
      data[offset + 3] = color[3] === undefined ? 255 : color[3];
    }
  }
  return image;
}

/**
 * Create a heatmap.
 * @param {Object} o
 *   rows: row names; steps: step numbers; values: values[row][stepIndex] (numbers, color)
 *   shown: optional values[row][stepIndex] shown on hover (default: values)
 *   scale: 'log' | 'linear'; range: optional [lo, hi]; legendTitle
 *   zeroIsEmpty: draw 0 as empty (histogram counts)
 *   selectedRow, onSelect(rowIndex, stepIndex)
 *   rowLabels: 'auto' | false; yTicks: [{row, label}] instead of row labels
 *   lines: [{row, label, color}] horizontal lines at (fractional) row positions
 *   rowHeight, maxHeight, describe(row, step, value): tooltip lines
 * @returns {HTMLElement} a <figure> with plot, legend and tooltip
 */
export function heatmap(o) {
  const scale = o.scale || 'log';
  const range = o.range || colorRange(o.values, scale) || [scale === 'log' ? 1e-6 : 0, 1];
  const figure = el('figure', {class: 'gl-chart gl-heatmap'});
  if (o.title) figure.appendChild(el('figcaption', {text: o.title}));
  const wrap = el('div', {class: 'gl-plot'});
  const canvas = el('canvas', {
    tabindex: 0, role: 'img',
    'aria-label': `${o.title || 'heatmap'}: arrow keys move, Enter selects`,
  });
  const tooltip = el('div', {class: 'gl-tooltip', hidden: true, role: 'status'});
  wrap.append(canvas, tooltip);
  figure.append(wrap, legend(range, scale, o.legendTitle || '', o.zeroIsEmpty));

  const state = {layout: null, cursor: null};
  const paint = (width) => {
    state.layout = drawHeatmap(canvas, o, range, scale, Math.max(width || 600, 240));
    if (state.cursor) drawCursor(canvas, state.layout, state.cursor);
  };
  // Drawn when laid out (now, or when attached) and on every width change.
  const draw = observeWidth(wrap, paint);
  figure.redraw = () => draw();

  const show = (cell, px, py) => {
    if (!cell) {
      tooltip.hidden = true;
      return;
    }
    const shown = (o.shown || o.values)[cell.row][cell.step];
    const lines = o.describe
      ? o.describe(cell.row, cell.step, shown)
      : [o.rows[cell.row], `step ${o.steps[cell.step]}`, `value ${fmt(shown)}`];
    tooltip.replaceChildren(...lines.map((line, i) => el('div', {
      class: i === 0 ? 'gl-tip-title' : '', text: line,
    })));
    placeTooltip(tooltip, wrap, px, py);
  };
  canvas.addEventListener('mousemove', (event) => {
    const rect = canvas.getBoundingClientRect();
    const px = event.clientX - rect.left;
    const py = event.clientY - rect.top;
    show(state.layout && state.layout.cellAt(px, py), px, py);
  });
  canvas.addEventListener('mouseleave', () => {
    tooltip.hidden = true;
  });
  canvas.addEventListener('click', (event) => {
    const rect = canvas.getBoundingClientRect();
    const cell = state.layout && state.layout.cellAt(event.clientX - rect.left, event.clientY - rect.top);
    if (cell && o.onSelect) o.onSelect(cell.row, cell.step);
  });
  canvas.addEventListener('keydown', (event) => {
    const layout = state.layout;
    if (!layout || !o.rows.length || !o.steps.length) return;
    const stride = Math.max(1, Math.round(o.steps.length / layout.columns));
    const c = state.cursor || {row: Math.max(0, o.selectedRow ?? 0), step: o.steps.length - 1};
    const moves = {
      ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -stride], ArrowRight: [0, stride],
      Home: [0, -o.steps.length], End: [0, o.steps.length],
    };
    if (event.key in moves) {
      const [dr, ds] = moves[event.key];
      state.cursor = {
        row: Math.max(0, Math.min(o.rows.length - 1, c.row + dr)),
        step: Math.max(0, Math.min(o.steps.length - 1, c.step + ds)),
      };
      draw();
      const p = layout.cellCenter(state.cursor);
      show(state.cursor, p.x, p.y);
      event.preventDefault();
    } else if ((event.key === 'Enter' || event.key === ' ') && o.onSelect) {
      o.onSelect(c.row, c.step);
      event.preventDefault();
    }
  });
  canvas.addEventListener('blur', () => {
    tooltip.hidden = true;
  });
  return figure;
}

function drawHeatmap(canvas, o, [lo, hi], scale, width) {
  const nRows = o.rows.length;
  const nSteps = o.steps.length;
  const colors = themeColors();
  const rowHeight = o.rowHeight || Math.max(2, Math.min(18, Math.floor(420 / Math.max(nRows, 1))));
  const plotHeight = Math.min(o.maxHeight || 480, Math.max(nRows * rowHeight, 40));
  const labels = o.yTicks ? 'ticks' : o.rowLabels === false || plotHeight / nRows < 9 ? 'none' : 'rows';
  const ctx0 = canvas.getContext('2d');
  ctx0.font = '11px sans-serif';
  let left = 48;
  if (labels !== 'none') {
    const names = labels === 'rows' ? o.rows : o.yTicks.map((t) => t.label);
    left = Math.min(220, 12 + Math.max(0, ...names.map((r) => ctx0.measureText(r).width)));
  }
  const plot = {x0: left, x1: width - 12, y0: 6, y1: 6 + plotHeight};
  const height = plot.y1 + 26;
  const ctx = sizeCanvas(canvas, width, height);
  ctx.font = '11px sans-serif';
  const columns = Math.max(1, Math.min(nSteps, Math.round(plot.x1 - plot.x0)));
  const empty = hexToRgb(colors.bg);

  if (nRows && nSteps) {
    const image = paintImage(o.values, columns, lo, hi, scale, empty, o.zeroIsEmpty);
    const buffer = document.createElement('canvas');
    buffer.width = image.width;
    buffer.height = image.height;
    buffer.getContext('2d').putImageData(image, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(buffer, plot.x0, plot.y0, plot.x1 - plot.x0, plot.y1 - plot.y0);
  }
  const rowH = (plot.y1 - plot.y0) / Math.max(nRows, 1);
  // The plot rectangle in CSS pixels, for tests and tools that point at cells.
  canvas.dataset.plot = JSON.stringify({...plot, rows: nRows, steps: nSteps});
  ctx.strokeStyle = colors.muted;
  ctx.lineWidth = 1;
  ctx.strokeRect(plot.x0 - 0.5, plot.y0 - 0.5, plot.x1 - plot.x0 + 1, plot.y1 - plot.y0 + 1);

  // Row labels (truncated) or y ticks.
  ctx.fillStyle = colors.fg;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  if (labels === 'rows') {
    o.rows.forEach((name, r) => {
      ctx.fillText(truncate(ctx, name, plot.x0 - 8), plot.x0 - 6, plot.y0 + (r + 0.5) * rowH);
    });
  } else if (labels === 'ticks') {
    for (const tick of o.yTicks) ctx.fillText(tick.label, plot.x0 - 6, plot.y0 + (tick.row + 0.5) * rowH);
  }
  // Step ticks.
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  ctx.fillStyle = colors.muted;
  if (nSteps) {
    const x = linear(0, nSteps, plot.x0, plot.x1);
    const count = Math.max(2, Math.floor((plot.x1 - plot.x0) / 90));
    const seen = new Set();
    for (let k = 0; k <= count; k++) {
      const i = Math.min(nSteps - 1, Math.round((k * (nSteps - 1)) / count));
      if (seen.has(i)) continue;
      seen.add(i);
      ctx.fillText(String(o.steps[i]), x(i + 0.5), plot.y1 + 6);
    }
  }
  // Horizontal limit lines.
  for (const line of o.lines || []) {
    const py = Math.round(plot.y0 + line.row * rowH) + 0.5;
    if (py < plot.y0 || py > plot.y1) continue;
    ctx.strokeStyle = line.color || colors.fg;
    ctx.setLineDash([6, 3]);
    ctx.beginPath();
    ctx.moveTo(plot.x0, py);
    ctx.lineTo(plot.x1, py);
    ctx.stroke();
    ctx.setLineDash([]);
    ctx.textAlign = 'right';
    ctx.textBaseline = 'top';
    const w = ctx.measureText(line.label).width;
    const top = py - 13 >= plot.y0 ? py - 13 : py + 1;
    ctx.fillStyle = colors.bg;
    ctx.fillRect(plot.x1 - w - 6, top, w + 4, 12);
    ctx.fillStyle = line.color || colors.fg;
    ctx.fillText(line.label, plot.x1 - 4, top);
  }
  // Selected row.
  if (o.selectedRow !== undefined && o.selectedRow !== null && o.selectedRow >= 0) {
    ctx.strokeStyle = colors.accent;
    ctx.lineWidth = 2;
    ctx.strokeRect(plot.x0 - 1, plot.y0 + o.selectedRow * rowH - 1, plot.x1 - plot.x0 + 2, rowH + 2);
  }
  const stepIndexAt = (px) => Math.min(nSteps - 1, Math.max(0, Math.floor(((px - plot.x0) / (plot.x1 - plot.x0)) * nSteps)));
  return {
    columns,
    plot,
    rowH,
    cellAt(px, py) {
      if (px < plot.x0 || px >= plot.x1 || py < plot.y0 || py >= plot.y1 || !nRows || !nSteps) return null;
      return {row: Math.min(nRows - 1, Math.floor((py - plot.y0) / rowH)), step: stepIndexAt(px)};
    },
    cellCenter(cell) {
      return {
        x: plot.x0 + ((cell.step + 0.5) / nSteps) * (plot.x1 - plot.x0),
        y: plot.y0 + (cell.row + 0.5) * rowH,
      };
    },
  };
}

function drawCursor(canvas, layout, cell) {
  const ctx = canvas.getContext('2d');
  const p = layout.cellCenter(cell);
  const w = Math.max(3, (layout.plot.x1 - layout.plot.x0) / layout.columns);
  ctx.strokeStyle = themeColors().fg;
  ctx.lineWidth = 1.5;
  ctx.strokeRect(p.x - w / 2 - 1, p.y - layout.rowH / 2 - 1, w + 2, layout.rowH + 2);
}

function legend([lo, hi], scale, title, zeroIsEmpty) {
  const bar = el('canvas', {class: 'gl-colorbar', width: 256, height: 10, 'aria-hidden': 'true'});
  const ctx = bar.getContext('2d');
  for (let i = 0; i < 256; i++) {
    ctx.fillStyle = lutCss(i);
    ctx.fillRect(i, 0, 1, 10);
  }
  const items = [
    el('span', {class: 'gl-legend-title', text: `${title}${title ? ' ' : ''}(${scale} scale)`}),
    el('span', {class: 'gl-legend-lo', text: `≤${fmt(lo)}`}),
    bar,
    el('span', {class: 'gl-legend-hi', text: `≥${fmt(hi)}`}),
    el('span', {class: 'gl-swatch', style: `background:${NONFINITE_CSS}`}),
    el('span', {text: 'NaN/Inf'}),
  ];
  if (zeroIsEmpty) items.push(el('span', {class: 'gl-swatch gl-empty'}), el('span', {text: '0'}));
  return el('div', {class: 'gl-colorlegend'}, items);
}

function truncate(ctx, text, width) {
  if (ctx.measureText(text).width <= width) return text;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (ctx.measureText(`…${text.slice(text.length - mid)}`).width <= width) lo = mid;
    else hi = mid - 1;
  }
  return `…${text.slice(text.length - lo)}`;
}

function hexToRgb(color) {
  const m = /^#([0-9a-f]{6})$/i.exec(color.trim());
  if (!m) return [255, 255, 255, 0];
  const n = parseInt(m[1], 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255, 255];
}

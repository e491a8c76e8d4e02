// A heatmap card of rows (variables, layers, exponent bins) x steps.
//
// Cells are painted by step value (heatmap_paint.js) and colored by a
// colorer (heatmap_colors.js) that brings its own legend.  Row labels stay
// readable at any row count (every k-th row, the selected one always, in
// bold); step ticks are round numbers.  Drag zooms the steps, double-click
// or "Reset zoom" undoes it; hover (or the arrow keys) shows row, step and
// value; click (or Enter) selects; a rule marks the marked step.  Each
// logged step's cells are centered on the step (a line chart's point at
// step 40 is over the middle of the heatmap's step-40 cells), and the step
// axis is the view's (shared_axis.js: its zoom, domain and left margin).

import {themeColors, hexToRgb} from './colors.js';
import {FONT, drawFrame, drawLabelledLine, drawRule, drawStepAxis} from './axes.js';
import {chartFrame, fillTooltip, placeTooltip, sizeCanvas} from './chart_frame.js';
import {remember} from './chart_memory.js';
import {isolate} from './dom.js';
import {fmt} from './format.js';
import {blit, columnSpans, paintImage} from './heatmap_paint.js';
import {lastAtOrBefore, linear} from './scale.js';
import {joinAxis} from './shared_axis.js';
import {attachZoom} from './zoom.js';

const LABEL_PX = 12;
// A heatmap grows up to this tall so that every row keeps its label (a label on every
// other row leaves the user guessing which row a cell is); past it, every k-th row is labelled.
const LABELLED_MAX_PX = 1200;

/**
 * Create a heatmap.
 * @param {Object} o
 *   rows: names; steps: sorted step numbers; values: values[row][stepIndex] (what is colored)
 *   colors: a colorer (heatmap_colors.js); legendTitle; shown: values shown on hover (default values)
 *   title, note, selectedRow, markStep, onSelect(row, stepIndex)
 *   yTicks: [{row, label, priority?}] instead of row labels (kept by priority, never overlapping);
 *   lines: [{row, label, color}] (fractional rows)
 *   rowHeight, maxHeight, describe(row, stepIndex, value): tooltip lines after the title
 */
export function heatmap(o) {
  const frame = chartFrame({
    title: o.title, note: o.note, className: 'gl-heatmap', name: o.title,
    label: `${o.title || 'heatmap'}: arrow keys move, Enter selects`,
    data: () => ({rows: o.rows, steps: o.steps, values: o.shown || o.values}),
    onReset: () => setZoom(null),
  });
  const {figure, canvas, tooltip, wrap} = frame;
  canvas.tabIndex = 0;
  frame.legend.appendChild(o.colors.legend(o.legendTitle || ''));
  figure.dataset.markStep = o.markStep ?? '';
  figure.dataset.selectedRow = o.selectedRow >= 0 ? o.rows[o.selectedRow] : '';
  const chart = {drawn: false, redraw: () => frame.redraw()};
  const axis = joinAxis(chart);
  const half = cellWidth(o.steps) / 2;
  if (o.steps.length) axis.extend(o.steps[0] - half, o.steps[o.steps.length - 1] + half);
  const view = {layout: null, cursor: null, zoom: axis.zoom};
  const draw = (width) => {
    chart.drawn = true;
    view.layout = drawHeatmap(canvas, o, view.zoom || axis.domain(), Math.max(width, 240), axis);
    if (view.cursor) drawCursor(canvas, view.layout, view.cursor, o.steps);
  };
  frame.draw(draw);
  figure.redraw = frame.redraw;
  const setZoom = (range) => axis.setZoom(range);
  frame.setZoomed(Boolean(view.zoom));

  const show = (cell, px, py) => {
    if (!cell) {
      tooltip.hidden = true;
      return;
    }
    const value = (o.shown || o.values)[cell.row][cell.index];
    const lines = o.describe ? o.describe(cell.row, cell.index, value)
      : [`step ${o.steps[cell.index]}`, `value ${fmt(value)}`];
    fillTooltip(tooltip, o.rows[cell.row], lines);
    placeTooltip(tooltip, wrap, px, py);
  };
  const cellAt = (px, py) => view.layout && view.layout.cellAt(px, py, o.steps);
  canvas.addEventListener('mousemove', (event) => {
    const rect = canvas.getBoundingClientRect();
    const px = event.clientX - rect.left;
    const py = event.clientY - rect.top;
    show(cellAt(px, py), px, py);
  });
  canvas.addEventListener('mouseleave', () => {
    tooltip.hidden = true;
  });
  attachZoom({
    canvas, brush: frame.brush, plot: () => view.layout && view.layout.plot,
    onZoom: (px0, px1) => {
      const s0 = Math.floor(view.layout.x.invert(px0));
      const s1 = Math.ceil(view.layout.x.invert(px1));
      if (s1 > s0) setZoom([s0, s1]);
    },
    onClick: (px, py) => {
      const cell = cellAt(px, py);
      if (cell && o.onSelect) o.onSelect(cell.row, cell.index);
    },
    onReset: () => setZoom(null),
  });
  canvas.addEventListener('keydown', (event) => {
    if (!view.layout || !o.rows.length || !o.steps.length) return;
    const stride = Math.max(1, Math.round(o.steps.length / view.layout.columns));
    const c = view.cursor || {row: Math.max(0, o.selectedRow ?? 0), index: o.steps.length - 1};
    const moves = {
      ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -stride], ArrowRight: [0, stride],
      Home: [0, -o.steps.length], End: [0, o.steps.length],
    };
    if (event.key in moves) {
      const [dr, ds] = moves[event.key];
      view.cursor = {
        row: Math.max(0, Math.min(o.rows.length - 1, c.row + dr)),
        index: Math.max(0, Math.min(o.steps.length - 1, c.index + ds)),
      };
      frame.redraw();
      const p = view.layout.cellCenter(view.cursor, o.steps);
      show(view.cursor, p.x, p.y);
      event.preventDefault();
    } else if ((event.key === 'Enter' || event.key === ' ') && o.onSelect) {
      o.onSelect(c.row, c.index);
      event.preventDefault();
    }
  });
  canvas.addEventListener('blur', () => {
    tooltip.hidden = true;
  });
  return figure;
}

/** The step where a heatmap's last logged value stops: last step + the usual gap. */
export function stepEnd(steps) {
  const n = steps.length;
  if (n < 2) return (n ? steps[0] : 0) + 1;
  const gaps = [];
  for (let i = Math.max(1, n - 50); i < n; i++) gaps.push(steps[i] - steps[i - 1]);
  gaps.sort((a, b) => a - b);
  return steps[n - 1] + Math.max(1, gaps[gaps.length >> 1]);
}

/** The steps a logged step's cells cover: its usual gap to the next one (1 for a single step). */
export function cellWidth(steps) {
  return steps.length ? stepEnd(steps) - steps[steps.length - 1] : 1;
}

/**
 * The height of a row: the heatmap's height (`maxHeight`, default 560 px) shared by its rows,
 * 2-18 px; rows labelled by name (`named`, not by ticks) at least a label's height while every
 * row can have its label within LABELLED_MAX_PX.
 */
export function rowHeightFor(nRows, maxHeight = 560, named = true) {
  const fit = Math.max(2, Math.min(18, Math.floor((maxHeight || 560) / Math.max(nRows, 1))));
  return named && fit < LABEL_PX && nRows * LABEL_PX <= LABELLED_MAX_PX ? LABEL_PX : fit;
}

/** Which rows get a label: every k-th, and `selected` (whose neighbours give way). */
export function labelledRows(nRows, rowH, selected) {
  const every = Math.max(1, Math.ceil(LABEL_PX / rowH));
  const near = Math.ceil(LABEL_PX / rowH);
  const out = [];
  for (let r = 0; r < nRows; r += every) {
    if (selected >= 0 && r !== selected && Math.abs(r - selected) < near) continue;
    out.push(r);
  }
  if (selected >= 0 && !out.includes(selected)) out.push(selected);
  return out.sort((a, b) => a - b);
}

function drawHeatmap(canvas, o, domain0, width, axis) {
  const nRows = o.rows.length;
  const nSteps = o.steps.length;
  const colors = themeColors();
  const rowH = o.rowHeight || rowHeightFor(nRows, o.maxHeight, !o.yTicks);
  const plotHeight = Math.max(nRows * rowH, 40);
  const selected = o.selectedRow ?? -1;
  const labelled = o.yTicks ? [] : labelledRows(nRows, rowH, selected);
  const texts = o.yTicks ? o.yTicks.map((t) => t.label) : labelled.map((r) => o.rows[r]);
  const ctx0 = canvas.getContext('2d');
  ctx0.font = `bold ${FONT}`;
  const needed = Math.min(260, 14 + Math.max(30, ...texts.map((t) => ctx0.measureText(t).width)));
  const left = axis ? axis.left(width, needed) : needed;
  const plot = {x0: left, x1: width - 12, y0: 16, y1: 16 + plotHeight};
  const ctx = sizeCanvas(canvas, width, plot.y1 + 24);
  ctx.font = FONT;
  const half = cellWidth(o.steps) / 2;
  const domain = domain0 || (nSteps ? [o.steps[0] - half, o.steps[nSteps - 1] + half] : [0, 1]);
  const x = linear(domain[0], domain[1], plot.x0, plot.x1);
  const columns = Math.max(1, Math.min(Math.round(plot.x1 - plot.x0), Math.ceil((domain[1] - domain[0]) * 4)));
  if (o.colors.refresh) o.colors.refresh();
  if (nRows && nSteps) {
    // Cells centered on their steps: painted as if the domain were half a cell further right.
    const spans = columnSpans(o.steps, domain[0] + half, domain[1] + half, columns, stepEnd(o.steps));
    blit(ctx, paintImage(o.values, spans, columns, o.colors.colorOf, hexToRgb(colors.bg)), plot);
  }
  const rowHeight = (plot.y1 - plot.y0) / Math.max(nRows, 1);
  drawFrame(ctx, plot, colors);
  const labelY = [];
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  if (o.yTicks) {
    // Never overlapping: labels are kept by priority, each at least LABEL_PX from those kept.
    const byPriority = [...o.yTicks].sort((a, b) => (b.priority || 0) - (a.priority || 0));
    for (const tick of byPriority) {
      const py = plot.y0 + (tick.row + 0.5) * rowHeight;
      if (labelY.some((y) => Math.abs(y - py) < LABEL_PX)) continue;
      labelY.push(py);
      ctx.fillStyle = colors.fg;
      ctx.fillText(tick.label, plot.x0 - 6, py);
    }
    labelY.sort((a, b) => a - b);
  }
  for (const r of labelled) {
    const chosen = r === selected;
    ctx.font = chosen ? `bold ${FONT}` : FONT;
    ctx.fillStyle = chosen ? colors.accent : colors.fg;
    ctx.fillText(isolate(truncate(ctx, o.rows[r], plot.x0 - 10)), plot.x0 - 6, plot.y0 + (r + 0.5) * rowHeight);
    labelY.push(plot.y0 + (r + 0.5) * rowHeight);
  }
  ctx.font = FONT;
  const xTicks = drawStepAxis(ctx, x, plot, colors);
  // What is drawn, for tests and tools that point at cells.
  canvas.dataset.plot = JSON.stringify({...plot, rows: nRows, steps: nSteps, domain, labelled: labelled.length,
    labelY, xTicks, theme: document.documentElement.dataset.theme || ''});
  drawLines(ctx, o.lines || [], plot, rowHeight, colors);
  if (selected >= 0) {
    ctx.strokeStyle = colors.accent;
    ctx.lineWidth = 2;
    ctx.strokeRect(plot.x0 - 1, plot.y0 + selected * rowHeight - 1, plot.x1 - plot.x0 + 2, rowHeight + 2);
  }
  if (o.markStep !== undefined && o.markStep !== null && o.markStep !== '') drawRule(ctx, x, plot, Number(o.markStep), colors);
  return {
    columns, plot, x, rowH: rowHeight, cellPx: Math.abs(x(domain[0] + 2 * half) - x(domain[0])),
    cellAt(px, py, steps) {
      if (px < plot.x0 || px >= plot.x1 || py < plot.y0 || py >= plot.y1 || !nRows || !nSteps) return null;
      const index = lastAtOrBefore(steps, x.invert(px) + half);
      return index < 0 ? null : {row: Math.min(nRows - 1, Math.floor((py - plot.y0) / rowHeight)), index};
    },
    cellCenter(cell, steps) {
      return {x: x(steps[cell.index]), y: plot.y0 + (cell.row + 0.5) * rowHeight};
    },
  };
}

function drawLines(ctx, lines, plot, rowH, colors) {
  for (const line of lines) {
    const py = Math.round(plot.y0 + line.row * rowH) + 0.5;
    if (py >= plot.y0 && py <= plot.y1) drawLabelledLine(ctx, plot, py, line.label, line.color || colors.fg, colors);
  }
}

function drawCursor(canvas, layout, cell, steps) {
  const ctx = canvas.getContext('2d');
  const p = layout.cellCenter(cell, steps);
  const w = Math.max(3, layout.cellPx);
  ctx.strokeStyle = themeColors().fg;
  ctx.lineWidth = 1.5;
  ctx.strokeRect(p.x - w / 2 - 1, p.y - layout.rowH / 2 - 1, w + 2, layout.rowH + 2);
}

/** `text`, shortened from the left with '…' to fit `width` (the ends of paths matter). */
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

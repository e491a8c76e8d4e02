// Drawing of a line chart on a canvas (no events): round ticks on linear,
// log and count axes, series with gaps at missing points, NaN/Inf as
// magenta markers on the top edge and None (disconnected) as grey markers
// on the bottom edge, tolerance lines, the rule at a marked step, and one
// highlighted series drawn over the others.

import {NONFINITE_CSS, NONE_CSS, themeColors} from './colors.js';
import {FONT, drawFrame, drawLabelledLine, drawRule, drawStepAxis, drawYTitle} from './axes.js';
import {sizeCanvas} from './chart_frame.js';
import {extent, linear, log10, tickText} from './scale.js';
import {smooth} from './smoothing.js';

/** Values a series draws: smoothed when smoothing > 0 (memoized per weight). */
export function drawnValues(s, smoothing) {
  if (!(smoothing > 0)) return s.values;
  if (!s.smoothCache || s.smoothCache.weight !== smoothing) {
    s.smoothCache = {weight: smoothing, values: smooth(s.values, smoothing)};
  }
  return s.smoothCache.values;
}

/** [first, last] step of the series (all of them if none is given). */
export function stepDomain(series) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const s of series) {
    if (!s.steps.length) continue;
    lo = Math.min(lo, s.steps[0]);
    hi = Math.max(hi, s.steps[s.steps.length - 1]);
  }
  return lo <= hi ? [lo, hi === lo ? lo + 1 : hi] : null;
}

/** Index range [i0, i1) of sorted `steps` within [d0, d1]. */
export function indexRange(steps, d0, d1) {
  let i0 = 0;
  while (i0 < steps.length && steps[i0] < d0) i0++;
  let i1 = i0;
  while (i1 < steps.length && steps[i1] <= d1) i1++;
  return [i0, i1];
}

function yDomain(visible, domain, model) {
  const log = model.yScale === 'log';
  const arrays = [];
  for (const s of visible) {
    const [i0, i1] = indexRange(s.steps, domain[0], domain[1]);
    arrays.push(s.values.slice(i0, i1));
    if (model.smoothing > 0) arrays.push(drawnValues(s, model.smoothing).slice(i0, i1));
  }
  let range = extent(arrays, log || model.yScale === 'count');
  if (model.yScale === 'count') return [0.5, Math.max(2, (range ? range[1] : 1) * 1.6)];
  const limits = (model.limits || []).map((l) => l.value).filter((v) => Number.isFinite(v) && (!log || v > 0));
  if (limits.length) {
    const near = range ? limits.filter((v) => log || v <= range[1] * 3) : limits;
    range = extent([...(range ? [range] : []), near], log) || range;
  }
  if (!range) return log ? [1e-3, 1] : [0, 1];
  let [lo, hi] = range;
  if (log) {
    if (hi / lo < 10) {
      const mid = Math.sqrt(hi * lo);
      lo = Math.min(lo, mid / 3.2);
      hi = Math.max(hi, mid * 3.2);
    }
    return [lo / 1.25, hi * 1.25];
  }
  if (lo === hi) {
    lo -= Math.abs(lo) * 0.1 || 1;
    hi += Math.abs(hi) * 0.1 || 1;
  }
  const pad = (hi - lo) * 0.06;
  return [lo >= 0 && lo - pad < 0 ? 0 : lo - pad, hi + pad];
}

/**
 * Draw a line chart; returns its layout ({plot, x, y, domain}) or null.
 * @param {HTMLCanvasElement} canvas
 * @param {Object} model
 *   series: [{name, steps, values, none?, color, dashed?}]; hidden: Set of names
 *   zoom: [step0, step1] or null; yScale: 'linear' | 'log' | 'count'; yLabel; height
 *   limits: [{value, label}]; markStep; highlight (series name); smoothing (0..0.999)
 * @param {number} width CSS pixels
 */
export function drawLines(canvas, model, width) {
  const colors = themeColors();
  const height = model.height || 220;
  const visible = model.series.filter((s) => !model.hidden.has(s.name));
  const domain = model.zoom || stepDomain(visible.length ? visible : model.series);
  const ctx0 = canvas.getContext('2d');
  ctx0.font = FONT;
  if (!domain) {
    const ctx = sizeCanvas(canvas, width, height);
    ctx.font = FONT;
    ctx.fillStyle = colors.muted;
    ctx.fillText('no data', 60, 40);
    return null;
  }
  const [ylo, yhi] = yDomain(visible, domain, model);
  const probe = model.yScale === 'linear' ? linear(ylo, yhi, 1, 0) : log10(ylo, yhi, 1, 0);
  let ticks = probe.ticks(model.yScale === 'linear' ? 5 : 6);
  if (model.yScale === 'count') ticks = ticks.filter((t) => t >= 1 && Number.isInteger(t));
  const labels = ticks.map(tickText);
  if (model.yScale === 'count') labels.push('0');
  const left = Math.max(50, 28 + Math.max(...labels.map((t) => ctx0.measureText(t).width)));
  const plot = {x0: left, x1: width - 12, y0: 18, y1: height - 24};
  const ctx = sizeCanvas(canvas, width, height);
  ctx.font = FONT;
  const x = linear(domain[0], domain[1], plot.x0, plot.x1);
  const y = model.yScale === 'linear' ? linear(ylo, yhi, plot.y1, plot.y0) : log10(ylo, yhi, plot.y1, plot.y0);
  const yOf = (v) => (model.yScale === 'count' && v <= 0 ? plot.y1 : y(v));

  ctx.lineWidth = 1;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  const yLabels = [];
  ticks.forEach((t, i) => {
    const py = Math.round(y(t)) + 0.5;
    if (py < plot.y0 - 1 || py > plot.y1 + 1) return;
    yLabels.push(labels[i]);
    ctx.strokeStyle = colors.grid;
    ctx.beginPath();
    ctx.moveTo(plot.x0, py);
    ctx.lineTo(plot.x1, py);
    ctx.stroke();
    ctx.fillStyle = colors.muted;
    ctx.fillText(labels[i], plot.x0 - 6, py);
  });
  if (model.yScale === 'count') {
    ctx.fillText('0', plot.x0 - 6, plot.y1);
    yLabels.push('0');
  }
  const xTicks = drawStepAxis(ctx, x, plot, colors);
  drawFrame(ctx, plot, colors);
  drawYTitle(ctx, model.yLabel, plot, colors);

  const ordered = [...visible].sort((a, b) => (a.name === model.highlight) - (b.name === model.highlight));
  ctx.save();
  ctx.beginPath();
  ctx.rect(plot.x0, plot.y0 - 1, plot.x1 - plot.x0, plot.y1 - plot.y0 + 2);
  ctx.clip();
  for (const s of ordered) {
    const faded = model.highlight && s.name !== model.highlight;
    const width0 = s.name === model.highlight ? 2.5 : 1.5;
    if (model.smoothing > 0) {
      tracePath(ctx, s, s.values, x, yOf, domain, model, {alpha: faded ? 0.12 : 0.3, width: 1});
    }
    tracePath(ctx, s, drawnValues(s, model.smoothing), x, yOf, domain, model,
      {alpha: faded ? 0.35 : 1, width: width0});
  }
  ctx.restore();
  drawMarkers(ctx, ordered, x, plot, domain);
  drawLimits(ctx, model.limits || [], y, plot, colors);
  if (model.markStep !== undefined && model.markStep !== null) drawRule(ctx, x, plot, model.markStep, colors);
  return {plot, x, y, domain, yDomain: [ylo, yhi], yLabels, xTicks};
}

function tracePath(ctx, s, values, x, yOf, domain, model, {alpha, width}) {
  const [i0, i1] = indexRange(s.steps, domain[0], domain[1]);
  const from = Math.max(0, i0 - 1);
  const to = Math.min(s.steps.length, i1 + 1);
  ctx.globalAlpha = alpha;
  ctx.strokeStyle = s.color;
  ctx.fillStyle = s.color;
  ctx.lineWidth = width;
  ctx.setLineDash(s.dashed ? [5, 3] : []);
  ctx.beginPath();
  let pen = false;
  const dots = i1 - i0 < 60;
  for (let i = from; i < to; i++) {
    const v = values[i];
    const ok = Number.isFinite(v) && !(s.none && s.none[i]) && (model.yScale !== 'log' || v > 0);
    if (!ok) {
      pen = false;
      continue;
    }
    const px = x(s.steps[i]);
    const py = yOf(v);
    if (pen) ctx.lineTo(px, py);
    else ctx.moveTo(px, py);
    pen = true;
    if (dots) ctx.fillRect(px - 1.5, py - 1.5, 3, 3);
  }
  ctx.stroke();
  ctx.setLineDash([]);
  ctx.globalAlpha = 1;
}

/** NaN/Inf: magenta triangles on the top edge; None: grey squares on the bottom edge. */
function drawMarkers(ctx, series, x, plot, domain) {
  for (const s of series) {
    const [i0, i1] = indexRange(s.steps, domain[0], domain[1]);
    for (let i = i0; i < i1; i++) {
      const px = x(s.steps[i]);
      if (s.none && s.none[i]) {
        ctx.fillStyle = NONE_CSS;
        ctx.fillRect(px - 3, plot.y1 - 7, 6, 6);
      } else if (!Number.isFinite(s.values[i]) || (s.flags && s.flags[i])) {
        ctx.fillStyle = NONFINITE_CSS;
        ctx.beginPath();
        ctx.moveTo(px - 4, plot.y0);
        ctx.lineTo(px + 4, plot.y0);
        ctx.lineTo(px, plot.y0 + 7);
        ctx.fill();
      }
    }
  }
}

/** Dashed horizontal tolerance lines with their label at the right end. */
function drawLimits(ctx, limits, y, plot, colors) {
  for (const limit of limits) {
    const py = Math.round(y(limit.value)) + 0.5;
    if (py >= plot.y0 && py <= plot.y1) drawLabelledLine(ctx, plot, py, limit.label, colors.fg, colors);
  }
}

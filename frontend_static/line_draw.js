// Drawing of a line chart on a canvas (no events): round ticks on linear,
// log and count axes, series with gaps at missing points, NaN/Inf as
// magenta markers on the top edge, None (disconnected) as grey squares and
// exact zeros on a log axis as a hollow triangle and a band on the bottom edge, limit
// series as dashed step lines, horizontal limit lines, the rule at a marked
// step, and one highlighted series drawn over the others.

import {NONFINITE_CSS, NONE_CSS, themeColors} from './colors.js';
import {FONT, drawFrame, drawLabelledLine, drawRule, drawStepAxis, drawYTitle} from './axes.js';
import {sizeCanvas} from './chart_frame.js';
import {extent, linear, log10, tickText} from './scale.js';
import {smooth} from './smoothing.js';

/** Values a series draws: smoothed when smoothing > 0 (memoized per weight). */
export function drawnValues(s, smoothing) {
  if (!(smoothing > 0) || s.smooth === false) return s.values;
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
  return lo <= hi ? [lo, hi] : null;
}

/** A step domain wide enough to draw: a single step sits in the middle, not on the y axis. */
export function drawable(domain) {
  if (!domain) return null;
  return domain[1] > domain[0] ? domain : [domain[0] - 1, domain[1] + 1];
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
    if (model.smoothing > 0 && s.smooth !== false) arrays.push(drawnValues(s, model.smoothing).slice(i0, i1));
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
 *   series: [{name, steps, values, none?, color, dashed?, stepped?, under?, smooth?}]; hidden: Set of names
 *   zoom: [step0, step1] or null; axis: the view's shared axis (shared_axis.js) or null
 *   yScale: 'linear' | 'log' | 'count'; yLabel; height
 *   limits: [{value, label}]; markStep; highlight (series name); smoothing (0..0.999)
 * @param {number} width CSS pixels
 */
export function drawLines(canvas, model, width) {
  const colors = themeColors();
  const height = model.height || 220;
  const visible = model.series.filter((s) => !isHidden(model, s));
  const own = stepDomain(visible.length ? visible : model.series);
  const domain = drawable(model.zoom || (model.axis && model.axis.domain()) || own);
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
  const needed = Math.max(50, 28 + Math.max(...labels.map((t) => ctx0.measureText(t).width)));
  const left = model.axis ? model.axis.left(width, needed) : needed;
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

  const ordered = [...visible].sort((a, b) => Number(Boolean(b.under)) - Number(Boolean(a.under))
    || (a.name === model.highlight) - (b.name === model.highlight));
  ctx.save();
  ctx.beginPath();
  ctx.rect(plot.x0, plot.y0 - 1, plot.x1 - plot.x0, plot.y1 - plot.y0 + 2);
  ctx.clip();
  for (const s of ordered) {
    const own0 = s.limitOf || s.name;
    const faded = model.highlight && own0 !== model.highlight;
    // A series drawn under the others (the reference under the candidate) is wide and pale, so one that
    // coincides with it is seen on top of it rather than hiding it.
    const width0 = s.under ? 5 : own0 === model.highlight ? 2.5 : 1.5;
    if (model.smoothing > 0 && s.smooth !== false) {
      tracePath(ctx, s, s.values, x, yOf, domain, model, {alpha: faded ? 0.12 : 0.3, width: 1});
    }
    tracePath(ctx, s, drawnValues(s, model.smoothing), x, yOf, domain, model,
      {alpha: (faded ? 0.35 : 1) * (s.under ? 0.45 : 1), width: width0});
  }
  ctx.restore();
  drawMarkers(ctx, ordered, x, plot, domain, model.yScale === 'log');
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
  setDash(ctx, s, model);
  ctx.beginPath();
  // More logged steps than pixel columns (a 10,000-step run): one vertical stroke per column, as uPlot
  // draws, instead of every point (docs/benchmarks-history.md §21).
  if (!s.stepped && i1 - i0 > 2 * Math.abs(x(domain[1]) - x(domain[0]))) {
    traceDense(ctx, s, values, x, yOf, from, to, model);
  } else {
    traceEach(ctx, s, values, x, yOf, from, to, i1 - i0, model);
  }
  ctx.stroke();
  ctx.setLineDash([]);
  ctx.lineDashOffset = 0;
  ctx.globalAlpha = 1;
}

/** Whether point ``i`` (value ``v``) of series ``s`` is on the line: finite, not None, positive on a log axis. */
function onLine(s, v, i, model) {
  return Number.isFinite(v) && !(s.none && s.none[i]) && (model.yScale !== 'log' || v > 0);
}

/** Every point of ``values[from, to)`` on the path (``n`` of them in the domain). */
function traceEach(ctx, s, values, x, yOf, from, to, n, model) {
  let pen = false;
  let lastY = 0;
  const dots = n < 60;
  const single = n === 1 && !s.stepped; // one logged step: a square, not a dot lost on an edge
  for (let i = from; i < to; i++) {
    const v = values[i];
    const ok = onLine(s, v, i, model);
    if (!ok) {
      pen = false;
      continue;
    }
    const px = x(s.steps[i]);
    const py = yOf(v);
    if (pen && s.stepped) ctx.lineTo(px, lastY);
    if (pen) ctx.lineTo(px, py);
    else ctx.moveTo(px, py);
    pen = true;
    lastY = py;
    if (single) ctx.fillRect(px - 3.5, py - 3.5, 7, 7);
    else if (dots && !s.stepped) ctx.fillRect(px - 1.5, py - 1.5, 3, 3);
  }
}

/**
 * More points than pixel columns: each column's points as one vertical
 * stroke (first, lowest, highest, last), the line between columns as drawn.
 */
function traceDense(ctx, s, values, x, yOf, from, to, model) {
  let col = NaN;
  let lo = 0;
  let hi = 0;
  let last = 0;
  let pen = false;
  const end = () => {
    if (!pen) return;
    ctx.lineTo(col, lo);
    ctx.lineTo(col, hi);
    ctx.lineTo(col, last);
  };
  for (let i = from; i < to; i++) {
    const v = values[i];
    const ok = onLine(s, v, i, model);
    if (!ok) {
      end();
      pen = false;
      continue;
    }
    const px = Math.round(x(s.steps[i]));
    const py = yOf(v);
    if (pen && px === col) {
      if (py < lo) lo = py;
      else if (py > hi) hi = py;
      last = py;
      continue;
    }
    end();
    if (pen) ctx.lineTo(px, py);
    else ctx.moveTo(px, py);
    pen = true;
    col = px;
    lo = py;
    hi = py;
    last = py;
  }
  end();
}

/**
 * Dashes: a limit series' dashes interleave with those of the other limits
 * (up to 4), so limits that coincide show every color in turn instead of
 * the last one drawn over the others.
 */
function setDash(ctx, s, model) {
  if (s.limitOf) {
    const limits = model.series.filter((x) => x.limitOf);
    const n = Math.min(4, limits.length);
    const k = limits.indexOf(s) % n;
    ctx.setLineDash(n > 1 ? [5, 5 * (n - 1)] : [5, 3]);
    ctx.lineDashOffset = -5 * k;
    return;
  }
  ctx.setLineDash(s.dashed ? [5, 3] : []);
  ctx.lineDashOffset = 0;
}

/**
 * NaN/Inf: magenta triangles on the top edge; None: grey squares on the
 * bottom edge; on a log axis an exact 0 (which has no place on it): a
 * hollow triangle in the series' color on the bottom edge.
 */
function drawMarkers(ctx, series, x, plot, domain, log) {
  for (const s of series) {
    if (s.limitOf) continue; // a limit that is not there (NaN) is no NaN of the data
    const [i0, i1] = indexRange(s.steps, domain[0], domain[1]);
    if (log) drawZeros(ctx, s, x, plot, i0, i1);
    for (let i = i0; i < i1; i++) {
      const px = x(s.steps[i]);
      if (log && s.values[i] === 0 && !(s.none && s.none[i])) {
        continue;
      } else if (s.none && s.none[i]) {
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

/**
 * Exact zeros of a series on a log axis: a hollow triangle on the bottom
 * edge at the first step of each run of zeros, and the run itself as a band
 * along the edge (a dead gradient is zero at every step: one band, not a
 * carpet of markers).
 */
function drawZeros(ctx, s, x, plot, i0, i1) {
  const zero = (i) => s.values[i] === 0 && !(s.none && s.none[i]);
  ctx.save();
  ctx.strokeStyle = s.color;
  for (let i = i0; i < i1; i++) {
    if (!zero(i) || (i > i0 && zero(i - 1))) continue;
    let j = i;
    while (j + 1 < i1 && zero(j + 1)) j++;
    const px = x(s.steps[i]);
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    ctx.moveTo(px - 4, plot.y1 - 1);
    ctx.lineTo(px + 4, plot.y1 - 1);
    ctx.lineTo(px, plot.y1 - 8);
    ctx.closePath();
    ctx.stroke();
    if (j > i) {
      ctx.lineWidth = 2.5;
      ctx.beginPath();
      ctx.moveTo(px, plot.y1 - 2);
      ctx.lineTo(x(s.steps[j]), plot.y1 - 2);
      ctx.stroke();
    }
  }
  ctx.restore();
}

/** Whether a series is hidden: its own legend entry, or the series whose limit it is. */
export function isHidden(model, s) {
  return model.hidden.has(s.name) || Boolean(s.limitOf && model.hidden.has(s.limitOf));
}

/** Dashed horizontal limit lines with their label at the right end. */
function drawLimits(ctx, limits, y, plot, colors) {
  for (const limit of limits) {
    const py = Math.round(y(limit.value)) + 0.5;
    if (py >= plot.y0 && py <= plot.y1) drawLabelledLine(ctx, plot, py, limit.label, colors.fg, colors);
  }
}

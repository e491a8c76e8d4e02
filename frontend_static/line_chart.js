// A canvas line chart: several series over steps, linear or log-10 y,
// NaN/Inf shown as markers on the top edge (never dropped), a hover
// tooltip with every series' value at the nearest step, and a legend.

import {PALETTE, NONFINITE_CSS, themeColors} from './colors.js';
import {el} from './dom.js';
import {fmt} from './format.js';
import {linear, log10, extent} from './scale.js';

const MARGIN = {left: 64, right: 16, top: 14, bottom: 30};

/**
 * Create a line chart.
 * @param {Object} options
 *   series: [{name, steps: number[], values: number[], color?, dashed?}]
 *   logY: log-10 y axis (values <= 0 are left out, NaN/Inf still marked)
 *   title, yLabel, height (CSS px), onClick(step)
 * @returns {HTMLElement} the chart (a <figure>)
 */
export function lineChart(options) {
  const {series, logY = false, title = '', yLabel = '', height = 220, onClick = null} = options;
  const figure = el('figure', {class: 'gl-chart'});
  if (title) figure.appendChild(el('figcaption', {text: title}));
  const wrap = el('div', {class: 'gl-plot'});
  const canvas = el('canvas', {role: 'img', 'aria-label': title || yLabel || 'line chart'});
  const tooltip = el('div', {class: 'gl-tooltip', hidden: true});
  wrap.append(canvas, tooltip);
  figure.appendChild(wrap);
  const colored = series.map((s, i) => ({...s, color: s.color || PALETTE[i % PALETTE.length]}));
  figure.appendChild(legend(colored));

  let layout = null;
  observeWidth(wrap, (width) => {
    layout = drawChart(canvas, colored, {width: Math.max(width || 600, 200), height, logY, yLabel});
  });

  canvas.addEventListener('mousemove', (event) => {
    if (!layout) return;
    const rect = canvas.getBoundingClientRect();
    const step = layout.stepAt(event.clientX - rect.left);
    if (step === null) {
      tooltip.hidden = true;
      return;
    }
    tooltip.replaceChildren(el('div', {class: 'gl-tip-title', text: `step ${step}`}));
    for (const s of colored) {
      const i = s.steps.indexOf(step);
      if (i < 0) continue;
      tooltip.appendChild(el('div', {}, [
        el('span', {class: 'gl-swatch', style: `background:${s.color}`}),
        `${s.name}: ${fmt(s.values[i])}`,
      ]));
    }
    placeTooltip(tooltip, wrap, event.clientX - rect.left, event.clientY - rect.top);
  });
  canvas.addEventListener('mouseleave', () => {
    tooltip.hidden = true;
  });
  if (onClick) {
    canvas.addEventListener('click', (event) => {
      const rect = canvas.getBoundingClientRect();
      const step = layout && layout.stepAt(event.clientX - rect.left);
      if (step !== null && step !== undefined) onClick(step);
    });
  }
  return figure;
}

function legend(series) {
  const list = el('ul', {class: 'gl-legend'});
  for (const s of series) {
    list.appendChild(el('li', {}, [
      el('span', {class: s.dashed ? 'gl-swatch gl-dashed' : 'gl-swatch', style: `background:${s.color}`}),
      el('span', {text: s.name}),
    ]));
  }
  return list;
}

/**
 * Draw with `draw(width)` now if `node` is laid out, and again whenever its
 * width changes (also when it is first attached).  Returns a function that
 * draws at the current width.
 */
export function observeWidth(node, draw) {
  let drawn = -1;
  const now = () => {
    drawn = node.clientWidth;
    draw(drawn);
  };
  const maybe = () => {
    if (node.isConnected && node.clientWidth > 0 && node.clientWidth !== drawn) now();
  };
  if (typeof ResizeObserver !== 'undefined') new ResizeObserver(maybe).observe(node);
  maybe();
  return now;
}

/** Show a tooltip near (x, y) inside `wrap`, kept within its width. */
export function placeTooltip(tooltip, wrap, x, y) {
  tooltip.hidden = false;
  const width = tooltip.offsetWidth;
  const left = x + 14 + width > wrap.clientWidth ? Math.max(0, x - 14 - width) : x + 14;
  tooltip.style.left = `${left}px`;
  tooltip.style.top = `${Math.max(0, y - 10)}px`;
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

function drawChart(canvas, series, {width, height, logY, yLabel}) {
  const ctx = sizeCanvas(canvas, width, height);
  const colors = themeColors();
  ctx.font = '11px sans-serif';
  const plot = {
    x0: MARGIN.left, x1: width - MARGIN.right, y0: MARGIN.top, y1: height - MARGIN.bottom,
  };
  const allSteps = series.flatMap((s) => s.steps);
  if (!allSteps.length) {
    ctx.fillStyle = colors.muted;
    ctx.fillText('no data', plot.x0, plot.y0 + 20);
    return null;
  }
  const s0 = Math.min(...allSteps);
  const s1 = Math.max(...allSteps);
  const x = linear(s0, s1 === s0 ? s0 + 1 : s1, plot.x0, plot.x1);
  let range = extent(series.map((s) => s.values), logY);
  if (!range) range = logY ? [1e-3, 1] : [0, 1];
  let [lo, hi] = range;
  if (logY) {
    if (hi / lo < 10) {
      lo /= 3;
      hi *= 3;
    }
  } else {
    if (lo === hi) {
      lo -= Math.abs(lo) * 0.1 || 1;
      hi += Math.abs(hi) * 0.1 || 1;
    }
    const pad = (hi - lo) * 0.05;
    lo = lo >= 0 && lo - pad < 0 ? 0 : lo - pad;
    hi += pad;
  }
  const y = logY ? log10(lo, hi, plot.y1, plot.y0) : linear(lo, hi, plot.y1, plot.y0);

  // Grid and axes.
  ctx.strokeStyle = colors.grid;
  ctx.fillStyle = colors.muted;
  ctx.lineWidth = 1;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'middle';
  for (const t of y.ticks(5)) {
    const py = Math.round(y(t)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(plot.x0, py);
    ctx.lineTo(plot.x1, py);
    ctx.stroke();
    ctx.fillText(fmt(t), plot.x0 - 6, py);
  }
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  for (const t of x.ticks(Math.max(2, Math.floor((plot.x1 - plot.x0) / 80)))) {
    if (!Number.isInteger(t)) continue;
    ctx.fillText(String(t), x(t), plot.y1 + 6);
  }
  ctx.strokeStyle = colors.muted;
  ctx.strokeRect(plot.x0 + 0.5, plot.y0 + 0.5, plot.x1 - plot.x0, plot.y1 - plot.y0);
  if (yLabel) {
    ctx.save();
    ctx.translate(12, (plot.y0 + plot.y1) / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = 'center';
    ctx.fillText(yLabel, 0, 0);
    ctx.restore();
  }

  // Series: a gap at every NaN/Inf (and value <= 0 on log axes); NaN/Inf get a marker on top.
  ctx.save();
  ctx.beginPath();
  ctx.rect(plot.x0, plot.y0 - 1, plot.x1 - plot.x0, plot.y1 - plot.y0 + 2);
  ctx.clip();
  for (const s of series) {
    ctx.strokeStyle = s.color;
    ctx.fillStyle = s.color;
    ctx.lineWidth = 1.5;
    ctx.setLineDash(s.dashed ? [5, 3] : []);
    ctx.beginPath();
    let pen = false;
    for (let i = 0; i < s.steps.length; i++) {
      const v = s.values[i];
      const ok = Number.isFinite(v) && (!logY || v > 0);
      if (!ok) {
        pen = false;
        continue;
      }
      const px = x(s.steps[i]);
      const py = y(v);
      if (pen) ctx.lineTo(px, py);
      else ctx.moveTo(px, py);
      pen = true;
      if (s.steps.length < 60) ctx.fillRect(px - 1.5, py - 1.5, 3, 3);
    }
    ctx.stroke();
  }
  ctx.restore();
  ctx.setLineDash([]);
  ctx.fillStyle = NONFINITE_CSS;
  for (const s of series) {
    for (let i = 0; i < s.steps.length; i++) {
      if (Number.isFinite(s.values[i])) continue;
      const px = x(s.steps[i]);
      ctx.beginPath();
      ctx.moveTo(px - 4, plot.y0);
      ctx.lineTo(px + 4, plot.y0);
      ctx.lineTo(px, plot.y0 + 7);
      ctx.fill();
    }
  }

  const steps = [...new Set(allSteps)].sort((a, b) => a - b);
  return {
    stepAt(px) {
      if (px < plot.x0 - 4 || px > plot.x1 + 4) return null;
      const target = s0 + ((px - plot.x0) / (plot.x1 - plot.x0)) * (s1 - s0);
      let best = steps[0];
      for (const st of steps) if (Math.abs(st - target) < Math.abs(best - target)) best = st;
      return best;
    },
  };
}

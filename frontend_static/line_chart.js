// A line chart card: series over steps (line_draw.js), with what
// TensorBoard's Time Series cards offer - drag to zoom the steps and
// double-click or "Reset zoom" to undo, legend entries that hide and show
// their series, smoothing, CSV/JSON download - plus a click that picks a
// step, a rule at the marked step, tolerance lines and a highlighted series.

import {NONFINITE_CSS, NONE_CSS, PALETTE} from './colors.js';
import {chartFrame, fillTooltip, placeTooltip} from './chart_frame.js';
import {remember} from './chart_memory.js';
import {el, isolate} from './dom.js';
import {fmt} from './format.js';
import {drawLines, drawnValues} from './line_draw.js';
import {attachZoom} from './zoom.js';

/**
 * Create a line chart.
 * @param {Object} o
 *   series: [{name, steps: number[], values: number[], none?: flags, flags?: flags, color?, dashed?}]
 *   yScale: 'linear' (default) | 'log' | 'count' (log with 0 on the bottom edge); logY: same as 'log'
 *   title, note, yLabel, height; limits: [{value, label}]; markStep; highlight (series name)
 *   smoothing (0..0.999); onClick(step); legendNote: extra legend entries [{css, text}]
 * @returns {HTMLElement} the chart (a <figure class="gl-chart gl-line">)
 */
export function lineChart(o) {
  const series = o.series.map((s, i) => ({...s, color: s.color || PALETTE[i % PALETTE.length]}));
  const kept = remember(`line:${o.title}`);
  const model = {
    series, hidden: kept.hidden, zoom: kept.zoom, height: o.height || 220,
    yScale: o.yScale || (o.logY ? 'log' : 'linear'), yLabel: o.yLabel || '', limits: o.limits || [],
    markStep: o.markStep, highlight: o.highlight, smoothing: Number(o.smoothing) || 0,
  };
  const frame = chartFrame({
    title: o.title, note: o.note, className: 'gl-line', label: o.title || o.yLabel,
    name: o.title, data: () => ({series: series.filter((s) => !model.hidden.has(s.name))}),
    onReset: () => setZoom(null),
  });
  const {figure, canvas, tooltip, wrap} = frame;
  let layout = null;
  const draw = (width) => {
    layout = drawLines(canvas, model, Math.max(width, 200));
    // What is drawn, for tests and tools that read the chart.
    canvas.dataset.plot = layout ? JSON.stringify({...layout.plot, domain: layout.domain, yScale: model.yScale,
      yDomain: layout.yDomain, yLabels: layout.yLabels, xTicks: layout.xTicks,
      hidden: [...model.hidden], theme: document.documentElement.dataset.theme || ''}) : '';
  };
  frame.draw(draw);
  const setZoom = (range) => {
    model.zoom = range;
    kept.zoom = range;
    frame.setZoomed(Boolean(range));
    frame.redraw();
  };
  frame.setZoomed(Boolean(model.zoom));
  frame.legend.appendChild(legend(series, model, () => frame.redraw(), o.legendNote));
  figure.dataset.markStep = model.markStep ?? '';
  figure.dataset.highlight = model.highlight || '';

  attachZoom({
    canvas, brush: frame.brush, plot: () => layout && layout.plot,
    onZoom: (px0, px1) => {
      const s0 = Math.round(layout.x.invert(px0));
      const s1 = Math.round(layout.x.invert(px1));
      if (s1 > s0) setZoom([s0, s1]);
    },
    onClick: (px) => {
      const step = layout && nearestStep(series, model, layout.x.invert(px));
      if (step !== null && o.onClick) o.onClick(step);
    },
    onReset: () => setZoom(null),
  });
  canvas.addEventListener('mousemove', (event) => {
    if (!layout) return;
    const rect = canvas.getBoundingClientRect();
    const px = event.clientX - rect.left;
    if (px < layout.plot.x0 - 4 || px > layout.plot.x1 + 4) {
      tooltip.hidden = true;
      return;
    }
    const step = nearestStep(series, model, layout.x.invert(px));
    if (step === null) return;
    fillTooltip(tooltip, `step ${step}`, tooltipLines(series, model, step));
    placeTooltip(tooltip, wrap, px, event.clientY - rect.top);
  });
  canvas.addEventListener('mouseleave', () => {
    tooltip.hidden = true;
  });
  return figure;
}

/** The logged step nearest `target` among the visible series within the zoom. */
function nearestStep(series, model, target) {
  let best = null;
  for (const s of series) {
    if (model.hidden.has(s.name)) continue;
    const i = nearestIndex(s.steps, target);
    if (i < 0) continue;
    const step = s.steps[i];
    if (model.zoom && (step < model.zoom[0] || step > model.zoom[1])) continue;
    if (best === null || Math.abs(step - target) < Math.abs(best - target)) best = step;
  }
  return best;
}

/** Index of the element of sorted `steps` nearest `target` (-1 if empty). */
export function nearestIndex(steps, target) {
  if (!steps.length) return -1;
  let lo = 0;
  let hi = steps.length - 1;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (steps[mid] < target) lo = mid + 1;
    else hi = mid;
  }
  if (lo > 0 && Math.abs(steps[lo - 1] - target) <= Math.abs(steps[lo] - target)) return lo - 1;
  return lo;
}

function tooltipLines(series, model, step) {
  const lines = [];
  const ordered = [...series].sort((a, b) => (b.name === model.highlight) - (a.name === model.highlight));
  for (const s of ordered) {
    if (model.hidden.has(s.name)) continue;
    const i = nearestIndex(s.steps, step);
    if (i < 0 || s.steps[i] !== step) continue;
    let text;
    if (s.none && s.none[i]) text = 'None (disconnected)';
    else {
      text = fmt(s.values[i]);
      if (model.smoothing > 0 && Number.isFinite(s.values[i])) text += ` (smoothed ${fmt(drawnValues(s, model.smoothing)[i])})`;
    }
    lines.push(el('div', {class: s.name === model.highlight ? 'gl-tip-highlight' : ''}, [
      el('span', {class: 'gl-swatch', style: `background:${s.color}`}), `${isolate(s.name)}: ${text}`,
    ]));
  }
  return lines;
}

/** Legend: one toggle button per series (click hides/shows it), then the marker keys. */
function legend(series, model, redraw, extra = []) {
  const list = el('ul', {class: 'gl-legend'});
  for (const s of series) {
    const off = model.hidden.has(s.name);
    const button = el('button', {
      type: 'button', class: `gl-legend-item${s.name === model.highlight ? ' gl-legend-highlight' : ''}${off ? ' gl-legend-off' : ''}`,
      'aria-pressed': String(!off), title: 'Click to hide or show this series',
    }, [el('span', {class: s.dashed ? 'gl-swatch gl-dashed' : 'gl-swatch', style: `background:${s.color}`}),
      el('span', {class: 'gl-legend-name', text: s.name})]);
    button.addEventListener('click', () => {
      const hidden = !model.hidden.has(s.name);
      if (hidden) model.hidden.add(s.name);
      else model.hidden.delete(s.name);
      button.setAttribute('aria-pressed', String(!hidden));
      button.classList.toggle('gl-legend-off', hidden);
      redraw();
    });
    list.appendChild(el('li', {}, [button]));
  }
  const markers = [];
  if (series.some((s) => s.values.some((v, i) => !Number.isFinite(v) && !(s.none && s.none[i]))
    || (s.flags && s.flags.some(Boolean)))) {
    markers.push({css: NONFINITE_CSS, text: '▼ NaN/Inf', cls: 'gl-key-nonfinite'});
  }
  if (series.some((s) => s.none && s.none.some(Boolean))) {
    markers.push({css: NONE_CSS, text: '■ None (disconnected)', cls: 'gl-key-none'});
  }
  for (const m of [...markers, ...extra]) {
    list.appendChild(el('li', {class: `gl-legend-key ${m.cls || ''}`}, [el('span', {style: `color:${m.css}`, text: m.text})]));
  }
  return list;
}

// A line chart card: series over steps (line_draw.js), with what
// TensorBoard's Time Series cards offer - drag to zoom the steps and
// double-click or "Reset zoom" to undo (the view's zoom: every chart of the
// view follows, shared_axis.js), legend entries that hide and show their
// series, smoothing, CSV/JSON download - plus a click that picks a step, a
// rule at the marked step, limits (dashed step lines in their series'
// color, or horizontal lines) whose basis the tooltip says, and a
// highlighted series.

import {NONFINITE_CSS, NONE_CSS, PALETTE} from './colors.js';
import {chartFrame, fillTooltip, placeTooltip} from './chart_frame.js';
import {remember} from './chart_memory.js';
import {el, isolate} from './dom.js';
import {fmt} from './format.js';
import {drawLines, drawnValues, isHidden, stepDomain} from './line_draw.js';
import {lastAtOrBefore} from './scale.js';
import {joinAxis} from './shared_axis.js';
import {attachZoom} from './zoom.js';

/**
 * Create a line chart.
 * @param {Object} o
 *   series: [{name, steps: number[], values: number[], none?: flags, flags?: flags, color?, dashed?,
 *     stepped? (a step line), under? (drawn wide and pale under the others), smooth? (false: never smoothed),
 *     limitOf? (the name of the series whose limit this is: one legend entry, hidden with it), basis?}]
 *   yScale: 'linear' (default) | 'log' | 'count' (log with 0 on the bottom edge); logY: same as 'log'
 *   title, note, yLabel, height; limits: [{value, label, basis?}]; markStep; highlight (series name)
 *   smoothing (0..0.999); onClick(step); legendNote: extra legend entries [{css, text}]
 * @returns {HTMLElement} the chart (a <figure class="gl-chart gl-line">)
 */
export function lineChart(o) {
  let k = 0;
  const colorOf = new Map();
  const series = o.series.map((s) => {
    const color = s.color || colorOf.get(s.limitOf) || PALETTE[k++ % PALETTE.length];
    if (!s.limitOf) colorOf.set(s.name, color);
    return {...s, color};
  });
  const kept = remember(`line:${o.title}`);
  const chart = {drawn: false, redraw: () => frame.redraw()};
  const axis = joinAxis(chart);
  const own = stepDomain(series);
  if (own) axis.extend(own[0], own[1]);
  const model = {
    series, hidden: kept.hidden, zoom: axis.zoom, axis, height: o.height || 220,
    yScale: o.yScale || (o.logY ? 'log' : 'linear'), yLabel: o.yLabel || '', limits: o.limits || [],
    markStep: o.markStep, highlight: o.highlight, smoothing: Number(o.smoothing) || 0,
  };
  const frame = chartFrame({
    title: o.title, note: o.note, className: 'gl-line', label: o.title || o.yLabel,
    name: o.title, data: () => ({series: series.filter((s) => !isHidden(model, s))}),
    onReset: () => setZoom(null),
  });
  const {figure, canvas, tooltip, wrap} = frame;
  let layout = null;
  const draw = (width) => {
    chart.drawn = true;
    layout = drawLines(canvas, model, Math.max(width, 200));
    // What is drawn, for tests and tools that read the chart.
    canvas.dataset.plot = layout ? JSON.stringify({...layout.plot, domain: layout.domain, yScale: model.yScale,
      yDomain: layout.yDomain, yLabels: layout.yLabels, xTicks: layout.xTicks,
      hidden: [...model.hidden], theme: document.documentElement.dataset.theme || ''}) : '';
  };
  frame.draw(draw);
  const setZoom = (range) => axis.setZoom(range);
  frame.setZoomed(Boolean(model.zoom));
  frame.legend.appendChild(legend(series, model, () => frame.redraw(), o.legendNote));
  figure.dataset.limits = String(series.filter((s) => s.limitOf).length);
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
    fillTooltip(tooltip, `step ${step}`, [...tooltipLines(series, model, step), ...basisLines(series, model)]);
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
    if (isHidden(model, s)) continue;
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
  const ordered = [...series].sort((a, b) => ((b.limitOf || b.name) === model.highlight)
    - ((a.limitOf || a.name) === model.highlight));
  for (const s of ordered) {
    if (isHidden(model, s)) continue;
    const i = s.stepped ? lastAtOrBefore(s.steps, step) : nearestIndex(s.steps, step);
    if (i < 0 || (!s.stepped && s.steps[i] !== step)) continue;
    let text;
    if (s.none && s.none[i]) text = 'None (disconnected)';
    else if (s.limitOf) text = Number.isFinite(s.values[i]) ? fmt(s.values[i]) : 'none (not judged here)';
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

/** What each limit drawn is (its basis), once per distinct basis: the lines under a tooltip. */
function basisLines(series, model) {
  const seen = new Map();
  for (const s of series) {
    if (!s.limitOf || !s.basis || isHidden(model, s)) continue;
    seen.set(s.basis, [...(seen.get(s.basis) || []), s.limitOf]);
  }
  for (const l of model.limits || []) if (l.basis) seen.set(l.basis, [...(seen.get(l.basis) || []), l.label]);
  const several = seen.size > 1;
  return [...seen].map(([basis, names]) => el('div', {class: 'gl-tip-basis',
    text: `${several ? `limit of ${names.join(', ')}` : 'limit'}: ${basis}`}));
}

/** Legend: one toggle button per series (click hides/shows it and its limit), then the marker keys. */
function legend(series, model, redraw, extra = []) {
  const list = el('ul', {class: 'gl-legend'});
  for (const s of series) {
    if (s.limitOf) continue;
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
  if (series.some((s) => s.limitOf)) {
    markers.push({css: 'inherit', text: '- - - limit (same color; hover for its basis)', cls: 'gl-key-limit'});
  }
  if (model.yScale === 'log' && series.some((s) => !s.limitOf && s.values.some((v, i) => v === 0
    && !(s.none && s.none[i])))) {
    markers.push({css: 'inherit', text: '△ exactly 0 (off the log axis, drawn on its bottom edge)', cls: 'gl-key-zero'});
  }
  if (series.some((s) => s.values.some((v, i) => !Number.isFinite(v) && !(s.limitOf) && !(s.none && s.none[i]))
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

// Canvas drawing shared by the line charts and heatmaps: the step axis
// with round ticks, the plot frame, and the rule that marks a step.

import {stepTicks} from './scale.js';

export const FONT = '11px Roboto, "Helvetica Neue", Arial, sans-serif';

/** Step ticks under the plot, about one per 90 px, never overlapping; returns the ticks drawn. */
export function drawStepAxis(ctx, x, plot, colors) {
  const [d0, d1] = x.domain;
  ctx.save();
  ctx.font = FONT;
  ctx.fillStyle = colors.muted;
  ctx.strokeStyle = colors.muted;
  ctx.textAlign = 'center';
  ctx.textBaseline = 'top';
  let lastRight = -Infinity;
  const drawn = [];
  for (const t of stepTicks(d0, d1, Math.max(2, Math.floor((plot.x1 - plot.x0) / 90)))) {
    const px = x(t);
    if (px < plot.x0 - 1 || px > plot.x1 + 1) continue;
    const text = String(t);
    const w = ctx.measureText(text).width;
    if (px - w / 2 < lastRight + 6) continue;
    lastRight = px + w / 2;
    drawn.push(t);
    ctx.beginPath();
    ctx.moveTo(Math.round(px) + 0.5, plot.y1);
    ctx.lineTo(Math.round(px) + 0.5, plot.y1 + 4);
    ctx.stroke();
    ctx.fillText(text, px, plot.y1 + 6);
  }
  ctx.restore();
  return drawn;
}

/** The plot's border. */
export function drawFrame(ctx, plot, colors) {
  ctx.strokeStyle = colors.muted;
  ctx.lineWidth = 1;
  ctx.strokeRect(plot.x0 + 0.5, plot.y0 + 0.5, plot.x1 - plot.x0, plot.y1 - plot.y0);
}

/** A vertical rule at `step` with its label ("step 150") above the plot. */
export function drawRule(ctx, x, plot, step, colors, label = `step ${step}`) {
  const px = x(step);
  if (!(px >= plot.x0 - 1 && px <= plot.x1 + 1)) return;
  ctx.save();
  ctx.strokeStyle = colors.rule;
  ctx.fillStyle = colors.rule;
  ctx.lineWidth = 1.5;
  ctx.setLineDash([4, 3]);
  ctx.beginPath();
  ctx.moveTo(Math.round(px) + 0.5, plot.y0);
  ctx.lineTo(Math.round(px) + 0.5, plot.y1);
  ctx.stroke();
  ctx.setLineDash([]);
  ctx.font = FONT;
  ctx.textBaseline = 'bottom';
  const w = ctx.measureText(label).width;
  const left = px + 4 + w > plot.x1 ? px - 4 - w : px + 4;
  ctx.fillText(label, left, plot.y0 - 1);
  ctx.restore();
}

/** A dashed horizontal line across the plot at py with its label at the right end (on a background box). */
export function drawLabelledLine(ctx, plot, py, label, color, colors) {
  ctx.save();
  ctx.font = FONT;
  ctx.strokeStyle = color;
  ctx.lineWidth = 1.25;
  ctx.setLineDash([7, 4]);
  ctx.beginPath();
  ctx.moveTo(plot.x0, py);
  ctx.lineTo(plot.x1, py);
  ctx.stroke();
  ctx.setLineDash([]);
  const w = ctx.measureText(label).width;
  const top = py - 14 >= plot.y0 ? py - 14 : py + 2;
  ctx.globalAlpha = 0.85;
  ctx.fillStyle = colors.bg;
  ctx.fillRect(plot.x1 - w - 8, top, w + 6, 13);
  ctx.globalAlpha = 1;
  ctx.fillStyle = color;
  ctx.textAlign = 'right';
  ctx.textBaseline = 'top';
  ctx.fillText(label, plot.x1 - 5, top + 1);
  ctx.restore();
}

/** A y-axis title along the left edge. */
export function drawYTitle(ctx, text, plot, colors) {
  if (!text) return;
  ctx.save();
  ctx.font = FONT;
  ctx.fillStyle = colors.muted;
  ctx.translate(11, (plot.y0 + plot.y1) / 2);
  ctx.rotate(-Math.PI / 2);
  ctx.textAlign = 'center';
  ctx.textBaseline = 'middle';
  ctx.fillText(text, 0, 0);
  ctx.restore();
}

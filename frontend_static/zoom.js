// Drag to zoom on a plot's step axis, click to pick, double-click to reset.
// A press and release that moved less than a few pixels is a click; a
// longer horizontal drag selects a step range (drawn as a band).

const DRAG_PX = 5;

/**
 * Wire a chart's canvas.
 * @param {Object} o
 *   canvas, brush (the band element), plot(): {x0, x1, y0, y1} or null
 *   onZoom(px0, px1): a drag from px0 to px1 (CSS px, px0 < px1)
 *   onClick(px, py), onReset()
 */
export function attachZoom(o) {
  const local = (event) => {
    const rect = o.canvas.getBoundingClientRect();
    return [event.clientX - rect.left, event.clientY - rect.top];
  };
  o.canvas.addEventListener('mousedown', (event) => {
    if (event.button !== 0) return;
    const plot = o.plot();
    const [x0, y0] = local(event);
    if (!plot || x0 < plot.x0 || x0 > plot.x1 || y0 < plot.y0 || y0 > plot.y1) return;
    event.preventDefault();
    const band = (x) => [Math.max(plot.x0, Math.min(x0, x)), Math.min(plot.x1, Math.max(x0, x))];
    const move = (e) => {
      const [lo, hi] = band(local(e)[0]);
      o.brush.hidden = hi - lo < DRAG_PX;
      Object.assign(o.brush.style, {left: `${lo}px`, width: `${hi - lo}px`,
        top: `${plot.y0}px`, height: `${plot.y1 - plot.y0}px`});
    };
    const up = (e) => {
      window.removeEventListener('mousemove', move);
      window.removeEventListener('mouseup', up);
      o.brush.hidden = true;
      const [lo, hi] = band(local(e)[0]);
      if (hi - lo < DRAG_PX) o.onClick(x0, y0);
      else o.onZoom(lo, hi);
    };
    window.addEventListener('mousemove', move);
    window.addEventListener('mouseup', up);
  });
  o.canvas.addEventListener('dblclick', () => o.onReset());
}

// The step axis the charts of one view share.  Its zoom is the view's
// (state key `zoom`, so it is in the URL): a drag on any chart zooms every
// chart of the view, "Reset zoom" or a double-click on any resets them all.
// Its step domain is the union of what the charts show, and charts of one
// width share their left margin, so a step is at the same x in a line chart
// and in the heatmap under it.

let current = newAxis(null, () => {});

function newAxis(zoom, setZoom) {
  return {zoom, setZoom, lo: Infinity, hi: -Infinity, lefts: new Map(), charts: new Set(), pending: false};
}

/** "40-120" -> [40, 120] (null when absent or not a range). */
export function parseZoom(text) {
  const m = /^(-?\d+)-(-?\d+)$/.exec(String(text || ''));
  if (!m) return null;
  const range = [Number(m[1]), Number(m[2])];
  return range[1] > range[0] ? range : null;
}

/** [40, 120] -> "40-120" ('' for null). */
export function zoomText(range) {
  return range ? `${Math.round(range[0])}-${Math.round(range[1])}` : '';
}

/** Start the axis of a view being drawn: its zoom ([s0, s1] or null) and how to change it. */
export function beginAxis(zoom, setZoom) {
  current = newAxis(zoom, setZoom);
}

/**
 * Join the current view's axis; `chart.redraw()` is called when the shared
 * domain or margin grows after the chart was drawn.
 */
export function joinAxis(chart) {
  const axis = current;
  axis.charts.add(chart);
  const redrawOthers = () => {
    if (axis.pending) return;
    axis.pending = true;
    requestAnimationFrame(() => {
      axis.pending = false;
      for (const other of axis.charts) other.redraw();
    });
  };
  return {
    zoom: axis.zoom,
    setZoom: (range) => axis.setZoom(range),
    /** Make the shared domain cover [lo, hi]. */
    extend(lo, hi) {
      if (!(lo <= hi)) return;
      const grew = lo < axis.lo || hi > axis.hi;
      axis.lo = Math.min(axis.lo, lo);
      axis.hi = Math.max(axis.hi, hi);
      if (grew && chart.drawn) redrawOthers();
    },
    /** The steps every chart of the view shows: the zoom, else the union of their data. */
    domain() {
      if (axis.zoom) return axis.zoom;
      if (!(axis.lo <= axis.hi)) return null;
      return axis.hi > axis.lo ? [axis.lo, axis.hi] : [axis.lo - 1, axis.hi + 1];
    },
    /** The left margin of charts `width` px wide: the largest any of them needs. */
    left(width, needed) {
      const key = Math.round(width);
      const known = axis.lefts.get(key) || 0;
      if (needed > known) {
        axis.lefts.set(key, needed);
        if (known > 0) redrawOthers();
        return needed;
      }
      return known;
    },
  };
}

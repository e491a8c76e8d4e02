// What a user did to a chart (the series hidden from its legend; the zoom
// is the view's, in the URL: shared_axis.js) kept while the view shows the
// same data: across TensorBoard's reloads
// (every 30 s with auto-reload on) and across a click that marks a step or
// selects a variable; forgotten when the run, record, metric, filters or
// view change.

const memory = new Map();
let shown = null;

// State keys that change what the charts hold (others only mark or highlight).
const DATA_KEYS = ['view', 'run', 'tag', 'utag', 'metric', 'filter', 'smin', 'smax', 'hrange', 'k', 'rank',
  'runA', 'runB', 'noise', 'qkind', 'qtag', 'qrow', 'qcol'];

/** Called by the shell before drawing a state: forgets the charts when it shows other data. */
export function beginDraw(state) {
  const identity = JSON.stringify(DATA_KEYS.map((key) => state[key] ?? ''));
  if (identity !== shown) memory.clear();
  shown = identity;
}

/** The remembered {hidden} of the chart named `key` (new ones the first time). */
export function remember(key) {
  if (!memory.has(key)) memory.set(key, {hidden: new Set()});
  return memory.get(key);
}

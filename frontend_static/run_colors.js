// Run colors as TensorBoard shows them: its default palette (Slate, Cyan,
// Pink, Yellow, Purple, Light Green, Orange; Slate lighter in dark mode),
// given to the runs in the order of TensorBoard's own runs listing
// (data/runs), the order its run selector colors them in.

const PALETTE = [
  ['#425066', '#8e98a3'], ['#12b5cb', '#12b5cb'], ['#e52592', '#e52592'], ['#f9ab00', '#f9ab00'],
  ['#9334e6', '#9334e6'], ['#7cb342', '#7cb342'], ['#e8710a', '#e8710a'],
];

let order = null;

/** TensorBoard's runs in its order (cached until forgetRunColors); [] outside TensorBoard. */
async function tensorBoardRuns() {
  if (!order) {
    order = fetch('../../runs').then((r) => (r.ok ? r.json() : [])).then((runs) => (Array.isArray(runs) ? runs : []))
      .catch(() => []);
  }
  return order;
}

/** Forget TensorBoard's runs listing (on reload: runs may have been added). */
export function forgetRunColors() {
  order = null;
}

/** The color of run `index` in TensorBoard's palette, for the theme. */
export function paletteColor(index, dark = document.documentElement.dataset.theme === 'dark') {
  const pair = PALETTE[((index % PALETTE.length) + PALETTE.length) % PALETTE.length];
  return dark ? pair[1] : pair[0];
}

/**
 * run -> CSS color for `names`: TensorBoard's color of each run (its index
 * in TensorBoard's runs listing); runs it does not list come after them.
 */
export async function runColors(names) {
  const listed = await tensorBoardRuns();
  const index = new Map(listed.map((name, i) => [name, i]));
  let next = listed.length;
  const out = new Map();
  for (const name of names) out.set(name, paletteColor(index.has(name) ? index.get(name) : next++));
  return out;
}

// Records as a user names them.  A comparison is the group of
// divergence-like records (gradients, activations, loss) that share a tag
// prefix, labelled by its variants: "mixed_bfloat16 vs float32", never a
// hash-suffixed tag.  The default comparison is the low-precision candidate
// against a float32 reference (the question users ask first).  The runs
// route names each tag (`name`) and resolves each comparison's sides and
// rank (`compared`, docs/ROUTES.md): nothing is parsed or ranked here.

import {isolate} from '../dom.js';

export const COMPARISON_KINDS = ['divergence', 'activation_divergence', 'loss_comparison'];

/** "label" of a comparison side, with XLA/device when its label does not say so. */
export function sideLabel(variant) {
  if (!variant || typeof variant !== 'object') return '?';
  return String(variant.label || variant.policy || '?');
}

/** "mixed_bfloat16 vs float32" of a record's extras. */
export function comparisonLabel(extras) {
  const e = extras || {};
  return `${sideLabel(e.candidate)} vs ${sideLabel(e.reference)}`;
}

/** Details of a side: "policy mixed_bfloat16, computes in bfloat16, XLA, device /GPU:0", and
 * how it computed ("eager"; "the step's own gradients" or "gradients recomputed by the lens");
 * `compute`: its compute dtype as the runs route resolved it (null: unknown). */
export function sideDetails(variant, compute) {
  if (!variant || typeof variant !== 'object') return 'unknown';
  const parts = [];
  if (variant.policy) parts.push(`policy ${variant.policy}`);
  if (compute) parts.push(`computes in ${compute}`);
  if (variant.jit_compile) parts.push('XLA');
  if (variant.device && variant.device !== 'default') parts.push(`device ${variant.device}`);
  if (variant.execution === 'eager') parts.push('eager');
  if (variant.gradients === 'applied') parts.push('the step\'s own gradients');
  else if (variant.gradients === 'recomputed') parts.push('gradients recomputed by the lens');
  return parts.join(', ');
}

/** The route's rank of a comparison (smaller first; 5 when its extras could not be read). */
function rankOf(compared) {
  return compared ? compared.rank : 5;
}

/**
 * The comparisons of a run entry (runs route): [{key, label, extras,
 * compared, rank, divergence, activation_divergence, loss_comparison}] (tag
 * entries or null), best first.  Labels are unique (a repeated one names
 * its key, the tags' name).
 */
export function comparisons(runEntry) {
  const groups = new Map();
  for (const t of (runEntry && runEntry.tags) || []) {
    if (!COMPARISON_KINDS.includes(t.kind)) continue;
    const key = t.name;
    if (!groups.has(key)) {
      groups.set(key, {key, extras: t.extras, compared: t.compared, divergence: null, activation_divergence: null,
        loss_comparison: null});
    }
    const group = groups.get(key);
    if (!group[t.kind]) group[t.kind] = t;
    if (t.kind === 'divergence') Object.assign(group, {extras: t.extras, compared: t.compared});
  }
  const list = [...groups.values()];
  for (const g of list) {
    g.label = comparisonLabel(g.extras);
    g.rank = rankOf(g.compared);
  }
  for (const g of list) {
    if (list.filter((h) => h.label === g.label).length > 1) g.label = `${g.label} (${g.key})`;
  }
  return list.sort((a, b) => a.rank - b.rank || a.key.localeCompare(b.key));
}

/** The comparison holding `tag` (any of its kinds), else the default one. */
export function chooseComparison(list, tag) {
  return list.find((g) => COMPARISON_KINDS.some((k) => g[k] && g[k].tag === tag)) || list[0] || null;
}

/** "gradients (6 variables)" of a grad_stats/update_stats tag entry. */
export function recordLabel(entry) {
  const n = entry.rows.length;
  return `${isolate(entry.name)} (${n} ${n === 1 ? 'variable' : 'variables'})`;
}

/** The tag entry of `kind` in `runEntry` named `tag`, else the first one. */
export function chooseTag(runEntry, kind, tag) {
  const tags = ((runEntry && runEntry.tags) || []).filter((t) => t.kind === kind);
  return tags.find((t) => t.tag === tag) || tags[0] || null;
}

/** The record of `kind` logged beside `entry` (same name), else the first of that kind. */
export function sibling(runEntry, entry, kind) {
  const tags = ((runEntry && runEntry.tags) || []).filter((t) => t.kind === kind);
  return tags.find((t) => t.name === entry.name) || tags[0] || null;
}

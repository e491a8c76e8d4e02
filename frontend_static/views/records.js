// Records as a user names them.  A comparison is the group of
// divergence-like records (gradients, activations, loss) that share a tag
// prefix, labelled by its variants: "mixed_bfloat16 vs float32", never a
// hash-suffixed tag.  The default comparison is the low-precision candidate
// against a float32 reference (the question users ask first).

import {isolate} from '../dom.js';

export const COMPARISON_KINDS = ['divergence', 'activation_divergence', 'loss_comparison'];

// Keras policy names and the compute dtype they stand for (records.py).
const POLICY_COMPUTE = {
  float64: 'float64', float32: 'float32', mixed_bfloat16: 'bfloat16', bfloat16: 'bfloat16',
  mixed_float16: 'float16', float16: 'float16',
};

/** The tag's name prefix: "model_vs_float32/divergence/1a2b" -> "model_vs_float32". */
export function prefixOf(tag, kind) {
  const marker = `/${kind}/`;
  const i = tag.lastIndexOf(marker);
  return i >= 0 ? tag.slice(0, i) : tag;
}

/** The compute dtype of a comparison side (stated, or from an exact policy name). */
export function computeDtype(variant) {
  if (!variant || typeof variant !== 'object') return null;
  if (variant.compute_dtype) return variant.compute_dtype;
  return POLICY_COMPUTE[variant.policy] || null;
}

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
 * how it computed ("eager"; "the step's own gradients" or "gradients recomputed by the lens"). */
export function sideDetails(variant) {
  if (!variant || typeof variant !== 'object') return 'unknown';
  const parts = [];
  if (variant.policy) parts.push(`policy ${variant.policy}`);
  const compute = computeDtype(variant);
  if (compute) parts.push(`computes in ${compute}`);
  if (variant.jit_compile) parts.push('XLA');
  if (variant.device && variant.device !== 'default') parts.push(`device ${variant.device}`);
  if (variant.execution === 'eager') parts.push('eager');
  if (variant.gradients === 'applied') parts.push('the step\'s own gradients');
  else if (variant.gradients === 'recomputed') parts.push('gradients recomputed by the lens');
  return parts.join(', ');
}

/** How likely a comparison is the one to show first (smaller first). */
export function comparisonRank(extras) {
  const e = extras || {};
  if (e.comparison === 'replica_vs_mean') return 9;
  const cand = computeDtype(e.candidate);
  const ref = computeDtype(e.reference);
  const low = cand === 'bfloat16' || cand === 'mixed' || cand === 'float16';
  if (low && ref === 'float32') return cand === 'float16' ? 1 : 0;
  if (low && ref === 'float64') return 2;
  if (cand === 'float32' && ref === 'float64') return 3;
  return 5;
}

/**
 * The comparisons of a run entry (runs route): [{key, label, extras,
 * divergence, activation_divergence, loss_comparison}] (tag entries or
 * null), best first.  Labels are unique (a repeated one names its prefix).
 */
export function comparisons(runEntry) {
  const groups = new Map();
  for (const t of (runEntry && runEntry.tags) || []) {
    if (!COMPARISON_KINDS.includes(t.kind)) continue;
    const key = prefixOf(t.tag, t.kind);
    if (!groups.has(key)) {
      groups.set(key, {key, extras: t.extras, divergence: null, activation_divergence: null, loss_comparison: null});
    }
    const group = groups.get(key);
    if (!group[t.kind]) group[t.kind] = t;
    if (t.kind === 'divergence') group.extras = t.extras;
  }
  const list = [...groups.values()];
  for (const g of list) g.label = comparisonLabel(g.extras);
  for (const g of list) {
    if (list.filter((h) => h.label === g.label).length > 1) g.label = `${g.label} (${g.key})`;
  }
  return list.sort((a, b) => comparisonRank(a.extras) - comparisonRank(b.extras) || a.key.localeCompare(b.key));
}

/** The comparison holding `tag` (any of its kinds), else the default one. */
export function chooseComparison(list, tag) {
  return list.find((g) => COMPARISON_KINDS.some((k) => g[k] && g[k].tag === tag)) || list[0] || null;
}

/** "gradients (6 variables)" of a grad_stats/update_stats tag entry. */
export function recordLabel(entry) {
  const n = entry.rows.length;
  return `${isolate(prefixOf(entry.tag, entry.kind))} (${n} ${n === 1 ? 'variable' : 'variables'})`;
}

/** The tag entry of `kind` in `runEntry` named `tag`, else the first one. */
export function chooseTag(runEntry, kind, tag) {
  const tags = ((runEntry && runEntry.tags) || []).filter((t) => t.kind === kind);
  return tags.find((t) => t.tag === tag) || tags[0] || null;
}

/** The record of `kind` logged beside `entry` (same prefix), else the first of that kind. */
export function sibling(runEntry, entry, kind) {
  const tags = ((runEntry && runEntry.tags) || []).filter((t) => t.kind === kind);
  const prefix = prefixOf(entry.tag, entry.kind);
  return tags.find((t) => prefixOf(t.tag, kind) === prefix) || tags[0] || null;
}

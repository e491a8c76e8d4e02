// View state kept in the URL hash, so that a view can be shared.
//
// The tab's own document (data/plugin_entry.html?name=gradlens) keeps the
// state in its hash: "#view=divergence&run=bf16&metric=rel_l2".  Inside
// TensorBoard the same keys are mirrored into TensorBoard's hash as
// "p.gradlens.<key>" (the convention of TensorBoard's GetURLPluginData), so
// the address bar of the whole page can be shared.

import {keepSettings, storedSettings} from './settings.js';

const PREFIX = 'p.gradlens.';
const listeners = new Set();
let current = {};

/** Parse "a=1&b=x" (a URL hash without '#') into an object. */
export function parseHash(hash) {
  const out = {};
  const text = hash.startsWith('#') ? hash.slice(1) : hash;
  for (const [key, value] of new URLSearchParams(text)) out[key] = value;
  return out;
}

/** Serialize state to a hash string (empty values are left out). */
export function toHash(state) {
  const query = new URLSearchParams();
  for (const key of Object.keys(state).sort()) {
    const value = state[key];
    if (value === undefined || value === null || value === '') continue;
    query.set(key, String(value));
  }
  return query.toString();
}

/** The current state (a copy). */
export function get() {
  return {...current};
}

/**
 * Initial state: the view settings kept from earlier visits (settings.js),
 * then TensorBoard's p.gradlens.* keys (if any), then this document's hash
 * (the URL wins).  Afterwards a change of either hash (the tab's own, or
 * TensorBoard's address while the GradLens tab is open) switches the view.
 */
export function init(hostState = {}) {
  current = {...storedSettings(), ...hostState, ...parseHash(window.location.hash)};
  // The first entry of this document's history holds the state shown (TensorBoard's p.gradlens.* keys
  // included): Back to it restores this view, not an empty one.
  if (window.location.hash.replace(/^#/, '') !== toHash(current)) {
    window.history.replaceState(null, '', withHash(toHash(current)));
  }
  // Back and Forward: an entry this tab pushed (pushState) comes back with a popstate and no
  // hashchange; either way the state follows the hash, and TensorBoard's address follows it.
  const own = () => adopt(parseHash(window.location.hash), false, true);
  window.addEventListener('hashchange', own);
  window.addEventListener('popstate', own);
  try {
    if (window.parent !== window) {
      // A TensorBoard address without p.gradlens.* keys (TensorBoard's own navigation back to the
      // tab) keeps the view: the keys are written back.
      const follow = () => {
        const host = hostHashState();
        if (host && Object.keys(host).length) adopt(host, true);
        else if (host) mirrorToHost();
      };
      window.parent.addEventListener('hashchange', follow);
      window.parent.addEventListener('popstate', follow);
    }
  } catch (error) {
    // Another origin: only the tab's own hash is followed.
  }
  return get();
}

/** Make `next` the state (if it differs); fromHost: also write it to our hash; toHost: to TensorBoard's. */
function adopt(next, fromHost, toHost = false) {
  if (toHash(next) === toHash(current)) return;
  current = next;
  if (fromHost) window.history.replaceState(null, '', withHash(toHash(current)));
  if (toHost) mirrorToHost();
  notify();
}

/**
 * Merge `patch` into the state, write the hash, keep the view settings
 * (settings.js: what the user set, not what an address brought), notify
 * listeners.  A key set to '' or null is removed.
 */
export function update(patch, {replace = false} = {}) {
  const next = {...current, ...patch};
  for (const key of Object.keys(next)) {
    if (next[key] === '' || next[key] === null || next[key] === undefined) delete next[key];
  }
  if (toHash(next) === toHash(current)) return;
  current = next;
  writeHash(replace);
  keepSettings(current);
  notify();
}

/** Call fn(state) after every change; returns an unsubscribe function. */
export function subscribe(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function notify() {
  for (const fn of listeners) fn(get());
}

function writeHash(replace) {
  const url = withHash(toHash(current));
  if (replace) window.history.replaceState(null, '', url);
  else window.history.pushState(null, '', url);
  mirrorToHost();
}

/**
 * This document's own address with `hash`: a bare "#..." would be resolved against the document's
 * base (TensorBoard's plugin_entry.html sets <base href="plugin/gradlens/">), moving the address to
 * another path that shows no tab when reloaded or shared.
 */
export function withHash(hash) {
  const url = new URL(window.location.href);
  url.hash = hash;
  return url.href;
}

/**
 * TensorBoard's hash as (tab, [key, value] pairs): "#gradlens&a=1&b=2".
 * The component without '=' is the active tab (TensorBoard's convention).
 */
export function parseHostHash(hash) {
  const text = hash.startsWith('#') ? hash.slice(1) : hash;
  let tab = '';
  const pairs = [];
  for (const part of text.split('&')) {
    if (!part) continue;
    const i = part.indexOf('=');
    if (i < 0) tab = decodeURIComponent(part);
    else pairs.push([decodeURIComponent(part.slice(0, i)), decodeURIComponent(part.slice(i + 1))]);
  }
  return {tab, pairs};
}

/** The p.gradlens.* keys of TensorBoard's hash (same origin), or {}. */
export function readHostState() {
  return hostHashState() || {};
}

/** The p.gradlens.* keys of TensorBoard's hash when its GradLens tab is open, else null. */
function hostHashState() {
  try {
    if (window.parent === window) return null;
    const {tab, pairs} = parseHostHash(window.parent.location.hash);
    if (tab && tab !== 'gradlens') return null;
    const out = {};
    for (const [key, value] of pairs) {
      if (key.startsWith(PREFIX)) out[key.slice(PREFIX.length)] = value;
    }
    return out;
  } catch (error) {
    return null; // Not reachable (another origin): the tab's own hash is used.
  }
}

/**
 * Write the state as p.gradlens.* keys into TensorBoard's hash, keeping its
 * tab and other keys; replaceState fires no hashchange, so TensorBoard does
 * not re-route.
 */
function mirrorToHost() {
  try {
    if (window.parent === window) return;
    const {tab, pairs} = parseHostHash(window.parent.location.hash);
    const kept = pairs.filter(([key]) => !key.startsWith(PREFIX));
    const ours = Object.keys(current).sort().map((key) => [PREFIX + key, String(current[key])]);
    const parts = [...kept, ...ours].map(
      ([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`);
    const hash = [tab || 'gradlens', ...parts].join('&');
    const url = new URL(window.parent.location.href);
    url.hash = hash;
    window.parent.history.replaceState(window.parent.history.state, '', url.toString());
  } catch (error) {
    // Another origin: the tab's own hash still holds the state.
  }
}

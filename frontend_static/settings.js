// View settings kept across reloads, as TensorBoard keeps its own (its
// settings live in the browser's localStorage): smoothing, log axes and the
// runs ticked for overlay.  The URL still wins: a key in the address is
// used as it is, a key absent from it comes from what was kept.

const STORAGE_KEY = 'tb_gradlens.view_settings';
export const KEPT_KEYS = ['smooth', 'logy', 'overlay'];

/** The kept settings ({} when none, or when the browser keeps nothing). */
export function storedSettings() {
  try {
    const value = JSON.parse(window.localStorage.getItem(STORAGE_KEY) || '{}');
    if (!value || typeof value !== 'object') return {};
    const out = {};
    for (const key of KEPT_KEYS) if (typeof value[key] === 'string' && value[key]) out[key] = value[key];
    return out;
  } catch (error) {
    return {};
  }
}

/** Keep the settings of `state` (a key absent from it is forgotten: its default). */
export function keepSettings(state) {
  const out = {};
  for (const key of KEPT_KEYS) if (state[key]) out[key] = String(state[key]);
  try {
    window.localStorage.setItem(STORAGE_KEY, JSON.stringify(out));
  } catch (error) {
    // Storage refused (private mode, quota): the settings live in the URL only.
  }
}

// Light and dark mode: follow TensorBoard's dark mode (the "dark-mode" class
// of its body, same origin) or, standalone, the browser's
// prefers-color-scheme; set data-theme on <html>, and tell every chart so it
// redraws its canvas in the new colors while it stays open.

const listeners = new Set();

/** Call fn() after each theme change while `node` is in the document. */
export function onThemeChange(node, fn) {
  listeners.add({node, fn, seen: node.isConnected});
}

function notify() {
  for (const entry of [...listeners]) {
    if (entry.node.isConnected) {
      entry.seen = true;
      entry.fn();
    } else if (entry.seen) {
      listeners.delete(entry); // the chart was removed with its view
    }
  }
}

/** Start following the theme; sets data-theme="dark"|"light" on <html>. */
export function followTheme() {
  const root = document.documentElement;
  const media = window.matchMedia ? window.matchMedia('(prefers-color-scheme: dark)') : null;
  let hostBody = null;
  try {
    if (window.parent !== window) hostBody = window.parent.document.body;
  } catch (error) {
    hostBody = null;
  }
  const apply = () => {
    const dark = hostBody ? hostBody.classList.contains('dark-mode') : Boolean(media && media.matches);
    const theme = dark ? 'dark' : 'light';
    if (root.dataset.theme === theme) return;
    root.dataset.theme = theme;
    notify();
    root.dataset.themeDraws = String(Number(root.dataset.themeDraws || 0) + 1);
  };
  apply();
  if (hostBody) {
    new MutationObserver(apply).observe(hostBody, {attributes: true, attributeFilter: ['class']});
  } else if (media && media.addEventListener) {
    media.addEventListener('change', apply);
  }
}

// Fetching the plugin's JSON routes (docs/ROUTES.md).
//
// Routes are fetched relative to the document base (plugin/gradlens/, set by
// TensorBoard's plugin_entry.html), so they work under --path_prefix too.
// Answers are cached until clearCache() (called on every reload).

const cache = new Map();

/** Error of a route: its HTTP status and the server's text/plain message. */
export class RouteError extends Error {
  constructor(route, status, text) {
    super(`${route}: ${status} ${text}`.trim());
    this.status = status;
  }
}

/** The URL of a route with query parameters (arrays repeat the key; empty values are left out). */
export function routeUrl(route, params = {}) {
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    const list = Array.isArray(value) ? value : [value];
    for (const v of list) {
      if (v === undefined || v === null || v === '') continue;
      query.append(key, String(v));
    }
  }
  const text = query.toString();
  return `./${route}${text ? `?${text}` : ''}`;
}

/** GET a route's JSON (cached). Rejects with RouteError on an HTTP error. */
export function getJson(route, params = {}) {
  const url = routeUrl(route, params);
  if (!cache.has(url)) {
    const promise = fetch(url, {headers: {Accept: 'application/json'}}).then(async (response) => {
      if (!response.ok) {
        throw new RouteError(route, response.status, (await response.text()).slice(0, 500));
      }
      return response.json();
    });
    promise.catch(() => cache.delete(url));
    cache.set(url, promise);
  }
  return cache.get(url);
}

/** Forget every cached answer (on reload). */
export function clearCache() {
  cache.clear();
}

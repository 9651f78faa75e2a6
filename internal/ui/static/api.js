// api.js: every datum of the page comes through here, from claimd's own
// HTTP/JSON API on this origin, with the caller's credentials: the bearer
// token kept in this tab's sessionStorage, or the browser's client
// certificate. The page holds no data of its own.

const tokenKey = 'claimd.token';

export function token() { return sessionStorage.getItem(tokenKey) || ''; }
export function setToken(t) { sessionStorage.setItem(tokenKey, t); }
export function forgetToken() { sessionStorage.removeItem(tokenKey); }

// APIError is a refused or failed call: status is the HTTP status, reason
// the google.rpc.ErrorInfo reason claimd sent (CREDENTIALS_MISSING,
// NAMESPACE_DENIED, RECORD_NOT_FOUND …), message its text.
export class APIError extends Error {
  constructor(status, body, text) {
    const info = ((body && body.details) || []).find((d) => d && d.reason) || {};
    super((body && body.message) || text || ('HTTP ' + status));
    this.status = status;
    this.reason = info.reason || '';
  }
  // auth is true when the credentials are missing, unknown or expired.
  get auth() { return this.status === 401; }
}

function headers() {
  const h = { Accept: 'application/json' };
  const t = token();
  if (t) h.Authorization = 'Bearer ' + t;
  return h;
}

// get calls GET path with params (an array value repeats the parameter)
// and returns {body, date}: the decoded JSON and the server's Date.
export async function get(path, params) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v === undefined || v === null || v === '') continue;
    for (const one of [].concat(v)) url.searchParams.append(k, String(one));
  }
  const res = await fetch(url, { headers: headers(), cache: 'no-store', credentials: 'same-origin', redirect: 'error' });
  const text = await res.text();
  let body = null;
  try { body = text ? JSON.parse(text) : {}; } catch (e) { body = null; }
  if (!res.ok) throw new APIError(res.status, body, text.slice(0, 200));
  if (body === null) throw new APIError(res.status, null, 'the answer is not JSON');
  return { body, date: serverDate(res) };
}

// metrics reads /metrics (Prometheus text), which needs the metrics role.
export async function metrics() {
  const res = await fetch('/metrics', { headers: Object.assign(headers(), { Accept: 'text/plain' }), cache: 'no-store', credentials: 'same-origin', redirect: 'error' });
  const text = await res.text();
  if (!res.ok) throw new APIError(res.status, null, text.slice(0, 300));
  return { text, date: serverDate(res) };
}

// serverDate is the server's clock as its Date header tells it (to the
// second), so "overdue" is judged by claimd's time, not this browser's.
function serverDate(res) {
  const d = Date.parse(res.headers.get('Date') || '');
  return Number.isNaN(d) ? new Date() : new Date(d);
}

const enc = encodeURIComponent;

export const claims = {
  providers: () => get('/v1/providers'),
  provider: (name) => get('/v1/providers/' + enc(name)),
  record: (ns, p, key) => get(`/v1/namespaces/${enc(ns)}/providers/${enc(p)}/claims/${enc(key)}`),
  audit: (ns, p, key, pageToken) => get(`/v1/namespaces/${enc(ns)}/providers/${enc(p)}/claims/${enc(key)}/audit`, { pageSize: 1000, pageToken }),
  list: (ns, filter, pageToken) => get(`/v1/namespaces/${enc(ns)}/claims`, Object.assign({ pageSize: 1000, pageToken }, filter)),
  deferred: (ns, p, entityId, pageToken) => get(`/v1/namespaces/${enc(ns)}/providers/${enc(p)}/deferred`, { entityId, pageSize: 1000, pageToken }),
  entity: (ns, p, lifecycle, id) => get(`/v1/namespaces/${enc(ns)}/providers/${enc(p)}/lifecycles/${enc(lifecycle)}/entities/${enc(id)}`),
};

// pages calls fetch(pageToken) until the last page or max pages, and
// returns the items of field and whether more remained.
export async function pages(fetchPage, field, max) {
  let items = [], tok = '', date = null;
  for (let i = 0; i < max; i++) {
    const { body, date: d } = await fetchPage(tok);
    date = date || d;
    items = items.concat(body[field] || []);
    tok = body.nextPageToken || '';
    if (!tok) return { items, more: false, date };
  }
  return { items, more: true, date };
}

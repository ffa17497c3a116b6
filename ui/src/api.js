// The JSON API (/api/v1/...), documented in services/querier/query_http.c.

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function buildUrl(path, params) {
  const u = new URL(path, window.location.href);
  for (const [k, v] of Object.entries(params || {})) {
    if (v == null || v === '') continue;
    if (Array.isArray(v)) v.forEach((x) => u.searchParams.append(k, x));
    else u.searchParams.set(k, String(v));
  }
  return u;
}

async function errorFrom(resp) {
  const text = await resp.text().catch(() => '');
  let message = text.trim();
  let code;
  try {
    const j = JSON.parse(text);
    if (j && typeof j === 'object') {
      message = j.message || j.error || message;
      code = j.code;
    }
  } catch { /* plain text error */ }
  if (!message) message = `${resp.status} ${resp.statusText}`;
  return new ApiError(resp.status, message, code);
}

export async function fetchRaw(path, params, signal) {
  const url = buildUrl(path, params);
  let resp;
  try {
    resp = await fetch(url, { signal, headers: { Accept: 'application/json' } });
  } catch (e) {
    if (e.name === 'AbortError') throw e;
    throw new ApiError(0, `cannot reach Strata at ${url.origin}: ${e.message}`);
  }
  if (!resp.ok) throw await errorFrom(resp);
  return resp;
}

export async function getJSON(path, params, signal) {
  const resp = await fetchRaw(path, params, signal);
  return resp.json();
}

export function apiUrl(path, params) {
  return buildUrl(path, params).toString();
}

export const api = {
  profileTypes: (signal) => getJSON('api/v1/profile_types', {}, signal),
  labels: (params, signal) => getJSON('api/v1/labels', params, signal),
  values: (name, params, signal) =>
    getJSON(`api/v1/labels/${encodeURIComponent(name)}/values`, params, signal),
  queryRange: (params, signal) => getJSON('api/v1/query_range', params, signal),
  query: (params, signal) => getJSON('api/v1/query', params, signal),
  diff: (params, signal) => getJSON('api/v1/diff', params, signal),
  targets: (signal) => getJSON('api/v1/targets', {}, signal),
  agents: (signal) => getJSON('api/v1/agents', {}, signal),
};

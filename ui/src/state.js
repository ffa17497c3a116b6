// All view state lives in the URL query string, so a link reproduces the view. The store keeps a
// copy, writes it back with history.pushState (navigations) or replaceState (small edits), and
// tells subscribers which keys changed, including on back/forward.

const listeners = new Set();
let current = read();

function read() {
  const p = new URLSearchParams(window.location.search);
  const out = {};
  for (const [k, v] of p) out[k] = v;
  return out;
}

function changedKeys(a, b) {
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return new Set([...keys].filter((k) => a[k] !== b[k]));
}

function emit(prev) {
  const changed = changedKeys(prev, current);
  if (changed.size === 0) return;
  for (const fn of [...listeners]) fn(current, changed);
}

export const store = {
  get(key, fallback = '') {
    const v = current[key];
    return v == null ? fallback : v;
  },
  all() { return { ...current }; },
  // patch: {key: string|null}; null or '' removes the key.
  set(patch, { push = true } = {}) {
    const prev = current;
    const next = { ...current };
    for (const [k, v] of Object.entries(patch)) {
      if (v == null || v === '') delete next[k];
      else next[k] = String(v);
    }
    if (changedKeys(prev, next).size === 0) return;
    current = next;
    const qs = new URLSearchParams(next).toString();
    const url = `${window.location.pathname}${qs ? `?${qs}` : ''}`;
    if (push) window.history.pushState(null, '', url);
    else window.history.replaceState(null, '', url);
    emit(prev);
  },
  subscribe(fn) {
    listeners.add(fn);
    return () => listeners.delete(fn);
  },
};

window.addEventListener('popstate', () => {
  const prev = current;
  current = read();
  emit(prev);
});

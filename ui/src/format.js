// Value, time and unit formatting shared by every view.

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];

function trim(n, digits = 3) {
  // Up to `digits` significant digits, no trailing zeros.
  if (!isFinite(n)) return String(n);
  const a = Math.abs(n);
  if (a === 0) return '0';
  const d = a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : Math.min(6, digits);
  return String(parseFloat(n.toFixed(d)));
}

export function formatBytes(v) {
  let i = 0;
  let a = Math.abs(v);
  while (a >= 1024 && i < BYTE_UNITS.length - 1) { a /= 1024; i++; }
  return `${trim(Math.sign(v) * a)} ${BYTE_UNITS[i]}`;
}

export function formatNanos(ns) {
  const a = Math.abs(ns);
  if (a < 1e3) return `${trim(ns)} ns`;
  if (a < 1e6) return `${trim(ns / 1e3)} µs`;
  if (a < 1e9) return `${trim(ns / 1e6)} ms`;
  if (a < 60e9) return `${trim(ns / 1e9)} s`;
  if (a < 3600e9) return `${trim(ns / 60e9)} min`;
  if (a < 86400e9) return `${trim(ns / 3600e9)} h`;
  return `${trim(ns / 86400e9)} d`;
}

export function formatCount(v) {
  const a = Math.abs(v);
  if (a < 1e3) return trim(v);
  if (a < 1e6) return `${trim(v / 1e3)}k`;
  if (a < 1e9) return `${trim(v / 1e6)}M`;
  if (a < 1e12) return `${trim(v / 1e9)}G`;
  return `${trim(v / 1e12)}T`;
}

// Formats a value in a pprof sample unit ("bytes", "nanoseconds", "count", ...).
export function formatValue(v, unit) {
  if (v == null || Number.isNaN(v)) return '–';
  switch (unit) {
    case 'bytes': return formatBytes(v);
    case 'nanoseconds': return formatNanos(v);
    case 'microseconds': return formatNanos(v * 1e3);
    case 'milliseconds': return formatNanos(v * 1e6);
    case 'seconds': return formatNanos(v * 1e9);
    case 'cores': return `${trim(v)} cores`;
    case 'bytes/s': return `${formatBytes(v)}/s`;
    case 'count/s': return `${formatCount(v)}/s`;
    case 'count': case '': case undefined: return formatCount(v);
    default: return `${formatCount(v)} ${unit}`;
  }
}

export function formatPercent(part, whole) {
  if (!whole) return '0%';
  const p = (part / whole) * 100;
  const a = Math.abs(p);
  return `${a >= 10 ? p.toFixed(1) : a >= 0.01 || a === 0 ? p.toFixed(2) : p.toExponential(1)}%`;
}

export function formatSignedPercent(p) {
  if (!isFinite(p)) return p > 0 ? '+∞%' : '−∞%';
  return `${p > 0 ? '+' : ''}${p.toFixed(Math.abs(p) >= 10 ? 1 : 2)}%`;
}

// The relative change from a to b as a label: "new" when only b has a value, "removed" when
// only a has, else the signed percentage of a ("+25.0%", "-50.0%").
export function formatDiffPercent(b, a) {
  if (a === 0) return b === 0 ? '0%' : 'new';
  if (b === 0) return 'removed';
  return formatSignedPercent(((b - a) / a) * 100);
}

export function formatSigned(v, unit) {
  return `${v > 0 ? '+' : ''}${formatValue(v, unit)}`;
}

function pad(n, w = 2) { return String(n).padStart(w, '0'); }

// Local time "2026-12-02 12:56:20" (ms precision when asked).
export function formatTime(ms, withMs = false) {
  const d = new Date(ms);
  const s = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  return withMs ? `${s}.${pad(d.getMilliseconds(), 3)}` : s;
}

// For <input type="datetime-local">.
export function toLocalInput(ms) {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// Prometheus-style duration ("15s", "1h30m", "2d") to milliseconds; null when invalid.
export function parseDurationMs(text) {
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)/g;
  const mult = { ms: 1, s: 1e3, m: 60e3, h: 3600e3, d: 86400e3, w: 7 * 86400e3, y: 365 * 86400e3 };
  let total = 0, used = 0, m;
  while ((m = re.exec(text)) !== null) {
    if (m.index !== used) return null;
    total += parseFloat(m[1]) * mult[m[2]];
    used = re.lastIndex;
  }
  return used === text.length && used > 0 ? total : null;
}

// "now", "now-1h" or Unix milliseconds to Unix milliseconds (null when invalid).
export function resolveTime(text, now = Date.now()) {
  if (text == null || text === '') return null;
  if (text === 'now') return now;
  if (text.startsWith('now-')) {
    const d = parseDurationMs(text.slice(4));
    return d == null ? null : now - d;
  }
  if (/^\d+$/.test(text)) return Number(text);
  const t = Date.parse(text);
  return Number.isNaN(t) ? null : t;
}

export function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }[c]));
}

// The icicle graph, drawn on a canvas from the flamebearer JSON (lib/calltree/calltree.h):
// root on top, colour by binary (or package), search highlight, click to zoom, tooltip.
// Diff profiles ("double" format) are sized by B and coloured by the relative change
// r = (B - A) / A: red for growth, green for shrinkage, blue when |r| <= 0.1%.

import { formatValue, formatPercent, formatSigned, formatSignedPercent, escapeHtml } from './format.js';

export const ROW = 20;

// Pastel fills that keep dark text readable in both themes.
const BINARY_PALETTE = ['#8fc3ea', '#f4b183', '#a9d99b', '#c9a7ef', '#eed58f', '#f2a7c8', '#8fd8cc',
  '#b9bdf6', '#f3b9a6', '#95d4e6', '#e3c88e', '#d3a8e3', '#b5d68a', '#f0a3a3'];
const GREY = 'rgba(150,150,150,0.35)';
const NEUTRAL = 'rgba(96,140,210,0.45)';

// Colour table: palette..., GREY, NEUTRAL, RED alpha 0.40..0.80, GREEN alpha 0.40..0.80.
const STYLES = [...BINARY_PALETTE, GREY, NEUTRAL];
const GREY_I = BINARY_PALETTE.length;
const NEUTRAL_I = GREY_I + 1;
const RED_I = STYLES.length;
for (let a = 40; a <= 80; a++) STYLES.push(`rgba(229,62,62,${a / 100})`);
const GREEN_I = STYLES.length;
for (let a = 40; a <= 80; a++) STYLES.push(`rgba(40,167,69,${a / 100})`);

function hashString(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
  return h >>> 0;
}

// "net/http.(*conn).serve" -> "net/http", "std::vector<int>::push_back" -> "std", "main.f" -> "main".
export function packageOf(name) {
  const cpp = name.indexOf('::');
  if (cpp > 0 && !name.slice(0, cpp).includes('.')) return name.slice(0, cpp);
  const slash = name.lastIndexOf('/', name.indexOf('(') >= 0 ? name.indexOf('(') : name.length);
  const dot = name.indexOf('.', slash + 1);
  return dot > 0 ? name.slice(0, dot) : name;
}

export function baseName(path) {
  if (!path) return '';
  const i = path.lastIndexOf('/');
  return i >= 0 ? path.slice(i + 1) : path;
}

// Relative change of a diff node: (B - A) / A (Infinity when A is 0 and B is not).
export function diffRatio(totalB, totalA) {
  if (totalA === 0) return totalB === 0 ? 0 : Infinity;
  return (totalB - totalA) / totalA;
}

export function diffKind(r) {
  if (Math.abs(r) <= 0.001) return 'neutral';
  return r > 0 ? 'growth' : 'shrinkage';
}

function diffStyleIndex(r) {
  if (Math.abs(r) <= 0.001) return NEUTRAL_I;
  const alpha = Math.min((Math.min(Math.abs(r), 1e9) / 2 + 0.5) * 0.8, 0.8);
  const a = Math.max(40, Math.min(80, Math.round(alpha * 100)));
  return (r > 0 ? RED_I : GREEN_I) + (a - 40);
}

// Decodes flamebearer levels into flat typed arrays, level by level, with parent links.
export function parseFlamebearer(fb) {
  const f = fb.flamebearer;
  const double = fb.metadata?.format === 'double';
  const stride = double ? 7 : 4;
  const L = f.levels.length;
  let n = 0;
  for (const lv of f.levels) n += lv.length / stride;
  const m = {
    names: f.names, L, n, diff: double, units: fb.metadata?.units || '',
    levelStart: new Uint32Array(L + 1),
    x: new Float64Array(n), total: new Float64Array(n), self: new Float64Array(n),
    name: new Uint32Array(n), parent: new Int32Array(n),
    xA: double ? new Float64Array(n) : null,
    totalA: double ? new Float64Array(n) : null,
    selfA: double ? new Float64Array(n) : null,
  };
  const { levelStart, x, total, self, name, parent, xA, totalA, selfA } = m;
  let k = 0;
  for (let d = 0; d < L; d++) {
    const lv = f.levels[d];
    const len = lv.length;
    levelStart[d] = k;
    let endA = 0, endB = 0;
    if (double) {
      for (let j = 0; j < len; j += 7, k++) {
        const xa = endA + lv[j], ta = lv[j + 1];
        const xb = endB + lv[j + 3], tb = lv[j + 4];
        xA[k] = xa; totalA[k] = ta; selfA[k] = lv[j + 2];
        x[k] = xb; total[k] = tb; self[k] = lv[j + 5]; name[k] = lv[j + 6];
        endA = xa + ta; endB = xb + tb;
      }
    } else {
      for (let j = 0; j < len; j += 4, k++) {
        const xb = endB + lv[j], t = lv[j + 1];
        x[k] = xb; total[k] = t; self[k] = lv[j + 2]; name[k] = lv[j + 3];
        endB = xb + t;
      }
    }
  }
  levelStart[L] = k;
  // Parents: both levels are ordered by x, so one forward scan per level (per side for diffs,
  // since a node present only in A has no width in B).
  parent.fill(-1);
  for (let d = 1; d < L; d++) {
    const ps = levelStart[d - 1], pe = levelStart[d], ce = levelStart[d + 1];
    let pB = ps, pA = ps;
    for (let c = pe; c < ce; c++) {
      const xc = x[c];
      if (total[c] > 0) {
        while (pB < pe && !(xc < x[pB] + total[pB] && xc >= x[pB])) pB++;
        if (pB < pe) parent[c] = pB; else pB = ps;
      } else if (double && totalA[c] > 0) {
        const xac = xA[c];
        while (pA < pe && !(xac < xA[pA] + totalA[pA] && xac >= xA[pA])) pA++;
        if (pA < pe) parent[c] = pA; else pA = ps;
      }
    }
  }
  m.rootTotal = n ? m.total[0] : 0;
  m.rootTotalA = double && n ? m.totalA[0] : 0;
  return m;
}

function levelOf(m, k) {
  let lo = 0, hi = m.L - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (m.levelStart[mid] <= k) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// The node of level d whose B range contains v, or -1.
function findAt(m, d, v) {
  let lo = m.levelStart[d], hi = m.levelStart[d + 1] - 1;
  if (hi < lo) return -1;
  let ans = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (m.x[mid] <= v) { ans = mid; lo = mid + 1; } else hi = mid - 1;
  }
  // Zero-width nodes may sit at the same x as the one that contains v; walk back to it.
  while (ans >= m.levelStart[d] && m.total[ans] === 0) ans--;
  if (ans < m.levelStart[d] || !(v < m.x[ans] + m.total[ans])) return -1;
  return ans;
}

export class Icicle {
  // opts: {onZoom(pathNames | null), onNodeClick?}
  constructor(el, opts = {}) {
    this.el = el;
    this.opts = opts;
    el.classList.add('icicle');
    el.innerHTML = `<div class="icicle-scroll"><canvas data-role="canvas"></canvas></div>
      <div class="icicle-tooltip" data-role="tooltip" hidden></div>`;
    this.canvas = el.querySelector('canvas');
    this.tooltip = el.querySelector('[data-role="tooltip"]');
    this.model = null;
    this.search = '';
    this.zoom = -1;
    this.colorBy = 'binary';
    this.drawn = null;
    this.drawnCount = 0;
    this.canvas.addEventListener('mousemove', (e) => this.onMove(e));
    this.canvas.addEventListener('mouseleave', () => { this.tooltip.hidden = true; this.canvas.style.cursor = ''; });
    this.canvas.addEventListener('click', (e) => this.onClick(e));
    this.lastWidth = 0;
    this.ro = new ResizeObserver(() => {
      const w = this.el.clientWidth;
      if (w !== this.lastWidth && this.model) this.render();
    });
    this.ro.observe(el);
  }

  destroy() { this.ro.disconnect(); }

  // model from parseFlamebearer; meta: {unit, binaryOf(name) -> string, fileOf(name) -> string}
  setProfile(model, meta = {}) {
    this.model = model;
    this.meta = meta;
    this.unit = meta.unit || model.units;
    this.zoom = -1;
    this.computeColors();
    this.computeSearch();
    this.render();
  }

  setColorBy(by) {
    if (by === this.colorBy) return;
    this.colorBy = by;
    if (this.model) { this.computeColors(); this.render(); }
  }

  setSearch(s) {
    s = (s || '').trim();
    if (s === this.search) return;
    this.search = s;
    if (this.model) { this.computeSearch(); this.render(); }
  }

  // path: frame names from the first level below the root down to the zoomed node.
  setZoomPath(path) {
    const m = this.model;
    if (!m) return;
    let z = -1;
    if (path && path.length) {
      let parent = 0;
      for (let d = 1; d <= path.length && d < m.L; d++) {
        let found = -1;
        for (let k = m.levelStart[d]; k < m.levelStart[d + 1]; k++) {
          if (m.parent[k] === parent && m.total[k] > 0 && m.names[m.name[k]] === path[d - 1]) { found = k; break; }
        }
        if (found < 0) break;
        z = parent = found;
      }
    }
    if (z !== this.zoom) { this.zoom = z; this.render(); }
  }

  pathOf(k) {
    const out = [];
    for (let p = k; p > 0; p = this.model.parent[p]) out.push(this.model.names[this.model.name[p]]);
    return out.reverse();
  }

  computeColors() {
    const m = this.model;
    if (m.diff) {
      this.colorIdx = new Uint16Array(m.n);
      for (let k = 0; k < m.n; k++) this.colorIdx[k] = diffStyleIndex(diffRatio(m.total[k], m.totalA[k]));
      return;
    }
    const byName = new Uint16Array(m.names.length);
    for (let i = 0; i < m.names.length; i++) {
      const nm = m.names[i];
      const key = this.colorBy === 'package' ? packageOf(nm) : (this.meta.binaryOf?.(nm) || packageOf(nm));
      byName[i] = hashString(key) % BINARY_PALETTE.length;
    }
    this.colorIdx = new Uint16Array(m.n);
    for (let k = 0; k < m.n; k++) this.colorIdx[k] = byName[m.name[k]];
  }

  computeSearch() {
    const m = this.model;
    this.matchName = null;
    this.matchTotal = 0;
    this.matchCount = 0;
    if (!this.search) return;
    const q = this.search.toLowerCase();
    this.matchName = new Uint8Array(m.names.length);
    for (let i = 1; i < m.names.length; i++) if (m.names[i].toLowerCase().includes(q)) this.matchName[i] = 1;
    // Sum of matched subtrees that have no matched ancestor (a recursive match counts once).
    const under = new Uint8Array(m.n);
    for (let k = 1; k < m.n; k++) {
      const p = m.parent[k];
      const hit = this.matchName[m.name[k]] === 1;
      if (hit) this.matchCount++;
      if (hit && !(p >= 0 && under[p])) this.matchTotal += m.total[k];
      under[k] = hit || (p >= 0 && under[p]) ? 1 : 0;
    }
  }

  // Visible B range [x0, x1) and the zoomed level.
  view() {
    const m = this.model;
    if (this.zoom > 0) {
      return { x0: m.x[this.zoom], x1: m.x[this.zoom] + m.total[this.zoom], dz: levelOf(m, this.zoom) };
    }
    return { x0: 0, x1: m.rootTotal || 1, dz: 0 };
  }

  render() {
    const t0 = performance.now();
    const m = this.model;
    const canvas = this.canvas;
    const W = Math.max(100, this.el.clientWidth);
    this.lastWidth = this.el.clientWidth;
    const H = Math.max(1, m.L) * ROW;
    const dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(W * dpr) || canvas.height !== Math.round(H * dpr)) {
      canvas.width = Math.round(W * dpr);
      canvas.height = Math.round(H * dpr);
      canvas.style.width = `${W}px`;
      canvas.style.height = `${H}px`;
    }
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, W, H);
    const { x0, x1, dz } = this.view();
    const scale = W / (x1 - x0);
    this.scale = scale;
    if (!this.drawn || this.drawn.idx.length < m.n) {
      this.drawn = { idx: new Int32Array(m.n), px: new Float32Array(m.n), pw: new Float32Array(m.n) };
    }
    const { idx, px, pw } = this.drawn;
    let cnt = 0;
    // Ancestors of the zoomed node span the whole width.
    if (this.zoom > 0) {
      for (let p = this.zoom; p >= 0; p = m.parent[p]) {
        if (p === this.zoom) continue;
        idx[cnt] = p; px[cnt] = 0; pw[cnt] = W; cnt++;
      }
    }
    for (let d = dz; d < m.L; d++) {
      const s = m.levelStart[d], e = m.levelStart[d + 1];
      let lo = s, hi = e;
      while (lo < hi) { const mid = (lo + hi) >> 1; if (m.x[mid] < x0) lo = mid + 1; else hi = mid; }
      for (let k = lo; k < e; k++) {
        const xk = m.x[k];
        if (xk >= x1) break;
        const w = m.total[k] * scale;
        if (w < 0.3) continue;
        idx[cnt] = k; px[cnt] = (xk - x0) * scale; pw[cnt] = w; cnt++;
      }
    }
    this.drawnCount = cnt;
    // Fill by colour: counting sort of the drawn nodes by style, one path per style.
    const match = this.matchName;
    const styleOf = (k) => (match && !match[m.name[k]] ? GREY_I : this.colorIdx[k]);
    const counts = new Uint32Array(STYLES.length + 1);
    for (let i = 0; i < cnt; i++) counts[styleOf(idx[i]) + 1]++;
    for (let i = 1; i <= STYLES.length; i++) counts[i] += counts[i - 1];
    const order = new Int32Array(cnt);
    const pos = counts.slice(0, STYLES.length);
    for (let i = 0; i < cnt; i++) order[pos[styleOf(idx[i])]++] = i;
    const levelCache = this.levelCache = new Uint16Array(cnt);
    // Level of each drawn node: ancestors first (by walking), then level by level.
    {
      let i = 0;
      if (this.zoom > 0) { for (let d = dz - 1; d >= 0; d--) levelCache[i++] = d; }
      for (let d = dz; d < m.L && i < cnt; d++) {
        const e = m.levelStart[d + 1];
        while (i < cnt && idx[i] < e) levelCache[i++] = d;
      }
    }
    for (let st = 0; st < STYLES.length; st++) {
      const a = counts[st], b = counts[st + 1];
      if (a === b) continue;
      ctx.fillStyle = STYLES[st];
      ctx.beginPath();
      for (let j = a; j < b; j++) {
        const i = order[j];
        const w = pw[i];
        ctx.rect(px[i], levelCache[i] * ROW, w > 3 ? w - 1 : w, ROW - 1);
      }
      ctx.fill();
    }
    // Labels where they fit.
    const style = getComputedStyle(this.el);
    const fgDark = '#1b1b1b';
    const fgTheme = style.getPropertyValue('--fg').trim() || '#222';
    const fgMuted = style.getPropertyValue('--fg-muted').trim() || '#777';
    ctx.font = '12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace';
    ctx.textBaseline = 'middle';
    if (!this.charW) this.charW = ctx.measureText('MMMMMMMMMM').width / 10;
    const cw = this.charW;
    for (let i = 0; i < cnt; i++) {
      const w = pw[i];
      if (w < cw * 3 + 8) continue;
      const k = idx[i];
      const nm = k === 0 ? 'total' : m.names[m.name[k]];
      const maxChars = Math.floor((w - 8) / cw);
      const label = nm.length <= maxChars ? nm : `${nm.slice(0, Math.max(1, maxChars - 1))}…`;
      const dimmed = match && !match[m.name[k]];
      ctx.fillStyle = dimmed ? fgMuted : m.diff ? fgTheme : fgDark;
      ctx.fillText(label, Math.max(px[i], 0) + 4, levelCache[i] * ROW + ROW / 2);
    }
    this.lastRenderMs = performance.now() - t0;
    this.el.dispatchEvent(new CustomEvent('icicle-rendered', { bubbles: true, detail: { ms: this.lastRenderMs } }));
  }

  // Node under a point of the canvas (CSS pixels), or -1.
  hit(x, y) {
    const m = this.model;
    if (!m) return -1;
    const d = Math.floor(y / ROW);
    if (d < 0 || d >= m.L) return -1;
    const { x0, dz } = this.view();
    if (d < dz) {
      for (let p = this.zoom; p >= 0; p = m.parent[p]) if (levelOf(m, p) === d) return p;
      return -1;
    }
    const k = findAt(m, d, x0 + x / this.scale);
    if (k < 0 || m.total[k] * this.scale < 0.3) return -1;
    if (this.zoom > 0) {
      const z = this.zoom;
      if (!(m.x[k] >= m.x[z] && m.x[k] < m.x[z] + m.total[z])) return -1;
    }
    return k;
  }

  onMove(e) {
    const r = this.canvas.getBoundingClientRect();
    const k = this.hit(e.clientX - r.left, e.clientY - r.top);
    if (k < 0) { this.tooltip.hidden = true; this.canvas.style.cursor = ''; return; }
    this.canvas.style.cursor = 'pointer';
    this.tooltip.innerHTML = this.tooltipHtml(k);
    this.tooltip.hidden = false;
    const er = this.el.getBoundingClientRect();
    const tw = this.tooltip.offsetWidth, th = this.tooltip.offsetHeight;
    let x = e.clientX - er.left + 16, y = e.clientY - er.top + 16;
    if (x + tw > er.width) x = Math.max(0, e.clientX - er.left - tw - 16);
    if (e.clientY + th + 16 > window.innerHeight) y = Math.max(0, e.clientY - er.top - th - 12);
    this.tooltip.style.left = `${x}px`;
    this.tooltip.style.top = `${y}px`;
  }

  tooltipHtml(k) {
    const m = this.model, u = this.unit;
    const nm = k === 0 ? 'total' : m.names[m.name[k]];
    const file = k === 0 ? '' : this.meta.fileOf?.(nm) || '';
    const bin = k === 0 ? '' : this.meta.binaryOf?.(nm) || '';
    const rows = [];
    const row = (a, b) => rows.push(`<tr><th>${a}</th><td>${escapeHtml(b)}</td></tr>`);
    if (m.diff) {
      const b = m.total[k], a = m.totalA[k];
      const r = diffRatio(b, a);
      row('Cumulative (B)', `${formatValue(b, u)} (${formatPercent(b, m.rootTotal)})`);
      row('Cumulative (A)', `${formatValue(a, u)} (${formatPercent(a, m.rootTotalA)})`);
      row('Diff', `${formatSigned(b - a, u)} (${formatSignedPercent(r * 100)})`);
      row('Flat (B)', `${formatValue(m.self[k], u)} (${formatPercent(m.self[k], m.rootTotal)})`);
      row('Flat (A)', `${formatValue(m.selfA[k], u)} (${formatPercent(m.selfA[k], m.rootTotalA)})`);
    } else {
      row('Cumulative', `${formatValue(m.total[k], u)} (${formatPercent(m.total[k], m.rootTotal)})`);
      row('Flat', `${formatValue(m.self[k], u)} (${formatPercent(m.self[k], m.rootTotal)})`);
      if (this.zoom > 0 && k !== this.zoom) row('Of zoomed', formatPercent(m.total[k], m.total[this.zoom]));
    }
    if (file) row('File', file);
    if (bin) row('Binary', bin);
    return `<div class="tt-title">${escapeHtml(nm)}</div><table>${rows.join('')}</table>` +
      `<div class="tt-hint">${k === 0 ? 'Click to reset the zoom' : 'Click to zoom'}</div>`;
  }

  onClick(e) {
    const r = this.canvas.getBoundingClientRect();
    const k = this.hit(e.clientX - r.left, e.clientY - r.top);
    if (k < 0) return;
    const path = k === 0 ? null : this.pathOf(k);
    if (this.opts.onZoom) this.opts.onZoom(path);
    else { this.zoom = k === 0 ? -1 : k; this.render(); }
  }

  // Test hook: the nodes drawn by the last render, with their names and colours.
  renderedNodes() {
    const m = this.model;
    if (!m) return [];
    const out = [];
    for (let i = 0; i < this.drawnCount; i++) {
      const k = this.drawn.idx[i];
      const node = {
        name: k === 0 ? 'total' : m.names[m.name[k]], level: this.levelCache[i],
        x: this.drawn.px[i], width: this.drawn.pw[i], total: m.total[k], self: m.self[k],
        color: this.matchName && !this.matchName[m.name[k]] ? GREY : STYLES[this.colorIdx[k]],
        highlighted: !!(this.matchName && this.matchName[m.name[k]]),
      };
      if (m.diff) {
        node.totalA = m.totalA[k];
        node.ratio = diffRatio(m.total[k], m.totalA[k]);
        node.kind = diffKind(node.ratio);
      }
      out.push(node);
    }
    return out;
  }

  searchSummary() {
    if (!this.search || !this.model) return null;
    return { count: this.matchCount, total: this.matchTotal, percent: formatPercent(this.matchTotal, this.model.rootTotal) };
  }
}

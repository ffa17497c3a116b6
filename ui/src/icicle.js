// The icicle graph, drawn on a canvas from the flamebearer JSON (lib/calltree/calltree.h):
// root on top, colour by package or binary, search highlight, click to zoom, tooltip.
// Diff profiles ("double" format) are sized by A + B, so code that went away (only in A) is drawn
// as well as code that is new (only in B), and a child always fits in its parent (both sides'
// totals are within the parent's). They are coloured by the change: red grew, green shrank, with
// an intensity growing with |B - A| / max(A, B); blue when |B - A| / A <= 0.1%. Nodes only in B
// are "new" (full red), nodes only in A "removed" (full green), and their labels say so.

import { formatValue, formatPercent, formatSigned, formatDiffPercent, escapeHtml } from './format.js';

export const ROW = 20;

// Pastel fills that keep dark text readable in both themes.
const BINARY_PALETTE = ['#8fc3ea', '#f4b183', '#a9d99b', '#c9a7ef', '#eed58f', '#f2a7c8', '#8fd8cc',
  '#b9bdf6', '#f3b9a6', '#95d4e6', '#e3c88e', '#d3a8e3', '#b5d68a', '#f0a3a3'];
const GREY = 'rgba(150,150,150,0.35)';
const KINDS = ['neutral', 'growth', 'shrinkage', 'new', 'removed'];
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

// The colour key of a label frame, the frame a profile grouped by labels (group_by labels.<name>)
// puts each sample's stack under: 'endpoint="/a"' or 'endpoint="/b", region="eu"' -> the label
// names ('endpoint=' / 'endpoint=,region='), so the frames of one label share a colour whatever
// their values hold (slashes and dots that would read as a package); '' for any other frame.
export function labelFrameKey(name) {
  if (!name || !/^[A-Za-z_][A-Za-z0-9_]*="/.test(name)) return '';
  const names = [...name.matchAll(/(?:^|", )([A-Za-z_][A-Za-z0-9_]*)="/g)].map((x) => `${x[1]}=`);
  return names.join(',');
}

// The package (namespace) of a function name, for colouring; '' when the name has none (a C
// function), so the caller can fall back to the binary.
//   Go    "net/http.(*conn).serve" -> "net/http", "github.com/x/y/z.F" -> "github.com/x/y/z",
//         "main.main.func2" -> "main", "slices.SortFunc[...]" -> "slices"
//   C++   "ns::cls::fn" -> "ns", "std::vector<int>::push_back" -> "std",
//         "(anonymous namespace)::f" -> "(anonymous namespace)"
//   Rust  "core::ptr::drop_in_place<T>" -> "core", "<alloc::vec::Vec<T> as Drop>::drop" -> "alloc"
//   Java  "java.util.HashMap.get" -> "java", "java/util/HashMap.get" -> "java/util/HashMap"
export function packageOf(name) {
  if (!name) return '';
  const s = name.replace(/^[<&*]+/, '');
  if (s.startsWith('(anonymous namespace)')) return '(anonymous namespace)';
  // The plain path ends at the first argument list, generic or template bracket, or space.
  let end = s.length;
  for (const c of '([< ') {
    const i = s.indexOf(c);
    if (i > 0 && i < end) end = i;
  }
  const cpp = s.indexOf('::');
  if (cpp > 0 && cpp < end) return s.slice(0, cpp);
  const slash = s.lastIndexOf('/', end - 1);
  const dot = s.indexOf('.', slash + 1);
  if (dot > 0 && dot < end) return s.slice(0, dot);
  return slash > 0 ? s.slice(0, slash) : '';
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

// What happened to a node between A and B: 'new' (only in B), 'removed' (only in A), 'neutral'
// (|B - A| / A <= 0.1%), 'growth' or 'shrinkage'.
export function diffKind(totalB, totalA) {
  if (totalA === 0 && totalB > 0) return 'new';
  if (totalB === 0 && totalA > 0) return 'removed';
  const r = diffRatio(totalB, totalA);
  if (Math.abs(r) <= 0.001) return 'neutral';
  return r > 0 ? 'growth' : 'shrinkage';
}

// Signed strength of a change in [-1, 1]: (B - A) / max(A, B). Symmetric, unlike (B - A) / A:
// doubling gives 0.5 and halving -0.5; new is 1 and removed -1.
export function diffIntensity(totalB, totalA) {
  const m = Math.max(totalA, totalB);
  return m > 0 ? (totalB - totalA) / m : 0;
}

// Style index of a diff node: blue when neutral, else red (growth, new) or green (shrinkage,
// removed) with alpha 0.4 + 0.4 * |intensity| (0.8 for new and removed).
function diffStyleIndex(totalB, totalA) {
  const kind = diffKind(totalB, totalA);
  if (kind === 'neutral') return NEUTRAL_I;
  const a = Math.max(40, Math.min(80, Math.round(40 + 40 * Math.abs(diffIntensity(totalB, totalA)))));
  return (kind === 'growth' || kind === 'new' ? RED_I : GREEN_I) + (a - 40);
}

// The fill of a diff node (CSS colour), for tests and legends.
export function diffColor(totalB, totalA) { return STYLES[diffStyleIndex(totalB, totalA)]; }

// The canvas label of a node in maxChars characters: the name, cut with an ellipsis, and for new
// and removed diff nodes a " (new)" / " (removed)" tag kept while there is room for it.
export function nodeLabel(name, maxChars, kind) {
  const tag = kind === 'new' ? ' (new)' : kind === 'removed' ? ' (removed)' : '';
  if (name.length + tag.length <= maxChars) return name + tag;
  if (tag && maxChars >= tag.length + 4) return `${name.slice(0, maxChars - tag.length - 1)}…${tag}`;
  if (name.length <= maxChars) return name;
  return `${name.slice(0, Math.max(1, maxChars - 1))}…`;
}

// Decodes flamebearer levels into flat typed arrays, level by level, with parent links.
// Layout: x and total are B's for a single profile and A + B for a diff (xA + xB, totalA +
// totalB: the server positions each side's nodes at their parent's x plus the totals of the
// preceding siblings, so the sums nest the same way). Values: totalB, selfB (= total, self for a
// single profile), totalA, selfA (diff only); self is always selfB.
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
    totalA: double ? new Float64Array(n) : null,
    selfA: double ? new Float64Array(n) : null,
  };
  m.totalB = double ? new Float64Array(n) : m.total;
  m.selfB = m.self;
  const { levelStart, x, total, self, name, parent, totalA, selfA, totalB } = m;
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
        totalA[k] = ta; selfA[k] = lv[j + 2];
        totalB[k] = tb; self[k] = lv[j + 5]; name[k] = lv[j + 6];
        x[k] = xa + xb; total[k] = ta + tb;
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
  // Parents: both levels are ordered by x, so one forward scan per level. Nodes of zero width
  // (nothing on either side) have none and are never drawn.
  parent.fill(-1);
  for (let d = 1; d < L; d++) {
    const ps = levelStart[d - 1], pe = levelStart[d], ce = levelStart[d + 1];
    let p = ps;
    for (let c = pe; c < ce; c++) {
      if (!(total[c] > 0)) continue;
      const xc = x[c];
      while (p < pe && !(xc < x[p] + total[p] && xc >= x[p])) p++;
      if (p < pe) parent[c] = p; else p = ps;
    }
  }
  m.rootTotal = n ? m.total[0] : 0;
  m.rootTotalB = n ? m.totalB[0] : 0;
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
    this.scroller = el.querySelector('.icicle-scroll');
    this.tooltip = el.querySelector('[data-role="tooltip"]');
    this.model = null;
    this.search = '';
    this.zoom = -1;
    this.colorBy = 'auto';
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

  // The colouring in use: 'package' or 'binary' ('auto' picks binary when the profile has
  // several binaries, package otherwise); 'diff' for a diff.
  effectiveColorBy() {
    if (this.model?.diff) return 'diff';
    if (this.colorBy === 'package' || this.colorBy === 'binary') return this.colorBy;
    return (this.meta?.binaryCount || 0) > 1 ? 'binary' : 'package';
  }

  computeColors() {
    const m = this.model;
    this.colorIdx = new Uint16Array(m.n);
    if (m.diff) {
      this.kindIdx = new Uint8Array(m.n);
      for (let k = 0; k < m.n; k++) {
        this.colorIdx[k] = diffStyleIndex(m.totalB[k], m.totalA[k]);
        this.kindIdx[k] = KINDS.indexOf(diffKind(m.totalB[k], m.totalA[k]));
      }
      return;
    }
    this.kindIdx = null;
    const by = this.effectiveColorBy();
    const keyOf = (nm) => {
      const bin = this.meta.binaryOf?.(nm) || '';
      const label = labelFrameKey(nm);
      if (label) return label;
      return (by === 'binary' ? bin || packageOf(nm) : packageOf(nm) || bin) || nm;
    };
    // Each key gets its hash's colour, or the next one free while any is, so the first keys (in
    // the order the tree first uses them, biggest callers first) differ and stay stable.
    const byName = new Uint16Array(m.names.length);
    const slotOf = new Map();
    const used = new Uint8Array(BINARY_PALETTE.length);
    let free = BINARY_PALETTE.length;
    for (let i = 0; i < m.names.length; i++) {
      const key = keyOf(m.names[i]);
      let c = slotOf.get(key);
      if (c === undefined) {
        c = hashString(key) % BINARY_PALETTE.length;
        if (free > 0) {
          while (used[c]) c = (c + 1) % BINARY_PALETTE.length;
          used[c] = 1;
          free--;
        }
        slotOf.set(key, c);
      }
      byName[i] = c;
    }
    this.colorKeys = slotOf;
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
      if (hit && !(p >= 0 && under[p])) this.matchTotal += m.totalB[k];
      under[k] = hit || (p >= 0 && under[p]) ? 1 : 0;
    }
  }

  // Visible layout range [x0, x1) and the zoomed level.
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
    // The scroller's width leaves out its vertical scrollbar (always reserved, see style.css), so
    // a tall graph is not cut on the right.
    const W = Math.max(100, this.scroller.clientWidth || this.el.clientWidth);
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
      const label = nodeLabel(nm, maxChars, this.kindIdx ? KINDS[this.kindIdx[k]] : '');
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
    let badge = '';
    if (m.diff) {
      const b = m.totalB[k], a = m.totalA[k];
      const kind = diffKind(b, a);
      if (kind === 'new' || kind === 'removed') badge = ` <span class="tt-badge ${kind}">${kind}</span>`;
      row('A (baseline)', `${formatValue(a, u)} (${formatPercent(a, m.rootTotalA)})`);
      row('B (comparison)', `${formatValue(b, u)} (${formatPercent(b, m.rootTotalB)})`);
      row('Change', `${formatSigned(b - a, u)} (${formatDiffPercent(b, a)})`);
      row('Flat A → B', `${formatValue(m.selfA[k], u)} → ${formatValue(m.selfB[k], u)}`);
    } else {
      row('Cumulative', `${formatValue(m.total[k], u)} (${formatPercent(m.total[k], m.rootTotal)})`);
      row('Flat', `${formatValue(m.self[k], u)} (${formatPercent(m.self[k], m.rootTotal)})`);
      if (this.zoom > 0 && k !== this.zoom) row('Of zoomed', formatPercent(m.total[k], m.total[this.zoom]));
    }
    if (file) row('File', file);
    if (bin) row('Binary', bin);
    return `<div class="tt-title">${escapeHtml(nm)}${badge}</div><table>${rows.join('')}</table>` +
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

  // Test hook: the nodes drawn by the last render, with their names, colours and labels (''
  // where none fits); diffs add totalA, totalB, ratio ((B - A) / A) and kind.
  renderedNodes() {
    const m = this.model;
    if (!m) return [];
    const out = [];
    const cw = this.charW || 7;
    for (let i = 0; i < this.drawnCount; i++) {
      const k = this.drawn.idx[i];
      const name = k === 0 ? 'total' : m.names[m.name[k]];
      const w = this.drawn.pw[i];
      const kind = this.kindIdx ? KINDS[this.kindIdx[k]] : '';
      const node = {
        name, level: this.levelCache[i],
        x: this.drawn.px[i], width: w, total: m.total[k], self: m.self[k],
        color: this.matchName && !this.matchName[m.name[k]] ? GREY : STYLES[this.colorIdx[k]],
        highlighted: !!(this.matchName && this.matchName[m.name[k]]),
        label: w < cw * 3 + 8 ? '' : nodeLabel(name, Math.floor((w - 8) / cw), kind),
      };
      if (m.diff) {
        node.totalA = m.totalA[k];
        node.totalB = m.totalB[k];
        node.ratio = diffRatio(m.totalB[k], m.totalA[k]);
        node.kind = kind;
      }
      out.push(node);
    }
    return out;
  }

  searchSummary() {
    if (!this.search || !this.model) return null;
    return { count: this.matchCount, total: this.matchTotal, percent: formatPercent(this.matchTotal, this.model.rootTotalB) };
  }
}

// The metrics graph: one line per series (uPlot), y in the type's unit, a hover tooltip with
// value, total, duration, time and labels, click to select a point, drag to zoom the time range.

import uPlot from '../vendor/uPlot.esm.js';
import { formatValue, formatNanos, formatTime, escapeHtml } from './format.js';
import { labelsToString } from './query.js';

const BASE_COLORS = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#db2777', '#0d9488',
  '#ea580c', '#4f46e5', '#65a30d', '#0891b2', '#be123c'];

export function seriesColor(i) {
  if (i < BASE_COLORS.length) return BASE_COLORS[i];
  const h = (i * 137.508) % 360;
  return `hsl(${h.toFixed(0)} 65% 48%)`;
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

// Aligns series on one x array (seconds) for uPlot; gaps are null.
export function alignSeries(series) {
  // Fast path: every series has the same timestamps (delta types bucketed by step).
  const first = series[0]?.samples || [];
  if (series.every((s) => s.samples.length === first.length &&
      s.samples.every((p, i) => p.timestamp === first[i].timestamp))) {
    return {
      xs: first.map((p) => p.timestamp / 1000),
      ys: series.map((s) => s.samples.map((p) => p.value_per_second)),
    };
  }
  let n = 0;
  for (const s of series) n += s.samples.length;
  const all = new Float64Array(n);
  let k = 0;
  for (const s of series) for (const p of s.samples) all[k++] = p.timestamp;
  all.sort();
  const xs = [];
  for (let i = 0; i < n; i++) if (i === 0 || all[i] !== all[i - 1]) xs.push(all[i]);
  const index = new Map();
  xs.forEach((t, i) => index.set(t, i));
  const ys = series.map((s) => {
    const y = new Array(xs.length).fill(null);
    for (const p of s.samples) y[index.get(p.timestamp)] = p.value_per_second;
    return y;
  });
  return { xs: xs.map((t) => t / 1000), ys };
}

export class MetricsGraph {
  // opts: {onSelect(seriesIndex, sampleIndex), onZoom(fromMs, toMs), height}
  constructor(el, opts) {
    this.el = el;
    this.opts = opts;
    this.el.classList.add('metrics');
    this.el.innerHTML = `<div class="metrics-plot" data-role="plot"></div>
      <div class="metrics-tooltip" data-role="tooltip" hidden></div>
      <div class="metrics-legend" data-role="legend"></div>`;
    this.plotEl = el.querySelector('[data-role="plot"]');
    this.tooltip = el.querySelector('[data-role="tooltip"]');
    this.legend = el.querySelector('[data-role="legend"]');
    this.u = null;
    this.data = null;
    this.hover = null;
    this.selected = null; // {series, index}
    this.ro = new ResizeObserver(() => {
      if (this.u) this.u.setSize({ width: this.width(), height: this.height() });
    });
    this.ro.observe(this.el);
  }

  width() { return Math.max(200, this.el.clientWidth); }
  height() { return this.opts.height || 260; }

  destroy() {
    this.ro.disconnect();
    if (this.u) this.u.destroy();
    this.u = null;
  }

  // data: {series (API), unit, label, from, to (ms), selected: {series, index} | null}
  setData(data) {
    this.data = data;
    this.selected = data.selected || null;
    this.build();
  }

  build() {
    const t0 = performance.now();
    if (this.u) { this.u.destroy(); this.u = null; }
    const d = this.data;
    if (!d) return;
    this.hideTooltip();
    const { xs, ys } = alignSeries(d.series);
    // Each series' own points, for nearest-point search.
    this.points = d.series.map((s) => ({
      t: Float64Array.from(s.samples, (p) => p.timestamp / 1000),
      v: Float64Array.from(s.samples, (p) => p.value_per_second),
    }));
    const fg = cssVar('--fg-muted') || '#666';
    const grid = cssVar('--grid') || '#e5e5e5';
    const unit = d.unit;
    const self = this;
    const opts = {
      width: this.width(),
      height: this.height(),
      legend: { show: false },
      cursor: {
        drag: { x: true, y: false, setScale: false },
        points: { show: false },
        y: false,
      },
      select: { show: true },
      scales: {
        x: { time: true, range: () => [d.from / 1000, d.to / 1000] },
        y: { range: (u, min, max) => [0, max > 0 ? max * 1.08 : 1] },
      },
      axes: [
        { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid } },
        {
          stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid }, label: d.label,
          labelSize: 20, labelGap: 2, size: 84, values: (u, splits) => splits.map((v) => formatValue(v, unit)),
        },
      ],
      series: [{}, ...d.series.map((s, i) => ({
        label: labelsToString(s.labels),
        stroke: seriesColor(i),
        width: 1.5,
        spanGaps: true,
        points: { size: 6, width: 1.5 },
      }))],
      hooks: {
        setCursor: [(u) => self.onCursor(u)],
        setSelect: [(u) => self.onSelectRange(u)],
        draw: [() => self.placeSelected()],
      },
    };
    this.u = new uPlot(opts, [xs, ...ys], this.plotEl);
    this.marker = document.createElement('div');
    this.marker.className = 'metrics-marker';
    this.marker.hidden = true;
    this.selMarker = document.createElement('div');
    this.selMarker.className = 'metrics-marker selected';
    this.selMarker.hidden = true;
    this.u.over.append(this.marker, this.selMarker);
    this.u.over.addEventListener('mousedown', (e) => { this.down = { x: e.clientX, y: e.clientY }; });
    this.u.over.addEventListener('mouseup', (e) => {
      const dn = this.down;
      this.down = null;
      if (!dn || Math.abs(e.clientX - dn.x) > 3) return;
      if (this.hover) this.opts.onSelect?.(this.hover.series, this.hover.index);
    });
    this.u.over.addEventListener('mouseleave', () => { this.hideTooltip(); });
    this.placeSelected();
    this.renderLegend();
    this.lastBuildMs = performance.now() - t0;
  }

  renderLegend() {
    const d = this.data;
    if (d.series.length <= 1 && Object.keys(d.series[0]?.labels || {}).length === 0) {
      this.legend.innerHTML = '';
      return;
    }
    this.legend.innerHTML = d.series.map((s, i) =>
      `<button type="button" class="legend-item" data-i="${i}" title="Show or hide this series">` +
      `<span class="swatch" style="background:${seriesColor(i)}"></span>${escapeHtml(labelsToString(s.labels))}</button>`).join('');
    this.legend.onclick = (e) => {
      const b = e.target.closest('.legend-item');
      if (!b || !this.u) return;
      const i = Number(b.dataset.i) + 1;
      const show = !this.u.series[i].show;
      this.u.setSeries(i, { show });
      b.classList.toggle('off', !show);
    };
  }

  // Nearest visible point to the cursor, in pixels.
  nearest(left, top) {
    const u = this.u;
    const xv = u.posToVal(left, 'x');
    let best = null;
    for (let s = 0; s < this.points.length; s++) {
      if (!u.series[s + 1].show) continue;
      const { t, v } = this.points[s];
      if (t.length === 0) continue;
      let lo = 0, hi = t.length - 1;
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (t[mid] < xv) lo = mid + 1; else hi = mid;
      }
      for (const i of [lo - 1, lo]) {
        if (i < 0 || i >= t.length) continue;
        const px = u.valToPos(t[i], 'x'), py = u.valToPos(v[i], 'y');
        const dist = Math.hypot(px - left, (py - top) * 0.7);
        if (!best || dist < best.dist) best = { series: s, index: i, px, py, dist };
      }
    }
    return best;
  }

  onCursor(u) {
    const { left, top } = u.cursor;
    if (left == null || left < 0 || !this.points) { this.hideTooltip(); return; }
    const n = this.nearest(left, top);
    if (!n || n.dist > 60) { this.hideTooltip(); return; }
    this.hover = n;
    this.marker.hidden = false;
    this.marker.style.left = `${n.px}px`;
    this.marker.style.top = `${n.py}px`;
    this.marker.style.borderColor = seriesColor(n.series);
    this.showTooltip(n);
  }

  showTooltip(n) {
    const d = this.data;
    const s = d.series[n.series];
    const p = s.samples[n.index];
    const labels = Object.entries(s.labels || {});
    const rawUnit = s.sample_type?.unit || '';
    this.tooltip.innerHTML = `
      <table>
        <tr><th>Value</th><td>${escapeHtml(formatValue(p.value_per_second, d.unit))}</td></tr>
        <tr><th>Total</th><td>${escapeHtml(formatValue(p.value, rawUnit))}</td></tr>
        ${p.duration ? `<tr><th>Duration</th><td>${escapeHtml(formatNanos(p.duration))}</td></tr>` : ''}
        <tr><th>At</th><td>${escapeHtml(formatTime(p.timestamp, true))}</td></tr>
        ${p.count > 1 ? `<tr><th>Profiles</th><td>${p.count}</td></tr>` : ''}
      </table>
      ${labels.length ? `<div class="tt-labels">${labels.map(([k, v]) =>
        `<span class="label-pill">${escapeHtml(k)}="${escapeHtml(v)}"</span>`).join('')}</div>` : ''}
      <div class="tt-hint">Click to select this profile</div>`;
    this.tooltip.hidden = false;
    const u = this.u;
    const ox = u.over.offsetLeft + u.over.parentElement.offsetLeft, oy = u.over.offsetTop;
    const tw = this.tooltip.offsetWidth, th = this.tooltip.offsetHeight;
    let x = ox + n.px + 14;
    if (x + tw > this.el.clientWidth) x = ox + n.px - tw - 14;
    let y = oy + n.py - th / 2;
    y = Math.max(0, Math.min(y, this.height() - th));
    this.tooltip.style.left = `${Math.max(0, x)}px`;
    this.tooltip.style.top = `${y}px`;
  }

  hideTooltip() {
    this.hover = null;
    this.tooltip.hidden = true;
    if (this.marker) this.marker.hidden = true;
  }

  onSelectRange(u) {
    const w = u.select.width;
    if (w < 4) return;
    const from = u.posToVal(u.select.left, 'x') * 1000;
    const to = u.posToVal(u.select.left + w, 'x') * 1000;
    u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
    this.opts.onZoom?.(Math.floor(from), Math.ceil(to));
  }

  placeSelected() {
    if (!this.u || !this.selMarker) return;
    const sel = this.selected;
    if (!sel || !this.points?.[sel.series] || sel.index >= this.points[sel.series].t.length) {
      this.selMarker.hidden = true;
      return;
    }
    const { t, v } = this.points[sel.series];
    this.selMarker.hidden = false;
    this.selMarker.style.left = `${this.u.valToPos(t[sel.index], 'x')}px`;
    this.selMarker.style.top = `${this.u.valToPos(v[sel.index], 'y')}px`;
    this.selMarker.style.borderColor = seriesColor(sel.series);
  }

  setSelected(sel) {
    this.selected = sel;
    this.placeSelected();
  }
}

// Strata web UI: the shell, the Profiles and Compare views, theme and test hooks.
// Every view lives at "/" with its state in the query string (see state.js).

import { api } from './api.js';
import { store } from './state.js';
import { QueryBar, describeRange } from './querybar.js';
import { MetricsGraph } from './metrics.js';
import { ProfilePanel, groupByParam } from './profileview.js';
import { TargetsView } from './targets.js';
import { friendlyName, metricUnit, parseTypeId } from './profiletypes.js';
import { withLabels, splitExpression, labelsToString } from './query.js';
import { resolveTime, formatTime, escapeHtml } from './format.js';

// ---- test and debugging hooks --------------------------------------------------------------

const events = [];
const hooks = {
  store,
  events,
  emit(type, detail) {
    events.push({ type, detail, at: performance.now() });
    window.dispatchEvent(new CustomEvent(`strata:${type}`, { detail }));
  },
  views: {},
};
window.__strata = hooks;

// ---- theme ---------------------------------------------------------------------------------

function currentTheme() {
  const fromUrl = new URLSearchParams(location.search).get('theme');
  if (fromUrl === 'dark' || fromUrl === 'light') return fromUrl;
  const saved = localStorage.getItem('strata-theme');
  if (saved === 'dark' || saved === 'light') return saved;
  return window.matchMedia?.('(prefers-color-scheme: dark)').matches ? 'dark' : 'light';
}

function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
  const b = document.getElementById('theme-toggle');
  if (b) b.textContent = theme === 'dark' ? '☀ Light' : '☾ Dark';
  window.dispatchEvent(new Event('strata-theme'));
}

// ---- shared state --------------------------------------------------------------------------

let profileTypes = null; // [] once loaded
const getTypes = () => profileTypes || [];

function typeOf(expression) {
  const { type } = splitExpression(expression);
  return getTypes().find((t) => t.id === type) || parseTypeId(type);
}

function preferredType(types) {
  const order = [/^parca_agent:samples:count:cpu:nanoseconds:delta$/, /^strata_agent:samples/, /samples:count:cpu:nanoseconds:delta$/,
    /cpu:nanoseconds:cpu:nanoseconds:delta$/, /:delta$/];
  for (const re of order) {
    const t = types.find((x) => re.test(x.id));
    if (t) return t.id;
  }
  return types[0]?.id || '';
}

// The profile a pane shows: its selected point, or a merge of its whole range.
function profileSource(s) {
  const expr = store.get(`expression_${s}`);
  if (!expr) return null;
  const sel = store.get(`selection_${s}`), mf = store.get(`merge_from_${s}`), mt = store.get(`merge_to_${s}`);
  if (sel && mf && mt) {
    return {
      query: sel, start: mf, end: mt, selected: true,
      title: `${escapeHtml(friendlyName(typeOf(sel) || splitExpression(sel).type))} at ${escapeHtml(formatTime(Number(mf)))} ` +
        `<code>${escapeHtml(splitExpression(sel).matchersText ? `{${splitExpression(sel).matchersText}}` : '')}</code>`,
    };
  }
  const from = store.get(`from_${s}`, 'now-1h'), to = store.get(`to_${s}`, 'now');
  return {
    query: expr, start: from, end: to, selected: false,
    title: `${escapeHtml(friendlyName(typeOf(expr) || splitExpression(expr).type))} merged over ${escapeHtml(describeRange(from, to).toLowerCase())}` +
      ' <span class="muted">— click a point in the graph to see one profile</span>',
  };
}

// ---- a query pane: query bar + metrics graph ---------------------------------------------

class QueryPane {
  constructor(el, s, { height = 240, title = '' } = {}) {
    this.s = s;
    this.el = el;
    el.classList.add('panel', 'query-pane');
    el.innerHTML = `${title ? `<div class="pane-title">${title}</div>` : ''}
      <div data-role="bar"></div>
      <div class="graph-wrap">
        <div class="graph-head"><span data-role="ylabel" class="muted" hidden></span><span></span><span data-role="gstatus" class="muted"></span></div>
        <div data-role="graph"></div>
        <div class="pv-status" data-role="gmsg" hidden></div>
        <div class="loading-overlay" data-role="loading" hidden><div class="spinner"></div><span>Loading series…</span></div>
      </div>`;
    this.$ = (r) => el.querySelector(`[data-role="${r}"]`);
    this.bar = new QueryBar(this.$('bar'), s, getTypes);
    this.graph = new MetricsGraph(this.$('graph'), {
      height,
      onSelect: (si, i) => this.select(si, i),
      onZoom: (from, to) => {
        store.set({ [`from_${s}`]: from, [`to_${s}`]: to, [`selection_${s}`]: null, [`merge_from_${s}`]: null, [`merge_to_${s}`]: null, cur_path: null });
        this.bar.sync();
      },
    });
    this.key = null;
    this.el.addEventListener('refresh', () => { this.fetch(true); });
    this.onTheme = () => this.graph.build();
    window.addEventListener('strata-theme', this.onTheme);
  }

  destroy() {
    window.removeEventListener('strata-theme', this.onTheme);
    this.graph.destroy();
    if (this.abort) this.abort.abort();
  }

  update(changed) {
    const s = this.s;
    if ([`expression_${s}`, `from_${s}`, `to_${s}`, `sum_by_${s}`].some((k) => changed.has(k))) {
      this.bar.sync();
      this.fetch(false);
    }
    if ([`selection_${s}`, `merge_from_${s}`, `merge_to_${s}`].some((k) => changed.has(k))) this.markSelected();
  }

  async fetch(force) {
    const s = this.s;
    const expr = store.get(`expression_${s}`);
    if (!expr) return;
    const from = store.get(`from_${s}`, 'now-1h'), to = store.get(`to_${s}`, 'now');
    const sumBy = store.get(`sum_by_${s}`);
    const now = Date.now();
    const f = resolveTime(from, now), t = resolveTime(to, now);
    const msg = this.$('gmsg');
    if (f == null || t == null || f >= t) {
      msg.hidden = false;
      msg.className = 'pv-status error-banner';
      msg.textContent = `Invalid time range: ${from} to ${to}`;
      return;
    }
    const width = this.$('graph').clientWidth || 800;
    const points = Math.max(20, Math.min(600, Math.floor(width / 10)));
    const stepS = Math.max(1, Math.round((t - f) / 1000 / points));
    const key = JSON.stringify([expr, f, t, sumBy, stepS]);
    if (!force && key === this.key) return;
    this.key = key;
    if (this.abort) this.abort.abort();
    const ctrl = this.abort = new AbortController();
    this.$('loading').hidden = false;
    try {
      const res = await api.queryRange({ query: expr, start: f, end: t, step: `${stepS}s`, sum_by: sumBy ? sumBy.split(',') : [] }, ctrl.signal);
      if (ctrl.signal.aborted) return;
      this.stepMs = stepS * 1000;
      this.series = res.series || [];
      const type = typeOf(expr);
      this.type = type;
      const mu = metricUnit(this.series[0], type);
      this.$('ylabel').textContent = mu.label;
      this.$('gstatus').textContent = `${this.series.length} series · step ${stepS}s`;
      if (this.series.length === 0) {
        msg.hidden = false;
        msg.className = 'pv-status empty';
        msg.textContent = 'No data for this query in this time range. Try a longer range or fewer label matchers.';
      } else msg.hidden = true;
      this.graph.setData({ series: this.series, unit: mu.unit, label: mu.label, from: f, to: t, selected: this.findSelected() });
      hooks.emit('series', { pane: s, count: this.series.length, unit: mu.unit, label: mu.label });
    } catch (e) {
      if (e.name === 'AbortError') return;
      this.key = null;
      this.series = [];
      msg.hidden = false;
      msg.className = 'pv-status error-banner';
      msg.innerHTML = `<b>Query failed.</b> ${escapeHtml(e.message)}`;
      this.graph.setData({ series: [], unit: '', label: '', from: f, to: t });
      hooks.emit('series-error', { pane: s, message: e.message });
    } finally {
      if (this.abort === ctrl) this.$('loading').hidden = true;
    }
  }

  findSelected() {
    const s = this.s;
    const sel = store.get(`selection_${s}`), mf = Number(store.get(`merge_from_${s}`));
    if (!sel || !mf || !this.series) return null;
    for (let si = 0; si < this.series.length; si++) {
      const ser = this.series[si];
      if (withLabels(store.get(`expression_${s}`), ser.labels) !== sel) continue;
      const i = ser.samples.findIndex((p) => p.timestamp === mf);
      if (i >= 0) return { series: si, index: i };
    }
    return null;
  }

  markSelected() { this.graph.setSelected(this.findSelected()); }

  select(si, i) {
    const s = this.s;
    const ser = this.series[si];
    const p = ser.samples[i];
    const delta = this.type?.delta ?? p.duration > 0;
    const from = p.timestamp;
    const to = delta ? p.timestamp + Math.max(this.stepMs, 1000) - 1 : p.timestamp + 1;
    store.set({
      [`selection_${s}`]: withLabels(store.get(`expression_${s}`), ser.labels),
      [`merge_from_${s}`]: from, [`merge_to_${s}`]: to, cur_path: null,
    });
  }
}

// ---- views -----------------------------------------------------------------------------------

class ProfilesView {
  constructor(el) {
    el.innerHTML = `<div data-role="pane"></div>
      <div class="view-actions"><button type="button" class="btn" data-role="compare" title="Compare this selection with another">⇆ Compare</button></div>
      <div data-role="profile"></div>`;
    this.pane = new QueryPane(el.querySelector('[data-role="pane"]'), 'a');
    this.panel = new ProfilePanel(el.querySelector('[data-role="profile"]'));
    el.querySelector('[data-role="compare"]').addEventListener('click', () => {
      const patch = { view: 'compare' };
      for (const k of ['expression', 'from', 'to', 'sum_by', 'selection', 'merge_from', 'merge_to']) {
        patch[`${k}_b`] = store.get(`${k}_a`) || null;
      }
      patch.cur_path = null;
      patch.sort = null; // a diff sorts by the largest change by default
      store.set(patch);
    });
    el.addEventListener('refresh', () => this.loadProfile(true));
    hooks.views.profiles = this;
    this.pane.fetch(false);
    this.loadProfile(false);
  }

  get icicle() { return this.panel.icicle; }

  loadProfile(force) {
    const src = profileSource('a');
    this.panel.load(src && {
      title: src.title,
      params: { query: src.query, start: src.start, end: src.end, group_by: groupByParam() },
      sides: [src],
    }, { force });
  }

  update(changed) {
    this.pane.update(changed);
    this.loadProfile(false);
    this.panel.applyUi();
  }

  destroy() { this.pane.destroy(); this.panel.destroy(); }
}

class CompareView {
  constructor(el) {
    el.innerHTML = `<div class="compare-grid"><div data-role="a"></div><div data-role="b"></div></div>
      <div data-role="diff"></div>`;
    this.a = new QueryPane(el.querySelector('[data-role="a"]'), 'a', { height: 180, title: '<span class="side side-a">A</span> Baseline' });
    this.b = new QueryPane(el.querySelector('[data-role="b"]'), 'b', { height: 180, title: '<span class="side side-b">B</span> Comparison' });
    this.panel = new ProfilePanel(el.querySelector('[data-role="diff"]'), { diff: true });
    el.addEventListener('refresh', () => this.loadDiff(true));
    hooks.views.compare = this;
    this.a.fetch(false);
    this.b.fetch(false);
    this.loadDiff(false);
  }

  get icicle() { return this.panel.icicle; }

  loadDiff(force) {
    const a = profileSource('a'), b = profileSource('b');
    if (!a || !b) { this.panel.load(null); return; }
    const abs = store.get('absolute') === 'true';
    this.panel.load({
      title: `Diff: B against A, ${abs ? 'absolute' : 'relative'} <span class="muted">— sized by A + B; ` +
        `${abs ? 'raw values' : 'the smaller side scaled to the larger'}</span>`,
      params: {
        query_a: a.query, start_a: a.start, end_a: a.end, query_b: b.query, start_b: b.start, end_b: b.end,
        absolute: abs ? 'true' : 'false', group_by: groupByParam(),
      },
      sides: [a, b],
    }, { force });
  }

  update(changed) {
    this.a.update(changed);
    this.b.update(changed);
    this.loadDiff(false);
    this.panel.applyUi();
  }

  destroy() { this.a.destroy(); this.b.destroy(); this.panel.destroy(); }
}

// ---- shell -----------------------------------------------------------------------------------

let view = null;
let viewName = null;

function renderView() {
  const name = store.get('view', 'profiles');
  const root = document.getElementById('view');
  if (view) view.destroy();
  view = null;
  viewName = name;
  root.innerHTML = '';
  root.className = `view view-${name}`;
  document.querySelectorAll('.nav a').forEach((a) => a.classList.toggle('active', a.dataset.view === name));
  if (name === 'targets') {
    view = new TargetsView(root);
    hooks.views.targets = view;
    return;
  }
  if (profileTypes && profileTypes.length === 0) {
    root.innerHTML = `<div class="empty-state panel"><h2>No profiles yet</h2>
      <p>Strata has not stored any profiles. Push one with
      <code>strata push profile.pb.gz --name process_cpu --label job=demo</code>,
      or run the agent or the scraper; this page picks them up on reload.</p></div>`;
    return;
  }
  view = name === 'compare' ? new CompareView(root) : new ProfilesView(root);
}

let inDefaults = false;
function ensureDefaults() {
  inDefaults = true;
  try { setDefaults(); } finally { inDefaults = false; }
}

function setDefaults() {
  if (!store.get('expression_a') && profileTypes?.length) {
    store.set({ expression_a: preferredType(profileTypes), from_a: store.get('from_a') || 'now-1h', to_a: store.get('to_a') || 'now' }, { push: false });
  }
  if (store.get('view') === 'compare' && !store.get('expression_b') && store.get('expression_a')) {
    const patch = {};
    for (const k of ['expression', 'from', 'to', 'sum_by']) patch[`${k}_b`] = store.get(`${k}_a`) || null;
    store.set(patch, { push: false });
  }
}

async function main() {
  applyTheme(currentTheme());
  document.getElementById('theme-toggle').addEventListener('click', () => {
    const next = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
    localStorage.setItem('strata-theme', next);
    applyTheme(next);
  });
  document.querySelector('.nav').addEventListener('click', (e) => {
    const a = e.target.closest('a[data-view]');
    if (!a || e.ctrlKey || e.metaKey || e.shiftKey) return;
    e.preventDefault();
    store.set({ view: a.dataset.view === 'profiles' ? null : a.dataset.view });
  });
  const banner = document.getElementById('global-error');
  try {
    const r = await api.profileTypes();
    profileTypes = r.types || [];
    banner.hidden = true;
  } catch (e) {
    profileTypes = [];
    banner.hidden = false;
    banner.innerHTML = `<b>Cannot load profile types.</b> ${escapeHtml(e.message)}`;
  }
  hooks.profileTypes = profileTypes;
  ensureDefaults();
  renderView();
  store.subscribe((state, changed) => {
    if (inDefaults) return;
    if (changed.has('view') || store.get('view', 'profiles') !== viewName) {
      ensureDefaults();
      renderView();
      return;
    }
    if (changed.has('theme')) applyTheme(currentTheme());
    view?.update?.(changed);
  });
  hooks.ready = true;
  hooks.emit('ready', {});
}

main();

export { labelsToString };

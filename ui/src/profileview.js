// The profile panel: a toolbar (view, search, colours, zoom, download) over the icicle graph and
// the table, side by side or alone, for one profile (merge / single) or a diff of two.

import { api, apiUrl } from './api.js';
import { Icicle, parseFlamebearer, baseName, diffColor } from './icicle.js';
import { ProfileTable, defaultSort } from './table.js';
import { store } from './state.js';
import { formatValue, escapeHtml } from './format.js';
import {
  GROUP_BY, GROUP_BY_SHORT, DEFAULT_GROUP_BY, parseGroupBy, maxNodesFor, groupByLabelOptions, labelNamesRequests,
  unionNames, nextGroupBy,
} from './profileopts.js';

export function groupByParam() { return parseGroupBy(store.get('group_by')).join(','); }

function readPath() {
  const p = store.get('cur_path');
  if (!p) return null;
  try {
    const a = JSON.parse(p);
    return Array.isArray(a) ? a.map(String) : null;
  } catch { return null; }
}

export class ProfilePanel {
  constructor(el, { diff = false } = {}) {
    this.el = el;
    this.diff = diff;
    el.classList.add('panel', 'profile-panel');
    el.innerHTML = `
      <div class="panel-toolbar">
        <div class="pv-title" data-role="title">No profile selected</div>
        <div class="pv-tools">
          ${diff ? `<div class="seg" data-role="mode" role="group" aria-label="Diff mode">
            <button type="button" data-mode="relative">Relative</button><button type="button" data-mode="absolute">Absolute</button></div>` : ''}
          <div class="seg" data-role="dash" role="group" aria-label="Panels">
            <button type="button" data-dash="icicle">Icicle</button><button type="button" data-dash="both">Both</button><button type="button" data-dash="table">Table</button></div>
          <input type="search" class="pv-search" data-role="search" placeholder="Search functions…" aria-label="Search functions">
          <div class="dropdown groupby" data-role="groupby">
            <button type="button" class="btn" data-role="groupby-button" aria-haspopup="true" aria-expanded="false"
              title="Merge frames that share these fields (function name: the same function in different binaries is one frame)">Group by: function</button>
            <div class="dropdown-menu" data-role="groupby-menu" role="menu" hidden>
              ${GROUP_BY.map(([k, l]) => `<label class="dropdown-item"><input type="checkbox" value="${k}"> ${l}</label>`).join('')}
              <div class="dropdown-section" data-role="groupby-labels" data-state="none"
                title="Put each sample's stack under a frame per value of the label (pprof labels such as Go's pprof.Do endpoint, or series labels)">
                <div class="dropdown-heading">Group by pprof label</div>
                <div class="dropdown-note muted" data-role="groupby-labels-note"></div>
                <div data-role="groupby-labels-items"></div>
              </div>
            </div>
          </div>
          ${diff ? '' : `<select data-role="colorby" aria-label="Colour by" title="Colour the icicle graph by package (one binary) or binary (several); or choose">
            <option value="auto">Colour: auto</option><option value="package">Colour: package</option><option value="binary">Colour: binary</option></select>`}
          <button type="button" class="btn" data-role="reset" hidden>Reset zoom</button>
          <a class="btn" data-role="download" download="profile.pb.gz" href="#" aria-disabled="true">Download pprof</a>
        </div>
      </div>
      <div class="pv-status" data-role="status"></div>
      <div class="pv-body" data-role="body">
        <div class="pv-icicle" data-role="icicle"></div>
        <div class="pv-table" data-role="table"></div>
      </div>
      <div class="loading-overlay" data-role="loading" hidden><div class="spinner"></div><span>Loading profile…</span></div>`;
    this.$ = (r) => el.querySelector(`[data-role="${r}"]`);
    this.icicle = new Icicle(this.$('icicle'), {
      onZoom: (path) => store.set({ cur_path: path ? JSON.stringify(path) : null }),
    });
    this.table = new ProfileTable(this.$('table'), {
      onSort: (k, d) => store.set({ sort: `${k}:${d}` }, { push: false }),
      onPick: (name) => store.set({ search_string: name }, { push: false }),
    });
    this.$('dash').addEventListener('click', (e) => {
      const b = e.target.closest('[data-dash]');
      if (b) store.set({ dashboard: b.dataset.dash === 'both' ? null : b.dataset.dash });
    });
    if (diff) {
      this.$('mode').addEventListener('click', (e) => {
        const b = e.target.closest('[data-mode]');
        if (b) store.set({ absolute: b.dataset.mode === 'absolute' ? 'true' : null });
      });
    } else {
      this.$('colorby').addEventListener('change', (e) => store.set({ color_by: e.target.value === 'auto' ? null : e.target.value }, { push: false }));
    }
    this.setupGroupBy();
    let t = null;
    this.$('search').addEventListener('input', (e) => {
      clearTimeout(t);
      t = setTimeout(() => store.set({ search_string: e.target.value }, { push: false }), 120);
    });
    this.$('reset').addEventListener('click', () => store.set({ cur_path: null }));
    this.abort = null;
    this.key = null;
    this.labelsAbort = null;
    this.labelsKey = null;
    this.labelNames = [];
    this.applyUi();
  }

  destroy() {
    if (this.abort) this.abort.abort();
    if (this.labelsAbort) this.labelsAbort.abort();
    document.removeEventListener('mousedown', this.onOutside);
    document.removeEventListener('keydown', this.onEscape);
    this.icicle.destroy();
  }

  setupGroupBy() {
    const menu = this.$('groupby-menu'), button = this.$('groupby-button');
    const open = (yes) => { menu.hidden = !yes; button.setAttribute('aria-expanded', String(yes)); };
    button.addEventListener('click', () => open(menu.hidden));
    // Escape closes the open menu wherever the focus is (its button, a checkbox, the page).
    this.onEscape = (e) => {
      if (e.key !== 'Escape' || menu.hidden) return;
      const inside = this.$('groupby').contains(document.activeElement);
      open(false);
      if (inside) button.focus();
    };
    document.addEventListener('keydown', this.onEscape);
    this.onOutside = (e) => { if (!this.$('groupby').contains(e.target)) open(false); };
    document.addEventListener('mousedown', this.onOutside);
    menu.addEventListener('change', () => {
      const inputs = [...menu.querySelectorAll('input')];
      const picked = inputs.filter((i) => i.checked).map((i) => i.value);
      // Label groups stay when frame fields change, including ones the menu does not list.
      const g = nextGroupBy(store.get('group_by'), picked, inputs.map((i) => i.value));
      store.set({ group_by: g === DEFAULT_GROUP_BY ? null : g, cur_path: null });
      this.syncGroupBy(); // unchecking the last field leaves the default checked
    });
  }

  // The label names of what the panel shows, for the Group-by menu: sides are [{query, start,
  // end}] (a diff's A and B), asked of the Labels API when they change.
  setLabelSides(sides) {
    const reqs = labelNamesRequests(sides);
    const key = JSON.stringify(reqs);
    if (key === this.labelsKey) return;
    this.labelsKey = key;
    if (this.labelsAbort) this.labelsAbort.abort();
    this.labelsAbort = null;
    if (reqs.length === 0) {
      this.labelNames = [];
      this.labelsState = 'none';
      this.renderLabelOptions();
      return;
    }
    const ctrl = new AbortController();
    this.labelsAbort = ctrl;
    this.labelsState = 'loading';
    this.renderLabelOptions();
    Promise.all(reqs.map((r) => api.labels(r, ctrl.signal).then((j) => j.label_names || []))).then((lists) => {
      if (ctrl.signal.aborted) return;
      this.labelNames = unionNames(lists);
      this.labelsState = 'ok';
    }, (e) => {
      if (ctrl.signal.aborted || e.name === 'AbortError') return;
      this.labelNames = [];
      this.labelsState = 'error';
      this.labelsError = e.message;
    }).then(() => {
      if (ctrl.signal.aborted) return;
      this.labelsAbort = null;
      this.renderLabelOptions();
      window.__strata?.emit?.('labels', { names: this.labelNames, state: this.labelsState });
    });
  }

  // The Group-by menu's label entries: the selection's label names and the labels grouped by.
  renderLabelOptions() {
    const box = this.$('groupby-labels'), items = this.$('groupby-labels-items'), note = this.$('groupby-labels-note');
    const opts = groupByLabelOptions(this.labelNames, store.get('group_by'));
    const html = opts.map(([k, l]) =>
      `<label class="dropdown-item"><input type="checkbox" value="${escapeHtml(k)}"> ${escapeHtml(l)}</label>`).join('');
    if (items.innerHTML !== html) items.innerHTML = html;
    const state = this.labelsState || 'none';
    box.dataset.state = state;
    note.textContent = state === 'loading' ? 'Loading label names…'
      : state === 'error' ? `Label names unavailable: ${this.labelsError}`
        : opts.length === 0 ? 'No labels in this selection' : '';
    note.hidden = !note.textContent;
    const groups = parseGroupBy(store.get('group_by'));
    items.querySelectorAll('input').forEach((i) => { i.checked = groups.includes(i.value); });
  }

  syncGroupBy() {
    const groups = parseGroupBy(store.get('group_by'));
    this.renderLabelOptions();
    this.$('groupby-menu').querySelectorAll('input').forEach((i) => { i.checked = groups.includes(i.value); });
    this.$('groupby-button').textContent = `Group by: ${groups.map((g) => GROUP_BY_SHORT[g]).join(', ')}`;
  }

  // Applies URL keys that do not need a fetch.
  applyUi() {
    const dash = store.get('dashboard', 'both');
    this.$('body').dataset.dash = dash;
    this.$('dash').querySelectorAll('button').forEach((b) => b.classList.toggle('active', b.dataset.dash === dash));
    if (this.diff) {
      const abs = store.get('absolute') === 'true';
      this.$('mode').querySelectorAll('button').forEach((b) => b.classList.toggle('active', (b.dataset.mode === 'absolute') === abs));
    } else {
      let cb = store.get('color_by', 'auto');
      if (!['auto', 'package', 'binary'].includes(cb)) cb = 'auto';
      this.$('colorby').value = cb;
      this.icicle.setColorBy(cb);
    }
    this.syncGroupBy();
    const search = store.get('search_string');
    if (this.$('search').value !== search && document.activeElement !== this.$('search')) this.$('search').value = search;
    this.icicle.setSearch(search);
    this.table.setSearch(search);
    const def = defaultSort(this.diff);
    const [k, d] = store.get('sort', `${def.key}:${def.dir}`).split(':');
    this.table.setSort(k, d);
    const path = readPath();
    this.$('reset').hidden = !path;
    if (this.icicle.model) this.icicle.setZoomPath(path);
    this.updateStatus();
    if (dash !== 'table' && this.icicle.model) requestAnimationFrame(() => this.icicle.render());
  }

  updateStatus() {
    const st = this.$('status');
    if (!this.data || this.error) return;
    const s = this.icicle.searchSummary();
    const d = this.data;
    const parts = [];
    if (d.diff) parts.push(`A total ${escapeHtml(formatValue(d.total_base, d.unit))} · B total ${escapeHtml(formatValue(d.total, d.unit))}`);
    else parts.push(`Total ${escapeHtml(formatValue(d.total, d.unit))}`);
    if (d.diff) {
      const sw = (c, l) => `<span class="legend-key"><i style="background:${c}"></i>${l}</span>`;
      parts.push(`<span class="diff-legend">${sw(diffColor(2, 1), 'grew')}${sw(diffColor(1, 2), 'shrank')}` +
        `${sw(diffColor(1, 0), 'new')}${sw(diffColor(0, 1), 'removed')}${sw(diffColor(1, 1), 'unchanged')}</span>`);
    }
    parts.push(`${d.profiles} profile${d.profiles === 1 ? '' : 's'}`);
    if (this.icicle.model) parts.push(`${this.icicle.model.n.toLocaleString()} nodes`);
    if (d.flamegraph?.trimmed) parts.push(`${escapeHtml(formatValue(d.flamegraph.trimmed, d.unit))} in small nodes not shown`);
    if (s) parts.push(`<b>${s.count} match${s.count === 1 ? '' : 'es'}</b> for “${escapeHtml(this.icicle.search)}”, ${s.percent} of total`);
    st.innerHTML = parts.join(' · ');
    st.className = 'pv-status';
  }

  // source: {title, params (for /query or /diff), sides ([{query, start, end}]: the selections
  // whose label names the Group-by menu offers)} or null (nothing to show).
  async load(source, { force = false } = {}) {
    if (force) this.labelsKey = null;
    this.setLabelSides(source?.sides || []);
    const key = source ? JSON.stringify(source.params) : null;
    if (!force && key === this.key) { this.$('title').innerHTML = source?.title || this.$('title').innerHTML; return; }
    this.key = key;
    if (this.abort) this.abort.abort();
    this.abort = null;
    if (!source) {
      this.$('title').textContent = 'No profile selected';
      return;
    }
    this.$('title').innerHTML = source.title;
    const dl = this.$('download');
    dl.href = apiUrl(this.diff ? 'api/v1/diff' : 'api/v1/query', { ...source.params, report: 'pprof', max_nodes: null });
    dl.removeAttribute('aria-disabled');
    const ctrl = new AbortController();
    this.abort = ctrl;
    this.$('loading').hidden = false;
    this.el.classList.add('loading');
    try {
      const params = { ...source.params, report: 'both', max_nodes: maxNodesFor(this.el.clientWidth) };
      const data = this.diff ? await api.diff(params, ctrl.signal) : await api.query(params, ctrl.signal);
      if (ctrl.signal.aborted) return;
      this.error = null;
      this.show(data);
    } catch (e) {
      if (e.name === 'AbortError') return;
      this.showError(e);
    } finally {
      if (this.abort === ctrl) {
        this.$('loading').hidden = true;
        this.el.classList.remove('loading');
      }
    }
  }

  show(data) {
    this.data = data;
    const byName = new Map();
    // Binaries that hold at least 1% of the flat total: with one, colours separate packages;
    // with several, binaries (a stray [vdso] frame does not count).
    const flatOf = new Map();
    let flatSum = 0;
    for (const r of data.table?.rows || []) {
      const label = r.label || r.name; // the flame graph's name for the frame
      if (!byName.has(label)) byName.set(label, r);
      const f = Math.max(r.flat || 0, (r.flat || 0) - (r.flat_diff || 0));
      flatSum += f;
      if (r.mapping_file) flatOf.set(r.mapping_file, (flatOf.get(r.mapping_file) || 0) + f);
    }
    const binaries = [...flatOf.values()].filter((f) => f > 0 && f >= flatSum * 0.01);
    const model = parseFlamebearer(data.flamegraph);
    this.$('body').hidden = false;
    this.icicle.setProfile(model, {
      unit: data.unit,
      binaryCount: binaries.length,
      binaryOf: (n) => baseName(byName.get(n)?.mapping_file || ''),
      fileOf: (n) => byName.get(n)?.filename || '',
    });
    this.icicle.setZoomPath(readPath());
    this.table.setData(data.table, { diff: !!data.diff });
    this.applyUi();
    window.__strata?.emit?.('profile', { diff: !!data.diff });
  }

  showError(e) {
    this.error = e;
    this.data = null;
    const st = this.$('status');
    const notFound = e.status === 404;
    st.className = `pv-status ${notFound ? 'empty' : 'error-banner'}`;
    st.innerHTML = notFound
      ? `No profiles match this selection. Pick another time range, loosen the label matchers, or click a point in the graph.<div class="err-detail">${escapeHtml(e.message)}</div>`
      : `<b>Could not load the profile.</b> ${escapeHtml(e.message)}`;
    this.$('body').hidden = true;
    window.__strata?.emit?.('profile-error', { message: e.message });
  }
}

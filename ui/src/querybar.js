// The query bar: profile type, label matchers with autocomplete, time range, sum by, Search.
// It edits a draft and commits it to the URL (expression_X, from_X, to_X, sum_by_X) on Search.

import { api } from './api.js';
import { friendlyName, defaultSumBy } from './profiletypes.js';
import { splitExpression, joinExpression, parseMatchers } from './query.js';
import { resolveTime, toLocalInput, formatTime, escapeHtml } from './format.js';
import { store } from './state.js';

export const RELATIVE_RANGES = [
  ['now-5m', 'Last 5 minutes'], ['now-15m', 'Last 15 minutes'], ['now-1h', 'Last 1 hour'],
  ['now-3h', 'Last 3 hours'], ['now-6h', 'Last 6 hours'], ['now-12h', 'Last 12 hours'],
  ['now-1d', 'Last 1 day'], ['now-2d', 'Last 2 days'], ['now-7d', 'Last 7 days'],
];

export function describeRange(from, to) {
  if (to === 'now' || !to) {
    const r = RELATIVE_RANGES.find(([k]) => k === from);
    if (r) return r[1];
    if (from?.startsWith('now-')) return `Last ${from.slice(4)}`;
  }
  const f = resolveTime(from), t = resolveTime(to || 'now');
  return `${f ? formatTime(f) : from} → ${t ? formatTime(t) : to}`;
}

// Where the cursor is in the matcher text: completing a label name or a value.
export function completionContext(text, pos) {
  let i = 0, state = 'name', tokStart = 0, name = '', valueStart = 0, quote = '';
  while (i < pos) {
    const c = text[i];
    if (state === 'name') {
      if (/[A-Za-z0-9_]/.test(c)) { i++; continue; }
      if (/\s/.test(c) && i === tokStart) { i++; tokStart = i; continue; }
      name = text.slice(tokStart, i).trim();
      state = 'op';
      continue;
    }
    if (state === 'op') {
      if (/\s/.test(c)) { i++; continue; }
      if ('=!~'.includes(c)) { i++; continue; }
      if (c === '"' || c === "'") { quote = c; i++; valueStart = i; state = 'value'; continue; }
      return null;
    }
    if (state === 'value') {
      if (c === '\\') { i += 2; continue; }
      if (c === quote) { i++; state = 'after'; continue; }
      i++;
      continue;
    }
    if (state === 'after') {
      if (c === ',') { i++; tokStart = i; state = 'name'; continue; }
      i++;
      continue;
    }
  }
  if (state === 'name') {
    while (tokStart < pos && /\s/.test(text[tokStart])) tokStart++;
    return { kind: 'name', start: tokStart, prefix: text.slice(tokStart, pos) };
  }
  if (state === 'op') {
    const opText = text.slice(tokStart + name.length, pos).trim();
    if (['=', '!=', '=~', '!~'].includes(opText)) return { kind: 'value', name, start: pos, prefix: '', needQuote: true };
    return null;
  }
  if (state === 'value') return { kind: 'value', name, start: valueStart, prefix: text.slice(valueStart, pos), quote };
  return null;
}

function rank(items, prefix) {
  const p = prefix.toLowerCase();
  const starts = [], contains = [];
  for (const it of items) {
    const l = it.toLowerCase();
    if (l.startsWith(p)) starts.push(it);
    else if (p && l.includes(p)) contains.push(it);
  }
  return starts.concat(contains).slice(0, 50);
}

export class QueryBar {
  // suffix: "a" or "b"; types: the ProfileTypes answer; onCommit(): after Search.
  constructor(el, suffix, getTypes) {
    this.el = el;
    this.s = suffix;
    this.getTypes = getTypes;
    this.labelCache = new Map();
    this.valueCache = new Map();
    this.el.classList.add('querybar');
    this.el.innerHTML = `
      <label class="qb-field qb-type"><span>Profile type</span>
        <select data-role="type" aria-label="Profile type"></select></label>
      <div class="qb-field qb-matchers"><span>Labels</span>
        <div class="ac-wrap">
          <input data-role="matchers" type="text" spellcheck="false" autocomplete="off"
            placeholder='e.g. job="api", instance=~"10.0.*"' aria-label="Label matchers">
          <ul class="ac-list" data-role="ac" role="listbox" hidden></ul>
        </div></div>
      <div class="qb-field qb-sumby"><span>Sum by</span>
        <div class="chips" data-role="sumby">
          <input data-role="sumby-input" list="sumby-list-${suffix}" placeholder="label…" aria-label="Sum by label">
          <datalist id="sumby-list-${suffix}"></datalist>
        </div></div>
      <div class="qb-field qb-time"><span>Time range</span>
        <div class="qb-time-row">
          <select data-role="range" aria-label="Time range"></select>
          <span class="qb-abs" data-role="abs" hidden>
            <input type="datetime-local" step="1" data-role="from" aria-label="From">
            <input type="datetime-local" step="1" data-role="to" aria-label="To">
          </span>
        </div></div>
      <button class="btn primary qb-search" data-role="search">Search</button>`;
    this.$ = (r) => this.el.querySelector(`[data-role="${r}"]`);
    this.typeSel = this.$('type');
    this.input = this.$('matchers');
    this.acList = this.$('ac');
    this.rangeSel = this.$('range');
    this.sumBy = [];

    for (const [k, label] of RELATIVE_RANGES) this.rangeSel.add(new Option(label, k));
    this.rangeSel.add(new Option('Absolute…', 'absolute'));

    this.typeSel.addEventListener('change', () => {
      this.labelCache.clear();
      this.valueCache.clear();
      this.loadLabelNames().then((names) => {
        if (this.sumBy.length === 0 && !store.get(`sum_by_${this.s}`)) {
          const t = this.currentType();
          this.sumBy = defaultSumBy(t, names);
          this.renderChips();
        }
      });
    });
    this.rangeSel.addEventListener('change', () => {
      const abs = this.rangeSel.value === 'absolute';
      this.$('abs').hidden = !abs;
      if (abs && !this.$('from').value) {
        const now = Date.now();
        this.$('from').value = toLocalInput(now - 3600e3);
        this.$('to').value = toLocalInput(now);
      }
    });
    this.$('search').addEventListener('click', () => this.commit());
    this.setupAutocomplete();
    this.setupSumBy();
    this.sync();
  }

  currentType() {
    return (this.getTypes() || []).find((t) => t.id === this.typeSel.value);
  }

  // Fills the draft from the URL.
  sync() {
    const types = this.getTypes() || [];
    const { type, matchersText } = splitExpression(store.get(`expression_${this.s}`));
    const sorted = [...types].sort((a, b) => friendlyName(a).localeCompare(friendlyName(b)));
    this.typeSel.innerHTML = '';
    if (sorted.length === 0) this.typeSel.add(new Option('No profile types yet', ''));
    for (const t of sorted) {
      const o = new Option(friendlyName(t), t.id);
      o.title = t.id;
      this.typeSel.add(o);
    }
    if (type && !types.some((t) => t.id === type)) this.typeSel.add(new Option(type, type));
    if (type) this.typeSel.value = type;
    this.input.value = matchersText;
    const from = store.get(`from_${this.s}`, 'now-1h');
    const to = store.get(`to_${this.s}`, 'now');
    if (to === 'now' && RELATIVE_RANGES.some(([k]) => k === from)) {
      this.rangeSel.value = from;
      this.$('abs').hidden = true;
    } else {
      this.rangeSel.value = 'absolute';
      this.$('abs').hidden = false;
      const f = resolveTime(from), t = resolveTime(to);
      if (f != null) this.$('from').value = toLocalInput(f);
      if (t != null) this.$('to').value = toLocalInput(t);
    }
    const sb = store.get(`sum_by_${this.s}`);
    this.sumBy = sb ? sb.split(',').filter(Boolean) : [];
    this.renderChips();
    this.loadLabelNames();
  }

  draft() {
    let from, to;
    if (this.rangeSel.value === 'absolute') {
      const f = Date.parse(this.$('from').value), t = Date.parse(this.$('to').value);
      if (Number.isNaN(f) || Number.isNaN(t)) throw new Error('enter both ends of the absolute time range');
      if (f >= t) throw new Error('the time range must start before it ends');
      from = String(f); to = String(t);
    } else {
      from = this.rangeSel.value; to = 'now';
    }
    const type = this.typeSel.value;
    if (!type) throw new Error('pick a profile type');
    parseMatchers(this.input.value); // throws with a column on a syntax error
    return { expression: joinExpression(type, this.input.value), from, to, sumBy: this.sumBy.join(',') };
  }

  commit() {
    let d;
    try {
      d = this.draft();
    } catch (e) {
      this.showError(e.message);
      return;
    }
    this.showError('');
    const s = this.s;
    store.set({
      [`expression_${s}`]: d.expression, [`from_${s}`]: d.from, [`to_${s}`]: d.to,
      [`sum_by_${s}`]: d.sumBy || null,
      [`selection_${s}`]: null, [`merge_from_${s}`]: null, [`merge_to_${s}`]: null,
      cur_path: null,
    });
    // Re-running the same query still refreshes (relative ranges move with the clock).
    this.el.dispatchEvent(new CustomEvent('refresh', { bubbles: true }));
  }

  showError(msg) {
    let e = this.el.querySelector('.qb-error');
    if (!msg) { if (e) e.remove(); return; }
    if (!e) {
      e = document.createElement('div');
      e.className = 'qb-error error-inline';
      this.el.appendChild(e);
    }
    e.textContent = msg;
  }

  timeParams() {
    return { start: store.get(`from_${this.s}`, 'now-1h'), end: store.get(`to_${this.s}`, 'now') };
  }

  async loadLabelNames() {
    const type = this.typeSel.value;
    if (!type) return [];
    if (this.labelCache.has(type)) return this.labelCache.get(type);
    const p = api.labels({ profile_type: type, ...this.timeParams() })
      .then((r) => r.label_names || [])
      .catch(() => []);
    this.labelCache.set(type, p);
    const names = await p;
    const dl = this.el.querySelector('datalist');
    dl.innerHTML = names.map((n) => `<option value="${escapeHtml(n)}">`).join('');
    return names;
  }

  async loadValues(name) {
    const key = `${this.typeSel.value}\u0000${name}`;
    if (!this.valueCache.has(key)) {
      this.valueCache.set(key, api.values(name, { profile_type: this.typeSel.value, ...this.timeParams() })
        .then((r) => r.label_values || []).catch(() => []));
    }
    return this.valueCache.get(key);
  }

  setupAutocomplete() {
    const input = this.input, list = this.acList;
    this.ac = { items: [], active: -1, ctx: null };
    const close = () => { list.hidden = true; this.ac.items = []; this.ac.active = -1; };
    const render = () => {
      list.innerHTML = this.ac.items.map((it, i) =>
        `<li role="option" data-i="${i}" class="${i === this.ac.active ? 'active' : ''}">${escapeHtml(it)}</li>`).join('');
      list.hidden = this.ac.items.length === 0;
    };
    let seq = 0;
    const update = async () => {
      const ctx = completionContext(input.value, input.selectionStart);
      const my = ++seq;
      if (!ctx) { close(); return; }
      const source = ctx.kind === 'name' ? await this.loadLabelNames() : await this.loadValues(ctx.name);
      if (my !== seq || document.activeElement !== input) return;
      this.ac.ctx = ctx;
      this.ac.items = rank(source, ctx.prefix);
      this.ac.active = this.ac.items.length ? 0 : -1;
      render();
    };
    const accept = (item) => {
      const ctx = this.ac.ctx;
      const v = input.value, pos = input.selectionStart;
      let insert, caret;
      if (ctx.kind === 'name') {
        const rest = v.slice(pos);
        if (/^\s*(=|!=|=~|!~)/.test(rest)) { insert = item; caret = ctx.start + item.length; }
        else { insert = `${item}=""`; caret = ctx.start + item.length + 2; }
      } else {
        const esc = item.replace(/\\/g, '\\\\').replace(/"/g, '\\"');
        const q = ctx.quote || '"';
        const closing = v[pos] === q ? '' : q;
        insert = `${ctx.needQuote ? q : ''}${esc}${closing}`;
        caret = ctx.start + insert.length + (closing ? 0 : 1);
      }
      input.value = v.slice(0, ctx.start) + insert + v.slice(pos);
      input.setSelectionRange(caret, caret);
      close();
      input.focus();
      update();
    };
    input.addEventListener('input', update);
    input.addEventListener('focus', update);
    input.addEventListener('click', update);
    input.addEventListener('blur', () => setTimeout(close, 150));
    input.addEventListener('keydown', (e) => {
      const open = !list.hidden && this.ac.items.length > 0;
      if (e.key === 'ArrowDown' && open) {
        this.ac.active = (this.ac.active + 1) % this.ac.items.length; render(); e.preventDefault();
      } else if (e.key === 'ArrowUp' && open) {
        this.ac.active = (this.ac.active - 1 + this.ac.items.length) % this.ac.items.length; render(); e.preventDefault();
      } else if ((e.key === 'Tab' || e.key === 'Enter') && open && this.ac.active >= 0) {
        accept(this.ac.items[this.ac.active]); e.preventDefault();
      } else if (e.key === 'Escape') {
        close();
      } else if (e.key === 'Enter') {
        close(); this.commit(); e.preventDefault();
      }
    });
    list.addEventListener('mousedown', (e) => {
      const li = e.target.closest('li');
      if (li) { e.preventDefault(); accept(this.ac.items[Number(li.dataset.i)]); }
    });
  }

  setupSumBy() {
    const inp = this.$('sumby-input');
    const add = () => {
      const v = inp.value.trim().replace(/,$/, '');
      if (v && /^[A-Za-z_][A-Za-z0-9_]*$/.test(v) && !this.sumBy.includes(v)) this.sumBy.push(v);
      inp.value = '';
      this.renderChips();
    };
    inp.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ',') {
        e.preventDefault();
        if (inp.value.trim()) add(); else if (e.key === 'Enter') this.commit();
      } else if (e.key === 'Backspace' && !inp.value && this.sumBy.length) {
        this.sumBy.pop(); this.renderChips();
      }
    });
    inp.addEventListener('change', add);
    this.$('sumby').addEventListener('click', (e) => {
      const x = e.target.closest('[data-remove]');
      if (x) { this.sumBy = this.sumBy.filter((n) => n !== x.dataset.remove); this.renderChips(); }
      else inp.focus();
    });
  }

  renderChips() {
    const box = this.$('sumby');
    box.querySelectorAll('.chip').forEach((c) => c.remove());
    const inp = this.$('sumby-input');
    for (const n of this.sumBy) {
      const c = document.createElement('span');
      c.className = 'chip';
      c.innerHTML = `${escapeHtml(n)}<button type="button" title="Remove" data-remove="${escapeHtml(n)}">×</button>`;
      box.insertBefore(c, inp);
    }
  }
}

// The table: one row per function with flat and cumulative values and percentages (and diffs
// for a compare), sortable by any column and filtered by the search string.

import { formatValue, formatPercent, formatSigned, formatSignedPercent, escapeHtml } from './format.js';
import { baseName } from './icicle.js';

const MAX_ROWS = 2000;

function pct(diff, value) {
  const base = value - diff;
  if (base === 0) return diff === 0 ? 0 : Infinity;
  return (diff / base) * 100;
}

function columns(diff) {
  const cols = [
    { key: 'name', label: 'Name' },
    { key: 'flat', label: 'Flat', num: true },
    { key: 'flat_pct', label: 'Flat (%)', num: true },
  ];
  if (diff) cols.push({ key: 'flat_diff', label: 'Flat Diff', num: true }, { key: 'flat_diff_pct', label: 'Flat Diff (%)', num: true });
  cols.push({ key: 'cumulative', label: 'Cumulative', num: true }, { key: 'cumulative_pct', label: 'Cumulative (%)', num: true });
  if (diff) cols.push({ key: 'cumulative_diff', label: 'Cumulative Diff', num: true }, { key: 'cumulative_diff_pct', label: 'Cumulative Diff (%)', num: true });
  cols.push({ key: 'binary', label: 'Binary' }, { key: 'filename', label: 'File' });
  return cols;
}

export class ProfileTable {
  // opts: {onSort(key, dir), onPick(name)}
  constructor(el, opts = {}) {
    this.el = el;
    this.opts = opts;
    el.classList.add('ptable');
    this.sortKey = 'flat';
    this.sortDir = 'desc';
    this.search = '';
    this.rows = [];
    el.addEventListener('click', (e) => {
      const th = e.target.closest('th[data-key]');
      if (th) {
        const key = th.dataset.key;
        const dir = key === this.sortKey ? (this.sortDir === 'desc' ? 'asc' : 'desc') : (key === 'name' || key === 'binary' || key === 'filename' ? 'asc' : 'desc');
        this.setSort(key, dir);
        this.opts.onSort?.(key, dir);
        return;
      }
      const tr = e.target.closest('tr[data-name]');
      if (tr) this.opts.onPick?.(tr.dataset.name);
    });
  }

  // table: the API's table object; opts: {diff}
  setData(table, { diff = false } = {}) {
    this.unit = table.unit;
    this.total = table.total;
    this.diff = diff;
    this.rows = table.rows.map((r) => {
      const row = {
        name: r.name, filename: r.filename || '', mapping_file: r.mapping_file || '',
        binary: baseName(r.mapping_file || ''), flat: r.flat, cumulative: r.cumulative,
        flat_pct: this.total ? r.flat / this.total : 0, cumulative_pct: this.total ? r.cumulative / this.total : 0,
      };
      if (diff) {
        row.flat_diff = r.flat_diff || 0;
        row.cumulative_diff = r.cumulative_diff || 0;
        row.flat_diff_pct = pct(row.flat_diff, r.flat);
        row.cumulative_diff_pct = pct(row.cumulative_diff, r.cumulative);
      }
      return row;
    });
    this.render();
  }

  setSort(key, dir) {
    if (!key) { key = 'flat'; dir = 'desc'; }
    if (!this.diff && key.includes('diff')) key = 'flat';
    this.sortKey = key;
    this.sortDir = dir === 'asc' ? 'asc' : 'desc';
    this.render();
  }

  setSearch(s) {
    this.search = (s || '').trim();
    this.render();
  }

  visibleRows() {
    const q = this.search.toLowerCase();
    let rows = q ? this.rows.filter((r) => r.name.toLowerCase().includes(q)) : this.rows.slice();
    const k = this.sortKey, mul = this.sortDir === 'asc' ? 1 : -1;
    const num = typeof (this.rows[0]?.[k]) === 'number';
    rows.sort((a, b) => {
      const c = num ? (a[k] === b[k] ? 0 : a[k] < b[k] ? -1 : 1) : String(a[k]).localeCompare(String(b[k]));
      return c !== 0 ? c * mul : a.name.localeCompare(b.name);
    });
    return rows;
  }

  render() {
    const u = this.unit;
    const cols = columns(this.diff);
    const rows = this.visibleRows();
    this.lastRows = rows;
    const shown = rows.slice(0, MAX_ROWS);
    const diffCls = (v) => (v > 0 ? 'pos' : v < 0 ? 'neg' : '');
    const cell = (r, c) => {
      switch (c.key) {
        case 'flat': case 'cumulative': return formatValue(r[c.key], u);
        case 'flat_pct': case 'cumulative_pct': return formatPercent(r[c.key], 1);
        case 'flat_diff': case 'cumulative_diff': return formatSigned(r[c.key], u);
        case 'flat_diff_pct': case 'cumulative_diff_pct': return formatSignedPercent(r[c.key]);
        default: return r[c.key];
      }
    };
    const head = cols.map((c) => {
      const active = c.key === this.sortKey;
      return `<th data-key="${c.key}" class="${c.num ? 'num' : ''} ${active ? 'sorted' : ''}" aria-sort="${active ? (this.sortDir === 'asc' ? 'ascending' : 'descending') : 'none'}">` +
        `${c.label}${active ? (this.sortDir === 'asc' ? ' ▲' : ' ▼') : ''}</th>`;
    }).join('');
    const body = shown.map((r) => `<tr data-name="${escapeHtml(r.name)}" data-flat="${r.flat}" data-cumulative="${r.cumulative}"` +
      `${this.diff ? ` data-cumulative-diff="${r.cumulative_diff}"` : ''} title="Click to highlight in the icicle graph">` +
      cols.map((c) => {
        const v = cell(r, c);
        const cls = [c.num ? 'num' : '', c.key.includes('diff') ? diffCls(r[c.key]) : '', c.key === 'name' ? 'fn' : ''].join(' ').trim();
        const title = c.key === 'binary' ? r.mapping_file : c.key === 'filename' || c.key === 'name' ? r[c.key] : '';
        return `<td class="${cls}"${title ? ` title="${escapeHtml(title)}"` : ''}>${escapeHtml(v)}</td>`;
      }).join('') + '</tr>').join('');
    const note = rows.length > MAX_ROWS ? `<div class="table-note">Showing the first ${MAX_ROWS} of ${rows.length} rows; search to narrow.</div>` :
      rows.length === 0 ? `<div class="table-note">${this.search ? `No function matches “${escapeHtml(this.search)}”.` : 'No rows.'}</div>` : '';
    this.el.innerHTML = `<div class="table-scroll"><table><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table></div>${note}`;
  }
}

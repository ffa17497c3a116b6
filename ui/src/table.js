// The table: one row per function with flat and cumulative values and percentages (and, for a
// compare, both sides and the change), sortable by any column and filtered by the search string.
// It fits its panel without scrolling sideways: names are cut with an ellipsis (the full name,
// file and binary are in the row's tooltip) and the less important columns ("extra") show only
// when the table is wide (a container query in style.css).

import { formatValue, formatPercent, formatSigned, formatDiffPercent, escapeHtml } from './format.js';
import { baseName, diffKind } from './icicle.js';

const MAX_ROWS = 2000;

// Relative change in percent for sorting: +Infinity for new, -100 for removed.
function pct(b, a) {
  if (a === 0) return b === 0 ? 0 : Infinity;
  return ((b - a) / a) * 100;
}

// The default sort of each table: flat descending, or for a diff the largest change of either
// sign first (|cumulative B - cumulative A| descending).
export function defaultSort(diff) {
  return diff ? { key: 'cumulative_diff_abs', dir: 'desc' } : { key: 'flat', dir: 'desc' };
}

// Sort keys ending in "_abs" sort the column without its key's suffix by magnitude.
export const ABS_SUFFIX = '_abs';

// What a click on a column header does: a new column sorts descending (names ascending); the
// change columns of a diff cycle |change| descending -> change descending (largest growth first)
// -> change ascending (largest shrinkage first); other columns toggle.
export function nextSort(column, key, dir, diffColumn = false) {
  const cur = key.endsWith(ABS_SUFFIX) ? key.slice(0, -ABS_SUFFIX.length) : key;
  const text = column === 'name' || column === 'binary' || column === 'filename';
  if (diffColumn) {
    if (cur !== column) return { key: column + ABS_SUFFIX, dir: 'desc' };
    if (key.endsWith(ABS_SUFFIX)) return { key: column, dir: 'desc' };
    return dir === 'desc' ? { key: column, dir: 'asc' } : { key: column + ABS_SUFFIX, dir: 'desc' };
  }
  if (cur !== column) return { key: column, dir: text ? 'asc' : 'desc' };
  return { key: column, dir: dir === 'desc' ? 'asc' : 'desc' };
}

// Sorts rows (objects with the column keys) by key and dir; ties by name. Pure, for tests.
export function sortRows(rows, key, dir) {
  const abs = key.endsWith(ABS_SUFFIX);
  const k = abs ? key.slice(0, -ABS_SUFFIX.length) : key;
  const mul = dir === 'asc' ? 1 : -1;
  const num = rows.length > 0 && typeof rows[0][k] === 'number';
  const val = abs ? (r) => Math.abs(r[k]) : (r) => r[k];
  return rows.sort((a, b) => {
    let c;
    if (num) { const x = val(a), y = val(b); c = x === y ? 0 : x < y ? -1 : 1; } else c = String(a[k]).localeCompare(String(b[k]));
    return c !== 0 ? c * mul : a.name.localeCompare(b.name);
  });
}

// One API table row as the table keeps it. For a diff, A's values are the server's flat_base and
// cumulative_base, or B - diff from servers that send only the diffs.
export function tableRow(r, total, diff) {
  // name: the flame graph's name for the frame (the server's "label": the function name, with the
  // address when grouping by location), so a row click searches the icicle graph for it.
  const row = {
    name: r.label || r.name, function_name: r.name, address: r.address || '',
    filename: r.filename || '', mapping_file: r.mapping_file || '',
    binary: baseName(r.mapping_file || ''), flat: r.flat || 0, cumulative: r.cumulative || 0,
    flat_pct: total ? (r.flat || 0) / total : 0, cumulative_pct: total ? (r.cumulative || 0) / total : 0,
  };
  if (diff) {
    row.flat_diff = r.flat_diff || 0;
    row.cumulative_diff = r.cumulative_diff || 0;
    row.flat_base = r.flat_base ?? row.flat - row.flat_diff;
    row.cumulative_base = r.cumulative_base ?? row.cumulative - row.cumulative_diff;
    row.flat_diff_pct = pct(row.flat, row.flat_base);
    row.cumulative_diff_pct = pct(row.cumulative, row.cumulative_base);
    row.change = diffKind(row.cumulative, row.cumulative_base);
  }
  return row;
}

// Rows that share a name (grouped by file, binary or address too) get `where`: the first of
// binary, mapping file path, file and address that tells them apart.
export function markDuplicates(rows) {
  const groups = new Map();
  for (const r of rows) {
    if (!groups.has(r.name)) groups.set(r.name, []);
    groups.get(r.name).push(r);
  }
  const pickers = [(r) => r.binary, (r) => r.mapping_file, (r) => baseName(r.filename), (r) => r.filename, (r) => r.address];
  for (const g of groups.values()) {
    if (g.length < 2) continue;
    const pick = pickers.find((p) => new Set(g.map(p)).size === g.length) || pickers[1];
    for (const r of g) r.where = pick(r) || '';
  }
  return rows;
}

// Columns: key, short label, title (the full name), num, extra (shown only when wide), diff (a
// change column: magnitude sorts first).
function columns(diff) {
  if (!diff) {
    return [
      { key: 'name', label: 'Name' },
      { key: 'flat', label: 'Flat', num: true },
      { key: 'flat_pct', label: 'Flat %', title: 'Flat (%)', num: true },
      { key: 'cumulative', label: 'Cumulative', num: true },
      { key: 'cumulative_pct', label: 'Cum. %', title: 'Cumulative (%)', num: true },
      { key: 'binary', label: 'Binary', extra: true },
      { key: 'filename', label: 'File', extra: true },
    ];
  }
  return [
    { key: 'name', label: 'Name' },
    { key: 'flat_base', label: 'Flat A', title: 'Flat in A (baseline)', num: true, extra: true },
    { key: 'flat', label: 'Flat B', title: 'Flat in B (comparison)', num: true, extra: true },
    { key: 'flat_diff', label: 'Flat Δ', title: 'Flat diff: B - A', num: true, diff: true },
    { key: 'flat_diff_pct', label: 'Flat Δ %', title: 'Flat diff (%) of A', num: true, extra: true },
    { key: 'cumulative_base', label: 'Cum. A', title: 'Cumulative in A (baseline)', num: true },
    { key: 'cumulative', label: 'Cum. B', title: 'Cumulative in B (comparison)', num: true },
    { key: 'cumulative_diff', label: 'Cum. Δ', title: 'Cumulative diff: B - A', num: true, diff: true },
    { key: 'cumulative_diff_pct', label: 'Cum. Δ %', title: 'Cumulative diff (%) of A; new: only in B, removed: only in A', num: true },
    { key: 'binary', label: 'Binary', extra: true },
    { key: 'filename', label: 'File', extra: true },
  ];
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
    this.diff = false;
    el.addEventListener('click', (e) => {
      const th = e.target.closest('th[data-key]');
      if (th) {
        const col = columns(this.diff).find((c) => c.key === th.dataset.key);
        const { key, dir } = nextSort(th.dataset.key, this.sortKey, this.sortDir, !!col?.diff);
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
    this.rows = (table.rows || []).map((r) => tableRow(r, this.total, diff));
    this.rowsTotal = Math.max(table.rows_total || 0, this.rows.length);
    markDuplicates(this.rows);
    this.render();
  }

  // key may be a column or a change column + "_abs"; an empty or unknown key gives the default.
  setSort(key, dir) {
    const cols = columns(this.diff);
    const base = key && key.endsWith(ABS_SUFFIX) ? key.slice(0, -ABS_SUFFIX.length) : key;
    const col = cols.find((c) => c.key === base);
    if (!col || (key !== base && !col.diff)) ({ key, dir } = defaultSort(this.diff));
    this.sortKey = key;
    this.sortDir = dir === 'asc' ? 'asc' : 'desc';
    this.render();
  }

  visibleRows() {
    const q = this.search.toLowerCase();
    const rows = q ? this.rows.filter((r) => r.name.toLowerCase().includes(q)) : this.rows.slice();
    return sortRows(rows, this.sortKey, this.sortDir);
  }

  setSearch(s) {
    this.search = (s || '').trim();
    this.render();
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
        case 'flat': case 'cumulative': case 'flat_base': case 'cumulative_base': return formatValue(r[c.key], u);
        case 'flat_pct': case 'cumulative_pct': return formatPercent(r[c.key], 1);
        case 'flat_diff': case 'cumulative_diff': return formatSigned(r[c.key], u);
        case 'flat_diff_pct': return formatDiffPercent(r.flat, r.flat_base);
        case 'cumulative_diff_pct': return formatDiffPercent(r.cumulative, r.cumulative_base);
        default: return r[c.key];
      }
    };
    const sortBase = this.sortKey.endsWith(ABS_SUFFIX) ? this.sortKey.slice(0, -ABS_SUFFIX.length) : this.sortKey;
    const head = cols.map((c) => {
      const active = c.key === sortBase;
      const byMagnitude = active && this.sortKey !== sortBase;
      const arrow = active ? (this.sortDir === 'asc' ? ' ▲' : ' ▼') : '';
      const how = byMagnitude ? ', sorted by magnitude (|B - A|)' : '';
      // Sorted by magnitude, "Cum. Δ" reads "Cum. |Δ|".
      const label = byMagnitude ? c.label.replace('Δ', '|Δ|') : c.label;
      const title = `${c.title || c.label}${how}${c.diff ? '. Click: |change|, then largest growth, then largest shrinkage first' : ''}`;
      return `<th data-key="${c.key}" class="${[c.num ? 'num' : '', active ? 'sorted' : '', c.extra ? 'extra' : '', c.key === 'name' ? 'fn' : ''].join(' ').trim()}"` +
        ` title="${escapeHtml(title)}" aria-sort="${active ? (this.sortDir === 'asc' ? 'ascending' : 'descending') : 'none'}">` +
        `${escapeHtml(label)}${arrow}</th>`;
    }).join('');
    const body = shown.map((r) => {
      const tip = [r.name, r.filename, r.mapping_file, r.address].filter(Boolean).join('\n');
      return `<tr data-name="${escapeHtml(r.name)}" data-flat="${r.flat}" data-cumulative="${r.cumulative}"` +
        `${this.diff ? ` data-cumulative-base="${r.cumulative_base}" data-cumulative-diff="${r.cumulative_diff}" data-change="${r.change}"` : ''}>` +
        cols.map((c) => {
          const v = cell(r, c);
          let cls = [c.num ? 'num' : '', c.extra ? 'extra' : '', c.key === 'name' ? 'fn' : ''];
          if (c.key.includes('diff')) cls.push(diffCls(r[c.key]));
          if (c.key === 'cumulative_diff_pct' && (r.change === 'new' || r.change === 'removed')) cls.push(`chg-${r.change}`);
          cls = cls.filter(Boolean).join(' ');
          const title = c.key === 'name' ? `${tip}\nClick to highlight in the icicle graph` : c.key === 'binary' ? r.mapping_file : c.key === 'filename' ? r.filename : '';
          const where = c.key === 'name' && r.where ? ` <span class="where">${escapeHtml(r.where)}</span>` : '';
          return `<td${cls ? ` class="${cls}"` : ''}${title ? ` title="${escapeHtml(title)}"` : ''}>${escapeHtml(v)}${where}</td>`;
        }).join('') + '</tr>';
    }).join('');
    const cut = this.rowsTotal > this.rows.length ?
      ` The server sent ${this.rows.length.toLocaleString()} of ${this.rowsTotal.toLocaleString()} frames.` : '';
    const note = rows.length > MAX_ROWS ? `<div class="table-note">Showing the first ${MAX_ROWS} of ${rows.length} rows; search to narrow.${cut}</div>` :
      rows.length === 0 ? `<div class="table-note">${this.search ? `No function matches “${escapeHtml(this.search)}”.` : 'No rows.'}${cut}</div>` :
        cut ? `<div class="table-note">${cut.trim()}</div>` : '';
    this.el.innerHTML = `<div class="table-scroll"><table class="${this.diff ? 'diff' : ''}"><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table></div>${note}`;
  }
}

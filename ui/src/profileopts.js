// Options of a profile query the UI chooses: group_by (which frames merge) and max_nodes (how
// many nodes to ask for). Pure, so the unit tests import it.

// Bounds of max_nodes, the nodes the UI asks the server for. It used to ask for 20,000 (with
// report=both that made answers of hundreds of MB on large fleets) while a screen shows far fewer.
export const MAX_NODES = 5000;
export const MIN_NODES = 1000;

// max_nodes for a profile panel `widthPx` wide: the server keeps the heaviest nodes (an ancestor
// is never lighter than its descendants, so they form a tree from the root). A node of 1 px is
// 1/width of the root; the canvas skips nodes under 1/3 px and labels only nodes of ~30 px, so
// about two nodes per pixel of width are what the graph can show without zooming.
export function maxNodesFor(widthPx) {
  const w = Number.isFinite(widthPx) && widthPx > 0 ? widthPx : 1200;
  return Math.max(MIN_NODES, Math.min(MAX_NODES, Math.round(w * 2)));
}

// Group-by fields (Parca's names and order); function_name alone is the default.
export const GROUP_BY = [
  ['function_name', 'Function name'],
  ['function_file_name', 'Function file name'],
  ['location_address', 'Location address'],
  ['mapping_file', 'Binary (mapping file)'],
];
const SHORT = { function_name: 'function', function_file_name: 'file', location_address: 'address', mapping_file: 'binary' };
export const DEFAULT_GROUP_BY = 'function_name';

// Grouping by a label (Parca's `labels.<name>`): the querier puts each sample's stack under a
// frame `name="value"` (pprof sample labels such as Go's pprof.Do endpoint=/checkout, or a series
// label: one namespace, as in Parca), so the icicle graph and the table split the CPU by value.
export const LABEL_PREFIX = 'labels.';

export function isLabelGroup(field) {
  return typeof field === 'string' && field.startsWith(LABEL_PREFIX) && field.length > LABEL_PREFIX.length &&
    !/[\s,]/.test(field);
}

// The short name of a group-by field, for the button: "function", or a label's name.
export function groupByShort(field) {
  return SHORT[field] ?? (isLabelGroup(field) ? field.slice(LABEL_PREFIX.length) : field);
}
// GROUP_BY_SHORT[field] as groupByShort(field), label fields included.
export const GROUP_BY_SHORT = new Proxy(SHORT, { get: (t, k) => groupByShort(String(k)) });

// The group_by URL value, cleaned: known fields in canonical order (the default when none), then
// the labels grouped by, in the order given, each once.
export function parseGroupBy(text) {
  const fields = String(text || '').split(',').map((x) => x.trim());
  const want = new Set(fields);
  const out = GROUP_BY.map(([k]) => k).filter((k) => want.has(k));
  const labels = [...new Set(fields.filter(isLabelGroup))];
  return [...(out.length ? out : [DEFAULT_GROUP_BY]), ...labels];
}

// Group-by menu entries for the label names the Labels API lists for a query (`__name__` and
// names that cannot be a group_by field left out), sorted: [['labels.endpoint', 'Label: endpoint']].
export function labelGroupOptions(names) {
  return [...new Set(names || [])].filter((n) => n !== '__name__' && isLabelGroup(LABEL_PREFIX + n))
    .sort().map((n) => [LABEL_PREFIX + n, `Label: ${n}`]);
}

// The label names of a group_by value: 'function_name,labels.endpoint' -> ['endpoint'].
export function groupByLabels(text) {
  return parseGroupBy(text).filter(isLabelGroup).map((g) => g.slice(LABEL_PREFIX.length));
}

// The Group-by menu's label entries: the names the Labels API lists for the selection, and the
// labels the URL groups by already (so a grouping the selection no longer has can be unchecked).
export function groupByLabelOptions(names, current) {
  return labelGroupOptions([...(names || []), ...groupByLabels(current)]);
}

// The Labels API requests that list the label names of what a profile panel shows: one per
// side (its selector as `match`, its time range), a diff's two sides once each when they agree.
// The API lists sample (pprof) label names and series label names together, without telling
// them apart; group_by labels.<name> takes either (one namespace, as in Parca), so the menu
// offers all of them (__name__ aside).
export function labelNamesRequests(sides) {
  const out = [], seen = new Set();
  for (const s of sides || []) {
    if (!s || !s.query) continue;
    const r = { match: s.query, start: s.start ?? '', end: s.end ?? '' };
    const key = JSON.stringify(r);
    if (!seen.has(key)) { seen.add(key); out.push(r); }
  }
  return out;
}

// The union of the Labels API's answers, sorted.
export function unionNames(lists) {
  return [...new Set((lists || []).flat().filter((n) => typeof n === 'string' && n))].sort();
}

// The group_by after the Group-by menu's checkboxes changed: the frame fields checked, then the
// labels grouped by: the current ones in their order while checked (or while the menu has no entry
// for them, so a change of frame fields never drops a label), then newly checked ones. `picked`:
// the values of the checked entries; `offered`: the values of all entries.
export function nextGroupBy(current, picked, offered) {
  const on = new Set(picked || []), shown = new Set(offered || []);
  const cur = parseGroupBy(current).filter(isLabelGroup);
  const labels = cur.filter((g) => on.has(g) || !shown.has(g));
  for (const g of picked || []) if (isLabelGroup(g) && !labels.includes(g)) labels.push(g);
  return parseGroupBy([...(picked || []).filter((g) => !isLabelGroup(g)), ...labels].join(',')).join(',');
}

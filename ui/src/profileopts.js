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
export const GROUP_BY_SHORT = { function_name: 'function', function_file_name: 'file', location_address: 'address', mapping_file: 'binary' };
export const DEFAULT_GROUP_BY = 'function_name';

// The group_by URL value, cleaned: known fields in canonical order, the default when none.
export function parseGroupBy(text) {
  const want = new Set(String(text || '').split(',').map((x) => x.trim()));
  const out = GROUP_BY.map(([k]) => k).filter((k) => want.has(k));
  return out.length ? out : [DEFAULT_GROUP_BY];
}

// Unit tests of the pure modules (no browser): formatting, selectors, profile types, flamebearer
// decoding, diff sizing, colours and labels, table sorting, group-by, targets normalisation.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { formatValue, formatPercent, parseDurationMs, resolveTime, formatDiffPercent } from '../src/format.js';
import { parseMatchers, formatMatchers, splitExpression, withLabels } from '../src/query.js';
import { friendlyName, metricUnit, defaultSumBy } from '../src/profiletypes.js';
import { parseFlamebearer, diffRatio, diffKind, diffIntensity, diffColor, nodeLabel, packageOf } from '../src/icicle.js';
import { tableRow, sortRows, nextSort, defaultSort, markDuplicates } from '../src/table.js';
import { maxNodesFor, parseGroupBy, MAX_NODES } from '../src/profileopts.js';
import { normTargets, normAgents, normDuration } from '../src/targets.js';

describe('format', () => {
  it('formats units', () => {
    assert.equal(formatValue(1536, 'bytes'), '1.5 KiB');
    assert.equal(formatValue(2.5e9, 'nanoseconds'), '2.5 s');
    assert.equal(formatValue(1500, 'count'), '1.5k');
    assert.equal(formatValue(0.455, 'cores'), '0.455 cores');
    assert.equal(formatPercent(1, 3), '33.3%');
    assert.equal(parseDurationMs('1h30m'), 5400000);
    assert.equal(resolveTime('now-1h', 7200000), 3600000);
    assert.equal(resolveTime('1700000000000'), 1700000000000);
  });
});

describe('selectors', () => {
  it('parses and formats matchers', () => {
    const m = parseMatchers('job="a", pod=~"x.*" ,  ns!="b\\"c"');
    assert.deepEqual(m, [{ name: 'job', op: '=', value: 'a' }, { name: 'pod', op: '=~', value: 'x.*' }, { name: 'ns', op: '!=', value: 'b"c' }]);
    assert.equal(formatMatchers(m), 'job="a", pod=~"x.*", ns!="b\\"c"');
    assert.throws(() => parseMatchers('job=a'), /quoted value/);
    assert.deepEqual(parseMatchers(''), []);
  });
  it('adds series labels to a query', () => {
    assert.equal(withLabels('t:a:b:c:d{job="x"}', { instance: 'i1' }), 't:a:b:c:d{job="x", instance="i1"}');
    assert.deepEqual(splitExpression('t:a:b:c:d'), { type: 't:a:b:c:d', matchersText: '' });
  });
});

describe('profile types', () => {
  it('has friendly names and units', () => {
    assert.equal(friendlyName('memory:inuse_space:bytes:space:bytes'), 'Memory In-Use Bytes');
    assert.equal(friendlyName('parca_agent:samples:count:cpu:nanoseconds:delta'), 'On-CPU');
    assert.equal(friendlyName('strata_agent:wallclock:nanoseconds:samples:count:delta'), 'Off-CPU');
    assert.equal(friendlyName('foo:bar_baz:count:x:y'), 'Foo Bar Baz Total');
    const cpu = { delta: true, sample_unit: 'count' };
    assert.deepEqual(metricUnit({ sample_type: { unit: 'nanoseconds' } }, cpu), { unit: 'cores', label: 'CPU Cores' });
    assert.deepEqual(metricUnit({ sample_type: { unit: 'bytes' } }, { delta: false }), { unit: 'bytes', label: 'Bytes' });
    assert.deepEqual(defaultSumBy({ delta: true }, ['namespace', 'comm']), ['comm']);
  });
});

describe('flamebearer', () => {
  it('decodes single levels with parents', () => {
    const m = parseFlamebearer({
      version: 1, metadata: { format: 'single', units: 'count' },
      flamebearer: { names: ['total', 'a', 'b', 'c'], numTicks: 10, maxSelf: 5,
        levels: [[0, 10, 0, 0], [0, 6, 1, 1, 1, 3, 3, 2], [0, 5, 5, 3]] },
    });
    assert.equal(m.n, 4);
    assert.deepEqual(Array.from(m.x), [0, 0, 7, 0]);
    assert.deepEqual(Array.from(m.parent), [-1, 0, 0, 1]);
    assert.equal(m.rootTotal, 10);
  });
  it('sizes a diff by A + B, so nodes only in A are drawn and children fit their parent', () => {
    // root: A 10, B 12. main: A 10 (self 0), B 12. Under main: dep.Fib only in A (6), work in
    // both (A 4, B 8), fresh only in B (4). Positions per side as the server writes them.
    const m = parseFlamebearer({
      version: 1, metadata: { format: 'double' },
      flamebearer: {
        names: ['total', 'main', 'dep.Fib', 'work', 'fresh'],
        levels: [
          [0, 10, 0, 0, 12, 0, 0],
          [0, 10, 0, 0, 12, 0, 1],
          [0, 6, 6, 0, 0, 0, 2, /**/ 0, 4, 4, 0, 8, 8, 3, /**/ 0, 0, 0, 0, 4, 4, 4],
        ],
      },
    });
    assert.equal(m.n, 5);
    assert.deepEqual(Array.from(m.totalA), [10, 10, 6, 4, 0]);
    assert.deepEqual(Array.from(m.totalB), [12, 12, 0, 8, 4]);
    assert.deepEqual(Array.from(m.total), [22, 22, 6, 12, 4], 'layout width = A + B');
    assert.deepEqual(Array.from(m.x), [0, 0, 0, 6, 18], 'layout x = xA + xB');
    assert.deepEqual(Array.from(m.parent), [-1, 0, 1, 1, 1]);
    assert.equal(m.rootTotal, 22);
    assert.equal(m.rootTotalA, 10);
    assert.equal(m.rootTotalB, 12);
    // children within the parent, side by side
    for (let k = 2; k < 5; k++) {
      assert.ok(m.x[k] >= m.x[1] && m.x[k] + m.total[k] <= m.x[1] + m.total[1]);
      if (k > 2) assert.ok(m.x[k] >= m.x[k - 1] + m.total[k - 1]);
    }
    assert.equal(diffKind(m.totalB[2], m.totalA[2]), 'removed');
    assert.equal(diffKind(m.totalB[3], m.totalA[3]), 'growth');
    assert.equal(diffKind(m.totalB[4], m.totalA[4]), 'new');
  });
  it('classifies and colours changes', () => {
    assert.equal(diffKind(4, 10), 'shrinkage');
    assert.equal(diffKind(12, 10), 'growth');
    assert.equal(diffKind(1000, 1000.5), 'neutral');
    assert.equal(diffKind(8, 0), 'new');
    assert.equal(diffKind(0, 8), 'removed');
    assert.equal(diffKind(0, 0), 'neutral');
    assert.equal(diffRatio(8, 0), Infinity);
    assert.equal(diffIntensity(2, 1), 0.5);
    assert.equal(diffIntensity(1, 2), -0.5);
    assert.equal(diffIntensity(5, 0), 1);
    assert.equal(diffIntensity(0, 5), -1);
    // red for growth and new, green for shrinkage and removed, stronger for larger changes
    assert.equal(diffColor(1, 0), 'rgba(229,62,62,0.8)');
    assert.equal(diffColor(0, 1), 'rgba(40,167,69,0.8)');
    assert.equal(diffColor(2, 1), 'rgba(229,62,62,0.6)');
    assert.equal(diffColor(1, 2), 'rgba(40,167,69,0.6)');
    assert.equal(diffColor(101, 100), 'rgba(229,62,62,0.4)');
    assert.equal(diffColor(1, 1), 'rgba(96,140,210,0.45)');
  });
  it('labels new and removed nodes, keeping the tag while it fits', () => {
    assert.equal(nodeLabel('dep.Fib', 40, 'removed'), 'dep.Fib (removed)');
    assert.equal(nodeLabel('main.fresh', 40, 'new'), 'main.fresh (new)');
    assert.equal(nodeLabel('github.com/x/y.LongFunction', 20, 'new'), 'github.com/x/… (new)');
    assert.equal(nodeLabel('dep.Fib', 8, 'removed'), 'dep.Fib');
    assert.equal(nodeLabel('dep.Fibonacci', 6, 'removed'), 'dep.F…');
    assert.equal(nodeLabel('main.work', 40, 'growth'), 'main.work');
    assert.equal(formatDiffPercent(5, 0), 'new');
    assert.equal(formatDiffPercent(0, 5), 'removed');
    assert.equal(formatDiffPercent(15, 10), '+50.0%');
    assert.equal(formatDiffPercent(5, 10), '-50.0%');
    assert.equal(formatDiffPercent(0, 0), '0%');
  });
  it('finds the package or namespace of a function', () => {
    const cases = {
      'net/http.(*conn).serve': 'net/http',
      'main.fibonacci': 'main',
      'main.main.func2': 'main',
      'runtime/internal/syscall.Syscall6': 'runtime/internal/syscall',
      'github.com/acme/svc/pkg/db.(*Conn).Query': 'github.com/acme/svc/pkg/db',
      'sync/atomic.(*Pointer[go.shape.struct { net/http.x int }]).Load': 'sync/atomic',
      'slices.SortFunc[go.shape.int]': 'slices',
      'ns::cls::fn': 'ns',
      'std::vector<int>::push_back': 'std',
      'std::__1::basic_string<char>::append(char const*)': 'std',
      '(anonymous namespace)::helper': '(anonymous namespace)',
      'core::ptr::drop_in_place<alloc::vec::Vec<u8>>': 'core',
      '<alloc::vec::Vec<T> as core::ops::drop::Drop>::drop': 'alloc',
      'java.util.HashMap.get': 'java',
      malloc: '',
      'operator new(unsigned long)': '',
    };
    for (const [name, want] of Object.entries(cases)) assert.equal(packageOf(name), want, name);
  });
});

describe('table', () => {
  const api = [
    { name: 'main.work', flat: 80, cumulative: 80, flat_diff: 40, cumulative_diff: 40 },
    { name: 'dep.Fib', flat: 0, cumulative: 0, flat_diff: -60, cumulative_diff: -60 },
    { name: 'main.fresh', flat: 40, cumulative: 40, flat_diff: 40, cumulative_diff: 40, flat_base: 0, cumulative_base: 0 },
    { name: 'main.main', flat: 0, cumulative: 120, flat_diff: 0, cumulative_diff: 20 },
    { name: 'runtime.gc', flat: 10, cumulative: 10, flat_diff: -1, cumulative_diff: -1 },
  ];
  const rows = () => api.map((r) => tableRow(r, 120, true));
  it('derives A from B - diff when the server sends no base, and labels new and removed', () => {
    const [work, fib, fresh, main] = rows();
    assert.equal(work.cumulative_base, 40);
    assert.equal(work.cumulative_diff_pct, 100);
    assert.equal(work.change, 'growth');
    assert.equal(fib.cumulative_base, 60);
    assert.equal(fib.change, 'removed');
    assert.equal(fib.cumulative_diff_pct, -100);
    assert.equal(fresh.change, 'new');
    assert.equal(fresh.cumulative_diff_pct, Infinity);
    assert.equal(main.cumulative_base, 100);
    assert.equal(tableRow({ name: 'x', flat: 1, cumulative: 5, flat_diff: 0, cumulative_diff: 1, cumulative_base: 9, flat_base: 3 }, 5, true).cumulative_base, 9,
      'the server base wins');
    const loc = tableRow({ name: 'main.work', label: 'main.work 0x401000', address: '0x401000', flat: 1, cumulative: 1 }, 1, false);
    assert.equal(loc.name, 'main.work 0x401000', 'rows are named as the flame graph names the frame');
    assert.equal(loc.function_name, 'main.work');
    const dup = markDuplicates([
      tableRow({ name: 'main.work', mapping_file: '/opt/app-v1/app', flat: 1, cumulative: 1 }, 1, false),
      tableRow({ name: 'main.work', mapping_file: '/opt/app-v2/app', flat: 1, cumulative: 1 }, 1, false),
      tableRow({ name: 'main.main', mapping_file: '/opt/app-v2/app', flat: 1, cumulative: 1 }, 1, false),
    ]);
    assert.deepEqual(dup.map((r) => r.where), ['/opt/app-v1/app', '/opt/app-v2/app', undefined], 'same binary name: the path tells them apart');
  });
  it('sorts a diff by the largest change of either sign by default', () => {
    const def = defaultSort(true);
    assert.deepEqual(def, { key: 'cumulative_diff_abs', dir: 'desc' });
    const names = sortRows(rows(), def.key, def.dir).map((r) => r.name);
    assert.deepEqual(names, ['dep.Fib', 'main.fresh', 'main.work', 'main.main', 'runtime.gc']);
    assert.deepEqual(sortRows(rows(), 'cumulative_diff', 'desc').map((r) => r.name)[0], 'main.fresh');
    assert.deepEqual(sortRows(rows(), 'cumulative_diff', 'asc').map((r) => r.name)[0], 'dep.Fib');
    assert.deepEqual(sortRows(rows(), 'cumulative_diff_pct', 'desc').map((r) => r.name).slice(0, 2), ['main.fresh', 'main.work']);
    assert.deepEqual(sortRows(rows(), 'name', 'asc').map((r) => r.name)[0], 'dep.Fib');
    assert.deepEqual(defaultSort(false), { key: 'flat', dir: 'desc' });
  });
  it('cycles a change column through |change|, growth first, shrinkage first', () => {
    let s = nextSort('cumulative_diff', 'flat', 'desc', true);
    assert.deepEqual(s, { key: 'cumulative_diff_abs', dir: 'desc' });
    s = nextSort('cumulative_diff', s.key, s.dir, true);
    assert.deepEqual(s, { key: 'cumulative_diff', dir: 'desc' });
    s = nextSort('cumulative_diff', s.key, s.dir, true);
    assert.deepEqual(s, { key: 'cumulative_diff', dir: 'asc' });
    s = nextSort('cumulative_diff', s.key, s.dir, true);
    assert.deepEqual(s, { key: 'cumulative_diff_abs', dir: 'desc' });
    assert.deepEqual(nextSort('cumulative', 'cumulative_diff_abs', 'desc'), { key: 'cumulative', dir: 'desc' });
    assert.deepEqual(nextSort('cumulative', 'cumulative', 'desc'), { key: 'cumulative', dir: 'asc' });
    assert.deepEqual(nextSort('name', 'flat', 'desc'), { key: 'name', dir: 'asc' });
  });
});

describe('profile options', () => {
  it('asks for a bounded number of nodes, relative to the width', () => {
    assert.equal(maxNodesFor(1240), 2480);
    assert.equal(maxNodesFor(100), 1000);
    assert.equal(maxNodesFor(100000), MAX_NODES);
    assert.ok(MAX_NODES <= 5000);
    assert.equal(maxNodesFor(0), 2400, 'a panel not laid out yet counts as 1200 px');
  });
  it('keeps group_by to known fields in Parca\'s order, function_name by default', () => {
    assert.deepEqual(parseGroupBy(''), ['function_name']);
    assert.deepEqual(parseGroupBy(null), ['function_name']);
    assert.deepEqual(parseGroupBy('mapping_file,function_name'), ['function_name', 'mapping_file']);
    assert.deepEqual(parseGroupBy('location_address,bogus'), ['location_address']);
    assert.deepEqual(parseGroupBy('bogus'), ['function_name']);
  });
});

describe('targets', () => {
  it('accepts protojson and snake_case shapes', () => {
    const jobs = normTargets({ targets: { j: { targets: [
      { labels: { labels: [{ name: 'a', value: '1' }] }, lastScrape: '2026-01-01T00:00:00Z', lastScrapeDuration: '0.5s', health: 'HEALTH_GOOD', url: 'u' },
      { labels: { a: '2' }, last_scrape: 1767225600000, last_scrape_duration: 2e6, health: 2, last_error: 'boom' },
    ] } } });
    assert.equal(jobs[0].targets[0].health, 'up');
    assert.equal(jobs[0].targets[0].lastScrape, Date.parse('2026-01-01T00:00:00Z'));
    assert.equal(jobs[0].targets[0].lastDuration, 5e8);
    assert.deepEqual(jobs[0].targets[1].labels, { a: '2' });
    assert.equal(jobs[0].targets[1].health, 'down');
    assert.equal(normDuration('250ms'), 2.5e8);
    assert.equal(normAgents({ agents: [{ id: 'x', lastPush: '2026-01-01T00:00:00Z' }] })[0].id, 'x');
  });
});

// Unit tests of the pure modules (no browser): formatting, selectors, profile types, flamebearer
// decoding, diff colours, targets normalisation.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { formatValue, formatPercent, parseDurationMs, resolveTime } from '../src/format.js';
import { parseMatchers, formatMatchers, splitExpression, withLabels } from '../src/query.js';
import { friendlyName, metricUnit, defaultSumBy } from '../src/profiletypes.js';
import { parseFlamebearer, diffRatio, diffKind, packageOf } from '../src/icicle.js';
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
  it('decodes double levels sized by B', () => {
    const m = parseFlamebearer({
      version: 1, metadata: { format: 'double' },
      flamebearer: { names: ['total', 'a', 'b'], levels: [[0, 10, 0, 0, 12, 0, 0], [0, 10, 10, 0, 4, 4, 1, 0, 0, 0, 0, 8, 8, 2]] },
    });
    assert.deepEqual(Array.from(m.total), [12, 4, 8]);
    assert.deepEqual(Array.from(m.totalA), [10, 10, 0]);
    assert.deepEqual(Array.from(m.x), [0, 0, 4]);
    assert.deepEqual(Array.from(m.parent), [-1, 0, 0]);
    assert.equal(diffKind(diffRatio(4, 10)), 'shrinkage');
    assert.equal(diffKind(diffRatio(8, 0)), 'growth');
    assert.equal(diffKind(diffRatio(1000, 1000.5)), 'neutral');
  });
  it('groups functions by package', () => {
    assert.equal(packageOf('net/http.(*conn).serve'), 'net/http');
    assert.equal(packageOf('main.fibonacci'), 'main');
    assert.equal(packageOf('std::vector<int>::push_back'), 'std');
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

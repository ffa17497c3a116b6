// The whole user journey in headless Chromium on real data from a real `strata all`:
// pick a type, filter by a label, sum by, hover and click a point, find the expected functions
// in the icicle graph and the table, sort, search, zoom, URL round trip, pprof download,
// compare two versions (the grown function is red), errors, targets, themes.
// Screenshots go to ui/test-artifacts/ (STRATA_UI_ARTIFACTS).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Env, GoVersions, GOVERSIONS_FIB, CPU, shot, waitEvent, eventCount, waitFor } from './harness.mjs';
import { formatValue, formatSigned } from '../src/format.js';

const env = new Env();
let page;

before(async () => {
  await env.start();
  await env.seed();
  await env.browser();
  page = await env.newPage();
}, { timeout: 180000 });

after(async () => {
  await env.stop();
});

async function open(p, query) {
  await p.goto(`${env.base}${query || ''}`);
  await p.waitForFunction(() => window.__strata && window.__strata.ready);
}

const icicleNodes = (p, view = 'profiles') => p.evaluate((v) => window.__strata.views[v].icicle.renderedNodes(), view);
const tableNames = (p) => p.$$eval('.pv-table tbody tr', (rows) => rows.map((r) => r.dataset.name));

describe('profiles view', () => {
  it('picks a type, filters by label with autocomplete, sums by, and draws one line per series', async () => {
    await open(page, '');
    await page.selectOption('[data-role="type"]', { label: 'Process CPU Samples' });
    const input = page.locator('[data-role="matchers"]');
    await input.click();
    await input.fill('');
    await page.keyboard.type('jo');
    await page.waitForSelector('.ac-list li:text-is("job")');
    await page.keyboard.press('Enter'); // accepts the label name: job=""
    await page.waitForSelector('.ac-list li:text-is("gotarget")');
    const values = await page.$$eval('.ac-list li', (l) => l.map((x) => x.textContent));
    assert.deepEqual(values.sort(), ['demo', 'gotarget']);
    await page.keyboard.press('ArrowDown');
    const active = await page.$eval('.ac-list li.active', (x) => x.textContent);
    if (active !== 'gotarget') await page.keyboard.press('ArrowUp');
    await page.keyboard.press('Enter');
    assert.equal(await input.inputValue(), 'job="gotarget"');
    await page.fill('[data-role="sumby-input"]', 'instance');
    await page.keyboard.press('Enter');
    await page.selectOption('[data-role="range"]', 'now-15m');
    const n0 = await eventCount(page);
    await page.click('[data-role="search"]');
    const s = await waitEvent(page, 'series', n0);
    assert.equal(s.count, 2, 'one series per instance');
    assert.equal(s.unit, 'cores');
    assert.equal(s.label, 'CPU Cores');
    const url = new URL(page.url());
    assert.equal(url.searchParams.get('expression_a'), `${CPU}{job="gotarget"}`);
    assert.equal(url.searchParams.get('sum_by_a'), 'instance');
    assert.equal(url.searchParams.get('from_a'), 'now-15m');
    const legend = await page.$$eval('.legend-item', (l) => l.map((x) => x.textContent));
    assert.deepEqual(legend.sort(), ['{instance="a"}', '{instance="b"}']);
    // y axis ticks are in cores
    const ticks = await page.evaluate(() => window.__strata.views.profiles.pane.graph.u.axes[1]._values || []);
    assert.ok(ticks.some((t) => /cores$/.test(t)), `y ticks in cores: ${ticks}`);
    await shot(page, 'profiles-graph-light');
  });

  it('shows a tooltip on hover and selects the profile on click', async () => {
    const pt = await page.evaluate(() => {
      const g = window.__strata.views.profiles.pane.graph;
      const r = g.u.over.getBoundingClientRect();
      const { t, v } = g.points[0];
      return { x: r.left + g.u.valToPos(t[0], 'x'), y: r.top + g.u.valToPos(v[0], 'y') };
    });
    await page.mouse.move(pt.x, pt.y);
    const tip = page.locator('.metrics-tooltip');
    await tip.waitFor({ state: 'visible' });
    const text = await tip.innerText();
    for (const want of ['Value', 'Total', 'Duration', 'At', 'cores', 'instance="']) assert.ok(text.includes(want), `tooltip has ${want}: ${text}`);
    await shot(page, 'profiles-tooltip');
    const n0 = await eventCount(page);
    await page.mouse.click(pt.x, pt.y);
    const p = await waitEvent(page, 'profile', n0);
    assert.equal(p.diff, false);
    const url = new URL(page.url());
    assert.match(url.searchParams.get('selection_a'), /instance="[ab]"/);
    assert.match(url.searchParams.get('selection_a'), /job="gotarget"/);
    assert.ok(Number(url.searchParams.get('merge_from_a')) > 0);
    const count = await page.evaluate(() => window.__strata.views.profiles.pane.series[0].samples[0].count);
    const status = await page.innerText('.profile-panel .pv-status');
    assert.match(status, new RegExp(`\\b${count} profiles?\\b`), 'the profile holds what the point counted');
    const names = (await icicleNodes(page)).map((n) => n.name);
    for (const fn of ['total', 'main.cpuHotLoop', 'main.fibonacci', 'main.fibonacciStep']) assert.ok(names.includes(fn), `icicle has ${fn}`);
    const rows = await tableNames(page);
    for (const fn of ['main.cpuHotLoop', 'main.fibonacci', 'main.fibonacciStep']) assert.ok(rows.includes(fn), `table has ${fn}`);
    await shot(page, 'profiles-selected-light');
  });

  it('sorts and searches the table, highlights matches in the icicle graph', async () => {
    await page.click('.pv-table th[data-key="cumulative"]');
    let vals = await page.$$eval('.pv-table tbody tr', (r) => r.map((x) => Number(x.dataset.cumulative)));
    assert.deepEqual(vals, [...vals].sort((a, b) => b - a), 'cumulative descending');
    assert.ok(['main.cpuHotLoop', 'main.fibonacci', 'main.fibonacciStep'].includes((await tableNames(page))[0]));
    await page.click('.pv-table th[data-key="cumulative"]');
    vals = await page.$$eval('.pv-table tbody tr', (r) => r.map((x) => Number(x.dataset.cumulative)));
    assert.deepEqual(vals, [...vals].sort((a, b) => a - b), 'cumulative ascending');
    assert.equal(new URL(page.url()).searchParams.get('sort'), 'cumulative:asc');
    await page.click('.pv-table th[data-key="flat"]');
    vals = await page.$$eval('.pv-table tbody tr', (r) => r.map((x) => Number(x.dataset.flat)));
    assert.deepEqual(vals, [...vals].sort((a, b) => b - a), 'flat descending');
    // On a loaded machine the Go runtime (asyncPreempt, GC) can out-sample the program's own hot
    // leaf, so check the order among the program's own functions.
    const ownByFlat = (await tableNames(page)).filter((n) => n.startsWith('main.'));
    assert.equal(ownByFlat[0], 'main.fibonacciStep', 'the hot leaf has the most flat of main.*');
    await page.fill('.pv-search', 'fibonacci');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('search_string') === 'fibonacci');
    const rows = await tableNames(page);
    assert.ok(rows.length >= 2 && rows.every((n) => n.toLowerCase().includes('fibonacci')), `filtered rows ${rows}`);
    const hi = (await icicleNodes(page)).filter((n) => n.highlighted).map((n) => n.name);
    assert.ok(hi.includes('main.fibonacci') && !hi.includes('main.cpuHotLoop'));
    assert.match(await page.innerText('.profile-panel .pv-status'), /match(es)? for “fibonacci”/);
  });

  it('zooms on click, keeps the zoom in the URL, resets', async () => {
    const nodes = await icicleNodes(page);
    const fib = nodes.find((n) => n.name === 'main.fibonacci');
    const canvas = page.locator('.pv-icicle canvas');
    const box = await canvas.boundingBox();
    // Zoom into a deeper fibonacciStep whose width is below the full width.
    const deep = nodes.filter((n) => n.name === 'main.fibonacciStep' && n.width > 30 && n.width < box.width - 40).pop() || fib;
    await canvas.click({ position: { x: deep.x + deep.width / 2, y: deep.level * 20 + 10 } });
    await page.waitForFunction(() => new URL(location.href).searchParams.get('cur_path'));
    const path = JSON.parse(new URL(page.url()).searchParams.get('cur_path'));
    assert.equal(path[0], 'main.cpuHotLoop');
    assert.equal(path[path.length - 1], deep.name);
    const zoomed = await icicleNodes(page);
    const z = zoomed.find((n) => n.level === deep.level);
    assert.ok(Math.abs(z.width - box.width) < 2, 'the zoomed node spans the width');
    await canvas.hover({ position: { x: 50, y: deep.level * 20 + 10 } });
    const tip = page.locator('.icicle-tooltip');
    await tip.waitFor({ state: 'visible' });
    const t = await tip.innerText();
    for (const want of ['Cumulative', 'Flat', 'File', 'Binary', 'main.go', 'gotarget']) assert.ok(t.includes(want), `icicle tooltip has ${want}: ${t}`);
    await shot(page, 'profiles-zoomed');
    await page.click('[data-role="reset"]');
    await page.waitForFunction(() => !new URL(location.href).searchParams.get('cur_path'));
  });

  it('reproduces the view from its URL', async () => {
    await page.fill('.pv-search', 'cpuHotLoop');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('search_string') === 'cpuHotLoop');
    const url = page.url();
    const before = (await icicleNodes(page)).map((n) => n.name).sort();
    const p2 = await env.newPage();
    await open(p2, url.slice(env.base.length));
    await waitEvent(p2, 'profile');
    await waitEvent(p2, 'series');
    assert.equal(await p2.inputValue('[data-role="matchers"]'), 'job="gotarget"');
    assert.equal(await p2.inputValue('[data-role="type"]'), CPU);
    assert.equal(await p2.inputValue('[data-role="range"]'), 'now-15m');
    assert.deepEqual(await p2.$$eval('.chip', (c) => c.map((x) => x.firstChild.textContent)), ['instance']);
    assert.equal(await p2.inputValue('.pv-search'), 'cpuHotLoop');
    const after = (await icicleNodes(p2)).map((n) => n.name).sort();
    assert.deepEqual(after, before);
    assert.ok(await p2.isVisible('.metrics-marker.selected'), 'the selected point is marked');
    // back button restores the previous search
    await page.goBack();
    await page.waitForFunction(() => new URL(location.href).searchParams.get('search_string') !== 'cpuHotLoop');
    await p2.close();
  });

  it('zooms the time range by dragging over the graph', async () => {
    // The earlier tests typed into the profile panel below the graph, which may have scrolled the
    // graph out of the viewport: mouse events at its old box would land on nothing. So the graph is
    // brought into view and the test waits until the point the drag starts at is on the graph (no
    // loading overlay above it). A drag that lands while the chart is being redrawn (a slow, loaded
    // machine) is lost, so the gesture is retried a few times; the assertions are about its effect.
    let zoomed = false;
    const start = await eventCount(page);
    for (let attempt = 0; attempt < 3 && !zoomed; attempt++) {
      const over = page.locator('.metrics .u-over');
      await over.scrollIntoViewIfNeeded();
      // hover where the drag starts first, as a user does (uPlot then draws its cursor there)
      const b0 = await over.boundingBox();
      await page.mouse.move(b0.x + b0.width * 0.5, b0.y + b0.height / 2);
      await page.waitForFunction(() => {
        const o = document.querySelector('.metrics .u-over');
        const r = o && o.getBoundingClientRect();
        if (!r || r.width < 10) return false;
        if (r.top < 0 || r.bottom > innerHeight) {
          // a re-layout (the table below filling in, on a loaded machine) moved it out of view
          o.scrollIntoView({ block: 'center' });
          return false;
        }
        // the graph or one of its parts (uPlot draws the cursor line and the selection inside it)
        return o.contains(document.elementFromPoint(r.left + r.width * 0.5, r.top + r.height / 2));
      });
      const b = await over.boundingBox();
      const n0 = await eventCount(page);
      await page.mouse.move(b.x + b.width * 0.5, b.y + b.height / 2);
      await page.mouse.down();
      await page.mouse.move(b.x + b.width * 0.7, b.y + b.height / 2, { steps: 10 });
      await page.mouse.move(b.x + b.width * 0.98, b.y + b.height / 2, { steps: 10 });
      await page.mouse.up();
      zoomed = await page.waitForFunction((s) => window.__strata.events.slice(s).some((e) => e.type === 'series' || e.type === 'series-error'),
        n0, { timeout: 15000 }).then(() => true, () => false);
    }
    const events = await page.evaluate(() => window.__strata.events.map((e) => e.type));
    if (!zoomed) await shot(page, 'drag-zoom-failed');
    assert.ok(zoomed, `dragging over the graph loads the zoomed range (events: ${events.slice(-8).join(', ')})`);
    const failed = await page.evaluate((s) => window.__strata.events.slice(s).filter((e) => e.type === 'series-error').pop()?.detail, start);
    assert.equal(failed, undefined, 'the zoomed range loads without an error');
    const u = new URL(page.url()).searchParams;
    assert.match(u.get('from_a'), /^\d+$/, 'absolute start');
    assert.match(u.get('to_a'), /^\d+$/, 'absolute end');
    assert.ok(Number(u.get('to_a')) > Number(u.get('from_a')));
    assert.equal(await page.inputValue('[data-role="range"]'), 'absolute');
    assert.equal(u.get('selection_a'), null, 'a new range clears the selection');
    await page.goBack();
    await page.waitForFunction(() => new URL(location.href).searchParams.get('from_a') === 'now-15m');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('selection_a'));
  });

  it('downloads the selected profile as pprof', async () => {
    const [dl] = await Promise.all([page.waitForEvent('download'), page.click('[data-role="download"]')]);
    const path = await dl.path();
    const { readFileSync } = await import('node:fs');
    const bytes = readFileSync(path);
    assert.ok(bytes.length > 100);
    assert.equal(bytes[0], 0x1f);
    assert.equal(bytes[1], 0x8b);
  });

  it('colours packages of one binary, groups by the chosen fields, fits the table in 1280 px', async () => {
    const queries = [];
    const onRequest = (r) => { if (r.url().includes('/api/v1/query?')) queries.push(new URL(r.url()).searchParams); };
    page.on('request', onRequest);
    await page.setViewportSize({ width: 1280, height: 900 });
    try {
      await open(page, `?expression_a=${encodeURIComponent(`${CPU}{job="gotarget"}`)}&from_a=now-15m&to_a=now`);
      await waitEvent(page, 'profile');
      // The UI asks for a bounded number of nodes, relative to the panel's width.
      const q = queries.find((x) => x.get('report') === 'both');
      assert.ok(q, 'the profile query was sent');
      const maxNodes = Number(q.get('max_nodes'));
      assert.ok(maxNodes >= 1000 && maxNodes <= 5000, `max_nodes ${maxNodes}`);
      assert.equal(q.get('group_by'), 'function_name', 'function name is the default grouping');
      // One binary: colours by package (main.* share one, runtime.* another).
      assert.equal(await page.evaluate(() => window.__strata.views.profiles.icicle.effectiveColorBy()), 'package');
      let nodes = await icicleNodes(page);
      const colorOf = (name) => nodes.find((n) => n.name === name)?.color;
      assert.ok(colorOf('main.cpuHotLoop'), 'main.cpuHotLoop drawn');
      assert.equal(colorOf('main.fibonacci'), colorOf('main.cpuHotLoop'), 'one package, one colour');
      const rt = nodes.find((n) => n.name.startsWith('runtime.'));
      assert.ok(rt, 'a runtime frame is drawn');
      assert.notEqual(rt.color, colorOf('main.cpuHotLoop'), 'runtime and main differ');
      await page.selectOption('[data-role="colorby"]', 'binary');
      await page.waitForFunction(() => new URL(location.href).searchParams.get('color_by') === 'binary');
      nodes = await icicleNodes(page);
      assert.equal(nodes.find((n) => n.name === rt.name).color, colorOf('main.cpuHotLoop'), 'one binary, one colour');
      // No sideways scrolling in the table at 1280 px, long names cut with an ellipsis.
      const fit = await page.$eval('.pv-table .table-scroll', (e) => [e.scrollWidth, e.clientWidth]);
      assert.ok(fit[0] <= fit[1] + 1, `table fits: scrollWidth ${fit[0]} clientWidth ${fit[1]}`);
      // Group by: the menu adds fields, the URL keeps them and the query sends them.
      const n0 = await eventCount(page);
      const before = queries.length;
      await page.click('[data-role="groupby-button"]');
      await page.check('[data-role="groupby-menu"] input[value="function_file_name"]');
      await page.waitForFunction(() => new URL(location.href).searchParams.get('group_by') === 'function_name,function_file_name');
      await waitEvent(page, 'profile', n0);
      const sent = queries.slice(before).find((x) => x.get('report') === 'both');
      assert.equal(sent.get('group_by'), 'function_name,function_file_name');
      assert.match(await page.innerText('[data-role="groupby-button"]'), /Group by: function, file/);
      await shot(page, 'profiles-groupby-1280');
      // Unchecking everything falls back to the default, which leaves the URL.
      await page.uncheck('[data-role="groupby-menu"] input[value="function_file_name"]');
      await page.waitForFunction(() => !new URL(location.href).searchParams.get('group_by'));
      await page.click('[data-role="groupby-menu"] input[value="function_name"]');
      assert.ok(await page.isChecked('[data-role="groupby-menu"] input[value="function_name"]'), 'function name stays when nothing else is picked');
    } finally {
      page.off('request', onRequest);
      await page.setViewportSize({ width: 1500, height: 1000 });
    }
  });

  it('shows memory in bytes and goroutines as counts', async () => {
    await open(page, '?expression_a=memory:inuse_space:bytes:space:bytes&from_a=now-15m&to_a=now');
    let s = await waitEvent(page, 'series', 0);
    assert.equal(s.unit, 'bytes');
    assert.equal(s.count, 2);
    const ticks = await page.evaluate(() => window.__strata.views.profiles.pane.graph.u.axes[1]._values || []);
    assert.ok(ticks.some((t) => /(B|iB)$/.test(t)), `y ticks in bytes: ${ticks}`);
    await open(page, '?expression_a=goroutine:goroutine:count:goroutine:count&from_a=now-15m&to_a=now');
    s = await waitEvent(page, 'series', 0);
    assert.equal(s.unit, 'count');
    assert.equal(await page.$eval('[data-role="type"]', (e) => e.selectedOptions[0].textContent), 'Goroutine Created Total');
  });

  it('reports a bad query clearly', async () => {
    await open(page, `?expression_a=${encodeURIComponent(`${CPU}{job=~"("}`)}&from_a=now-15m&to_a=now`);
    await page.waitForSelector('.query-pane .error-banner');
    const msg = await page.innerText('.query-pane .error-banner');
    assert.match(msg, /Query failed/);
    assert.match(msg, /invalid/i);
    // a syntax error is caught before it is sent
    await page.fill('[data-role="matchers"]', 'job=gotarget');
    await page.click('[data-role="search"]');
    assert.match(await page.innerText('.qb-error'), /quoted value/);
    await shot(page, 'profiles-error');
  });
});

describe('compare view', () => {
  it('colours the function that grew red and the one that shrank green', async () => {
    const a = `${CPU}{job="demo", version="1"}`, b = `${CPU}{job="demo", version="2"}`;
    await open(page, `?view=compare&expression_a=${encodeURIComponent(a)}&from_a=now-15m&to_a=now&expression_b=${encodeURIComponent(b)}&from_b=now-15m&to_b=now`);
    const p = await waitEvent(page, 'profile');
    assert.equal(p.diff, true);
    const nodes = await icicleNodes(page, 'compare');
    const grown = nodes.find((n) => n.name === 'main.main.func2');
    const shrunk = nodes.find((n) => n.name === 'main.cpuHotLoop');
    assert.ok(grown, 'the /burn handler is in the diff');
    assert.ok(['growth', 'new'].includes(grown.kind), `the /burn handler grew: ${grown.kind}`);
    assert.equal(shrunk.kind, 'shrinkage');
    // and the pixels say so
    const box = await page.locator('.pv-icicle canvas').boundingBox();
    const px = async (n) => page.evaluate(([x, y]) => {
      const c = document.querySelector('.pv-icicle canvas');
      const d = window.devicePixelRatio || 1;
      return Array.from(c.getContext('2d').getImageData(Math.round(x * d), Math.round(y * d), 1, 1).data);
    }, [n.x + Math.min(n.width - 2, 2), n.level * 20 + 3]);
    const [r1, g1] = await px(grown);
    const [r2, g2] = await px(shrunk);
    assert.ok(r1 > g1 + 60, `grown node is red: ${r1},${g1}`);
    assert.ok(g2 > r2 + 40, `shrunk node is green: ${r2},${g2}`);
    const row = await page.$('.pv-table tr[data-name="main.main.func2"]');
    assert.ok(Number(await row.getAttribute('data-cumulative-diff')) > 0);
    assert.ok(await page.isVisible('.pv-table td.pos'));
    await page.locator('.pv-icicle canvas').hover({ position: { x: grown.x + 4, y: grown.level * 20 + 10 } });
    await page.locator('.icicle-tooltip').waitFor({ state: 'visible' });
    assert.match(await page.innerText('.icicle-tooltip'), /A \(baseline\)[\s\S]*B \(comparison\)[\s\S]*Change/);
    await shot(page, 'compare-light');
    let n0 = await eventCount(page);
    await page.click('[data-mode="absolute"]');
    await waitEvent(page, 'profile', n0);
    assert.equal(new URL(page.url()).searchParams.get('absolute'), 'true');
    assert.ok(['growth', 'new'].includes((await icicleNodes(page, 'compare')).find((n) => n.name === 'main.main.func2').kind));
    await page.evaluate(() => { document.documentElement.dataset.theme = 'dark'; window.dispatchEvent(new Event('strata-theme')); window.__strata.views.compare.icicle.render(); });
    await page.waitForTimeout(200);
    await shot(page, 'compare-dark');
  });

  it('opens compare from the profiles view with both sides filled', async () => {
    await open(page, `?expression_a=${encodeURIComponent(`${CPU}{job="demo"}`)}&from_a=now-15m&to_a=now&theme=dark`);
    await waitEvent(page, 'profile');
    await shot(page, 'profiles-dark');
    const n0 = await eventCount(page);
    await page.click('[data-role="compare"]');
    await page.waitForFunction(() => window.__strata.views.compare && new URL(location.href).searchParams.get('view') === 'compare');
    const u = new URL(page.url()).searchParams;
    assert.equal(u.get('expression_b'), u.get('expression_a'));
    // The compare view's own profile: a diff (the profiles view's last one may still arrive after
    // the click, so wait for the diff rather than take the latest event).
    await page.waitForFunction((s) => window.__strata.events.slice(s)
      .some((e) => e.type === 'profile' && e.detail.diff === true), n0, { timeout: 30000 });
    const kinds = new Set((await icicleNodes(page, 'compare')).map((n) => n.kind));
    assert.deepEqual([...kinds], ['neutral'], 'a profile compared with itself has no change');
  });
});

// Synthetic profiles with known values (ms of CPU): A (version 1) and B (version 2) of one
// program, equal totals (1 s) so relative mode scales nothing. dep.Fib went away, main.fresh is
// new, main.work grew by 250 ms (+62.5%), main.idle shrank by 150 ms (-50%), main.main is unchanged.
const SYN = 'synth:cpu:nanoseconds:cpu:nanoseconds:delta';
const MS = 1e6;
const SYN_A = [{ stack: ['main.main', 'main.work'], value: 400 * MS }, { stack: ['main.main', 'dep.Fib'], value: 300 * MS },
  { stack: ['main.main', 'main.idle'], value: 300 * MS }];
const SYN_B = [{ stack: ['main.main', 'main.work'], value: 650 * MS }, { stack: ['main.main', 'main.fresh'], value: 200 * MS },
  { stack: ['main.main', 'main.idle'], value: 150 * MS }];
let synSeeded = false;

async function seedSynthetic() {
  if (synSeeded) return;
  await env.pushSynthetic('synth', { job: 'syn', version: '1' }, SYN_A);
  await env.pushSynthetic('synth', { job: 'syn', version: '2' }, SYN_B);
  // The same program built twice: v1 and v2 are different binaries (paths and build ids).
  await env.pushSynthetic('synth', { job: 'bin', version: '1' }, SYN_A, { binary: '/opt/app-v1/app', buildId: 'build-v1' });
  await env.pushSynthetic('synth', { job: 'bin', version: '2' }, SYN_B, { binary: '/opt/app-v2/app', buildId: 'build-v2' });
  await waitFor(async () => {
    const r = await fetch(`${env.base}api/v1/query?query=${encodeURIComponent(`${SYN}{job="bin",version="2"}`)}&start=now-15m&report=table`);
    return r.ok;
  }, 'the synthetic profiles to be queryable');
  synSeeded = true;
}

function compareUrl(job, extra = '') {
  const a = `${SYN}{job="${job}", version="1"}`, b = `${SYN}{job="${job}", version="2"}`;
  return `?view=compare&expression_a=${encodeURIComponent(a)}&from_a=now-15m&to_a=now&expression_b=${encodeURIComponent(b)}&from_b=now-15m&to_b=now${extra}`;
}

async function pixelAt(p, n) {
  return p.evaluate(([x, y]) => {
    const c = document.querySelector('.pv-icicle canvas');
    const d = window.devicePixelRatio || 1;
    return Array.from(c.getContext('2d').getImageData(Math.round(x * d), Math.round(y * d), 1, 1).data);
  }, [n.x + Math.min(n.width / 2, 20), n.level * 20 + 3]);
}

async function tooltipOf(p, n) {
  await p.mouse.move(0, 0);
  await p.locator('.pv-icicle canvas').hover({ position: { x: n.x + Math.min(n.width / 2, 20), y: n.level * 20 + 10 } });
  await p.locator('.icicle-tooltip').waitFor({ state: 'visible' });
  return p.innerText('.icicle-tooltip');
}

describe('compare view on known profiles', () => {
  before(async () => { await seedSynthetic(); }, { timeout: 60000 });

  it('draws code only in A as removed (green) and code only in B as new (red), sized by A + B', async () => {
    await open(page, compareUrl('syn', '&dashboard=icicle'));
    const p = await waitEvent(page, 'profile');
    assert.equal(p.diff, true);
    const nodes = await icicleNodes(page, 'compare');
    const by = (name) => { const n = nodes.find((x) => x.name === name); assert.ok(n, `${name} is drawn`); return n; };
    const root = by('total'), fib = by('dep.Fib'), fresh = by('main.fresh'), work = by('main.work'), idle = by('main.idle'), main = by('main.main');
    // sizes: A + B (2 s at the root)
    assert.equal(root.totalA, 1000 * MS);
    assert.equal(root.totalB, 1000 * MS);
    assert.ok(Math.abs(fib.width / root.width - 300 / 2000) < 0.005, `dep.Fib is 15% wide: ${fib.width / root.width}`);
    assert.ok(Math.abs(work.width / root.width - 1050 / 2000) < 0.005, `main.work is 52.5% wide: ${work.width / root.width}`);
    assert.ok(Math.abs(fresh.width / root.width - 200 / 2000) < 0.005);
    for (const n of [fib, fresh, work, idle]) assert.ok(n.x >= main.x - 0.5 && n.x + n.width <= main.x + main.width + 0.5, `${n.name} within main.main`);
    // kinds, colours, labels
    assert.deepEqual([fib.kind, fresh.kind, work.kind, idle.kind, main.kind], ['removed', 'new', 'growth', 'shrinkage', 'neutral']);
    assert.equal(fib.totalB, 0);
    assert.equal(fib.color, 'rgba(40,167,69,0.8)');
    assert.equal(fresh.color, 'rgba(229,62,62,0.8)');
    assert.equal(fib.label, 'dep.Fib (removed)');
    assert.equal(fresh.label, 'main.fresh (new)');
    assert.equal(work.label, 'main.work');
    const [r1, g1] = await pixelAt(page, fib);
    assert.ok(g1 > r1 + 60, `dep.Fib is green on the canvas: ${r1},${g1}`);
    const [r2, g2] = await pixelAt(page, fresh);
    assert.ok(r2 > g2 + 60, `main.fresh is red on the canvas: ${r2},${g2}`);
    const [r3, g3] = await pixelAt(page, idle);
    assert.ok(g3 > r3 + 30, `main.idle (shrank) is green: ${r3},${g3}`);
    // tooltips: A, B, the change and its percentage, or new / removed
    let t = await tooltipOf(page, fib);
    assert.match(t, /dep\.Fib\s*removed/);
    assert.match(t, /A \(baseline\)\s*300 ms \(30\.0%\)/);
    assert.match(t, /B \(comparison\)\s*0 ns \(0\.00%\)/);
    assert.match(t, /Change\s*-300 ms \(removed\)/);
    t = await tooltipOf(page, fresh);
    assert.match(t, /Change\s*\+200 ms \(new\)/);
    t = await tooltipOf(page, work);
    assert.match(t, /Change\s*\+250 ms \(\+62\.5%\)/);
    t = await tooltipOf(page, idle);
    assert.match(t, /Change\s*-150 ms \(-50\.0%\)/);
    assert.doesNotMatch(t, /∞|inf/i);
    await page.mouse.move(0, 0);
    await shot(page, 'compare-known-icicle');
  });

  it('lists the largest change first, new and removed, without scrolling sideways at 1280 px', async () => {
    await page.setViewportSize({ width: 1280, height: 900 });
    try {
      await open(page, compareUrl('syn'));
      await waitEvent(page, 'profile');
      const rows = () => page.$$eval('.pv-table tbody tr', (r) => r.map((x) => ({
        name: x.dataset.name, change: x.dataset.change, diff: Number(x.dataset.cumulativeDiff), base: Number(x.dataset.cumulativeBase),
        text: Array.from(x.cells).filter((c) => c.offsetParent !== null).map((c) => c.innerText),
      })));
      let r = await rows();
      assert.deepEqual(r.map((x) => x.name), ['dep.Fib', 'main.work', 'main.fresh', 'main.idle', 'main.main']);
      assert.deepEqual(r.map((x) => x.diff), [-300 * MS, 250 * MS, 200 * MS, -150 * MS, 0]);
      assert.deepEqual(r.map((x) => x.change), ['removed', 'growth', 'new', 'shrinkage', 'neutral']);
      assert.equal(r[0].base, 300 * MS, 'A of dep.Fib');
      // Name, Flat Δ, Cum. A, Cum. B, Cum. Δ, Cum. Δ % in a half-width table
      assert.deepEqual(r[0].text, ['dep.Fib', '-300 ms', '300 ms', '0 ns', '-300 ms', 'removed']);
      assert.deepEqual(r[2].text, ['main.fresh', '+200 ms', '0 ns', '200 ms', '+200 ms', 'new']);
      assert.deepEqual(r[1].text.slice(-1), ['+62.5%']);
      assert.doesNotMatch(await page.innerText('.pv-table'), /∞|inf %/i);
      assert.equal(await page.getAttribute('.pv-table th[data-key="cumulative_diff"]', 'aria-sort'), 'descending');
      const fit = await page.$eval('.pv-table .table-scroll', (e) => [e.scrollWidth, e.clientWidth]);
      assert.ok(fit[0] <= fit[1] + 1, `diff table fits: scrollWidth ${fit[0]} clientWidth ${fit[1]}`);
      await shot(page, 'compare-known-1280');
      await page.evaluate(() => { document.documentElement.dataset.theme = 'dark'; window.dispatchEvent(new Event('strata-theme')); window.__strata.views.compare.icicle.render(); });
      await shot(page, 'compare-known-1280-dark');
      await page.evaluate(() => { document.documentElement.dataset.theme = 'light'; window.__strata.views.compare.icicle.render(); });
      // Sortable by column: Cum. Δ cycles to largest growth first, then largest shrinkage first.
      await page.click('.pv-table th[data-key="cumulative_diff"]');
      assert.equal(new URL(page.url()).searchParams.get('sort'), 'cumulative_diff:desc');
      r = await rows();
      assert.deepEqual(r.map((x) => x.name).slice(0, 2), ['main.work', 'main.fresh']);
      await page.click('.pv-table th[data-key="cumulative_diff"]');
      r = await rows();
      assert.deepEqual(r.map((x) => x.name).slice(0, 2), ['dep.Fib', 'main.idle']);
      await page.click('.pv-table th[data-key="name"]');
      r = await rows();
      assert.equal(r[0].name, 'dep.Fib');
      assert.equal(r[4].name, 'main.work');
    } finally {
      await page.setViewportSize({ width: 1500, height: 1000 });
    }
  });

  it('lines up two builds of a program by function name, splits them by binary on request', async () => {
    // Needs the querier's group_by (issue 14); older queriers ignore it and send no flat_base.
    const probe = await (await fetch(`${env.base}api/v1/diff?query_a=${encodeURIComponent(`${SYN}{job="bin",version="1"}`)}` +
      `&query_b=${encodeURIComponent(`${SYN}{job="bin",version="2"}`)}&start_a=now-15m&start_b=now-15m&report=table&group_by=function_name`)).json();
    const serverGroups = probe.table.rows.length > 0 && 'flat_base' in probe.table.rows[0];
    const diffs = [];
    const onRequest = (q) => { if (q.url().includes('/api/v1/diff?')) diffs.push(new URL(q.url()).searchParams); };
    page.on('request', onRequest);
    try {
      await open(page, compareUrl('bin', '&dashboard=icicle'));
      await waitEvent(page, 'profile');
      assert.equal(diffs.find((x) => x.get('report') === 'both').get('group_by'), 'function_name');
      let nodes = await icicleNodes(page, 'compare');
      if (serverGroups) {
        const works = nodes.filter((n) => n.name === 'main.work');
        assert.equal(works.length, 1, 'main.work of v1 and v2 is one frame');
        assert.equal(works[0].kind, 'growth');
        assert.equal(nodes.find((n) => n.name === 'dep.Fib').kind, 'removed');
      }
      const n0 = await eventCount(page);
      const before = diffs.length;
      await page.click('[data-role="groupby-button"]');
      await page.check('[data-role="groupby-menu"] input[value="mapping_file"]');
      await page.waitForFunction(() => new URL(location.href).searchParams.get('group_by') === 'function_name,mapping_file');
      await waitEvent(page, 'profile', n0);
      assert.equal(diffs.slice(before).find((x) => x.get('report') === 'both').get('group_by'), 'function_name,mapping_file');
      nodes = await icicleNodes(page, 'compare');
      const kinds = nodes.filter((n) => n.name.startsWith('main.work [')).map((n) => n.kind).sort();
      assert.deepEqual(kinds, ['new', 'removed'], 'split by binary: v1\'s main.work went away, v2\'s is new');
      await shot(page, 'compare-groupby-binary');
    } finally {
      page.off('request', onRequest);
    }
    if (!serverGroups) {
      // Reported rather than failed while the server change is pending.
      console.log('# the querier does not group by function name yet (no flat_base): the merged-by-name checks were skipped');
    }
  });
});

// Synthetic profiles whose samples carry pprof labels (as Go's pprof.Do writes them), with known
// values (ms of CPU): version 1 spends 600 ms under endpoint=/a, 300 ms under endpoint=/b and
// 100 ms without a label; version 2 200, 700 and 100. Grouped by the label, each endpoint is a
// frame under the root and the unlabelled stack stays directly under the root.
const LBL = (a, b) => [
  { stack: ['main.main', 'main.handleA'], value: a * MS, labels: { endpoint: '/a' } },
  { stack: ['main.main', 'main.handleB'], value: b * MS, labels: { endpoint: '/b' } },
  { stack: ['main.main', 'main.idle'], value: 100 * MS },
];
const EP_A = 'endpoint="/a"', EP_B = 'endpoint="/b"';

describe('group by pprof label', () => {
  const requests = [];
  const onRequest = (q) => { if (q.url().includes('/api/v1/')) requests.push(new URL(q.url())); };
  const sent = (path, since) => requests.slice(since).filter((u) => u.pathname.endsWith(path)).map((u) => u.searchParams);
  const lbl = (v) => `${SYN}{job="lbl", version="${v}"}`;
  const profileUrl = (extra = '') => `?expression_a=${encodeURIComponent(lbl(1))}&from_a=now-15m&to_a=now${extra}`;
  const labelInputs = () => page.$$eval('[data-role="groupby-labels"] input', (l) => l.map((i) => ({ value: i.value, checked: i.checked })));
  const closeMenu = async () => {
    await page.keyboard.press('Escape');
    await page.waitForSelector('[data-role="groupby-menu"]', { state: 'hidden', timeout: 5000 });
  };

  before(async () => {
    await env.pushSynthetic('synth', { job: 'lbl', version: '1' }, LBL(600, 300));
    await env.pushSynthetic('synth', { job: 'lbl', version: '2' }, LBL(200, 700));
    await waitFor(async () => {
      const r = await fetch(`${env.base}api/v1/labels?${new URLSearchParams({ match: lbl(2), start: 'now-15m', end: 'now' })}`);
      return r.ok && (await r.json()).label_names.includes('endpoint');
    }, 'the labelled profiles to be queryable');
    page.on('request', onRequest);
  }, { timeout: 60000 });

  after(() => { page.off('request', onRequest); });

  it('lists the selection\'s label names in the Group-by menu and splits the icicle graph and table by endpoint', async () => {
    const before = requests.length;
    await open(page, profileUrl());
    await waitEvent(page, 'profile');
    const ev = await waitEvent(page, 'labels');
    assert.equal(ev.state, 'ok');
    // The Labels API was asked for the names of this selection: its selector and time range.
    const asked = sent('/api/v1/labels', before).filter((q) => q.get('match'));
    assert.equal(asked.length, 1, 'one Labels API request for the selection');
    assert.equal(asked[0].get('match'), lbl(1));
    assert.equal(asked[0].get('start'), 'now-15m');
    assert.equal(asked[0].get('end'), 'now');
    // Every name but __name__ (the API does not tell sample labels from series labels; as Parca).
    await page.click('[data-role="groupby-button"]');
    await page.waitForSelector('[data-role="groupby-labels"] input[value="labels.endpoint"]');
    assert.deepEqual(await labelInputs(), [
      { value: 'labels.endpoint', checked: false }, { value: 'labels.job', checked: false }, { value: 'labels.version', checked: false },
    ]);
    assert.match(await page.innerText('[data-role="groupby-labels"]'), /group by pprof label[\s\S]*Label: endpoint/i);
    await shot(page, 'profiles-groupby-labels-menu');

    const n0 = await eventCount(page);
    const q0 = requests.length;
    await page.check('[data-role="groupby-labels"] input[value="labels.endpoint"]');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('group_by') === 'function_name,labels.endpoint');
    await waitEvent(page, 'profile', n0);
    const query = sent('/api/v1/query', q0).find((q) => q.get('report') === 'both');
    assert.equal(query.get('group_by'), 'function_name,labels.endpoint', 'the query groups by the label');
    assert.match(await page.innerText('[data-role="groupby-button"]'), /Group by: function, endpoint/);
    await closeMenu();

    // The icicle graph: one frame per endpoint under the root, sized by its samples; the
    // unlabelled stack directly under the root.
    const nodes = await icicleNodes(page);
    const root = nodes.find((n) => n.name === 'total');
    assert.equal(root.total, 1000 * MS);
    const first = nodes.filter((n) => n.level === 1).sort((x, y) => x.name.localeCompare(y.name));
    assert.deepEqual(first.map((n) => [n.name, n.total]), [[EP_A, 600 * MS], [EP_B, 300 * MS], ['main.main', 100 * MS]]);
    for (const [n, share] of [[first[0], 0.6], [first[1], 0.3], [first[2], 0.1]]) {
      assert.ok(Math.abs(n.width / root.width - share) < 0.005, `${n.name} is ${share * 100}% wide: ${n.width / root.width}`);
    }
    assert.equal(first[0].color, first[1].color, 'the endpoints share their label\'s colour');
    const within = (n, p) => n.x >= p.x - 0.5 && n.x + n.width <= p.x + p.width + 0.5;
    const handleA = nodes.find((n) => n.name === 'main.handleA'), handleB = nodes.find((n) => n.name === 'main.handleB');
    assert.equal(handleA.level, 3);
    assert.ok(within(handleA, first[0]) && within(handleB, first[1]), 'each endpoint\'s stacks are under its frame');
    assert.equal(nodes.find((n) => n.name === 'main.idle').level, 2, 'the unlabelled stack is under the root');
    let t = await tooltipOf(page, first[0]);
    assert.match(t, /endpoint="\/a"/);
    assert.match(t, /Cumulative\s*600 ms \(60\.0%\)/);
    t = await tooltipOf(page, first[1]);
    assert.match(t, /Cumulative\s*300 ms \(30\.0%\)/);
    await page.mouse.move(0, 0);
    // The table: a row per endpoint with its value.
    const rows = await page.$$eval('.pv-table tbody tr', (r) => r.map((x) => [x.dataset.name, Number(x.dataset.cumulative)]));
    const byName = Object.fromEntries(rows);
    assert.equal(byName[EP_A], 600 * MS);
    assert.equal(byName[EP_B], 300 * MS);
    assert.equal(byName['main.main'], 1000 * MS);
    await shot(page, 'profiles-groupby-endpoint');

    // Frame checkboxes keep the label.
    await page.click('[data-role="groupby-button"]');
    await page.check('[data-role="groupby-menu"] input[value="function_file_name"]');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('group_by') === 'function_name,function_file_name,labels.endpoint');
    assert.ok(await page.isChecked('[data-role="groupby-labels"] input[value="labels.endpoint"]'));
    await page.uncheck('[data-role="groupby-menu"] input[value="function_file_name"]');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('group_by') === 'function_name,labels.endpoint');
    // Unchecking the label ungroups.
    const n1 = await eventCount(page);
    await page.uncheck('[data-role="groupby-labels"] input[value="labels.endpoint"]');
    await page.waitForFunction(() => !new URL(location.href).searchParams.get('group_by'));
    await waitEvent(page, 'profile', n1);
    // The profile event counted may be the answer to an earlier step's query, still on its way
    // when n1 was read on a loaded machine: wait for the ungrouped graph itself (or time out).
    await page.waitForFunction(() => {
      const top = window.__strata.views.profiles.icicle.renderedNodes().filter((n) => n.level === 1);
      return top.length === 1 && top[0].name === 'main.main';
    });
    const flat = await icicleNodes(page);
    assert.deepEqual(flat.filter((n) => n.level === 1).map((n) => n.name), ['main.main']);
    await closeMenu();
  });

  it('keeps a label the selection does not have in the URL, listed and checked, when frame fields change', async () => {
    await open(page, profileUrl('&group_by=function_name,labels.region'));
    await waitEvent(page, 'labels');
    await page.click('[data-role="groupby-button"]');
    assert.deepEqual((await labelInputs()).filter((i) => i.checked).map((i) => i.value), ['labels.region']);
    assert.match(await page.innerText('[data-role="groupby-button"]'), /Group by: function, region/);
    await page.check('[data-role="groupby-menu"] input[value="mapping_file"]');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('group_by') === 'function_name,mapping_file,labels.region');
    await closeMenu();
  });

  it('offers and applies the grouping in the compare view: each endpoint\'s change', async () => {
    const before = requests.length;
    await open(page, `${compareUrl('lbl')}&group_by=${encodeURIComponent('function_name,labels.endpoint')}`);
    assert.equal((await waitEvent(page, 'profile')).diff, true);
    await waitEvent(page, 'labels');
    const diff = sent('/api/v1/diff', before).find((q) => q.get('report') === 'both');
    assert.equal(diff.get('group_by'), 'function_name,labels.endpoint');
    // The names of both sides.
    const asked = sent('/api/v1/labels', before).filter((q) => q.get('match')).map((q) => q.get('match')).sort();
    assert.deepEqual(asked, [lbl(1), lbl(2)]);
    await page.click('[data-role="groupby-button"]');
    assert.deepEqual(await labelInputs(), [
      { value: 'labels.endpoint', checked: true }, { value: 'labels.job', checked: false }, { value: 'labels.version', checked: false },
    ]);
    await closeMenu();
    const nodes = await icicleNodes(page, 'compare');
    const a = nodes.find((n) => n.name === EP_A), b = nodes.find((n) => n.name === EP_B);
    assert.ok(a && b, 'both endpoints are drawn');
    assert.deepEqual([a.level, b.level], [1, 1]);
    assert.deepEqual([a.totalA, a.totalB, a.kind], [600 * MS, 200 * MS, 'shrinkage']);
    assert.deepEqual([b.totalA, b.totalB, b.kind], [300 * MS, 700 * MS, 'growth']);
    const rows = await page.$$eval('.pv-table tbody tr', (r) => r.map((x) => ({
      name: x.dataset.name, base: Number(x.dataset.cumulativeBase), b: Number(x.dataset.cumulative), change: x.dataset.change,
    })));
    assert.deepEqual(rows.find((x) => x.name === EP_A), { name: EP_A, base: 600 * MS, b: 200 * MS, change: 'shrinkage' });
    assert.deepEqual(rows.find((x) => x.name === EP_B), { name: EP_B, base: 300 * MS, b: 700 * MS, change: 'growth' });
    await shot(page, 'compare-groupby-endpoint');
  });
});

// Two builds of one real Go program (tests/goversions; only a dependency changed between them:
// v1's dep.Addition wastes its time in dep.Fib, v2's does not), scraped by a `strata all` of their
// own with the labels version=v1 and version=v2, compared in the browser against what the JSON API
// answers for the same diff.
describe('compare view on two builds of a real Go program', () => {
  const gv = new GoVersions(env);
  const FIB = GOVERSIONS_FIB;
  const ADDITION = 'strata.dev/goversions/dep.Addition';
  let sides; // the diff's query_a ... end_b, as the UI must send them
  const diffRequests = [];
  const onRequest = (q) => { if (q.url().includes('/api/v1/diff?')) diffRequests.push(new URL(q.url()).searchParams); };

  before(async () => {
    await gv.start({ profiles: 4 });
    const { from, to } = gv.window;
    sides = {
      query_a: `${CPU}{version="v1"}`, start_a: String(from), end_a: String(to),
      query_b: `${CPU}{version="v2"}`, start_b: String(from), end_b: String(to),
    };
    page.on('request', onRequest);
  }, { timeout: 120000 });

  after(() => { page.off('request', onRequest); });

  // The JSON API's table for the diff the UI shows (relative, the UI's default), grouped by `groupBy`.
  async function jsonTable(groupBy) {
    const q = new URLSearchParams({ ...sides, absolute: 'false', report: 'table', group_by: groupBy });
    const r = await fetch(`${gv.base}api/v1/diff?${q}`);
    assert.equal(r.status, 200, `${gv.base}api/v1/diff?${q}`);
    const j = await r.json();
    assert.equal(j.diff, true);
    return { unit: j.table.unit || j.unit, rows: j.table.rows.map((x) => ({ ...x, name: x.label || x.name })) };
  }

  // The visible cells of a table row by column key.
  const rowCells = (tr) => tr.evaluate((row) => {
    const keys = Array.from(row.closest('table').querySelectorAll('thead th')).map((th) => th.dataset.key);
    return Object.fromEntries(Array.from(row.cells).map((c, i) => [keys[i], c.innerText.replace(/\s+/g, ' ').trim()]));
  });
  const esc = (t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

  it('lines the builds up by function: one main.main, dep.Fib removed in green with v1\'s value', async () => {
    assert.ok(gv.profiles.v1 >= 4 && gv.profiles.v2 >= 4, `profiles per version: ${JSON.stringify(gv.profiles)}`);
    const url = `?view=compare&${new URLSearchParams({
      expression_a: sides.query_a, from_a: sides.start_a, to_a: sides.end_a,
      expression_b: sides.query_b, from_b: sides.start_b, to_b: sides.end_b,
    })}`;
    const before = diffRequests.length;
    await page.goto(`${gv.base}${url}`);
    await page.waitForFunction(() => window.__strata && window.__strata.ready);
    assert.equal((await waitEvent(page, 'profile')).diff, true);
    // The UI asked for exactly this diff, grouped by function name (the default).
    const sent = diffRequests.slice(before).find((x) => x.get('report') === 'both');
    assert.ok(sent, 'the diff was requested');
    for (const [k, v] of Object.entries(sides)) assert.equal(sent.get(k), v, k);
    assert.equal(sent.get('group_by'), 'function_name');
    assert.equal(sent.get('absolute'), 'false');

    const { unit, rows } = await jsonTable('function_name');
    assert.equal(unit, 'nanoseconds');
    const fib = rows.find((x) => x.name === FIB);
    assert.ok(fib, 'the JSON diff has dep.Fib');
    assert.equal(fib.cumulative, 0, 'dep.Fib is not in v2');
    assert.ok(fib.cumulative_base > 0, 'dep.Fib is in v1');

    // One frame per function although each build is its own binary.
    const nodes = await icicleNodes(page, 'compare');
    for (const name of ['main.main', 'main.work', ADDITION]) {
      assert.equal(nodes.filter((n) => n.name === name).length, 1, `${name} once in the diff icicle graph`);
    }
    // dep.Fib recurses: its outermost frame (under dep.Addition's inlined dep.fibOf20) holds v1's
    // cumulative value.
    const fibs = nodes.filter((n) => n.name === FIB);
    assert.ok(fibs.length > 0, 'dep.Fib is drawn');
    const top = Math.min(...fibs.map((n) => n.level));
    const outer = fibs.filter((n) => n.level === top);
    assert.equal(outer.length, 1, 'one outermost dep.Fib');
    const f = outer[0];
    assert.equal(f.kind, 'removed');
    assert.equal(f.totalB, 0);
    assert.equal(f.totalA, fib.cumulative_base, 'the icicle graph\'s A of dep.Fib is the JSON answer\'s cumulative_base');
    assert.equal(f.color, 'rgba(40,167,69,0.8)');
    const [r, g, b] = await pixelAt(page, f);
    assert.ok(g > r + 60 && g > b + 30, `dep.Fib is green on the canvas: ${r},${g},${b}`);
    assert.match(f.label, /\(removed\)$/);
    const tip = await tooltipOf(page, f);
    const base = formatValue(fib.cumulative_base, unit);
    assert.match(tip, new RegExp(`${esc(FIB)}\\s*removed`));
    assert.match(tip, new RegExp(`A \\(baseline\\)\\s*${esc(base)} \\(`));
    assert.match(tip, /B \(comparison\)\s*0 ns \(0\.00%\)/);
    assert.match(tip, new RegExp(`Change\\s*${esc(formatSigned(-fib.cumulative_base, unit))} \\(removed\\)`));
    assert.match(tip, /Binary\s*app-v1/);
    await page.mouse.move(0, 0);

    // The table: dep.Fib's row says removed, with v1's value.
    const tr = await page.$(`.pv-table tbody tr[data-name="${FIB}"]`);
    assert.ok(tr, 'dep.Fib has a table row');
    assert.equal(await tr.getAttribute('data-change'), 'removed');
    assert.equal(Number(await tr.getAttribute('data-cumulative-base')), fib.cumulative_base);
    assert.equal(Number(await tr.getAttribute('data-cumulative-diff')), fib.cumulative_diff);
    const cells = await rowCells(tr);
    assert.equal(cells.cumulative_base, base);
    assert.equal(cells.cumulative, formatValue(0, unit));
    assert.equal(cells.cumulative_diff, formatSigned(fib.cumulative_diff, unit));
    assert.equal(cells.cumulative_diff_pct, 'removed');
    assert.equal(await page.locator('.pv-table tbody tr[data-name="main.main"]').count(), 1, 'main.main once in the table');
    // Sorted by the largest |cumulative change| first: the rows the JSON answer's largest
    // |cumulative_diff| names (dep.Fib and the dep.fibOf20 inlined around it tie), ties by name.
    const max = Math.max(...rows.map((x) => Math.abs(x.cumulative_diff)));
    const tied = rows.filter((x) => Math.abs(x.cumulative_diff) === max).map((x) => x.name).sort((x, y) => x.localeCompare(y));
    const shown = await tableNames(page);
    assert.deepEqual(shown.slice(0, tied.length), tied, 'the table starts with the largest |change|');
    assert.equal(shown[0], tied[0]);
    assert.equal(await page.getAttribute('.pv-table th[data-key="cumulative_diff"]', 'aria-sort'), 'descending');
    await shot(page, 'compare-goversions');
  });

  it('splits the builds again when grouped by binary: main.main once per build', async () => {
    const { rows } = await jsonTable('function_name,mapping_file');
    const mainsJson = rows.filter((x) => x.name.startsWith('main.main ['));
    assert.deepEqual(mainsJson.map((x) => x.mapping_file).sort(), [gv.binaries.v1, gv.binaries.v2]);
    const n0 = await eventCount(page);
    const before = diffRequests.length;
    await page.click('[data-role="groupby-button"]');
    await page.check('[data-role="groupby-menu"] input[value="mapping_file"]');
    await page.waitForFunction(() => new URL(location.href).searchParams.get('group_by') === 'function_name,mapping_file');
    await waitEvent(page, 'profile', n0);
    await page.keyboard.press('Escape');
    await page.waitForSelector('[data-role="groupby-menu"]', { state: 'hidden' });
    assert.equal(diffRequests.slice(before).find((x) => x.get('report') === 'both').get('group_by'), 'function_name,mapping_file');
    const nodes = await icicleNodes(page, 'compare');
    // Split frames carry their binary in their name ("main.main [/path/app-v1]"), so each node
    // (and its tooltip and table row) says which build it is.
    const mains = nodes.filter((n) => n.name.startsWith('main.main [')).sort((x, y) => x.kind.localeCompare(y.kind));
    assert.deepEqual(mains.map((n) => n.kind), ['new', 'removed'], 'v2\'s main.main is new, v1\'s removed');
    const v1 = mainsJson.find((x) => x.mapping_file === gv.binaries.v1), v2 = mainsJson.find((x) => x.mapping_file === gv.binaries.v2);
    assert.equal(mains[1].totalA, v1.cumulative_base);
    assert.equal(mains[0].totalB, v2.cumulative);
    const [r1, g1] = await pixelAt(page, mains[1]);
    assert.ok(g1 > r1 + 60, `v1's main.main is green: ${r1},${g1}`);
    const [r2, g2] = await pixelAt(page, mains[0]);
    assert.ok(r2 > g2 + 60, `v2's main.main is red: ${r2},${g2}`);
    const where = await page.$$eval('.pv-table tbody tr[data-name^="main.main ["]', (trs) => trs.map((t) => ({
      where: t.dataset.name.match(/\[(.*)\]$/)[1].split('/').pop(), change: t.dataset.change, base: Number(t.dataset.cumulativeBase), b: Number(t.dataset.cumulative),
    })).sort((x, y) => x.where.localeCompare(y.where)));
    assert.deepEqual(where, [
      { where: 'app-v1', change: 'removed', base: v1.cumulative_base, b: 0 },
      { where: 'app-v2', change: 'new', base: 0, b: v2.cumulative },
    ]);
    await shot(page, 'compare-goversions-by-binary');
  });

  // Found by this test: the icicle tooltip takes a frame's file and binary from the table row
  // with the frame's name (ProfilePanel.show's byName in src/profileview.js); split frames used to
  // share one name, so both tooltips named one binary. The server now labels split frames apart.
  it('names each split frame\'s own binary in its tooltip', async () => {
    const mains = (await icicleNodes(page, 'compare')).filter((n) => n.name.startsWith('main.main ['));
    const v1 = mains.find((n) => n.kind === 'removed'), v2 = mains.find((n) => n.kind === 'new');
    const t1 = await tooltipOf(page, v1), t2 = await tooltipOf(page, v2);
    await page.mouse.move(0, 0);
    assert.match(t1, /Binary\s*app-v1/, 'v1\'s main.main (only in A)');
    assert.match(t2, /Binary\s*app-v2/, 'v2\'s main.main (only in B)');
  });
});

describe('targets page', () => {
  it('shows the real scraper\'s healthy and unhealthy targets', async () => {
    await open(page, '?view=targets');
    const job = page.locator('.job[data-job="ui-scrape"]');
    await job.waitFor();
    // The page refreshes every 10 s; the scraper needs a second for its first scrapes.
    const settled = async () => (await job.locator('tr[data-health="up"]').count()) === 1 &&
      (await job.locator('tr[data-health="down"]').count()) === 1;
    const end = Date.now() + 30000;
    while (!(await settled()) && Date.now() < end) {
      await page.click('[data-role="refresh"]');
      await page.waitForTimeout(500);
    }
    const up = job.locator('tr[data-health="up"]');
    const down = job.locator('tr[data-health="down"]');
    assert.equal(await up.count(), 1);
    assert.equal(await down.count(), 1);
    assert.equal(await up.getAttribute('data-url'), `${env.target}/debug/pprof/goroutine`);
    assert.match(await up.innerText(), /Up[\s\S]*__name__="scraped"[\s\S]*job="ui-scrape"[\s\S]*s ago[\s\S]*none/);
    assert.equal(await down.getAttribute('data-url'), `http://${env.deadTarget}/debug/pprof/goroutine`);
    assert.match(await down.innerText(), /Down[\s\S]*Failed to connect to 127\.0\.0\.1/);
    assert.match(await job.locator('h3').innerText(), /ui-scrape \(1\/2 up\)/);
    await shot(page, 'targets-scraper');
  });

  it('says so when the server has no targets API', async () => {
    await page.route('**/api/v1/targets', (route) => route.fulfill({ status: 404, contentType: 'application/json',
      body: JSON.stringify({ code: 'NOT_FOUND', message: 'not found' }) }));
    await open(page, '?view=targets');
    await page.waitForSelector('[data-role="targets"] .empty-state[data-state="unavailable"]');
    await page.unroute('**/api/v1/targets');
  });

  it('shows a healthy and an unhealthy target and the agents', async () => {
    const now = Date.now();
    await page.route('**/api/v1/targets', (route) => route.fulfill({
      contentType: 'application/json',
      body: JSON.stringify({
        targets: {
          gotarget: {
            targets: [
              { discoveredLabels: { labels: [{ name: '__address__', value: '127.0.0.1:6060' }] }, labels: { labels: [{ name: 'job', value: 'gotarget' }, { name: 'instance', value: '127.0.0.1:6060' }] },
                lastError: '', lastScrape: new Date(now - 4000).toISOString(), lastScrapeDuration: '0.012s', url: 'http://127.0.0.1:6060/debug/pprof/profile?seconds=10', health: 'HEALTH_GOOD' },
              { labels: { job: 'gotarget', instance: '127.0.0.1:6061' }, last_error: 'Get "http://127.0.0.1:6061/debug/pprof/allocs": connection refused',
                last_scrape: now - 9000, last_scrape_duration: 1500000, url: 'http://127.0.0.1:6061/debug/pprof/allocs', health: 'HEALTH_BAD' },
            ],
          },
        },
      }),
    }));
    await page.route('**/api/v1/agents', (route) => route.fulfill({
      contentType: 'application/json',
      body: JSON.stringify({ agents: [{ id: 'node-1 10.0.0.1', lastPush: new Date(now - 2000).toISOString(), lastPushDuration: '0.004s', lastError: '' },
        { id: 'node-2 10.0.0.2', last_push: now - 60000, last_error: 'rpc error: code = Unavailable' }] }),
    }));
    await open(page, '?view=targets');
    await page.waitForSelector('.targets-table tr[data-health="down"]');
    const up = page.locator('.targets-table tr[data-health="up"]');
    const down = page.locator('.targets-table tr[data-health="down"]');
    assert.equal(await up.count(), 1);
    assert.equal(await down.count(), 1);
    assert.match(await up.innerText(), /Up[\s\S]*instance="127.0.0.1:6060"[\s\S]*s ago[\s\S]*12 ms/);
    assert.match(await down.innerText(), /Down[\s\S]*connection refused/);
    assert.match(await page.innerText('.job h3'), /gotarget \(1\/2 up\)/);
    assert.equal(await page.locator('.agents-table tbody tr').count(), 2);
    assert.match(await page.innerText('.agents-table tr[data-agent="node-2 10.0.0.2"]'), /Unavailable/);
    await shot(page, 'targets-light');
    await page.evaluate(() => { document.documentElement.dataset.theme = 'dark'; });
    await shot(page, 'targets-dark');
    await page.unroute('**/api/v1/targets');
    await page.unroute('**/api/v1/agents');
  });

  it('had no uncaught page errors', () => {
    assert.deepEqual(env.pageErrors, []);
  });
});

// The whole user journey in headless Chromium on real data from a real `strata all`:
// pick a type, filter by a label, sum by, hover and click a point, find the expected functions
// in the icicle graph and the table, sort, search, zoom, URL round trip, pprof download,
// compare two versions (the grown function is red), errors, targets, themes.
// Screenshots go to ui/test-artifacts/ (STRATA_UI_ARTIFACTS).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { Env, CPU, shot, waitEvent, eventCount } from './harness.mjs';

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
    // A drag that lands while the chart is being redrawn (a slow, loaded machine) is lost, so the
    // gesture is retried a few times; the assertions below are about its effect.
    let zoomed = false;
    for (let attempt = 0; attempt < 3 && !zoomed; attempt++) {
      const over = page.locator('.metrics .u-over');
      const b = await over.boundingBox();
      const n0 = await eventCount(page);
      await page.mouse.move(b.x + b.width * 0.5, b.y + b.height / 2);
      await page.mouse.down();
      await page.mouse.move(b.x + b.width * 0.7, b.y + b.height / 2, { steps: 10 });
      await page.mouse.move(b.x + b.width * 0.98, b.y + b.height / 2, { steps: 10 });
      await page.mouse.up();
      zoomed = await waitEvent(page, 'series', n0, 15000).then(() => true, () => false);
    }
    assert.ok(zoomed, 'dragging over the graph loads the zoomed range');
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
    assert.equal(grown.kind, 'growth');
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
    assert.match(await page.innerText('.icicle-tooltip'), /Diff/);
    await shot(page, 'compare-light');
    const n0 = await eventCount(page);
    await page.click('[data-mode="absolute"]');
    await waitEvent(page, 'profile', n0);
    assert.equal(new URL(page.url()).searchParams.get('absolute'), 'true');
    assert.equal((await icicleNodes(page, 'compare')).find((n) => n.name === 'main.main.func2').kind, 'growth');
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

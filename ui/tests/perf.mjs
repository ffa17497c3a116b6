// Performance check in headless Chromium (not part of `npm test`: figures, not timed tests):
// a 100,000-node flame graph must draw in under 200 ms; a 100 series x 1,000 point graph must
// stay responsive. Serves ui/ with a tiny static server; needs `npm run build` (vendor/).
// Usage: node tests/perf.mjs   (exit 1 when a target is missed)
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { extname, join, normalize, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.svg': 'image/svg+xml' };
const server = createServer(async (req, res) => {
  const p = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname)).replace(/^(\.\.[/\\])+/, '');
  try {
    const body = await readFile(join(root, p));
    res.writeHead(200, { 'Content-Type': types[extname(p)] || 'application/octet-stream' });
    res.end(body);
  } catch { res.writeHead(404); res.end('not found'); }
});
await new Promise((r) => server.listen(0, '127.0.0.1', r));
const userDir = mkdtempSync(join(tmpdir(), 'strata-perf-'));
const ctx = await chromium.launchPersistentContext(userDir, {
  executablePath: process.env.STRATA_CHROMIUM || '/usr/bin/chromium', headless: true, viewport: { width: 1500, height: 1000 },
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let failed = false;
try {
  const page = ctx.pages()[0] || await ctx.newPage();
  page.on('pageerror', (e) => { console.error('page error:', e.message); failed = true; });
  await page.goto(`http://127.0.0.1:${server.address().port}/tests/perf.html`);
  await page.waitForFunction(() => window.perfReady);
  const r = await page.evaluate(() => window.runPerf());
  console.log(JSON.stringify(r, null, 2));
  const load = r.flame_load_draw_ms.median + r.flame_parse_ms.median;
  console.log(`flame graph, 100,000 nodes: decode + draw ${load.toFixed(1)} ms (median of 5 cold loads), redraw ${r.flame_redraw_ms_median} ms`);
  console.log(`metrics graph, 100 x 1,000 points: build ${r.graph_build_and_draw_ms.median} ms, hover ${r.graph_hover_ms_median} ms median`);
  if (!(load < 200 && r.flame_redraw_ms_median < 200)) { console.error('FAIL: flame graph over 200 ms'); failed = true; }
  if (!(r.graph_hover_ms_median < 16)) { console.error('FAIL: graph hover over one frame'); failed = true; }
  if (process.env.STRATA_UI_ARTIFACTS) await page.screenshot({ path: join(process.env.STRATA_UI_ARTIFACTS, 'perf.png'), fullPage: false });
} finally {
  await ctx.close();
  server.close();
  rmSync(userDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);

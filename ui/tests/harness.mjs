// Test harness for the browser tests: a real `strata all` serving the UI, the Go pprof target
// from tests/gotarget pushing real profiles, and headless Chromium driven by playwright-core.
//
// Environment:
//   STRATA_BINARY        the strata binary (default: build/cmd/strata/strata, then build-*/...)
//   STRATA_UI_DIR        directory strata serves at "/" (default: ui/dist, else ui/)
//   STRATA_CHROMIUM      Chromium executable (default /usr/bin/chromium)
//   STRATA_UI_ARTIFACTS  where screenshots go (default ui/test-artifacts)
//   STRATA_GOTARGET      a prebuilt tests/gotarget binary (default: built with tests/gotarget/build.sh)
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync, createWriteStream } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { gzipSync } from 'node:zlib';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
export const UI_DIR = resolve(here, '..');
export const SOURCE_DIR = resolve(UI_DIR, '..');
export const ARTIFACTS = process.env.STRATA_UI_ARTIFACTS || join(UI_DIR, 'test-artifacts');

export const CPU = 'process_cpu:samples:count:cpu:nanoseconds:delta';

function findBinary() {
  if (process.env.STRATA_BINARY) return process.env.STRATA_BINARY;
  const cands = [join(SOURCE_DIR, 'build', 'cmd', 'strata', 'strata')];
  for (const d of readdirSync(SOURCE_DIR)) if (d.startsWith('build-')) cands.push(join(SOURCE_DIR, d, 'cmd', 'strata', 'strata'));
  const found = cands.find((c) => existsSync(c));
  if (!found) throw new Error('no strata binary: build it or set STRATA_BINARY');
  return found;
}

function uiDir() {
  if (process.env.STRATA_UI_DIR) return process.env.STRATA_UI_DIR;
  return existsSync(join(UI_DIR, 'dist', 'index.html')) ? join(UI_DIR, 'dist') : UI_DIR;
}

export function freePort() {
  return new Promise((res, rej) => {
    const s = createServer();
    s.on('error', rej);
    s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => res(p)); });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export async function waitFor(fn, what, timeoutMs = 30000) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try { if (await fn()) return; } catch (e) { last = e; }
    await sleep(100);
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
}

async function get(url) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  return Buffer.from(await r.arrayBuffer());
}

// ---- synthetic pprof profiles -----------------------------------------------------------------

function varint(n) {
  const out = [];
  let v = BigInt.asUintN(64, BigInt(n));
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return out;
}
const tagged = (field, wire) => varint((field << 3) | wire);
const fieldInt = (field, n) => [...tagged(field, 0), ...varint(n)];
const fieldBytes = (field, bytes) => [...tagged(field, 2), ...varint(bytes.length), ...bytes];
const fieldMsg = (field, parts) => fieldBytes(field, parts.flat());
const packed = (field, nums) => fieldBytes(field, nums.flatMap((n) => varint(n)));

// A gzipped pprof profile of one sample type (cpu/nanoseconds, a delta profile of 10 s) with the
// given stacks: [{stack: ['main.main', 'dep.Fib'] (root first), value, labels}], all in one binary
// (mapping file `binary`, build id `buildId`). `labels` (optional) are the sample's pprof labels,
// as Go's pprof.Do writes them: {endpoint: '/a'} (a string: Label.str) or {bytes: 512} (a number:
// Label.num).
export function syntheticPprof(stacks, { binary = '/usr/local/bin/app', buildId = 'app-build', timeNanos = Date.now() * 1e6 } = {}) {
  const strings = [''];
  const str = (x) => { let i = strings.indexOf(x); if (i < 0) { i = strings.length; strings.push(x); } return i; };
  const fnIds = new Map();
  const sampleType = [fieldInt(1, str('cpu')), fieldInt(2, str('nanoseconds'))];
  const samples = stacks.map(({ stack, value, labels }) => {
    const locs = [...stack].reverse().map((name) => {
      if (!fnIds.has(name)) fnIds.set(name, fnIds.size + 1);
      return fnIds.get(name);
    });
    // Sample.label (3): Label {key (1), str (2) | num (3)}, key and str as string-table indexes.
    const label = Object.entries(labels || {}).map(([k, v]) =>
      fieldMsg(3, [fieldInt(1, str(k)), typeof v === 'number' ? fieldInt(3, v) : fieldInt(2, str(String(v)))]));
    return fieldMsg(2, [packed(1, locs), packed(2, [value]), ...label]);
  });
  const mapping = fieldMsg(3, [fieldInt(1, 1), fieldInt(2, 0x400000), fieldInt(3, 0x800000), fieldInt(5, str(binary)), fieldInt(6, str(buildId))]);
  const locations = [], functions = [];
  for (const [name, id] of fnIds) {
    locations.push(fieldMsg(4, [fieldInt(1, id), fieldInt(2, 1), fieldInt(3, 0x400000 + id * 16), fieldMsg(4, [fieldInt(1, id), fieldInt(2, 10 + id)])]));
    const file = `/src/${name.split('.')[0]}/${name.split('.')[0]}.go`;
    functions.push(fieldMsg(5, [fieldInt(1, id), fieldInt(2, str(name)), fieldInt(3, str(name)), fieldInt(4, str(file)), fieldInt(5, 10)]));
  }
  const periodType = [fieldInt(1, str('cpu')), fieldInt(2, str('nanoseconds'))];
  const bytes = [
    ...fieldMsg(1, sampleType), ...samples.flat(), ...mapping, ...locations.flat(), ...functions.flat(),
  ];
  const tail = [...fieldInt(9, timeNanos), ...fieldInt(10, 10e9), ...fieldMsg(11, periodType), ...fieldInt(12, 1)];
  const strs = strings.flatMap((x) => fieldBytes(6, [...Buffer.from(x, 'utf8')]));
  return gzipSync(Buffer.from([...bytes, ...strs, ...tail]));
}

export class Env {
  async start() {
    this.work = mkdtempSync(join(tmpdir(), 'strata-ui-test-'));
    this.binary = findBinary();
    this.procs = [];
    mkdirSync(ARTIFACTS, { recursive: true });
    // The Go target.
    let go = process.env.STRATA_GOTARGET;
    if (!go) {
      go = join(this.work, 'gotarget');
      execFileSync(join(SOURCE_DIR, 'tests', 'gotarget', 'build.sh'), [go], { stdio: 'inherit' });
    }
    const portFile = join(this.work, 'gotarget.addr');
    this.spawn('gotarget', go, ['-listen', '127.0.0.1:0', '-port-file', portFile]);
    await waitFor(() => existsSync(portFile), 'gotarget to listen');
    this.target = `http://${readFileSync(portFile, 'utf8').trim()}`;
    // Strata. Its scraper pulls goroutine profiles (as their own type, `scraped`, so the pushed
    // profiles the other tests count are untouched) from the Go target, which is healthy, and from
    // a port nobody listens on, which is not.
    this.deadTarget = `127.0.0.1:${await freePort()}`;
    const s = await this.startStrata('strata', `scrape_configs:
  - job_name: ui-scrape
    scrape_interval: 1s
    static_configs:
      - targets: ['${this.target.replace('http://', '')}', '${this.deadTarget}']
    profiling_config:
      pprof_config:
        memory: {enabled: false}
        block: {enabled: false}
        goroutine: {enabled: false}
        mutex: {enabled: false}
        process_cpu: {enabled: false}
        scraped: {path: /debug/pprof/goroutine}
`);
    this.httpPort = s.httpPort;
    this.grpcPort = s.grpcPort;
    this.base = s.base;
    return this;
  }

  // Starts a `strata all` of its own (`name`: its log, config and bucket directory in the work
  // directory) on free ports, serving the UI, with `extra` (YAML: scrape_configs) added to the
  // config; resolves once it is ready to {base, httpPort, grpcPort, proc}.
  async startStrata(name, extra = '') {
    const httpPort = await freePort();
    const grpcPort = await freePort();
    const cfg = join(this.work, `${name}.yaml`);
    writeFileSync(cfg, `server:
  http_listen_address: 127.0.0.1:${httpPort}
  grpc_listen_address: 127.0.0.1:${grpcPort}
  log_level: info
  ui_directory: ${uiDir()}
bucket:
  type: FILESYSTEM
  config:
    directory: ${join(this.work, `${name}-data`)}
ingester:
  flush_interval: 1s
${extra}`);
    const proc = this.spawn(name, this.binary, ['all', '-config', cfg]);
    const base = `http://127.0.0.1:${httpPort}/`;
    try {
      await waitFor(async () => proc.exitCode == null && (await fetch(`${base}ready`)).ok, `${name} to be ready`);
    } catch (e) {
      throw new Error(`${e.message}\n--- ${name}.log ---\n${this.log(name).slice(-5000)}`);
    }
    return { base, httpPort, grpcPort, proc };
  }

  log(name) {
    try { return readFileSync(join(this.work, `${name}.log`), 'utf8'); } catch { return ''; }
  }

  spawn(name, cmd, args) {
    const log = createWriteStream(join(this.work, `${name}.log`));
    const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    p.stdout.pipe(log);
    p.stderr.pipe(log);
    this.procs.push(p);
    return p;
  }

  async push(file, name, labels) {
    const args = ['push', file, '--name', name, '--address', `127.0.0.1:${this.grpcPort}`];
    for (const [k, v] of Object.entries(labels)) args.push('--label', `${k}=${v}`);
    execFileSync(this.binary, args, { stdio: 'pipe' });
  }

  // Pushes a synthetic profile (syntheticPprof's stacks and options) as `name` with labels.
  async pushSynthetic(name, labels, stacks, opts) {
    const file = join(this.work, `s-${Math.random().toString(36).slice(2)}.pb.gz`);
    writeFileSync(file, syntheticPprof(stacks, opts));
    await this.push(file, name, labels);
  }

  async pushFrom(path, name, labels) {
    const file = join(this.work, `p-${Math.random().toString(36).slice(2)}.pb.gz`);
    writeFileSync(file, await get(`${this.target}${path}`));
    await this.push(file, name, labels);
  }

  // Real profiles: CPU for instances a and b of job gotarget, allocs and goroutines, and CPU of
  // job demo version 1 (idle HTTP) and version 2 (the /burn handler hammered: it grows).
  async seed() {
    for (const inst of ['a', 'b']) {
      for (let i = 0; i < 2; i++) await this.pushFrom('/debug/pprof/profile?seconds=1', 'process_cpu', { job: 'gotarget', instance: inst });
      await this.pushFrom('/debug/pprof/allocs', 'memory', { job: 'gotarget', instance: inst });
      await this.pushFrom('/debug/pprof/goroutine', 'goroutine', { job: 'gotarget', instance: inst });
    }
    for (let i = 0; i < 2; i++) await this.pushFrom('/debug/pprof/profile?seconds=1', 'process_cpu', { job: 'demo', version: '1' });
    let burning = true;
    const burner = async () => { while (burning) await get(`${this.target}/burn`).catch(() => {}); };
    const burners = [burner(), burner(), burner()];
    await sleep(100);
    for (let i = 0; i < 2; i++) await this.pushFrom('/debug/pprof/profile?seconds=1', 'process_cpu', { job: 'demo', version: '2' });
    burning = false;
    await Promise.all(burners);
    // Wait until the querier sees the last blocks.
    await waitFor(async () => {
      const r = await fetch(`${this.base}api/v1/labels/version/values`);
      const j = await r.json();
      return (j.label_values || []).includes('2');
    }, 'the pushed profiles to be queryable');
  }

  async browser() {
    const userDir = mkdtempSync(join(this.work, 'chromium-'));
    this.ctx = await chromium.launchPersistentContext(userDir, {
      executablePath: process.env.STRATA_CHROMIUM || '/usr/bin/chromium',
      headless: true,
      viewport: { width: 1500, height: 1000 },
      acceptDownloads: true,
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
        '--disable-component-update', '--disable-sync'],
    });
    this.pageErrors = [];
    return this.ctx;
  }

  async newPage() {
    const page = await this.ctx.newPage();
    page.on('pageerror', (e) => this.pageErrors.push(e.message));
    return page;
  }

  async stop() {
    if (this.ctx) await this.ctx.close().catch(() => {});
    for (const p of this.procs) await stopProcess(p);
    if (!process.env.STRATA_UI_KEEP) rmSync(this.work, { recursive: true, force: true });
  }
}

// SIGTERM, then SIGKILL after 10 s; resolves once the process has exited.
export async function stopProcess(p) {
  if (p.exitCode != null || p.signalCode != null) return;
  await new Promise((r) => {
    const t = setTimeout(() => { p.kill('SIGKILL'); }, 10000);
    p.on('exit', () => { clearTimeout(t); r(); });
    p.kill('SIGTERM');
  });
}

// ---- two builds of one Go program -------------------------------------------------------------

// The real-program half of issue 14's compare: tests/goversions/app built against dep-v1
// (dep.Addition wastes its time in dep.Fib) and dep-v2 (it does not), both run and scraped by a
// `strata all` of their own (Env.startStrata) with the labels version=v1 and version=v2, CPU only,
// every second for a second. start() resolves once each version has `profiles` CPU profiles and
// the programs have been stopped, so the data no longer changes: every target failed a scrape
// after the stop and every scraped profile was acknowledged. Then `window` ([from, to] in Unix ms)
// holds all of them.
export const GOVERSIONS_FIB = 'strata.dev/goversions/dep.Fib';

export class GoVersions {
  constructor(env) { this.env = env; }

  async start({ profiles = 4 } = {}) {
    const env = this.env;
    mkdirSync(join(env.work, 'goversions'), { recursive: true });
    this.binaries = { v1: join(env.work, 'goversions', 'app-v1'), v2: join(env.work, 'goversions', 'app-v2') };
    execFileSync(join(SOURCE_DIR, 'tests', 'goversions', 'build.sh'), [this.binaries.v1, this.binaries.v2], { stdio: 'inherit' });
    this.procs = {};
    const address = {};
    for (const v of ['v1', 'v2']) {
      const portFile = join(env.work, 'goversions', `${v}.addr`);
      this.procs[v] = env.spawn(`goversions-${v}`, this.binaries[v], ['-listen', '127.0.0.1:0', '-port-file', portFile, '-busy', '25']);
      await waitFor(() => existsSync(portFile), `goversions ${v} to listen`);
      address[v] = readFileSync(portFile, 'utf8').trim();
    }
    const from = Date.now() - 1000;
    const s = await env.startStrata('strata-goversions', `scrape_configs:
  - job_name: goversions
    scrape_interval: 1s
    static_configs:
      - targets: ['${address.v1}']
        labels: {version: v1}
      - targets: ['${address.v2}']
        labels: {version: v2}
    profiling_config:
      pprof_config:
        memory: {enabled: false}
        block: {enabled: false}
        goroutine: {enabled: false}
        mutex: {enabled: false}
        process_cpu: {seconds: 1s}
`);
    this.base = s.base;
    const count = async (v) => {
      const r = await fetch(`${this.base}api/v1/query?${new URLSearchParams({
        query: `${CPU}{version="${v}"}`, start: String(from), end: 'now', report: 'top', max_nodes: '1',
      })}`);
      return r.ok ? (await r.json()).profiles || 0 : 0;
    };
    await waitFor(async () => Math.min(await count('v1'), await count('v2')) >= profiles,
      `${profiles} scraped CPU profiles of each version`, 60000);
    const stopped = Date.now();
    await Promise.all(Object.values(this.procs).map(stopProcess));
    await waitFor(async () => {
      const j = await (await fetch(`${this.base}api/v1/targets`)).json();
      const ts = j.targets?.goversions?.targets || [];
      return ts.length === 2 && ts.every((t) => t.health === 'HEALTH_BAD' && t.lastScrape && isoMs(t.lastScrape) > stopped);
    }, 'both targets to fail a scrape after the programs stopped');
    await waitFor(async () => {
      const m = await (await fetch(`${this.base}metrics`)).text();
      return metric(m, 'strata_scraper_push_enqueued_series_total') === metric(m, 'strata_scraper_push_acknowledged_series_total');
    }, 'every scraped profile acknowledged');
    this.window = { from, to: Date.now() + 1000 };
    this.profiles = { v1: await count('v1'), v2: await count('v2') };
    return this;
  }
}

// "2025-12-02T15:04:05.123456789Z" (nanoseconds) to Unix ms.
function isoMs(text) { return Date.parse(text.replace(/(\.\d{3})\d+/, '$1')); }

// A sample's value (the sum over its label sets) in Prometheus's text format; 0 when absent.
function metric(text, name) {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name} `) || line.startsWith(`${name}{`)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

export async function shot(page, name, opts = {}) {
  const path = join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true, ...opts });
  return path;
}

// Waits for the n-th occurrence (1-based, counted from `since`) of a UI event.
export async function waitEvent(page, type, since = 0, timeout = 30000) {
  await page.waitForFunction(([t, s]) => window.__strata && window.__strata.events.slice(s).some((e) => e.type === t),
    [type, since], { timeout });
  return page.evaluate(([t, s]) => window.__strata.events.slice(s).filter((e) => e.type === t).pop().detail, [type, since]);
}

export async function eventCount(page) {
  return page.evaluate(() => (window.__strata ? window.__strata.events.length : 0));
}

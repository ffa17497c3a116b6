// The targets page: scrape targets per job (Parca's ScrapeService.Targets shape, served as JSON
// at /api/v1/targets) and the agents that push (Parca's AgentsService.Agents at /api/v1/agents).
// Both shapes are accepted as protojson (camelCase, LabelSet, RFC 3339, "1.5s") or snake_case
// with plain label objects, Unix milliseconds and nanoseconds.

import { api } from './api.js';
import { formatNanos, formatTime, escapeHtml, parseDurationMs } from './format.js';

const REFRESH_MS = 10000;

function pick(o, ...keys) {
  for (const k of keys) if (o && o[k] != null) return o[k];
  return undefined;
}

export function normLabels(ls) {
  if (!ls) return {};
  const arr = Array.isArray(ls) ? ls : Array.isArray(ls.labels) ? ls.labels : null;
  if (arr) return Object.fromEntries(arr.map((l) => [l.name, l.value]));
  return { ...ls };
}

export function normTime(t) {
  if (t == null || t === '') return null;
  if (typeof t === 'number') return t > 1e14 ? Math.round(t / 1e6) : t; // ns or ms
  if (typeof t === 'object' && t.seconds != null) return Number(t.seconds) * 1000 + Math.round((t.nanos || 0) / 1e6);
  if (/^\d+$/.test(t)) return Number(t);
  const ms = Date.parse(t);
  if (Number.isNaN(ms) || ms <= 0) return null;
  return ms;
}

// Nanoseconds.
export function normDuration(d) {
  if (d == null || d === '') return null;
  if (typeof d === 'number') return d;
  if (typeof d === 'object' && d.seconds != null) return Number(d.seconds) * 1e9 + (d.nanos || 0);
  const m = /^(-?\d+(?:\.\d+)?)s$/.exec(d);
  if (m) return parseFloat(m[1]) * 1e9;
  const ms = parseDurationMs(d);
  return ms == null ? null : ms * 1e6;
}

export function normHealth(h) {
  if (h === 1 || /good|up|healthy/i.test(String(h))) return 'up';
  if (h === 2 || /bad|down|unhealthy/i.test(String(h))) return 'down';
  return 'unknown';
}

export function normTargets(resp) {
  const jobs = pick(resp, 'targets') || {};
  return Object.keys(jobs).sort().map((job) => {
    const list = pick(jobs[job], 'targets') || [];
    return {
      job,
      targets: list.map((t) => ({
        url: pick(t, 'url') || '',
        health: normHealth(pick(t, 'health')),
        labels: normLabels(pick(t, 'labels')),
        discovered: normLabels(pick(t, 'discovered_labels', 'discoveredLabels')),
        lastScrape: normTime(pick(t, 'last_scrape', 'lastScrape')),
        lastDuration: normDuration(pick(t, 'last_scrape_duration', 'lastScrapeDuration')),
        lastError: pick(t, 'last_error', 'lastError') || '',
      })),
    };
  });
}

export function normAgents(resp) {
  return (pick(resp, 'agents') || []).map((a) => ({
    id: a.id || '',
    lastPush: normTime(pick(a, 'last_push', 'lastPush')),
    lastDuration: normDuration(pick(a, 'last_push_duration', 'lastPushDuration')),
    lastError: pick(a, 'last_error', 'lastError') || '',
  })).sort((a, b) => a.id.localeCompare(b.id));
}

export function ago(ms, now = Date.now()) {
  if (ms == null) return 'never';
  const s = Math.round((now - ms) / 1000);
  if (s < 0) return 'in the future';
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

const pills = (labels) => Object.entries(labels).map(([k, v]) =>
  `<span class="label-pill">${escapeHtml(k)}="${escapeHtml(v)}"</span>`).join(' ');

export class TargetsView {
  constructor(el) {
    this.el = el;
    el.innerHTML = `
      <section class="panel">
        <div class="panel-toolbar"><h2>Scrape targets</h2>
          <div class="pv-tools"><span class="muted" data-role="updated"></span>
          <button type="button" class="btn" data-role="refresh">Refresh</button></div></div>
        <div data-role="targets"><div class="muted pad">Loading targets…</div></div>
      </section>
      <section class="panel">
        <div class="panel-toolbar"><h2>Agents</h2></div>
        <div data-role="agents"><div class="muted pad">Loading agents…</div></div>
      </section>`;
    this.$ = (r) => el.querySelector(`[data-role="${r}"]`);
    this.$('refresh').addEventListener('click', () => this.load());
    this.timer = setInterval(() => this.load(), REFRESH_MS);
    this.load();
  }

  destroy() {
    clearInterval(this.timer);
    if (this.abort) this.abort.abort();
  }

  async load() {
    if (this.abort) this.abort.abort();
    const ctrl = this.abort = new AbortController();
    const [t, a] = await Promise.allSettled([api.targets(ctrl.signal), api.agents(ctrl.signal)]);
    if (ctrl.signal.aborted) return;
    this.renderTargets(t);
    this.renderAgents(a);
    this.$('updated').textContent = `updated ${formatTime(Date.now())}`;
    window.__strata?.emit?.('targets', {});
  }

  renderTargets(res) {
    const box = this.$('targets');
    if (res.status === 'rejected') {
      const e = res.reason;
      box.innerHTML = e.status === 404 || e.status === 501
        ? `<div class="empty-state" data-state="unavailable"><b>No scrape targets to show.</b> This Strata server does not serve
           <code>/api/v1/targets</code> yet (the scraper is not running or not built). Profiles pushed by agents and
           <code>strata push</code> still appear in the Profiles view.</div>`
        : `<div class="error-banner"><b>Could not load targets.</b> ${escapeHtml(e.message)}</div>`;
      return;
    }
    const jobs = normTargets(res.value);
    if (jobs.length === 0) {
      box.innerHTML = '<div class="empty-state" data-state="empty">No scrape targets are configured (<code>scrape_configs</code> is empty).</div>';
      return;
    }
    box.innerHTML = jobs.map((j) => {
      const up = j.targets.filter((t) => t.health === 'up').length;
      return `<div class="job" data-job="${escapeHtml(j.job)}">
        <h3>${escapeHtml(j.job)} <span class="muted">(${up}/${j.targets.length} up)</span></h3>
        <div class="table-scroll"><table class="targets-table"><thead><tr>
          <th>Endpoint</th><th>Health</th><th>Labels</th><th>Last scrape</th><th>Duration</th><th>Last error</th></tr></thead>
        <tbody>${j.targets.map((t) => `<tr data-url="${escapeHtml(t.url)}" data-health="${t.health}">
          <td><a href="${escapeHtml(t.url)}" target="_blank" rel="noopener">${escapeHtml(t.url)}</a></td>
          <td><span class="health ${t.health}">${t.health === 'up' ? 'Up' : t.health === 'down' ? 'Down' : 'Unknown'}</span></td>
          <td title="${escapeHtml(Object.entries(t.discovered).map(([k, v]) => `${k}="${v}"`).join('\n'))}">${pills(t.labels)}</td>
          <td title="${t.lastScrape ? escapeHtml(formatTime(t.lastScrape, true)) : ''}">${escapeHtml(ago(t.lastScrape))}</td>
          <td>${t.lastDuration != null ? escapeHtml(formatNanos(t.lastDuration)) : '–'}</td>
          <td class="${t.lastError ? 'err-text' : 'muted'}">${escapeHtml(t.lastError || 'none')}</td></tr>`).join('')}
        </tbody></table></div></div>`;
    }).join('');
  }

  renderAgents(res) {
    const box = this.$('agents');
    if (res.status === 'rejected') {
      const e = res.reason;
      box.innerHTML = e.status === 404 || e.status === 501
        ? `<div class="empty-state" data-state="unavailable">This Strata server does not serve <code>/api/v1/agents</code> yet.</div>`
        : `<div class="error-banner"><b>Could not load agents.</b> ${escapeHtml(e.message)}</div>`;
      return;
    }
    const agents = normAgents(res.value);
    if (agents.length === 0) {
      box.innerHTML = '<div class="empty-state" data-state="empty">No agent has pushed profiles in the last 5 minutes.</div>';
      return;
    }
    box.innerHTML = `<div class="table-scroll"><table class="agents-table"><thead><tr><th>Name</th><th>Last push</th><th>Duration</th><th>Last error</th></tr></thead>
      <tbody>${agents.map((a) => `<tr data-agent="${escapeHtml(a.id)}">
        <td>${escapeHtml(a.id)}</td>
        <td title="${a.lastPush ? escapeHtml(formatTime(a.lastPush, true)) : ''}">${escapeHtml(ago(a.lastPush))}</td>
        <td>${a.lastDuration != null ? escapeHtml(formatNanos(a.lastDuration)) : '–'}</td>
        <td class="${a.lastError ? 'err-text' : 'muted'}">${escapeHtml(a.lastError || 'none')}</td></tr>`).join('')}</tbody></table></div>`;
  }
}

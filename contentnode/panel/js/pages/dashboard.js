// Dashboard: traffic for 1h / 24h / 7d and the health of domains, buckets and
// certificates at a glance, from /api/panel and /api/metrics.

import { get, query, enc } from '../api.js';
import { h, mount } from '../dom.js';
import { canShared } from '../scopes.js';
import { lineChart } from '../chart.js';
import { bytes, compact, count, daysUntil, ago } from '../format.js';
import { pageHeader, card, badge, loading, errorBox, callout, stat, seg } from '../ui.js';

const METRICS = {
  requests: { label: 'Requests', fmt: compact, series: [
    { label: 'Requests', value: (p) => p.requests },
    { label: 'Cache hits', value: (p) => p.cache_hits }] },
  bandwidth: { label: 'Bandwidth', fmt: bytes, series: [{ label: 'Bytes out', value: (p) => p.bytes_out }] },
  errors: { label: 'Errors', fmt: compact, series: [
    { label: '5xx', value: (p) => p.errors_5xx },
    { label: '4xx', value: (p) => p.errors_4xx }] },
};

function stats(m) {
  const t = m.last_24h;
  const served = t.cache_hits + t.cache_misses;
  return h('div', { class: 'stats' },
    stat('Requests, 24 h', count(t.requests)),
    stat('Bandwidth, 24 h', bytes(t.bytes_out)),
    stat('Cache hit ratio', served ? `${Math.round((100 * t.cache_hits) / served)}%` : '—', `${bytes(m.cache.bytes)} of ${bytes(m.cache.max_bytes)} · ${count(m.cache.entries)} entries`),
    stat('Errors, 24 h', count(t.errors_4xx + t.errors_5xx), `${count(t.errors_5xx)} server · ${count(t.errors_4xx)} client`));
}

function domainPicker(domains, onPick) {
  const sel = h('select', { id: 'traffic-domain', class: 'select-sm' },
    h('option', { value: '' }, 'All domains'), ...domains.map((d) => h('option', { value: d.host }, d.display || d.host)));
  sel.addEventListener('change', () => onPick(sel.value));
  return h('div', {}, h('label', { for: 'traffic-domain', class: 'sr-only' }, 'Traffic of domain'), sel);
}

function trafficCard(domains) {
  let range = '24h'; let metric = 'requests'; let domain = '';
  const body = h('div', {}, loading());
  const legend = h('div', { class: 'legend' });
  async function load() {
    try {
      const data = await get(`/api/metrics${query({ range, domain })}`);
      const m = METRICS[metric];
      mount(legend, ...m.series.map((s, i) => h('span', { class: i ? 'l2' : null }, s.label)));
      mount(body, lineChart(data.points, m.series, { fmt: m.fmt, longTimes: range === '7d', label: `${m.label}, last ${range}` }));
    } catch (err) {
      if (err.status !== 401) mount(body, errorBox(err));
    }
  }
  load();
  return card('Traffic', {
    description: 'Requests on the public port.',
    actions: [domains && domains.length ? domainPicker(domains, (v) => { domain = v; load(); }) : null,
      seg('Metric', Object.entries(METRICS).map(([k, v]) => [k, v.label]), metric, (v) => { metric = v; load(); }),
      seg('Range', [['1h', '1h'], ['24h', '24h'], ['7d', '7d']], range, (v) => { range = v; load(); })],
  }, body, legend);
}

function healthItem(title, href, detail, kind) {
  return h('li', {}, h('div', {}, h('a', { href }, title), h('p', { class: 'cell-sub' }, detail)), badge(kind === 'bad' ? 'failing' : kind === 'warn' ? 'attention' : 'ok', kind));
}

function health(panel) {
  const items = [];
  const domains = panel.domains || [];
  for (const d of domains) {
    if (d.status === 'failed') {
      const failed = d.last_check && d.last_check.steps ? d.last_check.steps.find((s) => !s.ok) : null;
      items.push(healthItem(d.display || d.host, `#/domains/${enc(d.host)}`, failed ? `check failed at ${failed.name}: ${failed.detail}` : 'the last check failed', 'bad'));
    }
    if (d.certificate) {
      const days = daysUntil(d.certificate.not_after);
      if (days < 30) items.push(healthItem(d.display || d.host, `#/domains/${enc(d.host)}`, days < 0 ? 'the certificate has expired' : `the certificate expires in ${days} days`, days < 7 ? 'bad' : 'warn'));
    }
  }
  for (const b of panel.buckets || []) {
    if (b.last_check && !b.last_check.ok) items.push(healthItem(b.name, `#/buckets/${enc(b.id)}`, `check failed at ${b.last_check.failed_step}: ${b.last_check.detail}`, 'bad'));
  }
  const pending = domains.filter((d) => d.status === 'pending').length;
  const summary = [];
  if (panel.domains) summary.push(`${domains.length} domains (${domains.filter((d) => d.status === 'verified').length} verified${pending ? `, ${pending} never checked` : ''})`);
  if (panel.buckets) summary.push(`${panel.buckets.length} buckets`);
  if (panel.rules) summary.push(`${panel.rules.length} rules`);
  return card('Health', { description: summary.join(' · ') || null },
    items.length ? h('ul', { class: 'health' }, ...items)
      : h('p', { class: 'result result-ok' }, 'Everything looks healthy: no failing check, no certificate expiring within 30 days.'));
}

function gettingStarted(panel) {
  const steps = [];
  if (panel.domains && !panel.domains.length && canShared('domains:write')) steps.push(['#/domains', 'Add your first domain']);
  if (panel.buckets && !panel.buckets.length && canShared('buckets:write')) steps.push(['#/buckets', 'Connect a bucket']);
  if (panel.rules && !panel.rules.length && canShared('routes:write')) steps.push(['#/rules', 'Route a path to a bucket']);
  if (!steps.length) return null;
  return card('Get started', { description: 'A few steps bring the first content online.' },
    h('ul', { class: 'next-steps' }, ...steps.map(([href, t]) => h('li', {}, h('a', { href }, h('span', {}, t), h('span', { 'aria-hidden': 'true' }, '→'))))));
}

export async function render(ctx) {
  const panel = await get('/api/panel');
  const parts = [pageHeader('Dashboard', ctx.state.nodeName ? `Overview of ${ctx.state.nodeName}` : 'Overview of this node')];
  const upd = panel.updates && panel.updates.status;
  if (upd && upd.available) parts.push(callout('info', `Version ${upd.latest} is available (this node runs ${panel.updates.current}). `, h('a', { href: '#/settings' }, 'See updates')));
  const start = gettingStarted(panel);
  if (start) parts.push(start);
  if (panel.metrics) parts.push(stats(panel.metrics), trafficCard(panel.domains));
  if (panel.domains || panel.buckets) parts.push(health(panel));
  if (Object.keys(panel).length === 1) { // only "user": no section is readable
    parts.push(card('Welcome', {}, h('p', {}, 'Your account has no access to the node\'s data yet. '), h('a', { href: '#/account' }, 'Manage your account')));
  }
  if (upd && upd.checked_at && !upd.available) parts.push(h('p', { class: 'muted small' }, `Up to date (version ${panel.updates.current}), checked ${ago(upd.checked_at)}.`));
  mount(ctx.main, ...parts);
}

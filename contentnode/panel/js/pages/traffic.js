// Traffic of one domain: status and cache charts (/api/metrics), the top paths,
// clients, referers, statuses and cache outcomes (/api/traffic/top) over
// 1h / 24h / 7d, and the live tail (/api/traffic/tail, polled with `after`).

import { get, query, enc } from '../api.js';
import { h, mount } from '../dom.js';
import { can } from '../scopes.js';
import { lineChart } from '../chart.js';
import { bytes, compact, count, when } from '../format.js';
import { checkbox } from '../forms.js';
import { pageHeader, card, loading, errorBox, callout, table, seg } from '../ui.js';

const TOPS = [
  ['path', 'Top paths', 'Path'], ['client', 'Top clients', 'Client'], ['referer', 'Top referers', 'Referer'],
  ['status', 'Status codes', 'Status'], ['cache', 'Cache outcomes', 'Outcome'],
];
const CHARTS = [
  ['Errors', [{ label: '4xx', value: (p) => p.errors_4xx }, { label: '5xx', value: (p) => p.errors_5xx }]],
  ['Cache', [{ label: 'Hits', value: (p) => p.cache_hits }, { label: 'Misses', value: (p) => p.cache_misses }]],
];
const POLL_MS = 3000;
const TAIL_ROWS = 200;   // rows kept on screen; the node keeps the last 1,000
const STATUS_FILTERS = [['', 'All statuses'], ['2xx', '2xx'], ['3xx', '3xx'], ['4xx', '4xx'], ['5xx', '5xx']];

function valueCell(by, value) {
  if (by === 'referer' && value === '') return h('span', { class: 'muted' }, '(none)');
  return h('code', { class: 'wrap' }, value);
}

function topTable(by, heading, data) {
  const note = data.approximate ? h('p', { class: 'muted small' }, 'Estimated: more distinct values arrived than the node keeps; these are the ones seen most.') : null;
  const empty = by === 'client' ? 'No clients to show (none yet, or client_addresses is off).' : 'Nothing counted in this range.';
  return [table([
    { label: heading, cell: (r) => valueCell(by, r.value) },
    { label: 'Requests', cls: 'num', cell: (r) => count(r.requests) },
    { label: 'Bytes', cls: 'num', cell: (r) => bytes(r.bytes) },
  ], data.top, { empty, caption: heading }), note];
}

function chartsCard(host, range) {
  const body = h('div', { class: 'grid-2' }, loading());
  (async () => {
    try {
      const data = await get(`/api/metrics${query({ range, domain: host })}`);
      mount(body, ...CHARTS.map(([title, series]) => h('div', {},
        h('h3', { class: 'chart-title' }, title),
        lineChart(data.points, series, { fmt: compact, longTimes: range === '7d', label: `${title}, last ${range}` }),
        h('div', { class: 'legend' }, ...series.map((s, i) => h('span', { class: i ? 'l2' : null }, s.label))))));
    } catch (err) {
      if (err.status !== 401) mount(body, errorBox(err));
    }
  })();
  return card('Status and cache', { description: `Error answers and cache hits, last ${range}.` }, body);
}

function topCards(host, range) {
  return TOPS.map(([by, title, heading]) => {
    const body = h('div', {}, loading());
    (async () => {
      try {
        mount(body, ...topTable(by, heading, await get(`/api/traffic/top${query({ domain: host, range, by })}`)));
      } catch (err) {
        if (err.status !== 401) mount(body, errorBox(err));
      }
    })();
    return card(title, {}, body);
  });
}

function tailRow(r) {
  return [r.id, h('tr', {},
    h('td', { 'data-label': 'Time' }, when(r.time)),
    h('td', { 'data-label': 'Status' }, String(r.status)),
    h('td', { 'data-label': 'Request' }, h('code', { class: 'wrap' }, `${r.method} ${r.path}`)),
    h('td', { 'data-label': 'Cache' }, r.cache),
    h('td', { 'data-label': 'Client' }, r.client || '—'),
    h('td', { 'data-label': 'Bytes', class: 'num' }, bytes(r.bytes)))];
}

function tailCard(host, ctx) {
  let after = 0; let status = ''; let timer = null;
  const rows = h('tbody', {});
  const info = h('p', { class: 'muted small', 'aria-live': 'polite' }, 'Loading…');
  const wrap = h('div', { class: 'table-wrap' }, h('table', { class: 'table' },
    h('caption', { class: 'sr-only' }, 'Most recent requests, newest first'),
    h('thead', {}, h('tr', {}, ...['Time', 'Status', 'Request', 'Cache', 'Client', 'Bytes'].map((c) => h('th', { scope: 'col', class: c === 'Bytes' ? 'num' : null }, c)))),
    rows));
  const filter = h('select', { id: 'tail-status', class: 'select-sm' }, ...STATUS_FILTERS.map(([v, t]) => h('option', { value: v }, t)));
  const followBox = checkbox({ label: 'Follow', name: 'follow', checked: true, id: 'tail-follow' });
  const follow = followBox.querySelector('input');

  let round = 0;   // a change of filter starts a new round: an answer of the old one is dropped
  async function poll() {
    timer = null;
    if (ctx.stale()) return;
    const mine = round;
    try {
      const data = await get(`/api/traffic/tail${query({ domain: host, status, after: after || null })}`);
      if (mine !== round) return;
      for (const [, tr] of data.requests.map(tailRow)) rows.prepend(tr);
      while (rows.children.length > TAIL_ROWS) rows.lastElementChild.remove();
      after = data.next_after;
      info.textContent = rows.children.length ? `${rows.children.length} most recent requests shown, newest first.` : 'No request yet.';
    } catch (err) {
      if (err.status !== 401) info.textContent = `The tail could not be read: ${err.message}`;
    }
    if (follow.checked && !ctx.stale()) timer = setTimeout(poll, POLL_MS);
  }
  filter.addEventListener('change', () => {
    status = filter.value; after = 0; round += 1; rows.replaceChildren();
    if (timer) clearTimeout(timer);
    poll();
  });
  follow.addEventListener('change', () => {
    round += 1;
    if (timer) clearTimeout(timer);
    if (follow.checked) poll();
  });
  poll();
  return card('Live tail', {
    description: 'The most recent requests (the path without its query string), refreshed every 3 seconds while Follow is on.',
    actions: [h('div', {}, h('label', { for: 'tail-status', class: 'sr-only' }, 'Status filter'), filter),
      followBox],
  }, info, wrap);
}

function domainPicker(domains, host) {
  const sel = h('select', { id: 'traffic-domain', class: 'select-sm' }, ...domains.map((d) => h('option', { value: d.host, selected: d.host === host }, d.display || d.host)));
  sel.addEventListener('change', () => { location.hash = `#/domains/${enc(sel.value)}/traffic`; });
  return h('div', {}, h('label', { for: 'traffic-domain', class: 'sr-only' }, 'Domain'), sel);
}

export async function render(ctx) {
  const domains = can('domains:read') ? (await get('/api/domains')).domains : [];
  const host = ctx.params.host || (domains[0] && domains[0].host);
  if (!host) {
    mount(ctx.main, pageHeader('Traffic', 'Top paths, clients and the live tail per domain'), callout('info', 'No domain yet: add one, and its traffic shows here.'));
    return;
  }
  let range = '1h';
  const ranged = h('div', { class: 'stack' });
  function draw() {
    mount(ranged, chartsCard(host, range), h('div', { class: 'grid-2' }, ...topCards(host, range)));
  }
  draw();
  mount(ctx.main,
    h('div', {}, h('a', { href: `#/domains/${enc(host)}`, class: 'crumb' }, `← ${host}`),
      pageHeader('Traffic', host, domains.length > 1 ? domainPicker(domains, host) : null,
        seg('Range', [['1h', '1h'], ['24h', '24h'], ['7d', '7d']], range, (v) => { range = v; draw(); }))),
    ranged,
    tailCard(host, ctx));
}

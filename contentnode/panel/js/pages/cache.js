// Cache: the books every process shares (GET /api/cache: stored, entries,
// hit ratio per process, last purge); purge by URLs, by prefix or everything
// (after a confirmation), and warm URLs ahead of visitors (routes:write).

import { get, post } from '../api.js';
import { h, mount } from '../dom.js';
import { can } from '../scopes.js';
import { field, form, button, onSubmit, actions } from '../forms.js';
import { confirm } from '../dialog.js';
import { toast, toastError } from '../toast.js';
import { ago, bytes, count, ms } from '../format.js';
import { pageHeader, card, table, badge, stat } from '../ui.js';

const lines = (text) => text.split(/\s+/).map((s) => s.trim()).filter(Boolean);

function purgeCard(domains, onPurged) {
  const urls = form({},
    field({ label: 'URLs to purge', name: 'urls', type: 'textarea', rows: 4, required: true, placeholder: 'https://cdn.example.com/static/app.css', hint: 'One per line, at most 1000. Image variants go with their original.' }),
    actions(button('Purge', { type: 'submit' })));
  onSubmit(urls, async (v) => {
    const r = await post('/api/purge', { urls: lines(v.urls) });
    toast(`${count(r.purged)} cache entries purged`);
    onPurged();
  });
  const prefix = form({},
    h('div', { class: 'form-grid' },
      domains ? field({ label: 'Domain', name: 'domain', options: domains.map((d) => [d.host, d.display || d.host]) })
        : field({ label: 'Domain', name: 'domain', required: true }),
      field({ label: 'Path prefix', name: 'prefix', value: '/', required: true, spellcheck: 'false' })),
    actions(button('Purge prefix', { type: 'submit' })));
  onSubmit(prefix, async (v) => {
    const r = await post('/api/purge', { domain: v.domain, prefix: v.prefix });
    toast(`${count(r.purged)} cache entries purged`);
    onPurged();
  });
  const all = button('Purge everything', { kind: 'danger-soft', onclick: async () => {
    if (!await confirm({ title: 'Purge the whole cache?', message: 'Every cached object of every domain is dropped; the next requests go to the origins.', confirmLabel: 'Purge everything' })) return;
    try {
      const r = await post('/api/purge', { all: true });
      toast(`${count(r.purged)} cache entries purged`);
      onPurged();
    } catch (err) { toastError(err); }
  } });
  return card('Purge', { description: 'Drop cached copies so the next request fetches from the origin.', actions: all },
    h('div', { class: 'grid-2' }, urls, prefix));
}

function warmCard() {
  const out = h('div', { 'aria-live': 'polite' });
  const f = form({},
    field({ label: 'URLs to warm', name: 'urls', type: 'textarea', rows: 4, required: true, placeholder: 'https://cdn.example.com/static/hero.jpg', hint: 'One per line, at most 100; fetched four at a time.' }),
    actions(button('Warm', { type: 'submit' })));
  onSubmit(f, async (v) => {
    const r = await post('/api/warm', { urls: lines(v.urls) });
    const good = r.results.filter((x) => x.ok).length;
    toast(`${good} of ${r.results.length} URLs warmed`, good === r.results.length ? 'ok' : 'error');
    mount(out, table([
      { label: 'URL', cell: (x) => h('code', {}, x.url) },
      { label: 'Result', cell: (x) => (x.ok ? h('div', {}, badge(`${x.status} ${x.cache}`, 'ok'), x.cache_status ? h('p', { class: 'cell-sub' }, h('code', { class: 'wrap' }, x.cache_status)) : null)
        : h('div', {}, badge(String(x.status || x.error.code), 'bad'), x.error ? h('p', { class: 'cell-sub' }, x.error.message) : null)) },
      { label: 'Size', cls: 'num', cell: (x) => bytes(x.bytes) },
      { label: 'Time', cls: 'num', cell: (x) => ms(x.ms) },
    ], r.results, { caption: 'Warm results' }));
  });
  return card('Warm', { description: 'Fetch objects into the cache before visitors ask for them.' }, f, out);
}

const ratio = (hits, misses) => (hits + misses ? `${Math.round((100 * hits) / (hits + misses))}%` : '—');

function booksStats(b) {
  const hits = b.processes.reduce((n, p) => n + p.hits, 0);
  const misses = b.processes.reduce((n, p) => n + p.misses, 0);
  const used = b.max_bytes ? Math.round((100 * b.bytes) / b.max_bytes) : 0;
  return h('div', { class: 'stats', 'data-testid': 'cache-books' },
    stat('Stored', bytes(b.bytes), `${used}% of ${bytes(b.max_bytes)}`),
    stat('Entries', count(b.entries), b.filling ? `${count(b.filling)} filling now` : 'none filling now'),
    stat('Hit ratio', ratio(hits, misses), `${count(hits)} ${hits === 1 ? 'hit' : 'hits'} · ${count(misses)} ${misses === 1 ? 'miss' : 'misses'}`),
    stat('Last purge', b.last_purge ? ago(b.last_purge.at) : 'never', b.last_purge ? `${count(b.last_purge.purged)} removed` : null));
}

function processesCard(b) {
  const name = (p) => (p.role === 'daemon' ? 'Daemon' : `Worker ${p.slot}`);
  return card('Processes', { description: 'Hits and misses of each process since it started. Workers serve the public port; the daemon warms, probes and reads image sources (and serves the public port when there are no workers).' },
    table([
      { label: 'Process', cell: (p) => name(p) },
      { label: 'PID', cls: 'num', cell: (p) => String(p.pid) },
      { label: 'State', cell: (p) => (p.alive ? badge('running', 'ok') : badge('gone', 'neutral')) },
      { label: 'Hits', cls: 'num', cell: (p) => count(p.hits) },
      { label: 'Misses', cls: 'num', cell: (p) => count(p.misses) },
      { label: 'Hit ratio', cls: 'num', cell: (p) => ratio(p.hits, p.misses) },
    ], b.processes, { caption: 'Cache hits per process', empty: 'No process has served yet.' }));
}

export async function render(ctx) {
  const write = can('routes:write');
  const [domains, books] = await Promise.all([
    write && can('domains:read') ? get('/api/domains').then((x) => x.domains) : null,
    get('/api/cache'),
  ]);
  const refresh = button('Refresh', { kind: 'secondary', onclick: () => ctx.rerender() });
  mount(ctx.main, pageHeader('Cache', 'The disk cache in front of the origins, one for every process that serves the public port.', refresh),
    booksStats(books), processesCard(books),
    write ? purgeCard(domains, () => ctx.rerender()) : null, write ? warmCard() : null);
}

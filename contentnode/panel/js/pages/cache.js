// Cache: purge by URLs, by prefix or everything (after a confirmation), and
// warm URLs ahead of visitors.

import { get, post } from '../api.js';
import { h, mount } from '../dom.js';
import { can } from '../scopes.js';
import { field, form, button, onSubmit, actions } from '../forms.js';
import { confirm } from '../dialog.js';
import { toast, toastError } from '../toast.js';
import { bytes, count, ms } from '../format.js';
import { pageHeader, card, table, badge, facts } from '../ui.js';

const lines = (text) => text.split(/\s+/).map((s) => s.trim()).filter(Boolean);

function purgeCard(domains) {
  const urls = form({},
    field({ label: 'URLs to purge', name: 'urls', type: 'textarea', rows: 4, required: true, placeholder: 'https://cdn.example.com/static/app.css', hint: 'One per line, at most 1000. Image variants go with their original.' }),
    actions(button('Purge', { type: 'submit' })));
  onSubmit(urls, async (v) => {
    const r = await post('/api/purge', { urls: lines(v.urls) });
    toast(`${count(r.purged)} cache entries purged`);
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
  });
  const all = button('Purge everything', { kind: 'danger-soft', onclick: async () => {
    if (!await confirm({ title: 'Purge the whole cache?', message: 'Every cached object of every domain is dropped; the next requests go to the origins.', confirmLabel: 'Purge everything' })) return;
    try {
      const r = await post('/api/purge', { all: true });
      toast(`${count(r.purged)} cache entries purged`);
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
      { label: 'Result', cell: (x) => (x.ok ? badge(`${x.status} ${x.cache}`, 'ok') : h('div', {}, badge(String(x.status || x.error.code), 'bad'), x.error ? h('p', { class: 'cell-sub' }, x.error.message) : null)) },
      { label: 'Size', cls: 'num', cell: (x) => bytes(x.bytes) },
      { label: 'Time', cls: 'num', cell: (x) => ms(x.ms) },
    ], r.results, { caption: 'Warm results' }));
  });
  return card('Warm', { description: 'Fetch objects into the cache before visitors ask for them.' }, f, out);
}

export async function render(ctx) {
  const [domains, panel] = await Promise.all([
    can('domains:read') ? get('/api/domains').then((x) => x.domains) : null,
    can('metrics:read') ? get('/api/panel') : {},
  ]);
  const c = panel.metrics && panel.metrics.cache;
  mount(ctx.main, pageHeader('Cache', 'The disk cache in front of the origins.'),
    c ? card('Usage', {}, facts([['Stored', `${bytes(c.bytes)} of ${bytes(c.max_bytes)}`], ['Entries', count(c.entries)], ['Filling now', count(c.filling)]])) : null,
    purgeCard(domains), warmCard());
}

// Rules: which bucket serves a path of a domain. Listed per domain; created,
// edited and deleted in dialogs.

import { get, post, put, del, enc } from '../api.js';
import { h, mount } from '../dom.js';
import { can, canShared } from '../scopes.js';
import { field, button, checkbox } from '../forms.js';
import { confirm, dialogForm } from '../dialog.js';
import { toast, toastError } from '../toast.js';
import { duration } from '../format.js';
import { pageHeader, card, table, badge } from '../ui.js';
import { cacheControls, cacheBody } from '../rule-cache.js';
import { browserControls, browserBody } from '../rule-cors-referers.js';
import { edgeControls, edgeBody } from '../rule-edge.js';

const FLAGS = ['signed', 'images', 'compress', 'enabled'];

function ruleForm(r, domains, buckets, presetDomain, countryDb) {
  const domainField = domains
    ? field({ label: 'Domain', name: 'domain', value: r ? r.domain : presetDomain, options: domains.map((d) => [d.host, d.display || d.host]), required: true })
    : field({ label: 'Domain', name: 'domain', value: r ? r.domain : presetDomain, required: true });
  const bucketField = buckets
    ? field({ label: 'Bucket', name: 'bucket', value: r && r.bucket, options: buckets.map((b) => [b.id, b.name]), required: true })
    : field({ label: 'Bucket id', name: 'bucket', value: r && r.bucket, required: true });
  const kindOf = (id) => (buckets ? (buckets.find((b) => b.id === id) || {}).type || null : null);
  return h('div', { class: 'stack' },
    h('div', { class: 'form-grid' }, domainField,
      field({ label: 'Path', name: 'path', value: r ? r.path : '/', required: true, spellcheck: 'false', hint: 'A directory: /static matches /static and everything below it.' }),
      bucketField,
      field({ label: 'Key prefix', name: 'prefix', value: r ? r.prefix : '', spellcheck: 'false', placeholder: 'site/', hint: '/static/a.png becomes key prefix + a.png.' }),
      field({ label: 'Cache TTL (seconds)', name: 'cache_ttl', type: 'number', min: 0, max: 31536000, value: r ? r.cache_ttl : 3600, hint: 'Override mode: how long every 200 is kept (0 turns caching off). Origin mode: the longest heuristic freshness.' })),
    cacheControls(r, kindOf, bucketField.querySelector('select')),
    browserControls(r),
    edgeControls(r, countryDb),
    h('div', { class: 'checks' },
      checkbox({ label: 'Enabled', name: 'enabled', checked: r ? r.enabled : true, hint: 'A disabled rule still claims its path (404).' }),
      checkbox({ label: 'Signed links only', name: 'signed', checked: r && r.signed, hint: 'Requests need a valid signed link.' }),
      checkbox({ label: 'Images on the fly', name: 'images', checked: r && r.images, hint: 'Resize and convert with ?w=&h=&format=.' }),
      checkbox({ label: 'Compress text', name: 'compress', checked: r ? r.compress !== false : true, hint: 'HTML, CSS, JS, JSON, SVG, XML and wasm go out gzip, zstd or br to clients that accept it.' })));
}

function openRule(ctx, r, domains, buckets, presetDomain, countryDb) {
  dialogForm({ title: r ? `Edit rule ${r.path}` : 'Add a rule', submitLabel: r ? 'Save rule' : 'Add rule', wide: true },
    ruleForm(r, domains, buckets, presetDomain, countryDb), async (v, close) => {
      const body = {};
      for (const k of ['domain', 'path', 'bucket', 'prefix', 'cache_ttl', ...FLAGS]) if (!r || v[k] !== r[k]) body[k] = v[k];
      if (body.cache_ttl === null) delete body.cache_ttl;
      Object.assign(body, cacheBody(v, r), browserBody(v, r), edgeBody(v, r));
      if (r) { if (Object.keys(body).length) await put(`/api/rules/${enc(r.id)}`, body, { revision: r.revision }); } else await post('/api/rules', body);
      close();
      toast(r ? 'Rule saved' : 'Rule added');
      ctx.rerender();
    });
}

export async function render(ctx) {
  const filter = ctx.query.domain || '';
  const [{ rules, country_database: countryDb }, domainList, bucketList] = await Promise.all([
    get(`/api/rules${filter ? `?domain=${enc(filter)}` : ''}`),
    can('domains:read') ? get('/api/domains').then((x) => x.domains) : null,
    can('buckets:read') ? get('/api/buckets').then((x) => x.buckets) : null,
  ]);
  const write = canShared('routes:write');
  const bucketName = (id) => (bucketList ? (bucketList.find((b) => b.id === id) || { name: id }).name : id);
  const add = write ? button('Add rule', { onclick: () => openRule(ctx, null, domainList, bucketList, filter, countryDb) }) : null;

  const picker = domainList ? field({ label: 'Domain', name: 'filter', value: filter, options: [['', 'All domains'], ...domainList.map((d) => [d.host, d.display || d.host])] }) : null;
  if (picker) picker.querySelector('select').addEventListener('change', (e) => ctx.go(e.target.value ? `/rules?domain=${enc(e.target.value)}` : '/rules'));

  const byDomain = new Map();
  for (const r of rules) { if (!byDomain.has(r.domain)) byDomain.set(r.domain, []); byDomain.get(r.domain).push(r); }
  const columns = [
    { label: 'Path', cell: (r) => h('span', { class: 'rule-path' }, h('span', { class: 'muted' }, r.domain), h('code', {}, r.path)) },
    { label: 'Bucket', cell: (r) => h('div', {}, h('span', { class: 'cell-main' }, bucketName(r.bucket)), r.prefix ? h('p', { class: 'cell-sub' }, `prefix ${r.prefix}`) : null) },
    { label: 'Cache', cell: (r) => (r.cache_mode === 'origin' ? h('div', {}, h('span', { class: 'cell-main' }, 'origin\'s headers'), h('p', { class: 'cell-sub' }, `heuristic at most ${duration(r.cache_ttl)}`))
      : (r.cache_ttl ? duration(r.cache_ttl) : 'off')) },
    { label: 'Options', cell: (r) => h('div', { class: 'row' }, r.enabled ? badge('enabled', 'ok') : badge('disabled', 'neutral'), r.signed ? badge('signed', 'info') : null, r.images ? badge('images', 'info') : null, r.compress === false ? badge('uncompressed', 'neutral') : null, r.methods === 'all' ? badge('all methods', 'info') : null) },
    write ? { label: 'Actions', cls: 'actions', cell: (r) => h('div', { class: 'row' },
      button('Edit', { kind: 'secondary', class: 'btn btn-secondary btn-sm', 'aria-label': `Edit rule ${r.domain}${r.path}`, onclick: () => openRule(ctx, r, domainList, bucketList, undefined, countryDb) }),
      button('Delete', { class: 'btn btn-danger-soft btn-sm', 'aria-label': `Delete rule ${r.domain}${r.path}`, onclick: async () => {
        if (!await confirm({ title: `Delete the rule ${r.domain}${r.path}?`, message: 'Requests for this path stop being served (404). Cached copies expire on their own.' })) return;
        try { await del(`/api/rules/${enc(r.id)}`, { revision: r.revision }); toast('Rule deleted'); ctx.rerender(); } catch (err) { toastError(err); }
      } })) } : null,
  ].filter(Boolean);

  const sections = [...byDomain].map(([domain, list]) => card(domain, {
    actions: can('domains:read') ? h('a', { href: `#/domains/${enc(domain)}`, class: 'btn btn-ghost btn-sm' }, 'Domain settings') : null,
  }, table(columns, list, { caption: `Rules of ${domain}` })));
  mount(ctx.main,
    pageHeader('Rules', 'Each rule routes a path of a domain to a bucket; the longest matching path wins.', add),
    picker ? h('div', { class: 'row' }, picker) : null,
    ...(sections.length ? sections : [card(null, {}, h('p', { class: 'empty' }, filter ? `No rules for ${filter} yet.` : 'No rules yet. A rule connects a domain path to a bucket.'))]));
}

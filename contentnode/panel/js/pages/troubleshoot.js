// Troubleshoot a URL: probe (what the node would do) and diagnose (every
// step of a visit, with its result).

import { post } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, onSubmit } from '../forms.js';
import { bytes, duration } from '../format.js';
import { pageHeader, card, facts, steps, resultBanner, badge } from '../ui.js';

/** What the cache would do with the origin's answer to the probe's HEAD (null: no answer, or an S3 bucket). */
function decisionFact(d) {
  if (!d) return ['Decision', '—'];
  const freshness = `${duration(d.lifetime)} from ${d.freshness}`;
  return ['Decision', d.store ? h('span', {}, badge('stored', 'ok'), ` · fresh for ${freshness}`)
    : h('span', {}, badge('not stored', 'warn'), ' · ', d.why)];
}

/** The shared cache's state and decision for a rule in cache_mode "origin": Cache-Status now, stored or not, freshness left, validators, Vary. */
function sharedCacheFacts(c) {
  const now = [['Cache-Status', c.cache_status ? h('code', {}, c.cache_status) : '—'], decisionFact(c.decision)];
  if (!c.cached) return [['Cache', 'shared cache (origin mode): nothing stored, the next request asks the origin'], ...now];
  const left = c.expires_in > 0 ? `fresh for ${duration(c.expires_in)} more` : `stale for ${duration(-c.expires_in)} (revalidated on the next request)`;
  const validators = [c.etag ? h('span', {}, 'ETag ', h('code', {}, c.etag)) : null,
    c.last_modified ? h('span', {}, 'Last-Modified ', h('code', {}, c.last_modified)) : null].filter(Boolean);
  return [
    ['Cache', `shared cache (origin mode): stored ${duration(c.age)} ago, status ${c.status}, ${bytes(c.size)}`],
    ['Freshness', h('span', {}, `${duration(c.lifetime)} from ${c.freshness} · `, badge(left, c.expires_in > 0 ? 'ok' : 'warn'))],
    ['Validators', validators.length ? h('span', { class: 'row' }, ...validators) : 'none: a stale answer is fetched again in full'],
    ['Vary', c.vary.length ? c.vary.join(', ') : 'none (one stored answer for the URL)'],
    ...now,
  ];
}

function cacheFacts(c) {
  if (!c) return [['Cache', '—']];
  if (c.mode === 'origin') return sharedCacheFacts(c);
  return [['Cache', c.cached ? `cached ${c.age} s ago, ${bytes(c.size)}, expires in ${c.expires_in} s` : 'not cached']];
}

function probeView(r) {
  const o = r.origin; const c = r.cache;
  const shared = c && c.mode === 'origin';
  return h('div', { class: 'stack' }, facts([
    ['Domain', r.domain ? h('span', {}, r.domain.host, ' ', badge(r.domain.status, r.domain.status === 'verified' ? 'ok' : 'warn')) : 'not a domain of this node'],
    ['Redirect', r.redirect ? `${r.redirect.code} → ${r.redirect.to}` : 'none'],
    ['Rule', r.rule ? `${r.rule.path} · ${r.rule.enabled ? 'enabled' : 'disabled'}${r.rule.signed ? ' · signed' : ''}${r.rule.images ? ' · images' : ''} · cache ${duration(r.rule.cache_ttl)}` : 'no rule matches'],
    ['Bucket', r.bucket ? r.bucket.name : '—'],
    ['Object key', r.key !== null && r.key !== undefined ? h('code', {}, r.key) : '—'],
    ['Signature', r.signature_required ? 'required' : 'not required'],
    ['Origin', o ? (o.ok ? `${o.status} · ${bytes(o.size)} · ${o.content_type || '?'} · ${o.ms} ms` : h('span', { class: 'result-bad' }, `${o.status || ''} ${o.code || ''}: ${o.error || ''}`)) : '—'],
    ...cacheFacts(c),
  ]), shared ? h('p', { class: 'hint' }, 'Why an answer was not stored is in the Cache-Status header of the answer that fetched it ',
    '(for example ', h('code', {}, 'contentnode; fwd=uri-miss; fwd-status=200; detail="no-store"'), '); a stored one is answered ',
    h('code', {}, 'contentnode; hit; ttl=…'), ' with its Age.') : null);
}

function urlForm(label, submitLabel, run) {
  const out = h('div', { 'aria-live': 'polite' });
  const f = form({ class: 'inline-form' },
    field({ label, name: 'url', type: 'url', required: true, placeholder: 'https://cdn.example.com/static/app.css' }),
    button(submitLabel, { type: 'submit' }));
  onSubmit(f, async (v) => mount(out, await run(v.url.trim())));
  return [f, out];
}

export function render(ctx) {
  const probe = urlForm('URL to probe', 'Probe', async (url) => probeView(await post('/api/probe', { url })));
  const diagnose = urlForm('URL to diagnose', 'Diagnose', async (url) => {
    const r = await post('/api/diagnose', { url });
    return h('div', { class: 'stack' }, resultBanner(r.ok, r.ok ? 'Every step passed.' : 'A step failed.'), steps(r.steps, 'Diagnose steps'));
  });
  mount(ctx.main, pageHeader('Troubleshoot', 'Follow a URL through the node the way a visitor\'s request goes.'),
    card('Diagnose', { description: 'DNS, redirect, TLS, domain, rule, signature, image, origin and cache, in a visitor\'s order.' }, ...diagnose),
    card('Probe', { description: 'Which domain, rule, bucket and key a URL maps to, and what the origin and cache hold.' }, ...probe));
}

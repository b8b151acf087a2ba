// Troubleshoot a URL: probe (what the node would do) and diagnose (every
// step of a visit, with its result).

import { post } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, onSubmit } from '../forms.js';
import { bytes, duration } from '../format.js';
import { pageHeader, card, facts, steps, resultBanner, badge } from '../ui.js';

function probeView(r) {
  const o = r.origin; const c = r.cache;
  return h('div', { class: 'stack' }, facts([
    ['Domain', r.domain ? h('span', {}, r.domain.host, ' ', badge(r.domain.status, r.domain.status === 'verified' ? 'ok' : 'warn')) : 'not a domain of this node'],
    ['Redirect', r.redirect ? `${r.redirect.code} → ${r.redirect.to}` : 'none'],
    ['Rule', r.rule ? `${r.rule.path} · ${r.rule.enabled ? 'enabled' : 'disabled'}${r.rule.signed ? ' · signed' : ''}${r.rule.images ? ' · images' : ''} · cache ${duration(r.rule.cache_ttl)}` : 'no rule matches'],
    ['Bucket', r.bucket ? r.bucket.name : '—'],
    ['Object key', r.key !== null && r.key !== undefined ? h('code', {}, r.key) : '—'],
    ['Signature', r.signature_required ? 'required' : 'not required'],
    ['Origin', o ? (o.ok ? `${o.status} · ${bytes(o.size)} · ${o.content_type || '?'} · ${o.ms} ms` : h('span', { class: 'result-bad' }, `${o.status || ''} ${o.code || ''}: ${o.error || ''}`)) : '—'],
    ['Cache', c ? (c.cached ? `cached ${c.age} s ago, ${bytes(c.size)}, expires in ${c.expires_in} s` : 'not cached') : '—'],
  ]));
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

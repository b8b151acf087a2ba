// A domain's edge members on its page: the address lists checked before every
// rule's own, and the error pages sent with the node's error answers
// (PUT /api/domains/{host}).

import { put, enc } from './api.js';
import { h } from './dom.js';
import { field, form, button, onSubmit, actions } from './forms.js';
import { toast } from './toast.js';
import { card, facts } from './ui.js';

const entries = (text) => [...new Set((text || '').split(/[\s,]+/).map((s) => s.trim()).filter(Boolean))];

/** "404 errors/404.html" lines as {"404": "errors/404.html"}; a line without a key keeps an empty one (the API names it). */
function pages(text) {
  const out = {};
  for (const line of (text || '').split('\n')) {
    const [status, ...key] = line.trim().split(/\s+/);
    if (status) out[status] = key.join(' ');
  }
  return Object.keys(out).length ? out : null;
}

const pageLines = (p) => (p ? Object.entries(p).map(([status, key]) => `${status} ${key}`).join('\n') : '');

/** The card; current() is the domain as the page last read it (other cards save it too), saved(next) is told the domain after a save. */
export function domainEdgeCard(current, write, saved) {
  const box = h('div', { class: 'stack' });
  const draw = () => {
    const d = current();
    const a = d.access;
    const summary = facts([
      ['Allowed addresses', a && a.allow.length ? a.allow.join(', ') : 'any'],
      ['Denied addresses', a && a.deny.length ? a.deny.join(', ') : 'none'],
      ['Error pages', d.error_pages ? Object.entries(d.error_pages).map(([s, k]) => `${s} → ${k}`).join(', ') : 'none: the node\'s plain answers'],
    ]);
    if (!write) { box.replaceChildren(summary); return; }
    const f = form({},
      h('div', { class: 'form-grid' },
        field({ label: 'Allowed addresses (CIDR)', name: 'access.allow', type: 'textarea', rows: 3, value: a ? a.allow.join('\n') : '',
          placeholder: '203.0.113.0/24', hint: 'One per line. Empty: every address not denied.' }),
        field({ label: 'Denied addresses (CIDR)', name: 'access.deny', type: 'textarea', rows: 3, value: a ? a.deny.join('\n') : '',
          placeholder: '192.0.2.0/24', hint: 'Refused (403) whatever the allowed list or a rule says.' }),
        field({ label: 'Error pages', name: 'error_pages', type: 'textarea', rows: 3, cls: 'wide', value: pageLines(d.error_pages),
          autocapitalize: 'none', placeholder: '404 errors/404.html\n5xx errors/5xx.html',
          hint: 'A status (404) or class (4xx, 5xx), then a key of the matched rule\'s bucket, one per line.' })),
      actions(button('Save access and error pages', { type: 'submit' })));
    onSubmit(f, async (v) => {
      const allow = entries(v['access.allow']);
      const deny = entries(v['access.deny']);
      const wanted = { access: allow.length || deny.length ? { allow, deny } : null, error_pages: pages(v.error_pages) };
      const body = {};
      const now = current();
      for (const [k, value] of Object.entries(wanted)) if (JSON.stringify(value) !== JSON.stringify(now[k])) body[k] = value;
      if (Object.keys(body).length) saved(await put(`/api/domains/${enc(now.host)}`, body, { revision: now.revision }));
      toast('Access and error pages saved');
      draw();
    });
    box.replaceChildren(summary, f);
  };
  draw();
  return card('Access and error pages', { description: 'Who may fetch this domain\'s content (checked before each rule\'s own list), and the pages sent with error answers.' }, box);
}

// Signed links: create one (with a copy button), and rotate the signing key
// after a confirmation.

import { get, post } from '../api.js';
import { h, mount } from '../dom.js';
import { can, canShared } from '../scopes.js';
import { field, form, button, onSubmit, actions } from '../forms.js';
import { dialogForm } from '../dialog.js';
import { toast } from '../toast.js';
import { when, ago } from '../format.js';
import { pageHeader, card, table, badge, copyButton, callout } from '../ui.js';

const EXPIRY = [[900, '15 minutes'], [3600, '1 hour'], [86400, '1 day'], [604800, '7 days'], [2678400, '31 days']];
const GRACE = [[0, 'Retire it now (old links stop working)'], [3600, '1 hour'], [86400, '24 hours'], [604800, '7 days']];

function createCard() {
  const out = h('div', { 'aria-live': 'polite' });
  const f = form({},
    h('div', { class: 'form-grid' },
      field({ label: 'URL', name: 'url', type: 'url', required: true, cls: 'wide', placeholder: 'https://cdn.example.com/private/report.pdf', hint: 'A URL on one of this node\'s domains, covered by a rule.' }),
      field({ label: 'Expires in', name: 'expires_in', value: 3600, options: EXPIRY }),
      field({ label: 'Only for this IP address', name: 'ip', placeholder: 'optional', hint: 'The link then works only for that client.' })),
    actions(button('Create link', { type: 'submit' })));
  onSubmit(f, async (v) => {
    const body = { url: v.url.trim(), expires_in: Number(v.expires_in) };
    if (v.ip.trim()) body.ip = v.ip.trim();
    const r = await post('/api/links', body);
    mount(out, h('div', { class: 'stack' },
      h('div', { class: 'copy-row' }, h('code', { 'data-testid': 'signed-link' }, r.url), copyButton(r.url)),
      h('p', { class: 'muted small' }, `Valid until ${when(r.expires_at)} · key ${r.kid}`),
      r.rule_signed ? null : callout('warn', 'The rule covering this path does not require signatures: the bare URL works too.')));
    toast('Signed link created');
  });
  return card('Create a signed link', { description: 'A time-limited link to content behind a signed rule.' }, f, out);
}

async function keysCard(rerender) {
  const { keys } = await get('/api/links/keys');
  let grace = 86400;
  try { grace = (await get('/api/settings')).link_grace_seconds; } catch { /* keep the default */ }
  const rotate = button('Rotate key', { kind: 'secondary', onclick: () => {
    dialogForm({ title: 'Rotate the signing key?', submitLabel: 'Rotate key', submitKind: 'danger' }, [
      h('p', {}, 'A new key signs every new link. Links signed with the current key keep working only for the grace period you choose.'),
      field({ label: 'Keep the previous key valid for', name: 'grace_seconds', value: GRACE.some(([s]) => s === grace) ? grace : 86400, options: GRACE }),
    ], async (v, close) => {
      const r = await post('/api/links/rotate', { grace_seconds: Number(v.grace_seconds) });
      close();
      toast(`New signing key ${r.kid}`);
      rerender();
    });
  } });
  return card('Signing keys', { description: 'Only ids and times are shown; keys never leave the node.', actions: rotate },
    table([
      { label: 'Key id', cell: (k) => h('code', {}, k.kid) },
      { label: 'State', cell: (k) => (k.current ? badge('current', 'ok') : badge('retiring', 'warn')) },
      { label: 'Created', cell: (k) => when(k.created_at) },
      { label: 'Retires', cell: (k) => (k.retires_at ? `${when(k.retires_at)} (${ago(k.retires_at)})` : '—') },
    ], keys, { empty: 'No key yet: the first signed link creates one.', caption: 'Signing keys' }));
}

export async function render(ctx) {
  mount(ctx.main, pageHeader('Signed links', 'Time-limited links for rules that require a signature.'),
    can('routes:write') ? createCard() : null,
    canShared('settings:write') ? await keysCard(ctx.rerender) : null);
}

// Domains: the list, and adding one (then its page opens for the check).

import { get, post, enc } from '../api.js';
import { h, mount } from '../dom.js';
import { canShared } from '../scopes.js';
import { field, button } from '../forms.js';
import { dialogForm } from '../dialog.js';
import { toast } from '../toast.js';
import { ago, daysUntil } from '../format.js';
import { pageHeader, card, table, statusBadge, badge, rowFilter, callout } from '../ui.js';

export function certCell(cert) {
  if (!cert) return h('span', { class: 'muted' }, 'none');
  const days = daysUntil(cert.not_after);
  if (days < 0) return badge('expired', 'bad');
  return badge(`${days} days left`, days < 14 ? 'bad' : days < 30 ? 'warn' : 'ok');
}

function addDialog(ctx) {
  dialogForm({ title: 'Add a domain', submitLabel: 'Add domain' },
    field({ label: 'Host name', name: 'host', required: true, autocapitalize: 'none', spellcheck: 'false', placeholder: 'cdn.example.com',
      hint: 'A name whose DNS points at this node. Unicode names are stored as punycode.' }),
    async (v, close) => {
      const d = await post('/api/domains', { host: v.host.trim() });
      close();
      toast(`Domain ${d.display || d.host} added; check it next`);
      ctx.go(`/domains/${enc(d.host)}`);
    });
}

export async function render(ctx) {
  const { domains } = await get('/api/domains');
  const add = canShared('domains:write') ? button('Add domain', { onclick: () => addDialog(ctx) }) : null;
  const list = table([
      { label: 'Domain', cell: (d) => h('div', {}, h('a', { href: `#/domains/${enc(d.host)}`, class: 'cell-main' }, d.display || d.host),
        d.display && d.display !== d.host ? h('p', { class: 'cell-sub' }, d.host) : null) },
      { label: 'Status', cell: (d) => statusBadge(d.status) },
      { label: 'Certificate', cell: (d) => certCell(d.certificate) },
      { label: 'Redirect', cell: (d) => (d.redirect ? h('span', { class: 'small' }, `${d.redirect.code} → ${d.redirect.to}`) : h('span', { class: 'muted' }, '—')) },
      { label: 'Last check', cell: (d) => (d.last_check ? ago(d.last_check.at)
        : h('a', { href: `#/domains/${enc(d.host)}`, class: 'small' },
          can('domains:write') ? 'never: check now' : 'never', h('span', { class: 'sr-only' }, ` (${d.display || d.host})`))) },
    ], domains, { empty: add ? 'No domains yet. Add the first one to start serving content.' : 'No domains yet.', caption: 'Domains' });
  mount(ctx.main, pageHeader('Domains', 'Host names this node serves, their verification and certificates.', add),
    uncheckedHint(domains), rowFilter('Filter domains', list), card(null, {}, list));
}

// A domain serves its rules whatever its status: say so, so `pending` does not read as "not serving".
function uncheckedHint(domains) {
  const unchecked = domains.filter((d) => !d.last_check).length;
  if (!unchecked) return null;
  return callout('info', `${unchecked === 1 ? 'One domain was' : `${unchecked} domains were`} never checked (status pending). `
    + 'A domain serves its rules whatever its status: nothing waits for a check. '
    + 'A check only confirms that the name leads to this node, and says what to fix when it does not: '
    + 'run it after changing DNS, or when visitors do not arrive.');
}

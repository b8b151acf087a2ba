// Users: the list and creating one with a role or custom scopes (checkboxes
// that show the reads a write implies).

import { get, post, enc } from '../api.js';
import { h, mount } from '../dom.js';
import { ALL_SCOPES } from '../scopes.js';
import { field, button, checkbox } from '../forms.js';
import { dialogForm } from '../dialog.js';
import { toast } from '../toast.js';
import { ago } from '../format.js';
import { pageHeader, card, table, badge, rowFilter, tokenSessionNote } from '../ui.js';

const ROLES = [['admin', 'Administrator: everything'], ['operator', 'Operator: domains, buckets, rules, traffic'], ['viewer', 'Viewer: read-only'], ['custom', 'Custom: chosen scopes']];

/**
 * Scope checkboxes; a checked x:write checks and locks x:read, marked implied.
 * `offered` narrows the boxes (a token gets at most its owner's scopes).
 */
export function scopeChecks(selected = [], offered = ALL_SCOPES) {
  const names = ALL_SCOPES.filter((s) => offered.includes(s));
  const boxes = names.map((s) => checkbox({ label: s, name: 'scopes', value: s, group: true, switch: false, checked: selected.includes(s) }));
  // metrics:read has no write partner: alone on its row, so each read sits beside its write
  const grid = names[0] === 'metrics:read' ? [boxes[0], h('div', { 'aria-hidden': 'true' }), ...boxes.slice(1)] : boxes;
  const set = h('fieldset', { class: 'scope-set', 'data-field': 'scopes', id: 'scopes-set' },
    h('legend', {}, 'Scopes'), h('div', { class: 'checks' }, ...grid),
    h('p', { class: 'field-error', id: 'scopes-set-error', hidden: true }));
  function sync() {
    const inputs = [...set.querySelectorAll('input')];
    for (const input of inputs) {
      if (!input.value.endsWith(':read')) continue;
      const writer = inputs.find((i) => i.value === input.value.replace(':read', ':write'));
      const implied = writer && writer.checked;
      const label = set.querySelector(`label[for="${input.id}"]`);
      if (implied) { input.checked = true; input.disabled = true; } else if (input.disabled) { input.disabled = false; input.checked = false; }
      label.replaceChildren(input.value, implied ? h('span', { class: 'implied' }, ' (implied by write)') : '');
    }
  }
  set.addEventListener('change', sync);
  sync();
  return set;
}

/** Show the scope checkboxes only for the custom role. */
export function roleAndScopes(user, me) {
  const roles = me.role === 'admin' ? ROLES : ROLES.filter(([r]) => r !== 'admin');
  const role = field({ label: 'Role', name: 'role', value: user ? user.role : 'viewer', options: roles });
  const scopes = scopeChecks(user && user.role === 'custom' ? user.scopes : []);
  const select = role.querySelector('select');
  const toggle = () => { scopes.hidden = select.value !== 'custom'; };
  select.addEventListener('change', toggle);
  toggle();
  return h('div', { class: 'stack' }, role, scopes);
}

/** role + scopes for the API: scopes only for custom. */
export function roleBody(v) {
  return v.role === 'custom' ? { role: 'custom', scopes: v.scopes || [] } : { role: v.role };
}

function addDialog(ctx) {
  dialogForm({ title: 'Add a user', submitLabel: 'Add user', wide: true }, [
    h('div', { class: 'form-grid' },
      field({ label: 'Username', name: 'username', required: true, autocomplete: 'off', autocapitalize: 'none', spellcheck: 'false' }),
      field({ label: 'Password', name: 'password', type: 'password', required: true, autocomplete: 'new-password', hint: 'Give it to them safely; they can change it.' })),
    roleAndScopes(null, ctx.user),
  ], async (v, close) => {
    const u = await post('/api/users', { username: v.username.trim(), password: v.password, ...roleBody(v) });
    close();
    toast(`User ${u.username} created`);
    ctx.rerender();
  });
}

export function userState(u) {
  return h('div', { class: 'row' },
    u.disabled ? badge('disabled', 'neutral') : badge('active', 'ok'),
    u.locked ? badge('locked out', 'bad') : null,
    u.two_factor ? badge('2FA', 'info') : null);
}

export async function render(ctx) {
  const { users } = await get('/api/users');
  const list = table([
      { label: 'User', cell: (u) => h('div', {}, h('a', { href: `#/users/${enc(u.id)}`, class: 'cell-main' }, u.username), u.id === ctx.user.id ? h('span', { class: 'cell-sub' }, ' (you)') : null) },
      { label: 'Role', cell: (u) => h('div', {}, u.role, u.role === 'custom' ? h('p', { class: 'cell-sub' }, u.scopes.join(', ') || 'no scopes') : null) },
      { label: 'State', cell: userState },
      { label: 'Sessions', cls: 'num', cell: (u) => String(u.sessions) },
      { label: 'Last login', cell: (u) => ago(u.last_login_at) },
    ], users, { caption: 'Users' });
  const token = Boolean(ctx.session.token); // a token session may read accounts, never make them
  mount(ctx.main, pageHeader('Users', 'Who may use this panel and the API, and with which scopes.', token ? null : button('Add user', { onclick: () => addDialog(ctx) })),
    token ? tokenSessionNote('accounts can be added or changed') : null, rowFilter('Filter users', list), card(null, {}, list));
}

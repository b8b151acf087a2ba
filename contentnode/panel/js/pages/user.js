// One user: role and scopes, disable, reset password and 2FA, end sessions,
// clear a lockout, delete, and their API tokens (listed, revocable).

import { get, put, del, enc } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, onSubmit, actions, actionButton } from '../forms.js';
import { confirm, dialogForm } from '../dialog.js';
import { toast, toastError } from '../toast.js';
import { when, ago } from '../format.js';
import { pageHeader, card, facts, callout, tokenSessionNote } from '../ui.js';
import { roleAndScopes, roleBody, userState } from './users.js';
import { tokenTable } from '../tokens.js';

export async function render(ctx) {
  let u = await get(`/api/users/${enc(ctx.params.id)}`);
  const self = u.id === ctx.user.id;
  const path = () => `/api/users/${enc(u.id)}`;
  const at = () => ({ revision: u.revision }); // the revision this page shows, for If-Match
  const info = h('div', {});
  const ops = h('div', { class: 'stack rows' });
  const head = h('div', {});

  async function refresh() { u = await get(path()); draw(); }

  const danger = async (title, message, confirmLabel, run, done) => {
    if (!await confirm({ title, message, confirmLabel })) return;
    try { await run(); toast(done); await refresh(); } catch (err) { toastError(err); }
  };

  function draw() {
    mount(head, h('a', { href: '#/users', class: 'crumb' }, '← Users'),
      pageHeader(u.username, self ? 'This is your account.' : `Created ${when(u.created_at)}`,
        button('Delete user', { kind: 'danger-soft', onclick: async () => {
          if (!await confirm({ title: `Delete ${u.username}?`, message: self ? 'You delete your own account and are logged out.' : 'The account and its sessions end at once.' })) return;
          try { await del(path(), at()); toast(`User ${u.username} deleted`); if (self) ctx.state.session = null; ctx.go(self ? '/login' : '/users'); } catch (err) { toastError(err); }
        } })));
    mount(info, facts([
      ['State', userState(u)], ['Role', u.role], ['Scopes', u.scopes.length ? u.scopes.join(', ') : 'none'],
      ['Two-factor', u.two_factor ? 'on' : 'off'], ['Open sessions', String(u.sessions)],
      ['Last login', u.last_login_at ? `${when(u.last_login_at)} (${ago(u.last_login_at)})` : 'never'],
      ['Password changed', when(u.password_changed_at)],
    ]));
    const list = [
      h('div', { class: 'spread' }, h('div', {}, h('h3', {}, u.disabled ? 'Enable the account' : 'Disable the account'), h('p', { class: 'muted small' }, u.disabled ? 'They can log in again.' : 'Ends their sessions and refuses their logins.')),
        u.disabled ? actionButton('Enable', async () => { u = await put(path(), { disabled: false }, at()); toast('Account enabled'); draw(); })
          : button('Disable', { kind: 'danger-soft', onclick: () => danger(`Disable ${u.username}?`, 'Their sessions end and logins are refused until the account is enabled again.', 'Disable', () => put(path(), { disabled: true }, at()), 'Account disabled') })),
      h('div', { class: 'spread' }, h('div', {}, h('h3', {}, 'End sessions'), h('p', { class: 'muted small' }, self ? 'Every other session of yours.' : `${u.sessions} open.`)),
        button('End sessions', { kind: 'secondary', onclick: () => danger('End their sessions?', 'Every open session of this account ends; they have to log in again.', 'End sessions', () => del(`${path()}/sessions`), 'Sessions ended') })),
    ];
    if (u.locked) list.push(h('div', { class: 'spread' }, h('div', {}, h('h3', {}, 'Clear the lockout'), h('p', { class: 'muted small' }, 'Too many failed logins locked this account.')),
      actionButton('Clear lockout', async () => { await del(`${path()}/lockout`); toast('Lockout cleared'); await refresh(); })));
    if (!self) {
      list.push(h('div', { class: 'spread' }, h('div', {}, h('h3', {}, 'Reset the password'), h('p', { class: 'muted small' }, 'For someone who forgot theirs; ends their sessions.')),
        button('Reset password', { kind: 'secondary', onclick: resetPassword })));
      if (u.two_factor) list.push(h('div', { class: 'spread' }, h('div', {}, h('h3', {}, 'Reset two-factor authentication'), h('p', { class: 'muted small' }, 'For a lost authenticator and recovery codes.')),
        button('Reset 2FA', { kind: 'danger-soft', onclick: () => danger(`Turn off 2FA for ${u.username}?`, 'Their authenticator and recovery codes stop working; they may set 2FA up again.', 'Reset 2FA', () => del(`${path()}/2fa`, at()), 'Two-factor authentication reset') })));
    } else list.push(callout('info', 'Your own password and 2FA are changed under ', h('a', { href: '#/account' }, 'My account'), '.'));
    mount(ops, ...list);
  }

  function resetPassword() {
    dialogForm({ title: `New password for ${u.username}`, description: 'Their open sessions end.', submitLabel: 'Set password' },
      field({ label: 'New password', name: 'password', type: 'password', autocomplete: 'new-password', required: true }),
      async (v, close) => { u = await put(`${path()}/password`, { password: v.password }, at()); close(); toast('Password set'); draw(); });
  }

  const roleForm = form({}, roleAndScopes(u, ctx.user), actions(button('Save role', { type: 'submit' })));
  onSubmit(roleForm, async (v) => {
    u = await put(path(), roleBody(v), at());
    toast('Role saved');
    if (self) { await ctx.refreshSession(); ctx.go('/dashboard'); return; } // my own scopes changed: rebuild the menu
    draw();
  });

  const tokensBox = h('div', {});
  async function drawTokens() {
    const { tokens } = await get(`${path()}/tokens`);
    mount(tokensBox, tokenTable(tokens, (t) => `${path()}/tokens/${enc(t.id)}`, () => drawTokens().catch(toastError), `API tokens of ${u.username}`));
  }

  if (ctx.session.token) { // a token session reads the account; changing it, or its tokens, needs a password login
    draw();
    mount(head, h('a', { href: '#/users', class: 'crumb' }, '← Users'), pageHeader(u.username, `Created ${when(u.created_at)}`));
    mount(ctx.main, head, tokenSessionNote('accounts, their passwords, 2FA, sessions and tokens can be changed'), card('Account', {}, info));
    return;
  }
  draw();
  await drawTokens();
  mount(ctx.main, head,
    h('div', { class: 'grid-2' }, card('Account', {}, info), card('Role and scopes', { description: 'Changes apply on their next request.' }, roleForm)),
    card('Actions', {}, ops),
    card('API tokens', { description: self ? 'Your own tokens are created under My account.' : 'Tokens they made for their scripts. Only they can create them; you can revoke them.' }, tokensBox));
}

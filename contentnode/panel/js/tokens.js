// The API tokens table shared by My account (own tokens) and a user's page
// (users:manage): each token with what it may do, when it was last used, and
// a Revoke button behind a confirmation.

import { h } from './dom.js';
import { del } from './api.js';
import { button } from './forms.js';
import { confirm } from './dialog.js';
import { toast, toastError } from './toast.js';
import { when, ago } from './format.js';
import { table } from './ui.js';

/** Tokens with a Revoke button each; `path(token)` is the route that revokes it. */
export function tokenTable(tokens, path, redraw, caption) {
  return table([
    { label: 'Name', cell: (t) => h('span', { class: 'cell-main' }, t.name) },
    { label: 'Scopes', cell: (t) => t.scopes.join(', ') || 'none' },
    { label: 'Created', cell: (t) => when(t.created_at) },
    { label: 'Expires', cell: (t) => (t.expires_at ? when(t.expires_at) : 'never') },
    { label: 'Last used', cell: (t) => (t.last_used_at ? ago(t.last_used_at) : 'never') },
    { label: 'Actions', cls: 'actions', cell: (t) => button('Revoke', { kind: 'danger-soft', class: 'btn btn-danger-soft btn-sm', 'aria-label': `Revoke token ${t.name}`, onclick: async () => {
      if (!await confirm({ title: `Revoke the token "${t.name}"?`, message: 'Scripts using it can no longer log in, and its open sessions end.', confirmLabel: 'Revoke' })) return;
      try { await del(path(t)); toast(`Token ${t.name} revoked`); redraw(); } catch (err) { toastError(err); }
    } }) },
  ], tokens, { empty: 'No tokens.', caption });
}

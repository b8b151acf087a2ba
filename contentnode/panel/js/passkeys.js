// My account's passkeys card: each passkey with when it was made and last
// used, Remove, and Add a passkey (the password first, then the browser's
// passkey dialog). The policy may turn passkeys off for the whole node.

import { get, post, del, enc } from './api.js';
import { h } from './dom.js';
import { field, button } from './forms.js';
import { confirm, dialogForm } from './dialog.js';
import { toast, toastError } from './toast.js';
import { when, ago } from './format.js';
import { card, table, badge } from './ui.js';
import { createPasskey, passkeysAvailable } from './webauthn.js';

function addPasskey(ctx, redraw) {
  dialogForm({ title: 'Add a passkey', submitLabel: 'Continue',
    description: 'Your browser then asks the device (this computer, a phone or a security key) to make a passkey for this node.' }, [
    field({ label: 'Name', name: 'name', required: true, autocomplete: 'off', maxlength: 64, hint: 'Which device it is, e.g. "work laptop".' }),
    field({ label: 'Your password', name: 'password', type: 'password', autocomplete: 'current-password', required: true, hint: 'Confirms it is you.' }),
  ], async (v, close) => {
    const { options } = await post('/api/me/passkeys/options', { password: v.password });
    const credential = await createPasskey(options);
    const made = await post('/api/me/passkeys', { name: v.name.trim(), credential });
    close();
    toast(`Passkey "${made.name}" added`);
    await ctx.refreshSession();
    redraw();
  });
}

export async function passkeysCard(ctx, redraw) {
  const description = 'Sign in with your device\'s screen lock or a security key instead of a code'
    + (ctx.session.passkeys_policy === 'passwordless' ? ', or without your password.' : '.');
  if (ctx.session.passkeys_policy === 'off') {
    return card('Passkeys', { description }, h('p', { class: 'muted' }, 'Passkeys are turned off on this node by its security policy.'));
  }
  const { passkeys } = await get('/api/me/passkeys');
  const usable = passkeysAvailable();
  const add = button('Add a passkey', { disabled: !usable, onclick: () => addPasskey(ctx, redraw) });
  return card('Passkeys', { description, actions: add },
    usable ? null : h('p', { class: 'muted small' }, 'This browser cannot make passkeys here: open the panel over HTTPS, or on the node itself as localhost.'),
    table([
      { label: 'Name', cell: (p) => h('span', { class: 'cell-main' }, p.name, p.backed_up ? h('span', {}, ' ', badge('synced', 'info')) : null) },
      { label: 'Created', cell: (p) => when(p.created_at) },
      { label: 'Last used', cell: (p) => (p.last_used_at ? ago(p.last_used_at) : 'never') },
      { label: 'Actions', cls: 'actions', cell: (p) => button('Remove', { kind: 'danger-soft', class: 'btn btn-danger-soft btn-sm', 'aria-label': `Remove passkey ${p.name}`, onclick: async () => {
        if (!await confirm({ title: `Remove the passkey "${p.name}"?`, message: 'It can no longer sign you in. Remove it from the device too.', confirmLabel: 'Remove' })) return;
        try { await del(`/api/me/passkeys/${enc(p.id)}`); toast(`Passkey ${p.name} removed`); await ctx.refreshSession(); redraw(); } catch (err) { toastError(err); }
      } }) },
    ], passkeys, { empty: 'No passkeys yet.', caption: 'My passkeys' }));
}

// Security policy: who must use 2FA, what passkeys may do, password length, session timeouts and
// login limits (GET/PUT /api/policy).

import { get, put } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, onSubmit, actions } from '../forms.js';
import { confirm } from '../dialog.js';
import { toast } from '../toast.js';
import { duration } from '../format.js';
import { pageHeader, card, tokenSessionNote } from '../ui.js';

const PASSKEYS = [['off', 'Off: nobody may add or use one'], ['second_factor', 'As a second factor, after the password'], ['passwordless', 'Also to sign in without a password']];
const TWO_FACTOR = [['off', 'Off: nobody may set it up'], ['optional', 'Optional: each user decides'], ['admins', 'Required for administrators'], ['all', 'Required for everyone']];
const NUMBERS = {
  password_min_length: ['Minimum password length', 8, 128, 'New passwords only; existing ones keep working.'],
  session_idle_timeout: ['Idle timeout (seconds)', 60, 2592000, 'A session unused this long ends.'],
  session_absolute_timeout: ['Absolute timeout (seconds)', 300, 31536000, 'A session this old ends, used or not.'],
  lockout_threshold: ['Failed attempts before lockout', 1, 100, 'Per client address and per account, within the window.'],
  lockout_duration: ['Lockout window and duration (seconds)', 10, 604800, 'How long failures count, and how long a lockout lasts.'],
};

export async function render(ctx) {
  const p = await get('/api/policy');
  const num = (k) => {
    const [label, min, max, hint] = NUMBERS[k];
    const f = field({ label, name: k, type: 'number', min, max, value: p[k], required: true, hint: k.includes('time') || k.endsWith('duration') ? `${hint} Now ${duration(p[k])}.` : hint });
    return f;
  };
  const f = form({},
    card('Two-factor authentication', { description: 'TOTP codes from an authenticator app, with recovery codes.' },
      field({ label: 'Who must use two-factor authentication', name: 'two_factor', value: p.two_factor, options: TWO_FACTOR,
        hint: 'Users who must and have not enrolled can only reach their account page until they do. A passkey counts as two-factor authentication.' })),
    card('Passkeys', { description: 'Passkeys (WebAuthn) on a phone, computer or security key, added in My account.' },
      field({ label: 'What passkeys may do', name: 'passkeys', value: p.passkeys, options: PASSKEYS,
        hint: 'Signing in without a password needs the device to verify its user (a PIN, fingerprint or face).' })),
    card('Passwords and sessions', {}, h('div', { class: 'form-grid' }, num('password_min_length'), h('div'), num('session_idle_timeout'), num('session_absolute_timeout'))),
    card('Login limits', { description: 'Failed logins lock the client address and the account for a while.' }, h('div', { class: 'form-grid' }, num('lockout_threshold'), num('lockout_duration'))),
    ctx.session.token ? tokenSessionNote('the policy can be changed') : actions(button('Save policy', { type: 'submit' })));
  onSubmit(f, async (v) => {
    const body = {};
    for (const k of Object.keys(p)) if (v[k] !== undefined && v[k] !== p[k]) body[k] = v[k];
    if (!Object.keys(body).length) { toast('Nothing changed'); return; }
    const strict = (body.two_factor === 'all' || (body.two_factor === 'admins' && ctx.user.role === 'admin')) && !ctx.user.two_factor;
    if (strict && !await confirm({ title: 'Require 2FA from yourself too?', message: 'You have no two-factor authentication yet: after saving, you can only use your account page until you set it up.', confirmLabel: 'Save policy', danger: false })) return;
    Object.assign(p, await put('/api/policy', body, { revision: p.revision }));
    toast('Policy saved');
    if (strict) { await ctx.refreshSession(); ctx.go('/account'); }
  });
  mount(ctx.main, pageHeader('Security', 'Rules for every account of this node.'), f);
}

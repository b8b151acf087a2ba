// My account: password, two-factor authentication (QR code, manual key,
// recovery codes shown once), passkeys, my API tokens (the secret shown once), and my
// sessions. A session opened with a token gets none of the credential or session
// cards: the API refuses them to token sessions (docs/API.md, "What a token session may and may not do").

import { get, post, put, del, enc } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, onSubmit, actions } from '../forms.js';
import { confirm, modal, dialogForm, showSecretOnce } from '../dialog.js';
import { toast, toastError } from '../toast.js';
import { when, ago } from '../format.js';
import { pageHeader, card, facts, table, badge, callout, copyButton, download } from '../ui.js';
import { qrSvg } from '../qr.js';
import { scopeChecks } from './users.js';
import { tokenTable } from '../tokens.js';
import { passkeysCard } from '../passkeys.js';

function passwordCard() {
  const f = form({},
    field({ label: 'Current password', name: 'current_password', type: 'password', autocomplete: 'current-password', required: true }),
    field({ label: 'New password', name: 'new_password', type: 'password', autocomplete: 'new-password', required: true }),
    field({ label: 'Repeat the new password', name: 'repeat', type: 'password', autocomplete: 'new-password', required: true }),
    actions(button('Change password', { type: 'submit' })));
  onSubmit(f, async (v) => {
    if (v.new_password !== v.repeat) throw { message: 'the two new passwords differ', field: 'repeat' };
    await put('/api/me/password', { current_password: v.current_password, new_password: v.new_password });
    f.reset();
    toast('Password changed; your other sessions ended');
  });
  return card('Password', { description: 'Changing it ends your other sessions.' }, f);
}

/** Recovery codes, shown once: copy and download, then gone. */
function showCodes(codes, onDone) {
  const text = `contentnode recovery codes\n\n${codes.join('\n')}\n\nEach code works once.\n`;
  const done = button('I have saved them', { onclick: () => close() });
  const { close } = modal({ title: 'Your recovery codes', onClose: onDone,
    description: 'Each works once, in place of a code from your app. They are shown only now: save them somewhere safe.',
    content: h('div', { class: 'stack' },
      h('ol', { class: 'codes', 'data-testid': 'recovery-codes' }, ...codes.map((c) => h('li', {}, c))),
      h('div', { class: 'form-actions' }, copyButton(text, 'Copy'),
        button('Download', { kind: 'secondary', class: 'btn btn-secondary btn-sm', onclick: () => download('contentnode-recovery-codes.txt', text, 'text/plain') }), done)) });
}

/** Ask for the password, then run fn(password). */
function withPassword(title, submitLabel, description, fn, danger = false) {
  dialogForm({ title, description, submitLabel, submitKind: danger ? 'danger' : 'primary' },
    field({ label: 'Password', name: 'password', type: 'password', autocomplete: 'current-password', required: true }),
    (v, close) => fn(v.password, close));
}

async function twoFactorCard(ctx, redraw) {
  const st = await get('/api/me/2fa');
  const box = h('div', { class: 'stack' });

  function enrol(setup) {
    const secretGroups = setup.secret.replace(/(.{4})/g, '$1 ').trim();
    const qrSlot = h('div', {});
    qrSvg(setup.otpauth_uri, 'QR code for your authenticator app').then((svg) => mount(qrSlot, svg)).catch(() => mount(qrSlot, h('p', { class: 'muted' }, 'The QR code could not be drawn; type the key instead.')));
    const f = form({ class: 'inline-form' },
      field({ label: 'Authentication code', name: 'code', autocomplete: 'one-time-code', inputmode: 'numeric', required: true, hint: 'The 6-digit code your app shows now.' }),
      button('Enable', { type: 'submit' }));
    onSubmit(f, async (v) => {
      const r = await post('/api/me/2fa/enable', { code: v.code.trim() });
      mount(box); // the secret is in the app now: drop the key and QR code from the page
      await ctx.refreshSession();
      showCodes(r.recovery_codes, () => { toast('Two-factor authentication is on'); ctx.rerender(); });
    });
    mount(box, h('ol', { class: 'stack enrol-steps' },
      h('li', {}, h('p', {}, 'Scan this code with an authenticator app (1Password, Aegis, Google Authenticator…):'),
        h('div', { class: 'enrol' }, qrSlot,
          h('div', { class: 'stack' }, h('p', { class: 'muted small' }, 'Or type this key into the app:'),
            h('code', { class: 'secret', 'data-testid': 'totp-secret' }, secretGroups), h('div', {}, copyButton(setup.secret, 'Copy key'))))),
      h('li', {}, h('p', {}, 'Enter the code the app shows to finish:'), f)));
    f.querySelector('input').focus();
  }

  const startSetup = (label) => button(label, { onclick: () => withPassword('Set up two-factor authentication', 'Continue', 'Confirm it is you.', async (password, close) => {
    const setup = await post('/api/me/2fa/setup', { password });
    close();
    enrol(setup);
  }) });

  const parts = [];
  if (st.enabled) {
    parts.push(h('p', { class: 'row' }, badge('on', 'ok'), `${st.recovery_codes_left} recovery codes left.`),
      h('div', { class: 'row' },
        button('New recovery codes', { kind: 'secondary', onclick: () => withPassword('New recovery codes', 'Make new codes', 'Every earlier code stops working.', async (password, close) => {
          const r = await post('/api/me/2fa/recovery-codes', { password });
          close();
          showCodes(r.recovery_codes, redraw);
        }) }),
        startSetup('Move to a new authenticator'),
        st.turn_off_allowed ? button('Turn off', { kind: 'danger-soft', onclick: () => withPassword('Turn off two-factor authentication?', 'Turn off', 'Logins then need only your password.', async (password, close) => {
          await post('/api/me/2fa/disable', { password });
          close();
          toast('Two-factor authentication is off');
          await ctx.refreshSession();
          redraw();
        }, true) }) : null),
      st.turn_off_allowed ? null : h('p', { class: 'muted small' }, 'The security policy requires two-factor authentication for your account, and this is its only second factor, so it cannot be turned off.'));
  } else if (st.policy === 'off') {
    parts.push(h('p', { class: 'muted' }, 'Two-factor authentication is turned off on this node by its security policy.'));
  } else {
    parts.push(h('p', { class: 'muted' }, 'Off. A code from your phone on every login keeps your account safe even if the password leaks.'), h('div', {}, startSetup('Set up two-factor authentication')));
  }
  mount(box, ...parts);
  return card('Two-factor authentication', { description: 'Time-based codes (TOTP) from an authenticator app.' }, box);
}

const EXPIRIES = [['', 'Never'], ['86400', 'In 1 day'], ['2592000', 'In 30 days'], ['7776000', 'In 90 days'], ['31536000', 'In 1 year']];

/** A new token's secret, shown this once: copy it (or a curl login line), then it is gone. */
function showSecret(token, secret, onDone) {
  const login = `curl -s -c cookies.txt -H 'Content-Type: application/json' -d '{"token":"${secret}"}' ${location.origin}/api/login`;
  showSecretOnce({ title: `Token "${token.name}" created`, onClose: onDone, secret, testId: 'token-secret', copyLabel: 'Copy token',
    description: 'Copy it now: it is shown only this once. The node keeps only a hash of it.',
    details: [h('p', { class: 'muted small' }, 'A script logs in with it (no 2FA step) and uses the session cookie, for example:'),
      h('pre', { class: 'pre', 'data-testid': 'token-curl' }, login)],
    copies: [copyButton(login, 'Copy curl login')] });
}

function createToken(ctx, redraw) {
  dialogForm({ title: 'New API token', submitLabel: 'Create token', wide: true,
    description: 'A token lets a script act as you, limited to the scopes you tick, until it expires or you revoke it.' }, [
    h('div', { class: 'form-grid' },
      field({ label: 'Name', name: 'name', required: true, autocomplete: 'off', spellcheck: 'false', hint: 'What it is for, e.g. "nightly purge". Unique among your tokens.' }),
      field({ label: 'Expires', name: 'expires_in', value: '7776000', options: EXPIRIES })),
    scopeChecks([], ctx.user.scopes),
    field({ label: 'Your password', name: 'password', type: 'password', autocomplete: 'current-password', required: true, hint: 'Confirms it is you.' }),
  ], async (v, close) => {
    const r = await post('/api/me/tokens', { name: v.name.trim(), scopes: v.scopes || [], password: v.password,
      expires_in: v.expires_in ? Number(v.expires_in) : null });
    close();
    showSecret(r.token, r.secret, redraw);
  });
}

async function tokensCard(ctx, redraw) {
  const { tokens } = await get('/api/me/tokens');
  const create = button('New token', { onclick: () => createToken(ctx, redraw) });
  return card('API tokens', { description: 'For scripts and cron jobs: each logs in without your password or 2FA, with the scopes you give it.', actions: create },
    tokenTable(tokens, (t) => `/api/me/tokens/${enc(t.id)}`, redraw, 'My API tokens'));
}

/** "Chrome on Linux" from a user agent string. */
function device(ua) {
  if (!ua) return 'unknown device';
  const browser = /Edg\//.test(ua) ? 'Edge' : /Firefox\//.test(ua) ? 'Firefox' : /Chrome\//.test(ua) ? 'Chrome' : /Safari\//.test(ua) ? 'Safari' : ua.split(/[ /]/)[0];
  const os = /Windows/.test(ua) ? 'Windows' : /Mac OS X/.test(ua) ? 'macOS' : /Android/.test(ua) ? 'Android' : /iPhone|iPad/.test(ua) ? 'iOS' : /Linux/.test(ua) ? 'Linux' : '';
  return os ? `${browser} on ${os}` : browser;
}

async function sessionsCard(ctx, redraw) {
  const { sessions } = await get('/api/me/sessions');
  const endOthers = button('End all other sessions', { kind: 'secondary', disabled: sessions.length < 2, onclick: async () => {
    if (!await confirm({ title: 'End all your other sessions?', message: 'Every other browser or device signed in as you is logged out.', confirmLabel: 'End sessions' })) return;
    try { await del('/api/me/sessions'); toast('Other sessions ended'); redraw(); } catch (err) { toastError(err); }
  } });
  return card('My sessions', { description: 'Where you are signed in.', actions: endOthers }, table([
    { label: 'Device', cell: (s) => h('div', {}, h('span', { class: 'cell-main', title: s.user_agent || '' }, device(s.user_agent)), s.current ? h('span', {}, ' ', badge('this session', 'info')) : null) },
    { label: 'Address', cell: (s) => s.ip },
    { label: 'Signed in', cell: (s) => when(s.created_at) },
    { label: 'Last seen', cell: (s) => ago(s.last_seen_at) },
    { label: 'Actions', cls: 'actions', cell: (s) => button(s.current ? 'End this session' : 'End', { class: 'btn btn-secondary btn-sm', 'aria-label': s.current ? 'End this session' : `End session from ${s.ip} signed in ${when(s.created_at)}`, onclick: async () => {
      if (!s.current && !await confirm({ title: 'End this session?', message: 'That browser or device is logged out.', confirmLabel: 'End session' })) return;
      try {
        await del(`/api/me/sessions/${enc(s.id)}`);
        if (s.current) { ctx.state.session = null; ctx.go('/login'); return; }
        toast('Session ended'); redraw();
      } catch (err) { toastError(err); }
    } }) },
  ], sessions, { caption: 'My sessions' }));
}

export async function render(ctx) {
  const me = ctx.user;
  const redraw = () => ctx.rerender();
  if (ctx.session.two_factor_enrollment_required) {
    // Until enrolment only /api/me/2fa... answers: show just that.
    mount(ctx.main, pageHeader('My account', `Signed in as ${me.username}`),
      callout('warn', 'The node requires two-factor authentication for your account. Set it up below (an authenticator app or a passkey) to use the rest of the panel.'),
      await twoFactorCard(ctx, redraw), await passkeysCard(ctx, redraw));
    return;
  }
  const profile = card('Profile', {}, facts([['Username', me.username], ['Role', me.role], ['Scopes', me.scopes.join(', ') || 'none'],
    ['Created', when(me.created_at)], ['Last login', when(me.last_login_at)]]));
  if (ctx.session.token) {
    // The API refuses passwords, 2FA, tokens and sessions to a token session: offer none of them.
    mount(ctx.main, pageHeader('My account', `Signed in as ${me.username}`),
      callout('info', `You are signed in with the API token "${ctx.session.token.name}". Your password, two-factor authentication, passkeys, API tokens and sessions can be seen and changed only after logging in with your password.`),
      profile);
    return;
  }
  const [tf, keys, tokens, sess] = await Promise.all([twoFactorCard(ctx, redraw), passkeysCard(ctx, redraw), tokensCard(ctx, redraw), sessionsCard(ctx, redraw)]);
  mount(ctx.main, pageHeader('My account', `Signed in as ${me.username}`),
    tf,
    keys,
    h('div', { class: 'grid-2' }, passwordCard(), profile),
    tokens,
    sess);
}

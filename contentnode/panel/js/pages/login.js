// Login: password, then the 2FA step (TOTP, recovery code or passkey) when
// asked, or a passkey alone where the policy allows it; a lockout shows its
// Retry-After countdown.

import { post } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, onSubmit, showError } from '../forms.js';
import { getPasskey, passkeysAvailable } from '../webauthn.js';

/** The logo, and the node's name (GET /api/session node_name) so several nodes' pages differ. */
export function brand(nodeName) {
  return h('div', { class: 'auth-brand-box' },
    h('div', { class: 'auth-brand' }, h('span', { class: 'logo', 'aria-hidden': 'true' }), 'contentnode'),
    nodeName ? h('p', { class: 'auth-node', 'data-testid': 'node-name' }, 'Node ', h('strong', {}, nodeName)) : null);
}

function lockout(err, submit, formEl) {
  let left = Math.max(1, Number(err.retryAfter) || 60);
  const secs = h('span', { class: 'countdown', 'data-testid': 'retry-after' }, String(left));
  const box = h('div', { class: 'callout callout-warn', role: 'alert' },
    'Too many failed attempts. Try again in ', secs, ' s', left > 120 ? ` (about ${Math.round(left / 60)} min).` : '.');
  formEl.querySelector('.form-alert').after(box);
  const lock = () => { if (!submit.disabled) submit.disabled = true; };
  lock();
  const observer = new MutationObserver(lock);
  observer.observe(submit, { attributes: true, attributeFilter: ['disabled'] });
  const timer = setInterval(() => {
    left -= 1;
    secs.textContent = String(left);
    if (left <= 0 || !box.isConnected) {
      clearInterval(timer);
      observer.disconnect();
      box.remove();
      submit.disabled = false;
    }
  }, 1000);
}

export function render(ctx) {
  document.title = `Sign in · ${ctx.session.node_name || 'contentnode'}`;
  const { next } = ctx; // where to go after the login: app.js vets ?next=
  const box = h('div', { class: 'card' });

  async function done() {
    await ctx.refreshSession();
    ctx.go(next);
  }

  function passwordStep(message) {
    const submit = button('Sign in', { type: 'submit', class: 'btn btn-primary btn-block' });
    const f = form({},
      field({ label: 'Username', name: 'username', autocomplete: 'username', autocapitalize: 'none', spellcheck: 'false', required: true }),
      field({ label: 'Password', name: 'password', type: 'password', autocomplete: 'current-password', required: true }),
      submit);
    onSubmit(f, async (v) => {
      try {
        const answer = await post('/api/login', { username: v.username, password: v.password });
        if (answer.two_factor_required) codeStep(answer.two_factor_methods);
        else await done();
      } catch (err) {
        if (err.status === 429) { lockout(err, submit, f); return; }
        throw err;
      }
    });
    const passwordless = ctx.session.passkeys_policy === 'passwordless' && passkeysAvailable()
      ? passkeyButton('Sign in with a passkey', f, submit, async () => {
        const { options } = await post('/api/login/passkey/options', {});
        await post('/api/login/passkey', { credential: await getPasskey(options) });
      }) : null;
    mount(box, h('h1', {}, 'Sign in'), h('p', { class: 'auth-sub' }, 'Administration of this content node.'), f,
      passwordless ? h('div', { class: 'auth-or' }, h('span', {}, 'or')) : null, passwordless);
    if (message) showError(f, { message });
    if (box.isConnected) f.querySelector('input').focus();
  }

  /** A button beside form `f` that runs a passkey ceremony, shows its errors in `f`, then signs in. */
  function passkeyButton(label, f, submit, ceremony) {
    const b = button(label, { class: 'btn btn-secondary btn-block', 'data-testid': 'passkey-sign-in' });
    b.addEventListener('click', async () => {
      b.disabled = true;
      try {
        await ceremony();
        await done();
      } catch (err) {
        if (err.status === 429) { lockout(err, submit, f); return; }
        if (err.status === 401 && err.code === 'unauthenticated') { passwordStep(err.message); return; }
        showError(f, err);
      } finally { b.disabled = false; }
    });
    return b;
  }

  // methods: what the login answer offered ("totp", "passkey"); unknown after a reload: both
  function codeStep(methods = ['totp', 'passkey']) {
    const submit = button('Verify', { type: 'submit', class: 'btn btn-primary btn-block' });
    const back = h('button', { type: 'button', class: 'btn btn-ghost btn-block', onclick: () => passwordStep() }, 'Start over');
    const withCode = methods.includes('totp');
    const f = form({},
      withCode ? field({ label: 'Authentication code', name: 'code', autocomplete: 'one-time-code', autocapitalize: 'none', spellcheck: 'false',
        required: true, hint: 'The 6-digit code from your authenticator app, or one of your recovery codes.' }) : null,
      withCode ? submit : null,
      back);
    if (methods.includes('passkey') && passkeysAvailable()) {
      back.before(passkeyButton('Use a passkey', f, submit, async () => {
        const { options } = await post('/api/login/2fa/passkey-options', {});
        await post('/api/login/2fa', { passkey: await getPasskey(options) });
      }));
    }
    onSubmit(f, async (v) => {
      try {
        await post('/api/login/2fa', { code: v.code.trim() });
        await done();
      } catch (err) {
        if (err.status === 429) { lockout(err, submit, f); return; }
        if (err.status === 401 && err.code === 'unauthenticated') { passwordStep(err.message); return; }
        throw err;
      }
    });
    mount(box, h('h1', {}, 'Two-factor authentication'), h('p', { class: 'auth-sub' }, 'Your password was right. One more step.'), f);
    if (box.isConnected) f.querySelector('input, .btn').focus();
  }

  if (ctx.session.two_factor_pending) codeStep();
  else passwordStep();
  mount(ctx.main, h('div', { class: 'auth' }, brand(ctx.session.node_name), box,
    h('p', { class: 'auth-foot' }, 'Forgot your password? Another administrator can reset it, or run contentnode user reset-password on the node.')));
  box.querySelector('input, .btn').focus(); // the first field, once the form is in the page
}

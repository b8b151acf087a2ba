// Login: password, then the 2FA step (TOTP or recovery code) when asked;
// a lockout shows its Retry-After countdown.

import { post } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, onSubmit, showError } from '../forms.js';

export function brand() {
  return h('div', { class: 'auth-brand' }, h('span', { class: 'logo', 'aria-hidden': 'true' }), 'contentnode');
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
  document.title = 'Sign in · contentnode';
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
        if (answer.two_factor_required) codeStep();
        else await done();
      } catch (err) {
        if (err.status === 429) { lockout(err, submit, f); return; }
        throw err;
      }
    });
    mount(box, h('h1', {}, 'Sign in'), h('p', { class: 'auth-sub' }, 'Administration of this content node.'), f);
    if (message) showError(f, { message });
    if (box.isConnected) f.querySelector('input').focus();
  }

  function codeStep() {
    const submit = button('Verify', { type: 'submit', class: 'btn btn-primary btn-block' });
    const back = h('button', { type: 'button', class: 'btn btn-ghost btn-block', onclick: () => passwordStep() }, 'Start over');
    const f = form({},
      field({ label: 'Authentication code', name: 'code', autocomplete: 'one-time-code', autocapitalize: 'none', spellcheck: 'false',
        required: true, hint: 'The 6-digit code from your authenticator app, or one of your recovery codes.' }),
      submit, back);
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
    if (box.isConnected) f.querySelector('input').focus();
  }

  if (ctx.session.two_factor_pending) codeStep();
  else passwordStep();
  mount(ctx.main, h('div', { class: 'auth' }, brand(), box,
    h('p', { class: 'auth-foot' }, 'Forgot your password? Another administrator can reset it, or run contentnode user reset-password on the node.')));
  box.querySelector('input').focus(); // the first field, once the form is in the page
}

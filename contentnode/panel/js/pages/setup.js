// First run: create the first administrator, name the node, then point to
// the next steps (domain, bucket, rule).

import { post, put } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, onSubmit, actions } from '../forms.js';
import { brand } from './login.js';

function progress(step) {
  return h('ol', { class: 'wizard-steps', 'aria-label': `Step ${step} of 3` },
    ...[1, 2, 3].map((i) => h('li', { class: i <= step ? 'done' : null })));
}

export function render(ctx) {
  document.title = 'Set up · contentnode';
  const box = h('div', { class: 'card' });

  function account() {
    const f = form({},
      field({ label: 'Username', name: 'username', autocomplete: 'username', autocapitalize: 'none', spellcheck: 'false', required: true,
        hint: 'Letters, digits and . _ @ -' }),
      field({ label: 'Password', name: 'password', type: 'password', autocomplete: 'new-password', required: true,
        hint: 'At least 12 characters. A few unrelated words make a strong one.' }),
      button('Create account', { type: 'submit', class: 'btn btn-primary btn-block' }));
    onSubmit(f, async (v) => {
      await post('/api/setup', { username: v.username, password: v.password });
      await ctx.refreshSession();
      node();
    });
    mount(box, progress(1), h('h1', {}, 'Welcome to contentnode'),
      h('p', { class: 'auth-sub' }, 'Create the first administrator account of this node.'), f);
  }

  function node() {
    const skip = h('button', { type: 'button', class: 'btn btn-ghost', onclick: finish }, 'Skip');
    const f = form({},
      field({ label: 'Node name', name: 'node_name', value: 'contentnode', required: true,
        hint: 'Shown in the panel, in notification subjects and in backups.' }),
      actions(skip, button('Continue', { type: 'submit' })));
    onSubmit(f, async (v) => {
      await put('/api/settings', { node_name: v.node_name });
      ctx.state.nodeName = v.node_name;
      finish();
    });
    mount(box, progress(2), h('h1', {}, 'Name this node'), h('p', { class: 'auth-sub' }, 'You can change it later in Settings.'), f);
    f.querySelector('input').focus();
  }

  function finish() {
    const items = [
      ['#/domains', 'Add a domain', 'the host names this node serves'],
      ['#/buckets', 'Connect a bucket', 'an S3-compatible origin'],
      ['#/rules', 'Create a rule', 'route a path of a domain to a bucket'],
      ['#/account', 'Protect your account', 'turn on two-factor authentication'],
    ];
    mount(box, progress(3), h('h1', {}, 'You are all set'),
      h('p', { class: 'auth-sub' }, 'Three steps bring the first content online:'),
      h('ul', { class: 'next-steps' }, ...items.map(([href, title, sub]) =>
        h('li', {}, h('a', { href }, h('span', {}, h('strong', {}, title), h('br'), h('span', { class: 'muted small' }, sub)), h('span', { 'aria-hidden': 'true' }, '→'))))),
      h('div', { class: 'form-actions' }, h('a', { href: '#/dashboard', class: 'btn btn-primary' }, 'Go to the dashboard')));
  }

  if (ctx.session.authenticated) finish(); else account();
  mount(ctx.main, h('div', { class: 'auth wizard' }, brand(ctx.session?.node_name), box));
}

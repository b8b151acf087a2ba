// Notifications: the email, Telegram, webhook and ntfy channels (secrets
// write-only; a webhook secret the node makes is shown once), the per-event
// switches, and a test message with the far side's answer.

import { get, put, post } from '../api.js';
import { h, mount } from '../dom.js';
import { showSecretOnce } from '../dialog.js';
import { field, form, button, checkbox, onSubmit, actions, busy } from '../forms.js';
import { toast } from '../toast.js';
import { pageHeader, card, badge, resultBanner } from '../ui.js';

const EVENTS = {
  cert_expiring: 'A certificate expires in 14 or 3 days',
  cert_renewal_failed: 'A certificate renewal failed',
  domain_check_failed: 'A domain check failed',
  bucket_check_failed: 'A bucket check failed',
  login_failures_burst: 'Many failed logins',
  admin_login_new_address: 'An administrator logged in from a new address',
  backup_restored: 'A backup was restored',
  update_available: 'An update is available',
  user_created: 'A user was created',
  user_deleted: 'A user was deleted',
  fleet_probe_failed: 'The fleet\'s bucket ignores conditional writes',
};

/** Body members of one channel from "channel.key" form values. */
function channelBody(prefix, v) {
  const out = {};
  for (const [k, val] of Object.entries(v)) if (k.startsWith(`${prefix}.`)) out[k.slice(prefix.length + 1)] = val;
  return out;
}

function testButton(channel) {
  const out = h('div', { 'aria-live': 'polite' });
  const btn = button('Send a test', { kind: 'secondary' });
  btn.addEventListener('click', () => busy(btn, async () => {
    try {
      const r = await post('/api/notifications/test', { channel });
      mount(out, resultBanner(r.ok, r.ok ? `Delivered: ${r.detail}` : `Not delivered: ${r.detail}`));
    } catch (err) { if (err.status !== 401) mount(out, resultBanner(false, err.message)); }
  }));
  return [btn, out];
}

function secretField(label, name, isSet, unsetHint = 'Write-only: never shown again.') {
  return field({ label, name, type: 'password', autocomplete: 'new-password',
    placeholder: isSet ? 'set (leave empty to keep it)' : '', hint: isSet ? 'Stored, never shown. Type a new one to replace it.' : unsetHint });
}

/** The webhook secret the node just made: the one time it is shown. */
function showNewSecret(secret) {
  showSecretOnce({ title: 'Webhook signing secret', secret, testId: 'webhook-secret', copyLabel: 'Copy secret',
    description: 'Copy it to the receiver now: it is shown only this once. The receiver checks X-Contentnode-Signature with it.' });
}

export async function render(ctx) {
  let n = await get('/api/notifications');
  const emailBox = h('div', {}); const tgBox = h('div', {}); const hookBox = h('div', {}); const ntfyBox = h('div', {});
  const evBox = h('div', {});

  /**
   * One channel's form: its switch and fields, the write-only secret (sent
   * only when typed, null when "remove" is ticked), save, and a test.
   */
  function drawChannel(box, spec) {
    const { channel, title, enableLabel, secret, secretLabel, secretHint, setBadge, removeLabel, fields, body, extra } = spec;
    const c = n[channel];
    const isSet = c[`${secret}_set`];
    const [testBtn, testOut] = testButton(channel);
    const f = form({},
      checkbox({ label: enableLabel, name: `${channel}.enabled`, checked: c.enabled }),
      h('div', { class: 'form-grid' }, ...fields(c, secretField(secretLabel, `${channel}.${secret}`, isSet, secretHint))),
      isSet ? checkbox({ label: removeLabel, name: `${channel}.clear_secret`, switch: false }) : null,
      extra ? extra(isSet) : null,
      h('div', { class: 'spread' }, h('div', { class: 'row' }, isSet ? badge(setBadge, 'info') : null, testBtn), button(`Save ${title}`, { type: 'submit' })), testOut);
    onSubmit(f, async (v) => {
      const b = channelBody(channel, v);
      const out = { enabled: b.enabled, ...body(b) };
      if (b[secret]) out[secret] = b[secret];
      if (b.clear_secret) out[secret] = null;
      n = await put('/api/notifications', { [channel]: out }, { revision: n.revision });
      toast(`${title} settings saved`);
      const made = n[channel].new_secret;
      delete n[channel].new_secret;
      drawChannel(box, spec);
      if (made) showNewSecret(made);
    });
    mount(box, f);
  }

  const drawEmail = () => drawChannel(emailBox, {
    channel: 'email', title: 'Email', enableLabel: 'Send notifications by email',
    secret: 'password', secretLabel: 'SMTP password', setBadge: 'password set', removeLabel: 'Remove the stored password',
    fields: (e, password) => [
      field({ label: 'SMTP server', name: 'email.host', value: e.host, placeholder: 'mail.example.com' }),
      field({ label: 'Port', name: 'email.port', type: 'number', min: 1, max: 65535, value: e.port }),
      field({ label: 'Security', name: 'email.security', value: e.security, options: [['starttls', 'STARTTLS'], ['tls', 'TLS (port 465)'], ['none', 'None (local servers only)']] }),
      field({ label: 'SMTP username', name: 'email.username', value: e.username, autocomplete: 'off' }),
      password,
      field({ label: 'From address', name: 'email.from', type: 'email', value: e.from }),
      field({ label: 'Send to', name: 'email.to', cls: 'wide', value: (e.to || []).join(', '), hint: 'Addresses separated by commas.' })],
    body: (b) => ({ host: b.host.trim() || null, port: b.port, security: b.security, username: b.username.trim() || null,
      from: b.from.trim() || null, to: b.to.split(/[,\s]+/).filter(Boolean) }),
  });

  const drawTelegram = () => drawChannel(tgBox, {
    channel: 'telegram', title: 'Telegram', enableLabel: 'Send notifications to Telegram',
    secret: 'bot_token', secretLabel: 'Bot token', setBadge: 'token set', removeLabel: 'Remove the stored token',
    fields: (t, token) => [
      token,
      field({ label: 'Chat id', name: 'telegram.chat_id', value: t.chat_id, placeholder: '-1001234567890' }),
      field({ label: 'Bot API server', name: 'telegram.api_url', cls: 'wide', type: 'url', value: t.api_url, placeholder: 'https://api.telegram.org', hint: 'Only for a self-hosted Bot API server.' })],
    body: (b) => ({ chat_id: b.chat_id.trim() || null, api_url: b.api_url.trim() || null }),
  });

  const drawWebhook = () => drawChannel(hookBox, {
    channel: 'webhook', title: 'Webhook', enableLabel: 'Send notifications to a webhook',
    secret: 'secret', secretLabel: 'Signing secret', setBadge: 'secret set', removeLabel: 'Remove the stored secret',
    secretHint: 'Leave empty: the node makes one when you switch the webhook on, and shows it once.',
    extra: (isSet) => (isSet ? checkbox({ label: 'Make a new secret (shown once; the old one stops working)', name: 'webhook.generate_secret', switch: false }) : null),
    fields: (w, secret) => [
      field({ label: 'URL', name: 'webhook.url', cls: 'wide', type: 'url', value: w.url, placeholder: 'https://hooks.example.com/contentnode', hint: 'Receives each event as signed JSON (POST). https, or http to this machine or a private address.' }),
      secret],
    body: (b) => ({ url: b.url.trim() || null, ...(b.generate_secret ? { generate_secret: true } : {}) }),
  });

  const drawNtfy = () => drawChannel(ntfyBox, {
    channel: 'ntfy', title: 'ntfy', enableLabel: 'Send notifications to ntfy',
    secret: 'token', secretLabel: 'Access token', setBadge: 'token set', removeLabel: 'Remove the stored token',
    secretHint: 'Optional, for a protected topic (tk_...). Write-only: never shown again.',
    fields: (t, token) => [
      field({ label: 'Server', name: 'ntfy.server', type: 'url', value: t.server, placeholder: 'https://ntfy.sh', hint: 'Empty: ntfy.sh.' }),
      field({ label: 'Topic', name: 'ntfy.topic', value: t.topic, placeholder: 'edge-7-alerts', autocomplete: 'off', spellcheck: 'false' }),
      token],
    body: (b) => ({ server: b.server.trim() || null, topic: b.topic.trim() || null }),
  });

  function drawEvents() {
    const f = form({},
      h('div', { class: 'checks', 'data-field': 'events' }, ...Object.keys(n.events).map((k) => checkbox({ label: EVENTS[k] || k, name: `events.${k}`, checked: n.events[k] }))),
      actions(button('Save events', { type: 'submit' })));
    onSubmit(f, async (v) => {
      n = await put('/api/notifications', { events: channelBody('events', v) }, { revision: n.revision });
      toast('Events saved');
      drawEvents();
    });
    mount(evBox, f);
  }

  drawEmail(); drawTelegram(); drawWebhook(); drawNtfy(); drawEvents();
  mount(ctx.main, pageHeader('Notifications', 'Where the node tells you about certificates, failed checks and sign-ins.'),
    h('div', { class: 'grid-2' }, card('Email', { description: 'Over SMTP; certificates are verified.' }, emailBox), card('Telegram', { description: 'Through a bot you created with @BotFather.' }, tgBox)),
    h('div', { class: 'grid-2' }, card('Webhook', { description: 'Signed JSON to your own endpoint (HMAC-SHA256, see the API reference).' }, hookBox), card('ntfy', { description: 'Push to a phone through ntfy.sh or your own ntfy server.' }, ntfyBox)),
    card('Events', { description: 'Which events are sent, on every enabled channel.' }, evBox));
}

// Settings: node settings, HTTPS, the admin host and its allow list (the
// self-lockout refusal becomes a confirmation), updates and "check now".

import { get, put, post } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, checkbox, onSubmit, actions, actionButton } from '../forms.js';
import { confirm } from '../dialog.js';
import { toast } from '../toast.js';
import { bytes, when, ago } from '../format.js';
import { pageHeader, card, callout, resultBanner, facts, badge } from '../ui.js';

const lines = (t) => t.split(/[\s,]+/).map((x) => x.trim()).filter(Boolean);
const orNull = (t) => (t && t.trim() ? t.trim() : null);

function generalCard(s, onSaved) {
  const f = form({},
    h('div', { class: 'form-grid' },
      field({ label: 'Node name', name: 'node_name', value: s.node_name, required: true, hint: 'Shown in the panel, notification subjects and backups.' }),
      field({ label: 'Public URL', name: 'public_url', type: 'url', value: s.public_url, placeholder: 'https://cdn.example.com', hint: 'Base URL of the public side, for links shown in the panel.' }),
      field({ label: 'Scheme for domain checks', name: 'public_scheme', value: s.public_scheme, options: ['http', 'https'] }),
      field({ label: 'Port for domain checks', name: 'public_port', type: 'number', min: 1, max: 65535, value: s.public_port, placeholder: 'the public listener\'s port' }),
      field({ label: 'ACME directory', name: 'acme_directory', type: 'url', value: s.acme_directory, cls: 'wide' }),
      field({ label: 'ACME contact email', name: 'acme_email', type: 'email', value: s.acme_email }),
      field({ label: 'Cache size limit (bytes)', name: 'cache_max_bytes', type: 'number', min: 0, value: s.cache_max_bytes, hint: `Now ${bytes(s.cache_max_bytes)}; 0 turns the cache off.` }),
      field({ label: 'Trusted proxies', name: 'trusted_proxies', type: 'textarea', rows: 3, value: s.trusted_proxies.join('\n'), hint: 'CIDRs whose X-Forwarded-For is believed, one per line.' }),
      h('div', { class: 'stack' },
        field({ label: 'Signing key grace (seconds)', name: 'link_grace_seconds', type: 'number', min: 0, max: 2592000, value: s.link_grace_seconds, hint: 'How long a rotated-out link key keeps working.' }),
        field({ label: 'Log level', name: 'log_level', value: s.log_level, options: ['debug', 'info', 'warning', 'error'] }))),
    checkbox({ label: 'Allow outbound requests to private and loopback addresses', name: 'allow_private_outbound', checked: s.allow_private_outbound,
      hint: 'Needed for origins or mail servers on this machine or the local network.' }),
    actions(button('Save settings', { type: 'submit' })));
  onSubmit(f, async (v) => {
    const next = { ...v, public_url: orNull(v.public_url), acme_email: orNull(v.acme_email), trusted_proxies: lines(v.trusted_proxies) };
    const body = {};
    for (const [k, val] of Object.entries(next)) if (JSON.stringify(val) !== JSON.stringify(s[k])) body[k] = val;
    if (!Object.keys(body).length) { toast('Nothing changed'); return; }
    onSaved(await put('/api/settings', body, { revision: s.revision }));
    toast('Settings saved');
  });
  return card('Node', {}, f);
}

function httpsCard(listener) {
  let x = listener;
  const box = h('div', {});
  function draw() {
    const f = form({},
      checkbox({ label: 'Serve HTTPS', name: 'enabled', checked: x.enabled, hint: x.enabled ? `Listening on port ${x.listening_port}.` : 'Off.' }),
      field({ label: 'HTTPS port', name: 'port', type: 'number', min: 0, max: 65535, value: x.port }),
      checkbox({ label: 'Redirect HTTP to HTTPS', name: 'redirect_http', checked: x.redirect_http, hint: 'For names that have a certificate.' }),
      checkbox({ label: 'Send HSTS', name: 'hsts', checked: x.hsts, hint: 'Browsers then refuse plain HTTP for a year.' }),
      h('p', { class: 'muted small' }, x.hosts_with_certificates.length ? `Certificates for ${x.hosts_with_certificates.join(', ')}.` : 'No domain has a certificate yet.'),
      actions(button('Save HTTPS', { type: 'submit' })));
    onSubmit(f, async (v) => { x = await put('/api/https', v); toast('HTTPS saved'); draw(); });
    mount(box, f);
  }
  draw();
  return card('HTTPS', { description: 'The TLS listener on the public address.' }, box);
}

function adminCard(s, onSaved) {
  const hostForm = form({ class: 'inline-form' },
    field({ label: 'Admin host', name: 'host', value: s.admin_host, placeholder: 'admin.example.com', hint: 'Serves this panel on the public side, over HTTPS only. Needs a valid certificate for the name. Empty turns it off.' }),
    button('Save host', { type: 'submit' }));
  onSubmit(hostForm, async (v) => { onSaved(await put('/api/admin-host', { host: orNull(v.host) }, { revision: s.revision })); toast(v.host.trim() ? 'Admin host set' : 'Admin host turned off'); });
  const allowForm = form({},
    field({ label: 'Allowed addresses (CIDRs)', name: 'cidrs', type: 'textarea', rows: 4, value: s.admin_allow.join('\n'),
      hint: 'IPv4/IPv6 networks or addresses, one per line. Empty: nobody reaches the admin host. The loopback admin port is never affected.' }),
    actions(button('Save allow list', { type: 'submit' })));
  onSubmit(allowForm, async (v) => {
    const cidrs = lines(v.cidrs);
    try {
      onSaved(await put('/api/admin-allow', { cidrs }, { revision: s.revision }));
    } catch (err) {
      if (err.status !== 409) throw err;
      const ok = await confirm({ title: 'Lock yourself out?', message: `${err.message.replace(/; send "confirm": true to apply it anyway$/, '')}. After saving, this browser cannot reach the panel through the admin host; only the loopback port on the node will work.`, confirmLabel: 'Save anyway' });
      if (!ok) return;
      onSaved(await put('/api/admin-allow', { cidrs, confirm: true }, { revision: s.revision }));
    }
    toast('Allow list saved');
  });
  return card('Admin access', { description: 'Reach this panel from the internet through a name of your own.' }, hostForm, allowForm);
}

function updatesCard(u, s) {
  const out = h('div', { 'aria-live': 'polite' });
  const st = u.status;
  if (st) {
    if (st.error) mount(out, resultBanner(false, `Last check ${ago(st.checked_at)} failed: ${st.error}`));
    else if (st.latest) mount(out, st.available ? callout('info', `Version ${st.latest} is available (checked ${ago(st.checked_at)}). `, st.notes || '') : resultBanner(true, `Up to date (checked ${ago(st.checked_at)}).`));
  }
  const f = form({},
    field({ label: 'Manifest URL', name: 'url', type: 'url', value: u.url, placeholder: 'https://updates.example.com/contentnode.json', hint: 'A signed manifest; the node only tells you, it never installs anything.' }),
    field({ label: 'Channel', name: 'channel', value: u.channel, options: [['stable', 'Stable'], ['beta', 'Beta']] }),
    checkbox({ label: 'Check automatically once a day', name: 'auto_check', checked: u.auto_check }),
    actions(actionButton('Check now', async () => {
      try {
        const r = await post('/api/update/check');
        mount(out, r.available ? callout('info', `Version ${r.latest} is available. `, r.notes || '') : resultBanner(true, `Up to date: ${r.current} is the latest ${r.channel} version.`));
      } catch (err) { if (err.status !== 401) mount(out, resultBanner(false, err.message)); }
    }), button('Save updates', { type: 'submit' })));
  onSubmit(f, async (v) => {
    Object.assign(u, await put('/api/updates', { url: orNull(v.url), channel: v.channel, auto_check: v.auto_check }));
    // These live in the settings object, whose revision this save moved: follow it, unless someone else changed more.
    const fresh = await get('/api/settings');
    const rest = (x) => JSON.stringify({ ...x, updates: null, revision: null });
    if (rest(fresh) === rest(s)) s.revision = fresh.revision;
    toast('Update settings saved');
  });
  return card('Updates', { description: `This node runs version ${u.current}.` }, facts([['Running', badge(u.current, 'info')], ['Last check', st && st.checked_at ? when(st.checked_at) : 'never']]), out, f);
}

export async function render(ctx) {
  // One request: the panel answer carries settings, https and updates for settings:write.
  const panel = await get('/api/panel');
  const s = panel.settings;
  // Every card compares with this one object, so it follows each save.
  const saved = (next) => { Object.assign(s, next); ctx.state.nodeName = s.node_name; };
  mount(ctx.main, pageHeader('Settings', 'How this node runs and how it is reached.'),
    generalCard(s, saved),
    h('div', { class: 'grid-2' }, httpsCard(panel.https), updatesCard(panel.updates, s)),
    adminCard(s, saved));
}

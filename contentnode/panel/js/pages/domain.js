// One domain: check (each step shown), test as a visitor, redirect, the
// certificate (upload or ACME issue), delete.

import { get, post, del, enc } from '../api.js';
import { h, mount } from '../dom.js';
import { can, canShared } from '../scopes.js';
import { field, form, button, checkbox, onSubmit, actions, actionButton } from '../forms.js';
import { confirm, modal, dialogForm } from '../dialog.js';
import { toast, toastError } from '../toast.js';
import { when, ago, bytes } from '../format.js';
import { pageHeader, card, facts, steps, statusBadge, resultBanner, errorBox, callout, table } from '../ui.js';
import { certCell } from './domains.js';
import { domainEdgeCard } from '../domain-edge.js';

function readFileInto(input, textarea) {
  input.addEventListener('change', async () => {
    const file = input.files[0];
    if (file) textarea.value = await file.text();
  });
}

function certFacts(c) {
  return facts([
    ['Names', c.sans.join(', ')], ['Issuer', c.issuer], ['Valid from', when(c.not_before)], ['Valid until', h('span', {}, when(c.not_after), ' ', certCell(c))],
    ['Fingerprint', h('code', {}, c.fingerprint)], ['Source', c.source === 'acme' ? 'issued over ACME' : 'uploaded'], ['Installed', when(c.installed_at)],
    c.trusted !== undefined ? ['Trusted', c.trusted ? 'yes' : `no${c.trust_error ? `: ${c.trust_error}` : ''}`] : null,
    c.matches_host !== undefined ? ['Matches host', c.matches_host ? 'yes' : 'no'] : null,
  ]);
}

export async function render(ctx) {
  const host = ctx.params.host;
  let d = await get(`/api/domains/${enc(host)}`);
  const write = canShared('domains:write');
  const checkOut = h('div', { 'aria-live': 'polite' });
  const testOut = h('div', { 'aria-live': 'polite' });
  const certOut = h('div', { 'aria-live': 'polite' });
  const statusSlot = h('span', {});

  function showCheck(check) {
    mount(checkOut, resultBanner(check.ok, check.ok ? 'The domain reaches this node.' : 'The check failed.'), steps(check.steps, 'Check steps'));
  }
  if (d.last_check) mount(checkOut, h('p', { class: 'muted small' }, `Last checked ${ago(d.last_check.at)}.`), steps(d.last_check.steps || [], 'Check steps'));
  else mount(checkOut, callout('info', 'Never checked, so the status stays pending. This domain already serves its rules: '
    + 'its status does not gate traffic. Press Check to confirm that the name leads to this node (DNS and the public port); '
    + 'when it does not, the steps say what to fix.'));

  async function reload() {
    d = await get(`/api/domains/${enc(host)}`);
    mount(statusSlot, statusBadge(d.status));
    drawRedirect();
    drawCert();
  }
  mount(statusSlot, statusBadge(d.status));

  const checkBtn = write ? actionButton('Check', async () => {
    const r = await post('/api/domains/check', { host });
    showCheck(r);
    toast(r.ok ? 'Check passed' : 'Check failed', r.ok ? 'ok' : 'error');
    await reload();
  }, { kind: 'primary' }) : null;

  // Test as a visitor
  const testForm = form({ class: 'inline-form' },
    field({ label: 'Path', name: 'path', value: '/', hint: 'Fetched as a visitor would, redirects reported, not followed.' }),
    button('Test', { type: 'submit', kind: 'secondary' }));
  onSubmit(testForm, async (v) => {
    const r = await post('/api/domains/test', { host, path: v.path || '/' });
    if (!r.ok && r.error) {
      mount(testOut, resultBanner(false, `Failed at ${r.error.step}: ${r.error.message}`), facts([['URL', r.url]]));
      return;
    }
    mount(testOut, resultBanner(r.ok, `HTTP ${r.status} from ${r.address}`),
      facts([['URL', h('code', {}, r.url)], ['Size', bytes(r.size)],
        ['Timings', `connect ${r.timings.connect_ms} ms · first byte ${r.timings.first_byte_ms} ms · total ${r.timings.total_ms} ms`]]),
      h('h3', { class: 'muted small' }, 'Headers'),
      h('pre', { class: 'pre' }, Object.entries(r.headers || {}).map(([k, val]) => `${k}: ${val}`).join('\n') || '(none)'),
      r.certificate ? [h('h3', { class: 'muted small' }, 'Certificate served'), certFacts(r.certificate)] : null);
  });

  // Redirect
  const redirectBox = h('div', { class: 'stack' });
  function drawRedirect() {
    const r = d.redirect;
    const current = r ? callout('info', `Every request is redirected with ${r.code} to `, h('code', {}, r.to), r.keep_path ? ' keeping the path and query.' : ' (path dropped).')
      : h('p', { class: 'muted' }, 'No redirect: the domain serves content through its rules.');
    if (!write) { mount(redirectBox, current); return; }
    const f = form({},
      h('div', { class: 'form-grid' },
        field({ label: 'Redirect to', name: 'to', type: 'url', value: r ? r.to : '', placeholder: 'https://new.example.com/', cls: 'wide' }),
        field({ label: 'Status code', name: 'code', value: r ? r.code : 301, options: [['301', '301 Moved permanently'], ['302', '302 Found'], ['307', '307 Temporary redirect'], ['308', '308 Permanent redirect']] }),
        checkbox({ label: 'Keep the path and query', name: 'keep_path', checked: r ? r.keep_path : true })),
      actions(r ? actionButton('Remove redirect', async () => {
        d = await post('/api/domains/redirect', { host, to: null }, { revision: d.revision });
        toast('Redirect removed');
        drawRedirect();
      }, { kind: 'danger-soft' }) : null, button(r ? 'Save redirect' : 'Set redirect', { type: 'submit' })));
    onSubmit(f, async (v) => {
      d = await post('/api/domains/redirect', { host, to: v.to.trim(), code: Number(v.code), keep_path: v.keep_path }, { revision: d.revision });
      toast('Redirect saved');
      drawRedirect();
    });
    mount(redirectBox, current, f);
  }

  // Certificate
  const certBox = h('div', { class: 'stack' });
  function uploadDialog() {
    const certArea = field({ label: 'Certificate chain (PEM)', name: 'cert_pem', type: 'textarea', rows: 6, required: true, placeholder: '-----BEGIN CERTIFICATE-----', hint: 'The leaf first, then its intermediates.' });
    const keyArea = field({ label: 'Private key (PEM)', name: 'key_pem', type: 'textarea', rows: 5, required: true, placeholder: '-----BEGIN PRIVATE KEY-----', hint: 'Unencrypted RSA (2048 bits or more) or EC key. Never shown again.' });
    const certFile = h('input', { type: 'file', id: 'cert-file', accept: '.pem,.crt,.cer,text/plain' });
    const keyFile = h('input', { type: 'file', id: 'key-file', accept: '.pem,.key,text/plain' });
    readFileInto(certFile, certArea.querySelector('textarea'));
    readFileInto(keyFile, keyArea.querySelector('textarea'));
    dialogForm({ title: `Upload a certificate for ${d.display || host}`, submitLabel: 'Upload certificate', wide: true }, [
      certArea, h('div', { class: 'row small' }, h('label', { for: 'cert-file' }, 'or read the chain from a file:'), certFile),
      keyArea, h('div', { class: 'row small' }, h('label', { for: 'key-file' }, 'or read the key from a file:'), keyFile),
    ], async (v, close) => {
      await post('/api/certs/upload', { host, cert_pem: v.cert_pem, key_pem: v.key_pem });
      close();
      toast('Certificate installed');
      await reload();
    });
  }
  async function issue(btn) {
    let seconds = 0;
    const counter = h('span', { class: 'countdown' }, '0');
    const progress = h('div', { class: 'callout callout-info row', role: 'status' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }),
      h('span', {}, 'Checking the domain, then ordering a certificate from the ACME CA. This takes seconds to about a minute: '), counter, ' s');
    mount(certOut, progress);
    const timer = setInterval(() => { seconds += 1; counter.textContent = String(seconds); }, 1000);
    try {
      const c = await post('/api/certs/issue', { host });
      mount(certOut, resultBanner(true, `Certificate issued by ${c.issuer}, valid until ${when(c.not_after)}.`));
      toast('Certificate issued');
      await reload();
    } catch (err) {
      mount(certOut, errorBox(err), err.steps ? steps(err.steps, 'Pre-flight check') : null);
      if (err.status !== 401) toast('The certificate was not issued', 'error');
    } finally {
      clearInterval(timer);
      btn.disabled = false;
    }
  }
  function drawCert() {
    const c = d.certificate;
    const btns = write ? h('div', { class: 'form-actions start' },
      actionButton(c && c.source === 'acme' ? 'Renew with ACME' : 'Issue with ACME', issue, { kind: 'primary' }),
      button(c ? 'Replace with an upload' : 'Upload certificate', { kind: 'secondary', onclick: uploadDialog })) : null;
    mount(certBox, c ? certFacts(c) : h('p', { class: 'muted' }, 'No certificate: HTTPS visitors of this name are refused.'), btns, certOut);
  }

  const rulesBox = h('div', {});
  if (can('routes:read')) {
    Promise.all([get(`/api/rules?domain=${enc(host)}`), can('buckets:read') ? get('/api/buckets') : { buckets: [] }]).then(([{ rules }, { buckets }]) => mount(rulesBox, table([
      { label: 'Path', cell: (r) => h('code', {}, r.path) },
      { label: 'Bucket', cell: (r) => (buckets.find((b) => b.id === r.bucket) || { name: r.bucket }).name },
      { label: 'Prefix', cell: (r) => (r.prefix ? h('code', {}, r.prefix) : '—') },
      { label: 'Enabled', cell: (r) => (r.enabled ? 'yes' : 'no') },
    ], rules, { empty: 'No rule uses this domain yet.', caption: 'Rules of this domain' }))).catch(() => {});
  }

  const deleteBtn = write ? button('Delete', { kind: 'danger-soft', onclick: async () => {
    const ok = await confirm({ title: `Delete ${d.display || host}?`, message: 'The node stops serving this name and its certificate file is deleted. This cannot be undone.' });
    if (!ok) return;
    try {
      await del(`/api/domains/${enc(host)}`, { revision: d.revision });
      toast(`Domain ${d.display || host} deleted`);
      ctx.go('/domains');
    } catch (err) {
      if (err.code === 'in_use') {
        modal({ title: 'This domain is still in use', content: h('div', { class: 'stack' }, h('p', {}, err.message),
          h('p', {}, 'Delete or move these rules first: ', h('a', { href: `#/rules?domain=${enc(host)}` }, 'open the rules of this domain'), '.')) });
      } else toastError(err);
    }
  } }) : null;

  drawRedirect();
  drawCert();
  mount(ctx.main,
    h('div', {}, h('a', { href: '#/domains', class: 'crumb' }, '← Domains'),
      pageHeader(d.display || d.host, d.display && d.display !== d.host ? d.host : `Added ${when(d.created_at)}`,
        can('metrics:read') ? h('a', { href: `#/domains/${enc(host)}/traffic`, class: 'btn btn-secondary' }, 'Traffic') : null, deleteBtn)),
    h('div', { class: 'grid-2' },
      card('Verification', { description: 'Does this name reach this node?', actions: [statusSlot, checkBtn] }, checkOut),
      card('Certificate', { description: 'Used by the HTTPS listener for this name.' }, certBox)),
    write ? card('Test as a visitor', { description: 'Fetches a path over the public port and shows the answer.' }, testForm, testOut) : null,
    card('Redirect', { description: 'Send every request for this name elsewhere.' }, redirectBox),
    domainEdgeCard(() => d, write, (next) => { d = next; }),
    can('routes:read') ? card('Rules', { actions: h('a', { href: `#/rules?domain=${enc(host)}`, class: 'btn btn-secondary btn-sm' }, 'Manage rules') }, rulesBox) : null);
}

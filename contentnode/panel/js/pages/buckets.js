// Buckets: S3-compatible origins, folders on the node and HTTP(S) sites. The
// list, and adding one of any type (optionally checked before it is saved).
// Secrets are write-only: shown as "set".

import { get, post, enc } from '../api.js';
import { h, mount } from '../dom.js';
import { canShared } from '../scopes.js';
import { field, button, values, clearErrors, showError, busy } from '../forms.js';
import { dialogForm } from '../dialog.js';
import { toast } from '../toast.js';
import { ago } from '../format.js';
import { pageHeader, card, table, badge, steps, resultBanner, rowFilter } from '../ui.js';

/** The answer of POST /api/buckets/check: the outcome and each step. */
export function checkView(r) {
  return [resultBanner(r.ok, r.ok ? 'Every step passed: content can be read from here.' : 'The check failed.'), steps(r.steps, 'Check steps')];
}

export function secretBadge(b) {
  return b.secret_key_set ? badge('set', 'info') : badge('missing', 'warn');
}

export function checkBadge(last) {
  if (!last) return badge('not checked', 'neutral');
  return last.ok ? badge('ok', 'ok') : badge(`failed: ${last.failed_step}`, 'bad');
}

const TYPES = [['s3', 'S3-compatible bucket'], ['folder', 'Folder on this node'], ['http', 'Website or app (HTTP)']];
const HOST_MODES = [['origin', 'The url\'s host (default)'], ['client', 'The Host the visitor asked for'], ['name', 'Another name']];

function s3Controls(b) {
  const ps = b ? String(b.path_style) : '';
  return [
    field({ label: 'Endpoint', name: 'endpoint', value: b && b.endpoint, required: true, type: 'url', placeholder: 'https://s3.eu-central-1.amazonaws.com', hint: 'http(s)://host[:port], no path.' }),
    field({ label: 'Bucket', name: 'bucket', value: b && b.bucket, required: true, autocapitalize: 'none', spellcheck: 'false' }),
    field({ label: 'Region', name: 'region', value: b ? b.region : 'us-east-1', required: true, hint: 'R2 uses auto.' }),
    field({ label: 'Access key', name: 'access_key', value: b && b.access_key, required: true, autocomplete: 'off', spellcheck: 'false' }),
    field({ label: 'Secret key', name: 'secret_key', type: 'password', autocomplete: 'new-password', required: !b,
      placeholder: b && b.secret_key_set ? 'set (leave empty to keep it)' : '', hint: b && b.secret_key_set ? 'Stored and never shown. Type a new one to replace it.' : 'Write-only: never shown again.' }),
    field({ label: 'Addressing', name: 'path_style', value: ps, cls: 'wide', options: [['', 'Automatic (path style for IP addresses and localhost)'], ['true', 'Path style: endpoint/bucket/key'], ['false', 'Virtual-hosted: bucket.endpoint/key']] }),
  ];
}

function folderControls(b, roots) {
  const where = roots.length ? `Inside ${roots.join(' or ')}.` : 'This node has no folder roots: folder buckets are turned off.';
  return [field({ label: 'Folder', name: 'path', value: b && b.path, required: true, cls: 'wide', autocapitalize: 'none', spellcheck: 'false',
    placeholder: roots.length ? `${roots[0]}/www` : '', hint: `The absolute path of the folder whose files are served. ${where}` })];
}

function httpControls(b) {
  const mode = b ? (['origin', 'client'].includes(b.host_header) ? b.host_header : 'name') : 'origin';
  const hostMode = field({ label: 'Host header', name: 'host_mode', value: mode, options: HOST_MODES,
    hint: 'The Host the site is asked with: most sites want their own name.' });
  const hostName = field({ label: 'Host name', name: 'host_name', value: mode === 'name' ? b.host_header : '', autocapitalize: 'none',
    spellcheck: 'false', placeholder: 'www.example.com', hint: 'Sent as Host to the site.' });
  const select = hostMode.querySelector('select');
  const toggle = () => {
    const on = select.value === 'name' && !select.disabled;
    hostName.hidden = !on;
    hostName.querySelector('input').disabled = !on;
    hostName.querySelector('input').required = on;
  };
  select.addEventListener('change', toggle);
  hostName.toggle = toggle;
  return [
    field({ label: 'Site URL', name: 'url', value: b && b.url, required: true, type: 'url', cls: 'wide', autocapitalize: 'none', spellcheck: 'false',
      placeholder: 'https://app.internal:8443/shop', hint: 'http(s)://host[:port][/path], no query. A request for a rule\'s key k goes to <url>/k.' }),
    hostMode, hostName,
    field({ label: 'TLS certificate', name: 'tls_verify', value: b ? String(b.tls_verify) : 'true',
      options: [['true', 'Verified (default)'], ['false', 'Not verified (self-signed site)']], hint: 'Only for https:// sites.' }),
    field({ label: 'Connect timeout (s)', name: 'connect_timeout', type: 'number', min: 1, max: 60, required: true,
      value: b ? b.connect_timeout : 5, hint: 'Connect and TLS handshake, 1–60.' }),
    field({ label: 'Read timeout (s)', name: 'read_timeout', type: 'number', min: 1, max: 3600, required: true,
      value: b ? b.read_timeout : 30, hint: 'Longest wait for the next bytes, 1–3600; never a limit on the whole answer.' }),
  ];
}

function ownControls(b, roots) {
  if (b.type === 'folder') return folderControls(b, roots);
  if (b.type === 'http') return httpControls(b);
  return s3Controls(b);
}

/** Host-name fields follow their select once every control's disabled state is set. */
function settle(fields) {
  for (const f of fields) if (f.toggle) f.toggle();
}

/** The bucket fields; b is the stored bucket when editing (its type is fixed), roots the node's folder roots. */
export function bucketFields(b, roots = []) {
  const name = field({ label: 'Name', name: 'name', value: b && b.name, required: true, hint: 'How the panel and rules call it.' });
  if (b) {
    const own = ownControls(b, roots);
    settle(own);
    return h('div', { class: 'form-grid' }, name, ...own);
  }
  const groups = { s3: s3Controls(null), folder: folderControls(null, roots), http: httpControls(null) };
  const type = field({ label: 'Type', name: 'type', value: 's3', options: TYPES, hint: 'Where the files come from.' });
  const show = (kind) => {
    for (const [k, fields] of Object.entries(groups)) {
      for (const f of fields) {
        f.hidden = k !== kind;
        f.querySelectorAll('input, select').forEach((c) => { c.disabled = k !== kind; });
      }
    }
    settle(groups.http);
  };
  type.querySelector('select').addEventListener('change', (e) => show(e.target.value));
  show('s3');
  return h('div', { class: 'form-grid' }, name, type, ...groups.s3, ...groups.folder, ...groups.http);
}

/** The body for POST/PUT from the form values (only the fields of the bucket's type); an empty secret is left out. */
export function bucketBody(v, b) {
  const body = {};
  const kind = b ? b.type : v.type;
  if (!b || v.name !== b.name) body.name = v.name.trim();
  if (kind === 'folder') {
    if (!b) body.type = 'folder';
    if (!b || v.path !== b.path) body.path = v.path.trim();
    return body;
  }
  if (kind === 'http') return Object.assign(body, httpBody(v, b));
  for (const k of ['endpoint', 'bucket', 'region', 'access_key']) if (!b || v[k] !== b[k]) body[k] = v[k].trim();
  if (v.secret_key) body.secret_key = v.secret_key;
  if (v.path_style !== '' && (!b || String(b.path_style) !== v.path_style)) body.path_style = v.path_style === 'true';
  return body;
}

function httpBody(v, b) {
  const wanted = {
    url: v.url.trim(),
    host_header: v.host_mode === 'name' ? v.host_name.trim() : v.host_mode,
    tls_verify: v.tls_verify === 'true',
    connect_timeout: Number(v.connect_timeout),
    read_timeout: Number(v.read_timeout),
  };
  const body = b ? {} : { type: 'http' };
  for (const [k, value] of Object.entries(wanted)) if (!b || b[k] !== value) body[k] = value;
  return body;
}

/** Where a bucket's files come from, for lists and headers. */
export function originText(b) {
  if (b.type === 'http') return b.url;
  return b.type === 'folder' ? b.path : `${b.endpoint} · ${b.bucket}`;
}

function originCell(b) {
  if (b.type === 'folder') return h('div', {}, h('code', { class: 'wrap' }, b.path), h('p', { class: 'cell-sub' }, 'folder on this node'));
  if (b.type === 'http') return h('div', {}, h('code', { class: 'wrap' }, b.url), h('p', { class: 'cell-sub' }, 'website or app'));
  return h('div', {}, h('code', {}, b.endpoint), h('p', { class: 'cell-sub' }, `${b.bucket} · ${b.region}`));
}

function addDialog(ctx, roots) {
  const out = h('div', { 'aria-live': 'polite' });
  const checkBtn = button('Check first', { kind: 'secondary' });
  const f = dialogForm({ title: 'Add a bucket', submitLabel: 'Add bucket', wide: true, extraButtons: [checkBtn],
    description: 'Any S3-compatible storage (AWS S3, MinIO, SeaweedFS, R2, B2…), a folder on this node, or a website or app the node sits in front of.' }, [bucketFields(null, roots), out], async (v, close) => {
    const b = await post('/api/buckets', bucketBody(v, null));
    close();
    toast(`Bucket ${b.name} added`);
    for (const warning of b.fleet_warnings || []) toast(warning, 'error'); // replicas that will refuse it
    ctx.go(`/buckets/${enc(b.id)}`);
  });
  checkBtn.addEventListener('click', () => busy([...f.querySelectorAll('button')], async () => {
    clearErrors(f);
    try {
      mount(out, checkView(await post('/api/buckets/check', bucketBody(values(f), null))));
    } catch (err) { if (err.status !== 401) showError(f, err); }
  }));
}

export async function render(ctx) {
  const { buckets, folder_roots: roots } = await get('/api/buckets');
  const add = canShared('buckets:write') ? button('Add bucket', { onclick: () => addDialog(ctx, roots || []) }) : null;
  const list = table([
      { label: 'Name', cell: (b) => h('a', { href: `#/buckets/${enc(b.id)}`, class: 'cell-main' }, b.name) },
      { label: 'Origin', cell: originCell },
      { label: 'Secret key', cell: (b) => (b.type === 's3' ? secretBadge(b) : badge('not needed', 'neutral')) },
      { label: 'Last check', cell: (b) => h('div', {}, checkBadge(b.last_check), b.last_check ? h('p', { class: 'cell-sub' }, ago(b.last_check.at)) : null) },
    ], buckets, { empty: add ? 'No buckets yet. Connect the storage your content lives in, or a folder on this node.' : 'No buckets yet.', caption: 'Buckets' });
  mount(ctx.main, pageHeader('Buckets', 'The origins content is fetched from: S3-compatible buckets, folders on this node and websites.', add),
    rowFilter('Filter buckets', list), card(null, {}, list));
}

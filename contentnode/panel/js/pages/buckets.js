// Buckets: S3-compatible origins. The list, and adding one (optionally
// checked before it is saved). Secrets are write-only: shown as "set".

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
  return [resultBanner(r.ok, r.ok ? 'The bucket answers with these credentials.' : 'The check failed.'), steps(r.steps, 'Check steps')];
}

export function secretBadge(b) {
  return b.secret_key_set ? badge('set', 'info') : badge('missing', 'warn');
}

export function checkBadge(last) {
  if (!last) return badge('not checked', 'neutral');
  return last.ok ? badge('ok', 'ok') : badge(`failed: ${last.failed_step}`, 'bad');
}

/** The bucket fields; b is the stored bucket when editing. */
export function bucketFields(b) {
  const ps = b ? String(b.path_style) : '';
  return h('div', { class: 'form-grid' },
    field({ label: 'Name', name: 'name', value: b && b.name, required: true, hint: 'How the panel and rules call it.' }),
    field({ label: 'Endpoint', name: 'endpoint', value: b && b.endpoint, required: true, type: 'url', placeholder: 'https://s3.eu-central-1.amazonaws.com', hint: 'http(s)://host[:port], no path.' }),
    field({ label: 'Bucket', name: 'bucket', value: b && b.bucket, required: true, autocapitalize: 'none', spellcheck: 'false' }),
    field({ label: 'Region', name: 'region', value: b ? b.region : 'us-east-1', required: true, hint: 'R2 uses auto.' }),
    field({ label: 'Access key', name: 'access_key', value: b && b.access_key, required: true, autocomplete: 'off', spellcheck: 'false' }),
    field({ label: 'Secret key', name: 'secret_key', type: 'password', autocomplete: 'new-password', required: !b,
      placeholder: b && b.secret_key_set ? 'set (leave empty to keep it)' : '', hint: b && b.secret_key_set ? 'Stored and never shown. Type a new one to replace it.' : 'Write-only: never shown again.' }),
    field({ label: 'Addressing', name: 'path_style', value: ps, cls: 'wide', options: [['', 'Automatic (path style for IP addresses and localhost)'], ['true', 'Path style: endpoint/bucket/key'], ['false', 'Virtual-hosted: bucket.endpoint/key']] }));
}

/** The body for POST/PUT from the form values; an empty secret is left out. */
export function bucketBody(v, b) {
  const body = {};
  for (const k of ['name', 'endpoint', 'bucket', 'region', 'access_key']) if (!b || v[k] !== b[k]) body[k] = v[k].trim();
  if (v.secret_key) body.secret_key = v.secret_key;
  if (v.path_style !== '' && (!b || String(b.path_style) !== v.path_style)) body.path_style = v.path_style === 'true';
  return body;
}

function addDialog(ctx) {
  const out = h('div', { 'aria-live': 'polite' });
  const checkBtn = button('Check first', { kind: 'secondary' });
  const f = dialogForm({ title: 'Add a bucket', submitLabel: 'Add bucket', wide: true, extraButtons: [checkBtn],
    description: 'Any S3-compatible storage: AWS S3, MinIO, SeaweedFS, R2, B2…' }, [bucketFields(null), out], async (v, close) => {
    const b = await post('/api/buckets', bucketBody(v, null));
    close();
    toast(`Bucket ${b.name} added`);
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
  const { buckets } = await get('/api/buckets');
  const add = canShared('buckets:write') ? button('Add bucket', { onclick: () => addDialog(ctx) }) : null;
  const list = table([
      { label: 'Name', cell: (b) => h('a', { href: `#/buckets/${enc(b.id)}`, class: 'cell-main' }, b.name) },
      { label: 'Endpoint', cell: (b) => h('div', {}, h('code', {}, b.endpoint), h('p', { class: 'cell-sub' }, `${b.bucket} · ${b.region}`)) },
      { label: 'Secret key', cell: secretBadge },
      { label: 'Last check', cell: (b) => h('div', {}, checkBadge(b.last_check), b.last_check ? h('p', { class: 'cell-sub' }, ago(b.last_check.at)) : null) },
    ], buckets, { empty: add ? 'No buckets yet. Connect the storage your content lives in.' : 'No buckets yet.', caption: 'Buckets' });
  mount(ctx.main, pageHeader('Buckets', 'The S3-compatible origins content is fetched from.', add),
    rowFilter('Filter buckets', list), card(null, {}, list));
}

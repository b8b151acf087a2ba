// One bucket (S3, folder or HTTP site): its settings (edit), check with steps, test an object, delete.

import { get, post, put, del, enc } from '../api.js';
import { h, mount } from '../dom.js';
import { canShared } from '../scopes.js';
import { field, form, button, onSubmit, actionButton } from '../forms.js';
import { confirm, modal, dialogForm } from '../dialog.js';
import { toast, toastError } from '../toast.js';
import { when, ago, bytes } from '../format.js';
import { pageHeader, card, facts, resultBanner } from '../ui.js';
import { bucketFields, bucketBody, checkBadge, checkView, originText, secretBadge } from './buckets.js';

function preview(b64) {
  const raw = atob(b64 || '');
  const printable = /^[\x09\x0a\x0d\x20-\x7e]*$/.test(raw);
  if (printable) return h('pre', { class: 'pre' }, raw || '(empty)');
  return h('pre', { class: 'pre' }, [...raw].map((c) => c.charCodeAt(0).toString(16).padStart(2, '0')).join(' '));
}

const CHECK_STEPS = {
  s3: 'Resolve, connect, authenticate and list, in order.',
  folder: 'Resolve (inside the folder roots), open and list, in order.',
  http: 'Resolve, connect, TLS (names and expiry) and a request to the site, in order.',
};

const DELETE_TEXT = {
  s3: 'The bucket definition and its credentials are removed from this node. Objects in the bucket are not touched.',
  folder: 'The bucket definition is removed from this node. The folder and its files are not touched.',
  http: 'The bucket definition is removed from this node. The site itself is not touched.',
};

function settingsFacts(b) {
  if (b.type === 'folder') return [['Type', 'folder on this node'], ['Folder', h('code', {}, b.path)]];
  if (b.type === 'http') {
    const host = { origin: 'the url\'s host', client: 'the visitor\'s Host' }[b.host_header] || h('code', {}, b.host_header);
    return [['Type', 'website or app (HTTP)'], ['Site URL', h('code', { class: 'wrap' }, b.url)], ['Host header', host],
      ['TLS certificate', b.tls_verify ? 'verified' : 'not verified'],
      ['Timeouts', `connect ${b.connect_timeout} s, read ${b.read_timeout} s`]];
  }
  return [
    ['Type', 'S3-compatible bucket'], ['Endpoint', h('code', {}, b.endpoint)], ['Bucket', b.bucket], ['Region', b.region],
    ['Addressing', b.path_style ? 'path style' : 'virtual-hosted'], ['Access key', h('code', {}, b.access_key)],
    ['Secret key', secretBadge(b)],
  ];
}

export async function render(ctx) {
  let b = await get(`/api/buckets/${enc(ctx.params.id)}`);
  const roots = b.type === 'folder' ? ((await get('/api/buckets')).folder_roots || []) : [];
  const write = canShared('buckets:write');
  const info = h('div', {});
  const checkOut = h('div', { 'aria-live': 'polite' });
  const testOut = h('div', { 'aria-live': 'polite' });
  const title = h('div', {});

  function draw() {
    mount(title, h('a', { href: '#/buckets', class: 'crumb' }, '← Buckets'), pageHeader(b.name, originText(b), write ? editBtn : null, write ? deleteBtn : null));
    mount(info, facts([
      ...settingsFacts(b),
      ['Last check', h('span', {}, checkBadge(b.last_check), b.last_check ? ` ${ago(b.last_check.at)}` : '')],
      ['Created', when(b.created_at)], ['Updated', when(b.updated_at)],
    ]));
  }

  const editBtn = button('Edit', { kind: 'secondary', onclick: () => {
    dialogForm({ title: `Edit ${b.name}`, submitLabel: 'Save', wide: true }, bucketFields(b, roots), async (v, close) => {
      const body = bucketBody(v, b);
      if (Object.keys(body).length) b = await put(`/api/buckets/${enc(b.id)}`, body, { revision: b.revision });
      close();
      toast('Bucket saved');
      for (const warning of b.fleet_warnings || []) toast(warning, 'error'); // replicas that will refuse it
      draw();
    });
  } });

  const deleteBtn = button('Delete', { kind: 'danger-soft', onclick: async () => {
    if (!await confirm({ title: `Delete ${b.name}?`, message: DELETE_TEXT[b.type] || DELETE_TEXT.s3 })) return;
    try {
      await del(`/api/buckets/${enc(b.id)}`, { revision: b.revision });
      toast(`Bucket ${b.name} deleted`);
      ctx.go('/buckets');
    } catch (err) {
      if (err.code === 'in_use') modal({ title: 'This bucket is still in use', content: h('div', { class: 'stack' }, h('p', {}, err.message), h('a', { href: '#/rules' }, 'Open the rules')) });
      else toastError(err);
    }
  } });

  if (b.last_check) mount(checkOut, b.last_check.ok ? resultBanner(true, `Last check passed ${ago(b.last_check.at)}.`)
    : resultBanner(false, `Last check failed at ${b.last_check.failed_step} ${ago(b.last_check.at)}: ${b.last_check.detail}`));
  const checkBtn = write ? actionButton('Check', async () => {
    const r = await post('/api/buckets/check', { id: b.id });
    mount(checkOut, checkView(r));
    toast(r.ok ? 'Check passed' : 'Check failed', r.ok ? 'ok' : 'error');
    b = await get(`/api/buckets/${enc(b.id)}`);
    draw();
  }, { kind: 'primary' }) : null;

  const testForm = form({ class: 'inline-form' },
    field({ label: 'Object key', name: 'key', required: true, placeholder: 'site/index.html', spellcheck: 'false', autocapitalize: 'none' }),
    button('Fetch', { type: 'submit', kind: 'secondary' }));
  onSubmit(testForm, async (v) => {
    const r = await post('/api/buckets/test', { id: b.id, key: v.key });
    if (!r.ok) {
      mount(testOut, resultBanner(false, r.error ? r.error.message : 'The object could not be fetched.'),
        r.error ? facts([['Code', r.error.code], ['Status', r.error.status], ...(r.error.s3_code ? [['S3 code', r.error.s3_code]] : [])]) : null);
      return;
    }
    mount(testOut, resultBanner(true, `Found: ${r.size == null ? 'size not sent' : bytes(r.size)}, ${r.content_type || 'no content type'}`),
      facts([['Status', r.status], ['ETag', h('code', {}, r.etag || '—')], ['Last modified', r.last_modified], ['Time', `${r.ms} ms`]]),
      h('h3', { class: 'muted small' }, 'First bytes'), preview(r.first_bytes));
  });

  draw();
  mount(ctx.main, title,
    h('div', { class: 'grid-2' },
      card('Settings', {}, info),
      card('Connection check', { description: CHECK_STEPS[b.type] || CHECK_STEPS.s3, actions: checkBtn }, checkOut)),
    write ? card('Test an object', { description: 'Reads the object\'s metadata and first 64 bytes.' }, testForm, testOut) : null);
}

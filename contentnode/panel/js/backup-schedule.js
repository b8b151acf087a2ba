// The Backup page's scheduled backups: the schedule and its bucket, the
// passphrase (set, or generated and shown once), "Run now", the last run, and
// the backups stored in the bucket with a restore from one.

import { get, post, put } from './api.js';
import { h, mount } from './dom.js';
import { field, form, button, onSubmit, actions, checkbox, actionButton } from './forms.js';
import { confirm, showSecretOnce } from './dialog.js';
import { toast, toastError } from './toast.js';
import { when, bytes } from './format.js';
import { card, callout, facts, table, badge, errorBox, loading } from './ui.js';
import { restoredView } from './backup-restored.js';

const WEEKDAYS = ['monday', 'tuesday', 'wednesday', 'thursday', 'friday', 'saturday', 'sunday'];
const cap = (s) => s.charAt(0).toUpperCase() + s.slice(1);
const two = (n) => String(n).padStart(2, '0');

function scheduleText(s) {
  if (s.frequency === 'off') return 'Off: backups run only when started by hand';
  const at = `${two(s.hour)}:${two(s.minute)} UTC`;
  return s.frequency === 'daily' ? `Every day at ${at}` : `Every ${cap(s.weekday)} at ${at}`;
}

function statusFacts(s) {
  const st = s.status;
  const error = st.last_error ? h('span', {}, badge(st.last_error.code, 'bad'), ' ', st.last_error.message,
    st.failures > 1 ? ` (${st.failures} failed runs in a row)` : '') : null;
  return facts([
    ['Schedule', scheduleText(s)],
    ['Bucket', s.bucket ? h('code', {}, `${s.bucket}/${s.prefix}`) : 'not set'],
    ['Passphrase', s.passphrase_set ? `held by the node since ${when(s.passphrase_set_at)}` : 'not set'],
    ['Next run', s.next_run_at ? `${when(s.next_run_at)} (your time)` : '—'],
    ['Last run', st.running ? 'running now' : st.last_run_at ? `${when(st.last_run_at)} ${st.last_error ? '(failed)' : '(ok)'}` : 'never'],
    ['Last success', st.last_ok_at ? `${when(st.last_ok_at)}, ${bytes(st.last_size)}` : 'never'],
    error ? ['Last error', error] : null,
    st.prune_error ? ['Retention', `old backups could not be deleted: ${st.prune_error}`] : null,
  ]);
}

/** A generated passphrase, shown this once: the operator must keep a copy outside the node. */
function showPassphrase(passphrase) {
  showSecretOnce({ title: 'Backup passphrase generated', secret: passphrase, testId: 'backup-passphrase', copyLabel: 'Copy passphrase',
    description: 'Keep a copy outside this node, in a password manager: every stored backup is sealed with it, and without it a backup cannot be restored. It is shown only this once.' });
}

function orNull(text) {
  return text.trim() === '' ? undefined : text.trim();
}

function scheduleForm(s, buckets, redraw) {
  const hours = Array.from({ length: 24 }, (_, i) => [String(i), `${two(i)}:00`]);
  const s3 = buckets.filter((b) => b.type === 's3');
  const f = form({},
    h('div', { class: 'form-grid' },
      field({ label: 'Frequency', name: 'frequency', value: s.frequency, options: [['off', 'Off (run by hand only)'], ['daily', 'Daily'], ['weekly', 'Weekly']] }),
      field({ label: 'Weekday', name: 'weekday', value: s.weekday, options: WEEKDAYS.map((d) => [d, cap(d)]), hint: 'Weekly backups only.' }),
      field({ label: 'Hour (UTC)', name: 'hour', value: String(s.hour), options: hours }),
      field({ label: 'Minute', name: 'minute', type: 'number', min: 0, max: 59, value: s.minute }),
      field({ label: 'Backups to keep', name: 'keep', type: 'number', min: 1, max: 1000, value: s.keep, hint: 'Older backups of this node are deleted after each successful run.' }),
      field({ label: 'Key prefix of the backups', name: 'prefix', value: s.prefix, autocomplete: 'off', spellcheck: 'false' })),
    h('h3', { class: 'subhead' }, 'Bucket'),
    s3.length ? field({ label: 'Copy endpoint and keys from a bucket', name: 'from_bucket', value: '',
      options: [['', 'No, enter them below'], ...s3.map((b) => [b.id, `${b.name} (${b.bucket})`])],
      hint: 'Fields you fill in below win, e.g. another bucket name with the same keys. Folder buckets cannot hold backups.' }) : null,
    h('div', { class: 'form-grid' },
      field({ label: 'Endpoint', name: 'endpoint', value: s.endpoint ?? '', placeholder: 'https://s3.example.com', autocomplete: 'off', spellcheck: 'false' }),
      field({ label: 'Region', name: 'region', value: s.region ?? '', autocomplete: 'off', spellcheck: 'false' }),
      field({ label: 'Bucket', name: 'bucket', value: s.bucket ?? '', autocomplete: 'off', spellcheck: 'false', hint: 'Use a bucket the public does not read.' }),
      field({ label: 'Access key', name: 'access_key', value: s.access_key ?? '', autocomplete: 'off', spellcheck: 'false' }),
      field({ label: 'Secret key', name: 'secret_key', type: 'password', autocomplete: 'new-password', placeholder: s.secret_key_set ? 'stored; leave empty to keep' : '' }),
      h('div', { class: 'field' }, checkbox({ label: 'Path-style requests', name: 'path_style', checked: Boolean(s.path_style), hint: 'Needed for an endpoint given by address or localhost.' }))),
    h('h3', { class: 'subhead' }, 'Passphrase'),
    checkbox({ label: s.passphrase_set ? 'Generate a new passphrase' : 'Generate a passphrase', name: 'generate', checked: !s.passphrase_set,
      hint: 'Every backup is sealed with it. It is shown once; backups made before a change still need the old one.' }),
    h('div', { class: 'form-grid', 'data-passphrase': '' },
      field({ label: 'New passphrase', name: 'passphrase', type: 'password', autocomplete: 'new-password', hint: s.passphrase_set ? 'Leave empty to keep the current one.' : '8 characters or more.' }),
      field({ label: 'Repeat the new passphrase', name: 'passphrase2', type: 'password', autocomplete: 'new-password' })),
    actions(button('Save schedule', { type: 'submit' })));
  const typed = f.querySelector('[data-passphrase]');
  const sync = () => {
    typed.hidden = f.elements.generate.checked;
    if (typed.hidden) { f.elements.passphrase.value = ''; f.elements.passphrase2.value = ''; } // no hidden secret
  };
  f.elements.generate.addEventListener('change', sync);
  sync();
  onSubmit(f, async (v) => {
    if (v.passphrase !== v.passphrase2) throw { message: 'the two passphrases differ', field: 'passphrase2' };
    const body = { frequency: v.frequency, weekday: v.weekday, hour: Number(v.hour), minute: v.minute, keep: v.keep, prefix: v.prefix };
    // a bucket copied from lends its own path_style, unless the box was changed
    if (!v.from_bucket || v.path_style !== Boolean(s.path_style)) body.path_style = v.path_style;
    for (const name of ['endpoint', 'region', 'bucket', 'access_key', 'secret_key']) if (orNull(v[name]) !== undefined) body[name] = v[name].trim();
    if (v.from_bucket) body.from_bucket = v.from_bucket;
    if (v.generate) body.generate_passphrase = true;
    else if (v.passphrase) body.passphrase = v.passphrase;
    const saved = await put('/api/backup/schedule', body, { revision: s.revision });
    f.elements.secret_key.value = ''; f.elements.passphrase.value = ''; f.elements.passphrase2.value = '';
    toast('Backup schedule saved');
    if (saved.generated_passphrase) showPassphrase(saved.generated_passphrase);
    redraw();
  });
  return f;
}

function storedCard(admin, token) {
  const out = h('div', { 'aria-live': 'polite' });
  const body = h('div', {}, loading());
  const restore = async (b) => {
    const creds = checkbox({ label: 'Bring back the backup\'s accounts and credentials as they were', name: 'restore_credentials',
      hint: 'For moving a node to new hardware. Left off, passwords, second factors, tokens, accounts, link keys, channel and bucket secrets and certificates stay as they are now.' });
    const ok = await confirm({ title: 'Restore this stored backup?', confirmLabel: 'Restore', details: creds,
      message: `Made ${when(b.created_at)}${b.own ? '' : ' by another node'}. Settings, buckets, domains, keys and certificates are replaced by the backup's; the backup schedule stays as it is. Every other session, yours elsewhere too, ends. The current state is saved on the node first.` });
    if (!ok) return;
    try {
      const r = await post('/api/backup/stored/restore', { key: b.key, restore_credentials: creds.querySelector('input').checked });
      mount(out, restoredView(r));
      toast('Backup restored');
    } catch (err) { toastError(err); }
  };
  const load = async () => {
    mount(body, loading());
    try {
      const r = await get('/api/backup/stored');
      mount(body, table([
        { label: 'Made', cell: (b) => h('span', { class: 'cell-main' }, when(b.created_at)) },
        { label: 'Size', cell: (b) => bytes(b.size) },
        { label: 'Node', cell: (b) => (b.own ? 'this node' : b.node) },
        { label: 'Key', cell: (b) => h('code', { class: 'wrap' }, b.key) },
        admin ? { label: 'Actions', cls: 'actions', cell: (b) => button('Restore…', { kind: 'danger-soft', class: 'btn btn-danger-soft btn-sm',
          'aria-label': `Restore the backup made ${when(b.created_at)}`, onclick: () => restore(b) }) } : null,
      ].filter(Boolean), r.backups, { empty: 'No backups stored yet.', caption: 'Stored backups' }));
    } catch (err) { mount(body, errorBox(err)); }
  };
  load();
  return card('Stored backups', { description: 'The backups in the bucket, newest first.', actions: actionButton('Refresh', load) },
    token ? callout('info', 'You are signed in with an API token: a backup can be restored only after logging in with your password.')
      : admin ? null : callout('info', 'Only an administrator can restore a backup.'), body, out);
}

/** The scheduled-backup cards of the Backup page. */
export async function scheduleCards(ctx, admin) {
  const holder = h('div', { class: 'stack' }, loading());
  const draw = async () => {
    try {
      const [s, buckets] = await Promise.all([get('/api/backup/schedule'),
        admin ? get('/api/buckets').then((r) => r.buckets).catch(() => []) : Promise.resolve([])]);
      const run = actionButton('Run now', async () => {
        try {
          const r = await post('/api/backup/schedule/run');
          toast(`Backup stored (${bytes(r.size)})`);
        } finally { draw(); }
      });
      mount(holder,
        card('Scheduled backups', { description: 'Encrypted backups of the whole node, sent to a bucket of your own.', actions: s.bucket ? run : null },
          statusFacts(s),
          admin ? scheduleForm(s, buckets, draw) : callout('info', ctx.session.token
            ? 'You are signed in with an API token: the schedule can be changed only after logging in with your password.'
            : 'Only an administrator can change the schedule.')),
        s.bucket ? storedCard(admin, Boolean(ctx.session.token)) : null);
    } catch (err) { mount(holder, errorBox(err)); }
  };
  await draw();
  return holder;
}

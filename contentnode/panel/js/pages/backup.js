// Backup: export (plain, or encrypted with a passphrase) as a file download,
// restore from a file after a confirmation, and the scheduled backups to a
// bucket (backup-schedule.js).

import { api, post } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, onSubmit, actions, checkbox } from '../forms.js';
import { confirm } from '../dialog.js';
import { toast } from '../toast.js';
import { when } from '../format.js';
import { pageHeader, card, download, callout, tokenSessionNote } from '../ui.js';
import { restoredView } from '../backup-restored.js';
import { scheduleCards } from '../backup-schedule.js';

function filename(disposition, kind) {
  const m = /filename="?([^";]+)"?/.exec(disposition);
  return m ? m[1] : `contentnode-backup-${kind}-${new Date().toISOString().slice(0, 10)}.json`;
}

function exportCard(admin) {
  const pass = h('div', { class: 'form-grid' },
    field({ label: 'Passphrase', name: 'passphrase', type: 'password', autocomplete: 'new-password', hint: '8 characters or more. Without it the backup cannot be opened: keep it safe.' }),
    field({ label: 'Repeat the passphrase', name: 'passphrase2', type: 'password', autocomplete: 'new-password' }));
  const enc = admin ? checkbox({ label: 'Encrypt, with every secret', name: 'encrypted', checked: true,
    hint: 'A complete copy of the node: users, keys, certificates. Unencrypted backups leave every secret out.' }) : null;
  const f = form({}, enc, pass, actions(button('Download backup', { type: 'submit' })));
  const sync = () => {
    pass.hidden = !admin || !f.elements.encrypted.checked;
    if (pass.hidden) { f.elements.passphrase.value = ''; f.elements.passphrase2.value = ''; } // no hidden secret
  };
  if (enc) f.elements.encrypted.addEventListener('change', sync);
  sync();
  onSubmit(f, async (v) => {
    const encrypted = admin && v.encrypted;
    if (encrypted && v.passphrase !== v.passphrase2) throw { message: 'the two passphrases differ', field: 'passphrase2' };
    const r = await api('POST', '/api/backup/export', encrypted ? { passphrase: v.passphrase } : {}, { text: true });
    download(filename(r.disposition, encrypted ? 'encrypted' : 'plain'), r.text);
    f.elements.passphrase.value = ''; f.elements.passphrase2.value = '';
    toast(encrypted ? 'Encrypted backup downloaded' : 'Plain backup downloaded (no secrets)');
  });
  return card('Export', { description: 'Download the node\'s configuration as a file.' },
    admin ? null : callout('info', 'Only an administrator can export an encrypted backup; yours leaves every secret out.'), f);
}

function restoreCard() {
  const out = h('div', { 'aria-live': 'polite' });
  let doc = null;
  const fileInput = h('input', { type: 'file', id: 'backup-file', name: 'backup', accept: 'application/json,.json', required: true, 'aria-describedby': 'backup-file-error backup-file-hint' });
  const about = h('p', { class: 'hint', id: 'backup-file-hint' }, 'A file made by Export. Files over 64 KB: use contentnode backup restore on the node.');
  const pass = field({ label: 'Passphrase of the backup', name: 'passphrase', type: 'password', autocomplete: 'off' });
  const creds = checkbox({ label: 'Bring back the backup\'s accounts and credentials as they were', name: 'restore_credentials',
    hint: 'For moving a node to new hardware. Left off, passwords, second factors, tokens, accounts, link keys, channel and bucket secrets and certificates stay as they are now: nothing revoked or replaced since the backup comes back.' });
  pass.hidden = true;
  creds.hidden = true;
  fileInput.addEventListener('change', async () => {
    doc = null;
    const file = fileInput.files[0];
    if (!file) return;
    try {
      doc = JSON.parse(await file.text());
      about.textContent = `${doc.kind || 'unknown'} backup of ${doc.node || '?'} made ${when(doc.created_at)}`;
      pass.hidden = creds.hidden = doc.kind !== 'encrypted';
      if (pass.hidden) { pass.querySelector('input').value = ''; creds.querySelector('input').checked = false; }
    } catch { about.textContent = 'This file is not a JSON backup.'; }
  });
  const f = form({},
    h('div', { class: 'field', 'data-field': 'backup' }, h('label', { for: 'backup-file' }, 'Backup file'), fileInput, about,
      h('p', { class: 'field-error', id: 'backup-file-error', hidden: true })),
    pass, creds, actions(button('Restore…', { type: 'submit', kind: 'danger' })));
  onSubmit(f, async (v) => {
    if (!doc) throw { message: 'choose a backup file first', field: 'backup' };
    const ok = await confirm({ title: 'Restore this backup?', confirmLabel: 'Restore',
      message: `${doc.kind === 'encrypted' ? 'Settings, buckets, domains, keys and certificates are replaced by the backup\'s.'
        : 'Settings, buckets, domains and rules are replaced by the backup\'s; users and keys stay.'} ${v.restore_credentials
        ? 'Users, passwords, second factors, tokens, link keys, channel and bucket secrets and certificates become the backup\'s, as they were.'
        : 'Passwords, second factors, tokens, accounts, link keys, channel and bucket secrets and certificates stay as they are now.'} Every other session, yours elsewhere too, ends. The current state is saved on the node first.` });
    if (!ok) return;
    const body = { backup: doc };
    if (doc.kind === 'encrypted') body.passphrase = v.passphrase;
    if (doc.kind === 'encrypted' && v.restore_credentials) body.restore_credentials = true;
    const r = await post('/api/backup/restore', body);
    f.elements.passphrase.value = '';
    mount(out, restoredView(r));
    toast('Backup restored');
  });
  return card('Restore', { description: 'Replace this node\'s configuration with a backup.' }, f, out);
}

export async function render(ctx) {
  const admin = ctx.user.role === 'admin' && !ctx.session.token; // a token session acts as a custom user
  const scheduled = h('div', {});
  mount(ctx.main, pageHeader('Backup', 'Export the configuration, or restore it on this or a new node; back up to a bucket on a schedule.'),
    h('div', { class: 'stack' },
      h('div', { class: 'grid-2' }, exportCard(admin), admin ? restoreCard() : card('Restore', {}, ctx.session.token
        ? tokenSessionNote('a backup can be restored') : callout('info', 'Only an administrator can restore a backup.'))),
      scheduled));
  mount(scheduled, await scheduleCards(ctx, admin));
}

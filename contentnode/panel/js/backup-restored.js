// What a restore did, as the Backup page shows it after a restore from a file
// or from the bucket: when the backup was made, where the previous state was
// saved, the sessions ended and what the restore kept of this node's credentials.

import { h } from './dom.js';
import { when } from './format.js';
import { facts, resultBanner } from './ui.js';

// What the restore kept of this node's credentials (the answer's "kept"), one row per non-empty list.
function keptFacts(r) {
  if (r.restore_credentials) return [['Credentials', 'restored as the backup had them']];
  const k = r.kept;
  const tokens = (list) => list.map((t) => `${t.name} (${t.user})`).join(', ');
  const rows = [['Tokens revoked since, still revoked', tokens(k.tokens_revoked)], ['Tokens made since, kept', tokens(k.tokens_created)],
    ['Users deleted since, still deleted', k.users_deleted.join(', ')], ['Users made since, kept', k.users_created.join(', ')],
    ['Current credentials kept', k.users_credentials.map((c) => `${c.user}: ${c.kept.join(', ').replace('_', ' ')}`).join('; ')],
    ['Link keys retired since, still retired', k.link_keys_retired.join(', ')], ['Link keys made since, kept', k.link_keys_created.join(', ')],
    ['Current notification secrets kept', k.notification_channels.join(', ')],
    ['Current bucket credentials kept', k.bucket_credentials.join(', ')], ['Current certificates kept', k.certificates.join(', ')]];
  const shown = rows.filter(([, text]) => text);
  return shown.length ? shown : [['Credentials', 'none changed since the backup']];
}

/** The banner and facts of a restore's answer. */
export function restoredView(r) {
  return h('div', {}, resultBanner(true, 'The backup was restored.'), facts([['Kind', r.kind], ['Made', when(r.created_at)],
    r.from_bucket ? ['From the bucket', h('code', {}, r.from_bucket)] : null,
    ['Previous state saved as', h('code', {}, r.pre_restore)], ['Other sessions ended', String(r.sessions_ended)], ...keptFacts(r)]));
}

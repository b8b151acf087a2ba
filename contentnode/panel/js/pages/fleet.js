// Fleet: this node's role in a fleet (docs/API.md, Fleet). Standalone: set up a primary
// or join with a code (a dry run first). Primary: mint join codes (shown once, with a
// copy button), the codes minted (who used each, revoke) and the nodes table (remove a node). Replica: where edits are made. Any member: leave.
// The issuer, promotion and key rotation parts are in fleet_keys.js.

import { get, post, del, enc } from '../api.js';
import { h, mount } from '../dom.js';
import { field, checkbox, form, button, onSubmit, actions } from '../forms.js';
import { confirm } from '../dialog.js';
import { toast } from '../toast.js';
import { when, ago, bytes, count } from '../format.js';
import { pageHeader, card, table, badge, copyButton, callout, facts } from '../ui.js';
import { issuerCard, promoteCard, rotateButton, nodeAlerts } from './fleet_keys.js';

const EXPIRY = [[3600, '1 hour'], [86400, '1 day'], [604800, '7 days']];

function shownOnce(title, text, warning) {
  return callout('warn', h('p', {}, h('strong', {}, title), ' ', warning),
    h('div', { class: 'copy-row' }, h('code', { 'data-testid': 'shown-once' }, text), copyButton(text)));
}

function initCard(ctx) {
  const out = h('div', { 'aria-live': 'polite' });
  const f = form({},
    h('div', { class: 'form-grid' },
      field({ label: 'Endpoint', name: 'endpoint', type: 'url', required: true, placeholder: 'https://s3.example.com' }),
      field({ label: 'Region', name: 'region', required: true, value: 'us-east-1' }),
      field({ label: 'Bucket', name: 'bucket', required: true }),
      field({ label: 'Prefix', name: 'prefix', value: 'contentnode/', hint: 'Folder for the bundle and node statuses.' }),
      field({ label: 'Access key', name: 'access_key', required: true, autocomplete: 'off' }),
      field({ label: 'Secret key', name: 'secret_key', type: 'password', required: true, autocomplete: 'new-password' }),
      checkbox({ label: 'Path-style addressing', name: 'path_style', checked: true })),
    actions(button('Make this node the primary', { type: 'submit' })));
  onSubmit(f, async (v) => {
    const r = await post('/api/fleet/init', { ...v, prefix: v.prefix.trim() || 'contentnode/' });
    mount(out, shownOnce('Recovery secret.', r.recovery_secret,
      'Shown once: keep it offline. It lets a replica take over if this primary is lost.'),
    h('p', {}, button('Done', { kind: 'secondary', onclick: () => { ctx.state.fleetRole = null; ctx.rerender(); } })));
    toast('This node is now the fleet primary');
  });
  return card('Set up a primary', { description: 'Share this node\'s domains, buckets, rules and link keys through a bucket only the fleet writes to.' }, f, out);
}

function counts(c) {
  return `${c.domains} domains, ${c.certificates ?? 0} certificates, ${c.buckets} buckets, ${c.rules} rules, ${c.link_keys} link keys`;
}

function joinCard(ctx) {
  const out = h('div', { 'aria-live': 'polite' });
  const f = form({},
    field({ label: 'Join code', name: 'code', type: 'textarea', rows: 3, required: true, placeholder: 'cnj_…', hint: 'Minted on the primary; it works once and until it expires.' }),
    actions(button('Check what it replaces', { type: 'submit' })));
  onSubmit(f, async (v) => {
    const code = v.code.trim();
    const r = await post('/api/fleet/join', { code, dry_run: true });
    const join = button('Join the fleet', { kind: 'danger', onclick: async () => {
      await post('/api/fleet/join', { code });
      toast('Joined: the fleet\'s configuration arrives within a poll');
      ctx.state.fleetRole = null;
      ctx.rerender();
    } });
    mount(out, callout('warn', h('p', {}, `Fleet ${r.fleet_id} (primary ${r.primary}, seq ${r.seq}). `,
      `This node's ${counts(r.replaces)} will be replaced by the fleet's ${counts(r.with)}.`),
    r.cannot_take ? h('p', { 'data-testid': 'cannot-take' }, h('strong', {}, 'This node cannot take the fleet\'s configuration yet: '), r.cannot_take,
      ' It will refuse every bundle until that is fixed.') : null, join));
  });
  return card('Join a fleet', { description: 'This node becomes a read-only replica of the fleet\'s primary.' }, f, out);
}

function codeState(c) {
  if (c.used_at) return h('span', {}, badge('used', 'neutral'), ' ', h('span', { class: 'cell-sub' }, `by node ${c.used_by}, ${ago(c.used_at)}`));
  return Date.parse(c.expires_at) <= Date.now() ? badge('expired', 'warn') : badge('unused', 'ok');
}

function revokeButton(ctx, c) {
  return button('Revoke', { kind: 'secondary', 'aria-label': `Revoke join code ${c.id}`, onclick: async () => {
    const ok = await confirm({ title: 'Revoke this join code?', confirmLabel: 'Revoke',
      message: `A node that has not joined with code ${c.id} yet cannot join with it any more. A node that already joined stays.` });
    if (!ok) return;
    await del(`/api/fleet/join-codes/${enc(c.id)}`);
    toast('Join code revoked');
    ctx.rerender();
  } });
}

function codesCard(ctx, codes) {
  return card('Join codes', { description: 'Each code joins one node, until it expires or is revoked. The codes themselves are never shown again.' }, table([
    { label: 'Code id', cell: (c) => h('code', {}, c.id) },
    { label: 'Created', cell: (c) => (c.created_at ? when(c.created_at) : '—') },
    { label: 'Expires', cell: (c) => when(c.expires_at) },
    { label: 'State', cell: (c) => codeState(c) },
    { label: 'Actions', cell: (c) => revokeButton(ctx, c) },
  ], codes, { empty: 'No join code is valid now.', caption: 'Join codes' }));
}

function unknownNote(count) {
  if (!count) return null;
  return callout('warn', h('p', { 'data-testid': 'unknown-statuses' }, h('strong', {}, `${count} unknown ${count === 1 ? 'status' : 'statuses'} `),
    'in the bucket: not signed by a fleet member, malformed or too large, so not listed. Another node version, or someone else writing to the fleet bucket.'));
}

function mintCard(ctx) {
  const out = h('div', { 'aria-live': 'polite' });
  const f = form({}, h('div', { class: 'form-grid' }, field({ label: 'Valid for', name: 'expires_in', value: 3600, options: EXPIRY })),
    actions(button('Mint join code', { type: 'submit' })));
  onSubmit(f, async (v) => {
    const r = await post('/api/fleet/join-codes', { expires_in: Number(v.expires_in) });
    mount(out, shownOnce('Join code.', r.code, `Shown once; joins one node; useless after ${when(r.expires_at)}.`),
      h('p', {}, button('Done', { kind: 'secondary', onclick: () => ctx.rerender() })));
  });
  return card('Add a node', { description: 'Paste the code into the new node\'s Fleet page, or give it to contentnode fleet join there.' }, f, out);
}

function lagCell(n) {
  if (n.lag === 0) return badge('current', 'ok');
  if (!n.lag) return '—';
  return badge(n.behind ? `${n.lag} behind for 3 polls` : `${n.lag} behind`, n.behind ? 'bad' : 'warn');
}

/** The error's code and its message, what the node cannot take of the primary's buckets, alerts. */
function errorCell(n) {
  const error = n.last_error ? [badge(n.last_error.code, 'bad'), ' ', h('span', { class: 'cell-sub' }, n.last_error.message || '')]
    : n.unreadable ? [badge('unreadable', 'bad'), ' ', h('span', { class: 'cell-sub' }, n.unreadable)] : ['—'];
  const refuses = (n.cannot_take || []).map((text) => h('p', { class: 'cell-sub', 'data-testid': 'cannot-take' }, badge('will refuse', 'bad'), ' ', text));
  return h('div', {}, h('p', {}, ...error, ' ', ...nodeAlerts(n)), ...refuses);
}

function primaryName(p) {
  if (!p?.node_id) return 'unknown (no bundle applied yet)';
  return p.name ? `${p.name}${p.address ? ` at ${p.address}` : ''} (node ${p.node_id})` : `node ${p.node_id}`;
}

/** A node's public traffic since it started (its status's counters): requests, bytes, cache hits. */
function trafficCell(t) {
  if (!t || t.requests === undefined) return '—';
  const served = (t.cache_hits || 0) + (t.cache_misses || 0);
  return h('div', {}, `${count(t.requests)} requests`, h('p', { class: 'cell-sub' },
    `${bytes(t.bytes_out || 0)} sent${served ? ` · ${Math.round((100 * t.cache_hits) / served)}% cache hits` : ''}`));
}

function removeButton(ctx, n) {
  return button('Remove', { kind: 'danger-soft', class: 'btn btn-danger-soft btn-sm', 'aria-label': `Remove node ${n.node_id} from the fleet`, onclick: async () => {
    const ok = await confirm({ title: `Remove node ${n.node_id}?`, confirmLabel: 'Remove node',
      message: 'It is taken off the member list and the fleet\'s sealing key is replaced: it cannot open any bundle published from now on and keeps serving what it applied last. It joins again only with a new join code. Change the secrets it held if you do not control its disk.' });
    if (!ok) return;
    await del(`/api/fleet/nodes/${enc(n.node_id)}`);
    toast(`Node ${n.node_id} removed from the fleet`);
    ctx.rerender();
  } });
}

function nodesCard(ctx, nodes) {
  return card('Nodes', { description: 'Each node\'s last status in the bucket (read every third poll, every poll while a join code is unused and valid).' }, table([
    { label: 'Node', cell: (n) => h('div', {}, h('code', {}, n.node_id), h('p', { class: 'cell-sub' }, n.name || '')) },
    { label: 'Role', cell: (n) => n.role || '—' },
    { label: 'Version', cell: (n) => h('span', {}, n.version || '—', ' ', n.version_skew ? badge('other version', 'warn') : null) },
    { label: 'Seq', cell: (n) => (n.seq ?? '—') },
    { label: 'Lag', cell: (n) => lagCell(n) },
    { label: 'Traffic', cell: (n) => trafficCell(n.traffic) },
    { label: 'Last error', cell: (n) => errorCell(n) },
    { label: 'Last seen', cell: (n) => h('span', {}, n.seen_at ? ago(n.seen_at) : '—', ' ', n.unseen ? badge('not seen', 'bad') : null) },
    { label: 'Actions', cell: (n) => removeButton(ctx, n) },
  ], nodes, { empty: 'No other node yet: mint a join code.', caption: 'Fleet nodes' }));
}

function summary(f) {
  const b = f.bucket || {};
  return card('This node', {}, facts([
    ['Role', badge(f.role, f.role === 'standalone' ? 'neutral' : 'ok')],
    ['Node id', h('code', {}, f.node_id)],
    f.fleet_id ? ['Fleet id', h('code', {}, f.fleet_id)] : null,
    f.fleet_id ? ['Seq', String(f.seq ?? '—')] : null,
    f.fleet_id ? ['Bucket', h('code', {}, `${b.endpoint} · ${b.bucket}/${b.prefix}`)] : null,
    f.role === 'replica' ? ['Applied', f.applied_at ? when(f.applied_at) : 'not yet'] : null,
    f.fleet_id ? ['Key epoch', String(f.key_epoch)] : null,
    f.fleet_id ? ['Poll', `every ${f.poll_seconds} s`] : null,
    f.last_error ? ['Last error', h('span', {}, badge(f.last_error.code, 'bad'), ' ', f.last_error.message)] : null,
    f.fleet_id ? ['Members', String(f.members)] : null,
    f.removed ? ['Membership', h('span', { 'data-testid': 'removed' }, badge('no longer a member', 'bad'), ' ',
      `${when(f.removed.at)}: this node was removed from the fleet; it keeps serving what it applied last. Leave the fleet to make it standalone.`)] : null,
    f.demoted ? ['Demoted', h('span', {}, badge('demoted', 'warn'), ' ', `${when(f.demoted.at)}: ${f.demoted.message}`)] : null,
  ]));
}

function leaveButton(ctx) {
  return button('Leave the fleet', { kind: 'secondary', onclick: async () => {
    const ok = await confirm({ title: 'Leave the fleet?', confirmLabel: 'Leave',
      message: 'This node becomes standalone and keeps its current configuration; its fleet keys are deleted.' });
    if (!ok) return;
    await post('/api/fleet/leave', {});
    toast('This node left the fleet');
    ctx.state.fleetRole = null;
    ctx.rerender();
  } });
}

export async function render(ctx) {
  const f = await get('/api/fleet');
  const codes = f.role === 'primary' ? (await get('/api/fleet/join-codes')).join_codes : [];
  const header = pageHeader('Fleet', 'Many nodes, one configuration, through your own bucket.',
    f.role === 'primary' ? rotateButton(ctx) : null, f.role === 'standalone' ? null : leaveButton(ctx));
  if (f.role === 'standalone') {
    mount(ctx.main, header, summary(f), initCard(ctx), joinCard(ctx));
  } else if (f.role === 'primary') {
    mount(ctx.main, header, summary(f), mintCard(ctx), codesCard(ctx, codes), unknownNote(f.unknown_statuses),
      nodesCard(ctx, f.nodes), issuerCard(f));
  } else {
    mount(ctx.main, header, callout('info', h('p', { 'data-testid': 'replica-primary' }, 'This node is a replica: domains, buckets, rules, link keys and shared settings are edited on the primary, ',
      h('strong', {}, primaryName(f.primary)), '. Changes made there arrive here within a poll.')), summary(f),
    issuerCard(f), promoteCard(ctx));
  }
}

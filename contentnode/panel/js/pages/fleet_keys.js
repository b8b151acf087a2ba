// Fleet page parts for the issuer and the keys (docs/API.md, Certificates in a fleet;
// POST /api/fleet/probe, /promote, /rotate-key): who orders certificates and what the
// bucket's probe found; promoting a replica with the recovery secret (the next one
// shown once); rotating the primary's signing key.

import { post } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, onSubmit, actions, actionButton } from '../forms.js';
import { confirm } from '../dialog.js';
import { toast } from '../toast.js';
import { when } from '../format.js';
import { card, badge, callout, steps, copyButton } from '../ui.js';

const ISSUER = {
  lease: ['lease', 'ok', 'This primary orders certificates for the fleet and holds a lease in the bucket while an order runs.'],
  primary_only: ['primary only', 'warn', 'The bucket does not honour conditional writes (or was not probed yet), so no lease is used: this primary is the fleet\'s only issuer. Never run two primaries.'],
};

function probeResult(probe) {
  if (!probe) return h('p', { class: 'muted' }, 'The bucket has not been probed yet.');
  return h('div', {},
    h('p', {}, probe.conditional_writes ? badge('conditional writes honoured', 'ok') : badge('conditional writes not honoured', 'bad'),
      ' ', h('span', { class: 'muted small' }, `probed ${when(probe.probed_at)}`)),
    steps(probe.checks || [], 'Probe checks'));
}

/** Who orders certificates, and the probe's checks with a button to run it again. */
export function issuerCard(f) {
  const [label, kind, text] = ISSUER[f.issuer] || ['on the primary', 'neutral',
    'Certificates are ordered and renewed on the primary and reach this node with the bundle; this node answers the CA\'s HTTP-01 requests from the bucket.'];
  const out = h('div', { 'aria-live': 'polite' }, probeResult(f.probe));
  const again = actionButton(f.probe ? 'Probe the bucket again' : 'Probe the bucket', async () => {
    const probe = await post('/api/fleet/probe', {});
    mount(out, probeResult(probe));
    toast(probe.conditional_writes ? 'The bucket honours conditional writes' : 'The bucket does not honour conditional writes');
  });
  return card('Certificates and the issuer', { actions: again },
    h('p', {}, badge(label, kind), ' ', text), out);
}

function shownOnce(secret) {
  return callout('warn', h('p', {}, h('strong', {}, 'New recovery secret.'),
    ' Shown once: store it offline in place of the old one, which no longer works.'),
  h('div', { class: 'copy-row' }, h('code', { 'data-testid': 'shown-once' }, secret), copyButton(secret)));
}

/** On a replica: become the primary with the recovery secret (when the primary is lost). */
export function promoteCard(ctx) {
  const out = h('div', { 'aria-live': 'polite' });
  const f = form({},
    field({ label: 'Recovery secret', name: 'recovery_secret', type: 'password', required: true, autocomplete: 'off',
      placeholder: 'cnr_…', hint: 'Shown when the fleet was set up (or at the last promotion).' }),
    actions(button('Promote this node', { type: 'submit', kind: 'danger' })));
  onSubmit(f, async (v) => {
    const ok = await confirm({ title: 'Promote this node to primary?', confirmLabel: 'Promote',
      message: 'Only when the primary is lost for good. This node signs with a new key; the other nodes follow it, and the old primary steps down if it comes back.' });
    if (!ok) return;
    const r = await post('/api/fleet/promote', { recovery_secret: v.recovery_secret });
    f.reset();
    mount(out, shownOnce(r.recovery_secret), h('p', {}, button('Done', { kind: 'secondary', onclick: () => ctx.rerender() })));
    toast(`This node is now the primary (key epoch ${r.key_epoch})`);
  });
  return card('Lost the primary?', { description: 'Make this replica the fleet\'s primary. Pick the replica with the highest seq.' }, f, out);
}

/** On the primary: a new signing key, certified by the current one. */
export function rotateButton(ctx) {
  return button('Rotate signing key', { kind: 'secondary', onclick: async () => {
    const ok = await confirm({ title: 'Rotate the signing key?', confirmLabel: 'Rotate', danger: false,
      message: 'The current key signs a new one; replicas follow within a poll. The recovery secret stays the same.' });
    if (!ok) return;
    const r = await post('/api/fleet/rotate-key', {});
    toast(`Signing key rotated (key epoch ${r.key_epoch})`);
    ctx.rerender();
  } });
}

/** Badges for what the primary derived from a node's status beyond errors and silence. */
export function nodeAlerts(n) {
  return [(n.expiring_certificates || []).length ? badge('old certificate', 'bad') : null];
}

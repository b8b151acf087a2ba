// Short confirmations of what just happened, announced politely.

import { h } from './dom.js';

let region = null;

function ensureRegion() {
  if (!region) {
    region = h('div', { class: 'toasts', 'data-testid': 'toasts' });
    document.body.append(region);
  }
  return region;
}

export function toast(message, kind = 'ok') {
  const el = h('div', { class: `toast toast-${kind}`, role: kind === 'error' ? 'alert' : 'status' },
    h('span', { class: 'toast-dot', 'aria-hidden': 'true' }), h('span', {}, message));
  ensureRegion().append(el);
  setTimeout(() => { el.classList.add('leaving'); setTimeout(() => el.remove(), 300); }, kind === 'error' ? 7000 : 4000);
}

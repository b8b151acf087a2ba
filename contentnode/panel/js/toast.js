// Short confirmations of what just happened, announced politely. The region
// is a manual popover so it sits in the top layer, above an open <dialog>.

import { h } from './dom.js';

let region = null;

function ensureRegion() {
  if (!region) region = h('div', { class: 'toasts', 'data-testid': 'toasts', popover: 'manual' });
  // Inside the open modal dialog, if any (the rest of the page is inert then),
  // and shown again so it stays on top of whatever opened since.
  const dialogs = document.querySelectorAll('dialog[open]');
  const host = dialogs.length ? dialogs[dialogs.length - 1] : document.body;
  if (region.matches(':popover-open')) region.hidePopover();
  if (region.parentNode !== host) host.append(region);
  region.showPopover();
  return region;
}

export function toast(message, kind = 'ok') {
  const el = h('div', { class: `toast toast-${kind}`, role: kind === 'error' ? 'alert' : 'status' },
    h('span', { class: 'toast-dot', 'aria-hidden': 'true' }), h('span', {}, message));
  ensureRegion().append(el);
  setTimeout(() => {
    el.classList.add('leaving');
    setTimeout(() => { el.remove(); if (!region.childElementCount) region.hidePopover(); }, 300);
  }, kind === 'error' ? 7000 : 4000);
}

/** A failed action as an error toast; a 401 is left to the return to the login. */
export function toastError(err) {
  if (err && err.status !== 401) toast(err.message, 'error');
}

// Native <dialog>: confirmations before destructive actions, and modal forms.

import { h, uid } from './dom.js';
import { button, form, actions, onSubmit } from './forms.js';
import { copyButton } from './ui.js';

/** Open a modal holding `content`; returns {dialog, close}. The dialog is removed when closed. */
export function modal({ title, content, description, wide = false, onClose }) {
  const titleId = uid('dlg');
  const closeBtn = h('button', { type: 'button', class: 'btn btn-ghost btn-icon dialog-x', 'aria-label': 'Close' }, '×');
  const dialog = h('dialog', { class: ['dialog', wide && 'dialog-wide'], 'aria-labelledby': titleId },
    h('header', { class: 'dialog-head' }, h('h2', { id: titleId }, title), closeBtn),
    description ? h('p', { class: 'dialog-desc' }, description) : null,
    h('div', { class: 'dialog-body' }, content));
  const close = () => dialog.open && dialog.close();
  closeBtn.addEventListener('click', close);
  dialog.addEventListener('close', () => {
    const toasts = dialog.querySelector('[data-testid=toasts]');
    if (toasts) { // toasts outlive the dialog they were shown in
      document.body.append(toasts);
      if (toasts.childElementCount && !toasts.matches(':popover-open')) toasts.showPopover();
    }
    dialog.remove();
    if (onClose) onClose();
  });
  document.body.append(dialog);
  dialog.showModal();
  const first = dialog.querySelector('.dialog-body input:not([type=hidden]), .dialog-body select, .dialog-body textarea');
  if (first) first.focus();
  return { dialog, close };
}

/**
 * A secret the node shows this one time (a token, a signing secret, a passphrase): the secret,
 * `details` under it, a copy button (and `copies`), "I have saved it"; gone with the dialog.
 */
export function showSecretOnce({ title, description, secret, testId, copyLabel, details = [], copies = [], onClose }) {
  const done = button('I have saved it', { onclick: () => close() });
  const { close } = modal({ title, description, wide: true, onClose,
    content: h('div', { class: 'stack' },
      h('code', { class: 'secret token-secret', 'data-testid': testId }, secret), ...details,
      h('div', { class: 'form-actions' }, copyButton(secret, copyLabel), ...copies, done)) });
}

/**
 * A modal form with Cancel and a submit button. submit(values, close) runs with
 * the buttons disabled; its ApiError lands beside the field it names. The
 * dialog, and any secret typed into it, is gone once closed.
 */
export function dialogForm({ title, description, wide, submitLabel, submitKind = 'primary', extraButtons = [] }, content, submit) {
  const f = form({}, ...[].concat(content),
    actions(button('Cancel', { kind: 'secondary', onclick: () => close() }), ...extraButtons, button(submitLabel, { type: 'submit', kind: submitKind })));
  const { close } = modal({ title, description, wide, content: f });
  onSubmit(f, (values) => submit(values, close));
  return f;
}

/** Ask before a destructive action. Resolves true when confirmed. */
export function confirm({ title, message, confirmLabel = 'Delete', danger = true, details = null }) {
  return new Promise((resolve) => {
    let answer = false;
    const yes = button(confirmLabel, { kind: danger ? 'danger' : 'primary' });
    const no = button('Cancel', { kind: 'secondary' });
    const { close } = modal({
      title,
      content: h('div', {}, h('p', { class: 'dialog-message' }, message), details,
        h('div', { class: 'form-actions' }, no, yes)),
      onClose: () => resolve(answer),
    });
    yes.addEventListener('click', () => { answer = true; close(); });
    no.addEventListener('click', close);
    no.focus();
  });
}

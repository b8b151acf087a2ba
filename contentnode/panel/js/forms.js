// Labelled fields, and form submission that disables its buttons while the
// request runs and shows each API error beside the field it names.

import { h, uid } from './dom.js';
import { toast, toastError } from './toast.js';

function describe(control, hintId, errorId) {
  control.setAttribute('aria-describedby', [hintId, errorId].filter(Boolean).join(' '));
}

/** A labelled input, select or textarea with a hint and an error slot. */
export function field({ label, name, type = 'text', value, hint, required, options, rows, cls, id, ...attrs }) {
  const cid = id || uid(name ? name.replace(/[^\w-]/g, '-') : 'f');
  let control;
  if (options) {
    control = h('select', { id: cid, name, ...attrs },
      ...options.map((o) => {
        const [v, text] = Array.isArray(o) ? o : [o, o];
        return h('option', { value: v, selected: String(v) === String(value ?? '') }, text);
      }));
  } else if (type === 'textarea') {
    control = h('textarea', { id: cid, name, rows: rows || 4, required, spellcheck: 'false', ...attrs });
    control.value = value ?? '';
  } else {
    control = h('input', { id: cid, name, type, required, ...attrs });
    if (value !== undefined && value !== null) control.value = value;
  }
  const hintId = hint ? `${cid}-hint` : null;
  describe(control, hintId, `${cid}-error`);
  return h('div', { class: ['field', cls] },
    h('label', { for: cid }, label),
    control,
    hint ? h('p', { class: 'hint', id: hintId }, hint) : null,
    h('p', { class: 'field-error', id: `${cid}-error`, hidden: true }));
}

/** A checkbox styled as a switch or a plain box, label after it. */
export function checkbox({ label, name, checked, hint, value, group, switch: sw = true, id, ...attrs }) {
  const cid = id || uid(name || 'c');
  const control = h('input', { type: 'checkbox', id: cid, name, value, checked, class: sw ? 'switch' : null,
    dataset: group ? { group: '1' } : undefined, ...attrs });
  const hintId = hint ? `${cid}-hint` : null;
  describe(control, hintId, `${cid}-error`);
  return h('div', { class: 'check' }, control,
    h('div', {}, h('label', { for: cid }, label), hint ? h('p', { class: 'hint', id: hintId }, hint) : null,
      h('p', { class: 'field-error', id: `${cid}-error`, hidden: true })));
}

/** A form with a top error area (role=alert) and novalidate (the API validates). */
export function form(attrs, ...children) {
  return h('form', { novalidate: true, ...attrs }, h('div', { class: 'form-alert', role: 'alert', hidden: true }), ...children);
}

export function actions(...buttons) {
  return h('div', { class: 'form-actions' }, ...buttons);
}

export function button(label, { kind = 'primary', type = 'button', ...attrs } = {}) {
  return h('button', { type, class: `btn btn-${kind}`, ...attrs }, label);
}

/** Values by name: checkboxes are booleans (or arrays for groups), numbers are numbers or null. */
export function values(formEl) {
  const out = {};
  for (const el of formEl.elements) {
    if (!el.name || el.disabled) continue;
    if (el.type === 'checkbox' && el.dataset.group) {
      out[el.name] = out[el.name] || [];
      if (el.checked) out[el.name].push(el.value);
    } else if (el.type === 'checkbox') out[el.name] = el.checked;
    else if (el.type === 'radio') { if (el.checked) out[el.name] = el.value; }
    else if (el.type === 'number') out[el.name] = el.value === '' ? null : Number(el.value);
    else if (el.type === 'file') continue;
    else out[el.name] = el.value;
  }
  return out;
}

export function clearErrors(formEl) {
  const alert = formEl.querySelector('.form-alert');
  if (alert) { alert.hidden = true; alert.textContent = ''; }
  formEl.querySelectorAll('.field-error').forEach((e) => { e.hidden = true; e.textContent = ''; });
  formEl.querySelectorAll('[aria-invalid]').forEach((e) => e.removeAttribute('aria-invalid'));
}

function controlFor(formEl, fieldName) {
  if (!fieldName) return null;
  const esc = CSS.escape(fieldName);
  return formEl.querySelector(`[name="${esc}"]`) || formEl.querySelector(`[data-field="${esc}"]`)
    || formEl.querySelector(`[name="${CSS.escape(fieldName.split('.')[0])}"]`);
}

/** Show an error beside its field, or at the top of the form. */
export function showError(formEl, err) {
  const control = controlFor(formEl, err.field);
  const slot = control && document.getElementById(`${control.id}-error`);
  if (slot) {
    slot.textContent = err.message;
    slot.hidden = false;
    control.setAttribute('aria-invalid', 'true');
    if (control.focus) control.focus();
    return;
  }
  const alert = formEl.querySelector('.form-alert');
  if (alert) {
    alert.textContent = err.message;
    alert.hidden = false;
    alert.scrollIntoView({ block: 'nearest' });
  } else toast(err.message, 'error');
}

/** Run fn with the buttons disabled; errors go beside their field (or a toast). */
export async function busy(buttons, fn) {
  const list = (Array.isArray(buttons) ? buttons : [buttons]).filter(Boolean);
  list.forEach((b) => { b.disabled = true; b.setAttribute('aria-busy', 'true'); });
  try {
    return await fn();
  } finally {
    list.forEach((b) => { b.disabled = false; b.removeAttribute('aria-busy'); });
  }
}

/** Wire a form: handler(values, form) runs with buttons disabled; its ApiError lands beside its field. */
export function onSubmit(formEl, handler) {
  formEl.addEventListener('input', (event) => {
    const slot = event.target.id && document.getElementById(`${event.target.id}-error`);
    if (slot && !slot.hidden) { slot.hidden = true; event.target.removeAttribute('aria-invalid'); }
  });
  formEl.addEventListener('submit', async (event) => {
    event.preventDefault();
    clearErrors(formEl);
    const buttons = [...formEl.querySelectorAll('button')];
    await busy(buttons, async () => {
      try {
        await handler(values(formEl), formEl);
      } catch (err) {
        if (err && err.code === 'unauthenticated' && err.status === 401) return;
        if (err && err.message) showError(formEl, err);
        else throw err;
      }
    });
  });
  return formEl;
}

/** A button that runs an async action; errors become an error toast. */
export function actionButton(label, fn, opts = {}) {
  const btn = button(label, { kind: 'secondary', ...opts });
  btn.addEventListener('click', () => busy(btn, async () => {
    try { await fn(btn); } catch (err) { toastError(err); }
  }));
  return btn;
}

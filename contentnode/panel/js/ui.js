// Shared building blocks of every page: headers, cards, tables, badges,
// check-step lists, copy and download.

import { h } from './dom.js';
import { ms } from './format.js';
import { toast } from './toast.js';

export function pageHeader(title, subtitle, ...actions) {
  document.title = `${title} · contentnode`;
  return h('header', { class: 'page-head' },
    h('div', {}, h('h1', {}, title), subtitle ? h('p', { class: 'page-sub' }, subtitle) : null),
    actions.length ? h('div', { class: 'page-actions' }, ...actions) : null);
}

export function card(title, { description, actions, cls, id } = {}, ...content) {
  return h('section', { class: ['card', cls], id },
    title || actions ? h('div', { class: 'card-head' },
      h('div', {}, title ? h('h2', {}, title) : null, description ? h('p', { class: 'card-desc' }, description) : null),
      actions ? h('div', { class: 'card-actions' }, ...[].concat(actions)) : null) : null,
    ...content);
}

/** A segmented choice (1h / 24h / 7d...): options [[value, text]], onPick(value) on a click. */
export function seg(label, options, current, onPick) {
  const buttons = options.map(([v, text]) => h('button', { type: 'button', 'aria-pressed': String(v === current) }, text));
  buttons.forEach((b, i) => b.addEventListener('click', () => {
    buttons.forEach((o) => o.setAttribute('aria-pressed', String(o === b)));
    onPick(options[i][0]);
  }));
  return h('div', { class: 'seg', role: 'group', 'aria-label': label }, ...buttons);
}

/** One figure of a row of `.stats`: its label, the value, an optional note under it. */
export function stat(label, value, note) {
  return h('div', { class: 'stat' }, h('p', { class: 'stat-label' }, label), h('p', { class: 'stat-value' }, value), note ? h('p', { class: 'stat-note' }, note) : null);
}

export function badge(text, kind = 'neutral') {
  return h('span', { class: `badge badge-${kind}` }, text);
}

const STATUS_KIND = { verified: 'ok', failed: 'bad', pending: 'warn' };
export function statusBadge(status) {
  return badge(status, STATUS_KIND[status] || 'neutral');
}

/** columns: [{label, cell(row) -> node|string, cls}] */
export function table(columns, rows, { empty = 'Nothing here yet.', caption } = {}) {
  if (!rows.length) return h('p', { class: 'empty' }, empty);
  return h('div', { class: 'table-wrap' }, h('table', { class: 'table' },
    caption ? h('caption', { class: 'sr-only' }, caption) : null,
    h('thead', {}, h('tr', {}, ...columns.map((c) => h('th', { scope: 'col', class: c.cls }, c.label)))),
    h('tbody', {}, ...rows.map((r) => h('tr', {}, ...columns.map((c) => h('td', { class: c.cls, 'data-label': c.label }, c.cell(r))))))));
}

/** A text box that hides the rows of `tableEl` not containing its text; only for longer lists. */
export function rowFilter(label, tableEl, minRows = 8) {
  const rows = [...tableEl.querySelectorAll('tbody tr')];
  if (rows.length < minRows) return null;
  const input = h('input', { type: 'search', id: 'row-filter', class: 'filter-input', placeholder: `${label}…`, autocomplete: 'off', spellcheck: 'false' });
  input.addEventListener('input', () => {
    const q = input.value.trim().toLowerCase();
    rows.forEach((tr) => { tr.hidden = Boolean(q) && !tr.textContent.toLowerCase().includes(q); });
  });
  return h('div', { class: 'filter' }, h('label', { for: 'row-filter', class: 'sr-only' }, label), input);
}

/** Key/value pairs as a description list; [label, value] with value a node or text. */
export function facts(pairs) {
  return h('dl', { class: 'facts' }, ...pairs.filter(Boolean).flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v ?? '—')]));
}

/** The steps of a check, probe or diagnose: each with its result and detail. */
export function steps(list, label = 'Steps') {
  return h('ol', { class: 'steps', 'data-testid': 'steps', 'aria-label': label },
    ...list.map((s) => h('li', { class: s.ok ? 'ok' : 'fail', 'data-step': s.name },
      h('span', { class: 'step-mark', 'aria-hidden': 'true' }, s.ok ? '✓' : '✕'),
      h('div', { class: 'step-body' },
        h('div', { class: 'step-title' }, h('strong', {}, s.name), h('span', { class: 'sr-only' }, s.ok ? ' passed' : ' failed'),
          s.code ? badge(s.code, 'bad') : null,
          h('span', { class: 'step-ms' }, ms(s.milliseconds ?? s.ms))),
        s.detail ? h('p', { class: 'step-detail' }, s.detail) : null))));
}

export function resultBanner(ok, text) {
  return h('p', { class: `result ${ok ? 'result-ok' : 'result-bad'}`, role: 'status' }, text);
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    // Clipboard API refused (plain http on a non-loopback host): fall back to a selection.
    const ta = h('textarea', { class: 'offscreen', 'aria-hidden': 'true' });
    ta.value = text;
    document.body.append(ta);
    ta.select();
    document.execCommand('copy');
    ta.remove();
  }
  toast('Copied to the clipboard');
}

export function copyButton(getText, label = 'Copy') {
  return h('button', { type: 'button', class: 'btn btn-secondary btn-sm', onclick: () => copyText(typeof getText === 'function' ? getText() : getText) }, label);
}

/** Save text as a file through a Blob (nothing leaves the browser). */
export function download(filename, text, type = 'application/json') {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = h('a', { href: url, download: filename, class: 'offscreen' });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export function loading() {
  return h('div', { class: 'loading', role: 'status' }, h('span', { class: 'spinner', 'aria-hidden': 'true' }), 'Loading…');
}

export function errorBox(err) {
  return h('div', { class: 'callout callout-bad', role: 'alert' }, err.message || String(err));
}

/** Why a control is missing in a session opened with an API token (docs/API.md: what a token session may do). */
export function tokenSessionNote(what) {
  return callout('info', `You are signed in with an API token: ${what} only after logging in with your password.`);
}

export function callout(kind, ...content) {
  return h('div', { class: `callout callout-${kind}` }, ...content);
}

export function noAccess() {
  return h('div', { class: 'empty-page' }, h('h1', {}, 'No access'),
    h('p', {}, 'You do not have access to this page. Ask an administrator for the scope it needs.'),
    h('a', { href: '#/dashboard', class: 'btn btn-secondary' }, 'Back to the dashboard'));
}

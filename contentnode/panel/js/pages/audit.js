// Activity log: filters (user, action, time) and paging with next_cursor.

import { get, query } from '../api.js';
import { h, mount } from '../dom.js';
import { field, form, button, onSubmit, actions } from '../forms.js';
import { when } from '../format.js';
import { pageHeader, card, table, badge } from '../ui.js';

function iso(local) {
  if (!local) return '';
  const d = new Date(local);
  return Number.isNaN(d.getTime()) ? local : d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

export function render(ctx) {
  const out = h('div', {});
  const pager = h('div', { class: 'spread' });
  let filters = {}; let cursors = [null]; // cursors[i] = cursor of page i

  async function load(page) {
    const data = await get(`/api/audit${query({ ...filters, cursor: cursors[page] })}`);
    cursors = cursors.slice(0, page + 1);
    if (data.next_cursor) cursors.push(data.next_cursor);
    mount(out, table([
      { label: 'Time', cell: (e) => h('span', { class: 'small' }, when(e.time)) },
      { label: 'User', cell: (e) => e.user || h('span', { class: 'muted' }, 'anonymous') },
      { label: 'Action', cell: (e) => h('div', { class: 'row' }, h('code', {}, e.action), e.ok ? null : badge('refused', 'bad')) },
      { label: 'Target', cell: (e) => e.target || '—' },
      { label: 'Address', cell: (e) => h('span', { class: 'small' }, e.ip || '—') },
      { label: 'Detail', cell: (e) => (e.detail && Object.keys(e.detail).length
        ? h('details', {}, h('summary', { class: 'small' }, 'show'), h('pre', { class: 'pre' }, JSON.stringify(e.detail, null, 2))) : '—') },
    ], data.entries, { empty: 'No entries match.', caption: 'Activity log entries' }));
    const newer = button('Newer', { kind: 'secondary', disabled: page === 0, onclick: () => load(page - 1).catch(() => {}) });
    const older = button('Older', { kind: 'secondary', disabled: !data.next_cursor, onclick: () => load(page + 1).catch(() => {}) });
    mount(pager, h('span', { class: 'muted small' }, `Page ${page + 1} · ${data.entries.length} entries`), h('div', { class: 'row' }, newer, older));
  }

  const f = form({},
    h('div', { class: 'form-grid auto' },
      field({ label: 'User', name: 'user', placeholder: 'username', autocapitalize: 'none', spellcheck: 'false' }),
      field({ label: 'Action', name: 'action', placeholder: 'user. or login.failure', spellcheck: 'false', hint: 'Exact, or a prefix ending in a dot.' }),
      field({ label: 'Since', name: 'since', type: 'datetime-local' }),
      field({ label: 'Until', name: 'until', type: 'datetime-local' }),
      field({ label: 'Entries per page', name: 'limit', value: '50', options: ['25', '50', '100', '200'] })),
    actions(button('Reset', { kind: 'secondary', type: 'reset' }), button('Apply filters', { type: 'submit' })));
  onSubmit(f, async (v) => {
    filters = { user: v.user.trim(), action: v.action.trim(), since: iso(v.since), until: iso(v.until), limit: v.limit };
    cursors = [null];
    await load(0);
  });
  f.addEventListener('reset', () => setTimeout(() => { filters = { limit: '50' }; cursors = [null]; load(0).catch(() => {}); }));
  filters = { limit: '50' };
  mount(ctx.main, pageHeader('Activity log', 'Every sign-in and change, newest first; the log is hash-chained on disk.'),
    card('Filters', {}, f), card(null, {}, out, h('div', { class: 'card-foot' }, pager)));
  return load(0);
}

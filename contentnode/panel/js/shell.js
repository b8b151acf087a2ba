// The shell around every page once someone is logged in: the menu of the
// sections their scopes allow, the user menu (theme, log out), and the page
// of the current route in <main>. Loaded by app.js with import() after the
// login, so the login page never waits for it.

import { get, post } from './api.js';
import { h, mount, icon } from './dom.js';
import { can, setScopes, setSharedReadOnly } from './scopes.js';
import { noAccess, loading, errorBox, callout } from './ui.js';

const I = {
  '/dashboard': ['M4 13h6V4H4zM14 20h6v-9h-6zM4 20h6v-3H4zM14 7h6V4h-6z'],
  '/domains': ['M12 21a9 9 0 1 0 0-18 9 9 0 0 0 0 18z', 'M3 12h18M12 3c2.5 2.7 3.5 5.7 3.5 9s-1 6.3-3.5 9c-2.5-2.7-3.5-5.7-3.5-9s1-6.3 3.5-9z'],
  '/buckets': ['M4 6c0-1.7 3.6-3 8-3s8 1.3 8 3-3.6 3-8 3-8-1.3-8-3z', 'M4 6l2 13c.3 1.2 3 2 6 2s5.7-.8 6-2l2-13'],
  '/rules': ['M6 3v12M6 21a3 3 0 1 0 0-6 3 3 0 0 0 0 6zM18 9a3 3 0 1 0 0-6 3 3 0 0 0 0 6zM18 9c0 6-12 3-12 9'],
  '/links': ['M10 14a4 4 0 0 0 5.7 0l3-3a4 4 0 0 0-5.7-5.7l-1 1', 'M14 10a4 4 0 0 0-5.7 0l-3 3a4 4 0 0 0 5.7 5.7l1-1'],
  '/traffic': ['M3 20h18', 'M6 16V11M11 16V5M16 16v-7M21 16v-3'],
  '/cache': ['M3 7l9-4 9 4-9 4-9-4z', 'M3 12l9 4 9-4M3 17l9 4 9-4'],
  '/troubleshoot': ['M11 4a7 7 0 1 0 0 14 7 7 0 0 0 0-14zM21 21l-5-5'],
  '/users': ['M9 11a4 4 0 1 0 0-8 4 4 0 0 0 0 8zM2 21c0-4 3-6 7-6s7 2 7 6', 'M16 3.5a4 4 0 0 1 0 7.5M22 21c0-3-1.7-5-4-5.7'],
  '/security': ['M12 3l8 3v6c0 5-3.5 8-8 9-4.5-1-8-4-8-9V6z', 'M9 12l2 2 4-4'],
  '/audit': ['M8 6h13M8 12h13M8 18h13M3 6h.01M3 12h.01M3 18h.01'],
  '/backup': ['M3 4h18v4H3zM5 8v12h14V8M10 12h4'],
  '/notifications': ['M6 8a6 6 0 1 1 12 0c0 7 3 8 3 8H3s3-1 3-8', 'M10 20a2 2 0 0 0 4 0'],
  '/settings': ['M12 15a3 3 0 1 0 0-6 3 3 0 0 0 0 6z', 'M19.4 15a1.7 1.7 0 0 0 .3 1.8l.1.1a2 2 0 1 1-2.8 2.8l-.1-.1a1.7 1.7 0 0 0-1.8-.3 1.7 1.7 0 0 0-1 1.5V21a2 2 0 1 1-4 0v-.1a1.7 1.7 0 0 0-1.1-1.5 1.7 1.7 0 0 0-1.8.3l-.1.1a2 2 0 1 1-2.8-2.8l.1-.1a1.7 1.7 0 0 0 .3-1.8 1.7 1.7 0 0 0-1.5-1H3a2 2 0 1 1 0-4h.1a1.7 1.7 0 0 0 1.5-1.1 1.7 1.7 0 0 0-.3-1.8l-.1-.1a2 2 0 1 1 2.8-2.8l.1.1a1.7 1.7 0 0 0 1.8.3H9a1.7 1.7 0 0 0 1-1.5V3a2 2 0 1 1 4 0v.1a1.7 1.7 0 0 0 1 1.5 1.7 1.7 0 0 0 1.8-.3l.1-.1a2 2 0 1 1 2.8 2.8l-.1.1a1.7 1.7 0 0 0-.3 1.8V9a1.7 1.7 0 0 0 1.5 1H21a2 2 0 1 1 0 4h-.1a1.7 1.7 0 0 0-1.5 1z'],
  '/fleet': ['M5 5h5v5H5zM14 5h5v5h-5zM9.5 14h5v5h-5z', 'M7.5 10v2h9v-2M12 12v2'],
  '/account': ['M12 12a4 4 0 1 0 0-8 4 4 0 0 0 0 8zM4 21c0-4 3.6-6 8-6s8 2 8 6'],
};

let shell = null;
let lastPath = null; // focus and scroll move only when the page changes, not on a re-render

function themeSelect() {
  let saved = 'system';
  try { saved = localStorage.getItem('cn-theme') || 'system'; } catch { /* storage refused */ }
  const sel = h('select', { id: 'theme', class: 'select-sm' },
    ...[['system', 'System'], ['light', 'Light'], ['dark', 'Dark']].map(([v, t]) => h('option', { value: v, selected: v === saved }, t)));
  sel.addEventListener('change', () => {
    const v = sel.value;
    try { if (v === 'system') localStorage.removeItem('cn-theme'); else localStorage.setItem('cn-theme', v); } catch { /* ignore */ }
    if (v === 'system') delete document.documentElement.dataset.theme;
    else document.documentElement.dataset.theme = v;
  });
  return h('div', { class: 'theme-pick' }, h('label', { for: 'theme' }, 'Theme'), sel);
}

/** The menu depends on who is logged in, their scopes and a pending 2FA enrolment. */
function shellKey(s) {
  return [s.user.id, s.user.role, s.user.scopes.join(), s.two_factor_enrollment_required].join('|');
}

function buildShell({ root, pages, state, go }) {
  const user = state.session.user;
  const enrolOnly = state.session.two_factor_enrollment_required;
  async function logout() {
    try { await post('/api/logout'); } catch { /* the session is gone either way */ }
    state.session = null;
    state.fleetRole = null;
    setScopes([]);
    go('/login');
  }
  const groups = new Map();
  for (const [path, , label, group, allowed] of pages) {
    if (!label || !allowed() || (enrolOnly && path !== '/account')) continue;
    if (!groups.has(group)) groups.set(group, []);
    groups.get(group).push(h('a', { href: `#${path}`, class: 'nav-link', dataset: { path } }, icon(I[path]), h('span', {}, label)));
  }
  const nav = h('nav', { id: 'nav', class: 'nav', 'aria-label': 'Main' },
    ...[...groups].map(([g, links]) => h('div', { class: 'nav-group' }, h('p', { class: 'nav-title', 'aria-hidden': 'true' }, g), ...links)));
  const toggle = h('button', { type: 'button', class: 'btn btn-ghost menu-toggle', 'aria-expanded': 'false', 'aria-controls': 'sidebar-body' }, 'Menu');
  const body = h('div', { id: 'sidebar-body', class: 'sidebar-body' }, nav,
    h('div', { class: 'sidebar-foot' },
      h('div', { class: 'who' }, h('span', { class: 'avatar', 'aria-hidden': 'true' }, user.username.slice(0, 1).toUpperCase()),
        h('div', {}, h('p', { class: 'who-name' }, user.username), h('p', { class: 'who-role' }, user.role))),
      themeSelect(),
      h('button', { type: 'button', class: 'btn btn-secondary btn-block', onclick: logout }, 'Log out')));
  toggle.addEventListener('click', () => {
    const open = toggle.getAttribute('aria-expanded') !== 'true';
    toggle.setAttribute('aria-expanded', String(open));
    body.classList.toggle('open', open);
  });
  nav.addEventListener('click', (e) => { if (e.target.closest('a')) { toggle.setAttribute('aria-expanded', 'false'); body.classList.remove('open'); } });
  const brandName = h('span', { class: 'brand-node' }, state.nodeName && state.nodeName !== 'contentnode' ? state.nodeName : '');
  const main = h('main', { id: 'main', class: 'main', tabindex: '-1' });
  const skip = h('a', { href: '#main', class: 'skip', onclick: (e) => { e.preventDefault(); main.focus(); } }, 'Skip to content');
  const aside = h('aside', { class: 'sidebar' },
    h('div', { class: 'sidebar-top' },
      h('a', { href: '#/dashboard', class: 'brand' }, h('span', { class: 'logo', 'aria-hidden': 'true' }), h('span', { class: 'brand-text' }, h('span', {}, 'contentnode'), brandName)),
      toggle),
    body);
  mount(root, skip, h('div', { class: 'shell' }, aside, main));
  if (can('settings:write') && !state.nodeName && !enrolOnly) {
    get('/api/settings').then((s) => { state.nodeName = s.node_name; if (s.node_name !== 'contentnode') brandName.textContent = s.node_name; }).catch(() => {});
  }
  return { main, nav, key: shellKey(state.session) };
}

// Pages of what a fleet shares: on a replica they say where edits are made (docs/API.md, Fleet).
const SHARED_PAGES = ['/domains', '/buckets', '/rules', '/links', '/settings'];

/** This node's fleet role, asked once per session; on a replica shared write controls hide. */
function fleetRole(state) {
  if (!state.fleetRole) {
    state.fleetRole = get('/api/fleet/role').then((r) => { setSharedReadOnly(r.role === 'replica'); return r; })
      .catch(() => null);
  }
  return state.fleetRole;
}

/**
 * The page of `route` (null: no such page) in the shell, which is built again
 * when it left the document (a login or setup page replaced it) or the user
 * or their scopes changed. `stale()` says a newer route change took over.
 */
export async function showPage({ root, where, route, pages, state, refreshSession, go, rerender, stale }) {
  const s = state.session;
  if (!shell || !shell.main.isConnected || shell.key !== shellKey(s)) shell = buildShell({ root, pages, state, go });
  shell.nav.querySelectorAll('a').forEach((a) => {
    const active = where.path === a.dataset.path || where.path.startsWith(`${a.dataset.path}/`);
    if (active) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
  });
  const { main } = shell;
  if (!route) { mount(main, h('div', { class: 'empty-page' }, h('h1', {}, 'Not found'), h('p', {}, 'There is no such page.'))); return; }
  if (!route.meta.allowed()) { mount(main, noAccess()); return; }
  mount(main, loading());
  try {
    const [mod, fleet] = await Promise.all([route.load(), fleetRole(state)]);
    if (stale()) return;
    const box = h('div', { class: 'page' });
    await mod.render({ main: box, query: where.query, params: route.params, session: s, user: s.user, refreshSession, go, state, rerender, stale });
    if (stale()) return;
    if (fleet?.role === 'replica' && SHARED_PAGES.some((p) => where.path === p || where.path.startsWith(`${p}/`))) {
      box.prepend(callout('info', h('p', { 'data-testid': 'replica-banner' }, 'This node is a fleet replica: domains, buckets, rules, link keys and shared settings are edited on the primary, ',
        h('strong', {}, fleet.primary || 'unknown'), '. Changes made there arrive here within a poll.')));
    }
    mount(main, box);
    if (where.path !== lastPath) { window.scrollTo(0, 0); if (lastPath) main.focus({ preventScroll: true }); }
    lastPath = where.path;
  } catch (err) {
    if (stale() || err.status === 401) return;
    mount(main, errorBox(err));
  }
}

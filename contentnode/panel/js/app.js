// Boot and hash routes: asks /api/session who is here and shows the setup
// wizard, the login, or the page of the current hash route inside the shell
// (shell.js, loaded with import() once someone is logged in, so the login
// needs only what it shows). Hash routes (#/domains/x?y=z): the panel is one
// page, and the hash keeps every view linkable without any server route but `/`.

import { get, onAuthProblem } from './api.js';
import { h, mount } from './dom.js';
import { setScopes, can, canAny } from './scopes.js';
import { toast } from './toast.js';

// --- hash routes ---

const routes = [];

/** route('/domains/:host', loader, {label, allowed, bare}): `:name` parts become ctx.params. */
function route(pattern, load, meta = {}) {
  const keys = [];
  const re = new RegExp(`^${pattern.replace(/:(\w+)/g, (_, k) => { keys.push(k); return '([^/]+)'; })}$`);
  routes.push({ pattern, re, keys, load, meta });
}

function parse(hash = location.hash) {
  const raw = hash.replace(/^#/, '') || '/';
  const cut = raw.indexOf('?');
  const path = cut < 0 ? raw : raw.slice(0, cut);
  const qs = cut < 0 ? '' : raw.slice(cut + 1);
  return { path, query: Object.fromEntries(new URLSearchParams(qs)), full: raw };
}

function match(path) {
  for (const r of routes) {
    const m = r.re.exec(path);
    if (m) {
      const params = {};
      try {
        r.keys.forEach((k, i) => { params[k] = decodeURIComponent(m[i + 1]); });
      } catch { return null; } // a malformed %-escape names nothing
      return { ...r, params };
    }
  }
  return null;
}

/**
 * Where to go after the login: `next` from the URL only when it is a page of
 * this panel (a hash route), never the login or setup again; else the dashboard.
 */
function safeNext(next) {
  if (typeof next !== 'string' || !/^\/[a-z]/.test(next) || /[\\\s]/.test(next)) return '/dashboard';
  const { path } = parse(`#${next}`);
  return path === '/login' || path === '/setup' || !match(path) ? '/dashboard' : next;
}

function go(path) {
  const target = `#${path}`;
  if (location.hash === target) render();
  else location.hash = target;
}

/**
 * Another page in place of the one asked for (`/` is the dashboard, a page
 * that needs a login is the login): the URL is replaced, with no history
 * entry and no hashchange, and the page renders at once. Back never lands on
 * a page that only sends the user on.
 */
function redirect(path) {
  history.replaceState(history.state, '', `#${path}`);
  render();
}

// --- boot ---

const page = (name) => () => import(`./pages/${name}.js`);

// path, page module, nav label, nav group, who may open it
const PAGES = [
  ['/dashboard', 'dashboard', 'Dashboard', 'Overview', () => true],
  ['/domains', 'domains', 'Domains', 'Delivery', () => can('domains:read')],
  ['/domains/:host', 'domain', null, null, () => can('domains:read')],
  ['/buckets', 'buckets', 'Buckets', 'Delivery', () => can('buckets:read')],
  ['/buckets/:id', 'bucket', null, null, () => can('buckets:read')],
  ['/rules', 'rules', 'Rules', 'Delivery', () => can('routes:read')],
  ['/links', 'links', 'Signed links', 'Delivery', () => canAny('routes:write', 'settings:write')],
  ['/traffic', 'traffic', 'Traffic', 'Delivery', () => can('metrics:read')],
  ['/domains/:host/traffic', 'traffic', null, null, () => can('metrics:read')],
  ['/cache', 'cache', 'Cache', 'Delivery', () => can('routes:read')],
  ['/troubleshoot', 'troubleshoot', 'Troubleshoot', 'Delivery', () => can('routes:read')],
  ['/users', 'users', 'Users', 'Administration', () => can('users:manage')],
  ['/users/:id', 'user', null, null, () => can('users:manage')],
  ['/security', 'security', 'Security', 'Administration', () => can('users:manage')],
  ['/audit', 'audit', 'Activity log', 'Administration', () => can('users:manage')],
  ['/backup', 'backup', 'Backup', 'Administration', () => can('users:manage')],
  ['/notifications', 'notifications', 'Notifications', 'Administration', () => can('notifications:manage')],
  ['/settings', 'settings', 'Settings', 'Administration', () => can('settings:write')],
  ['/fleet', 'fleet', 'Fleet', 'Administration', () => can('settings:write')],
  ['/account', 'account', 'My account', 'You', () => true],
];
PAGES.forEach(([path, mod, label, , allowed]) => route(path, page(mod), { label, allowed }));
route('/login', page('login'), { bare: true });
route('/setup', page('setup'), { bare: true });

const state = { session: null, nodeName: null, fleetRole: null };
const root = document.getElementById('app');
let seq = 0;

async function refreshSession() {
  state.session = await get('/api/session');
  setScopes(state.session.user ? state.session.user.scopes : []);
  return state.session;
}

function here() {
  return parse().full;
}

onAuthProblem('unauthenticated', () => {
  state.session = null;
  state.fleetRole = null;
  const current = parse();
  if (current.path !== '/login') go(`/login?next=${encodeURIComponent(current.full)}`);
});
onAuthProblem('enrolment', () => {
  toast('Set up two-factor authentication first: the node requires it for your account', 'error');
  go('/account');
});

/** The node or the panel's own files cannot be reached: say so in place of any page. */
async function showError(err) {
  const { errorBox } = await import('./ui.js');
  mount(root, h('main', { class: 'auth-wrap' }, errorBox(err)));
}

async function render() {
  const mySeq = ++seq;
  const where = parse();
  // A dialog belongs to the page that opened it (and may hold a secret): a new
  // page, a lost session or a link followed from inside it closes it.
  document.querySelectorAll('dialog[open]').forEach((d) => d.close());
  if (!where.path.startsWith('/')) return;
  if (where.path === '/') { redirect('/dashboard'); return; }
  try {
    if (!state.session) await refreshSession();
  } catch (err) {
    await showError(err);
    return;
  }
  const s = state.session;
  if (s.setup_required && where.path !== '/setup') { redirect('/setup'); return; }
  const r = match(where.path);
  if (r && r.meta.bare) {
    if (where.path === '/login' && s.authenticated) { redirect(safeNext(where.query.next)); return; }
    if (where.path === '/setup' && !s.setup_required && !s.authenticated) { redirect('/login'); return; }
    const mod = await r.load();
    if (mySeq !== seq) return;
    const box = h('main', { class: 'auth-wrap', id: 'main' });
    mount(root, box);
    mod.render({ main: box, query: where.query, next: safeNext(where.query.next), params: r.params, session: s, refreshSession, go, state });
    return;
  }
  if (!s.authenticated) { redirect(`/login?next=${encodeURIComponent(here())}`); return; }
  if (s.two_factor_enrollment_required && where.path !== '/account') { redirect('/account'); return; }
  let shell;
  try {
    shell = await import('./shell.js');
  } catch (err) {
    await showError(err);
    return;
  }
  if (mySeq !== seq) return;
  await shell.showPage({
    root, where, route: r, pages: PAGES, state, refreshSession, go, rerender: render, stale: () => mySeq !== seq,
  });
}

// index.html preloads the login page's module, the likeliest first view:
// evaluating it now overlaps that with the session question. The route loads
// it again (the same module) and shows any error.
import('./pages/login.js').catch(() => {});
window.addEventListener('hashchange', render);
render();

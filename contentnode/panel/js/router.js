// Hash routes (#/domains/x?y=z): the panel is one page, and the hash keeps
// every view linkable without any server route but `/`.

const routes = [];
let renderFn = null;

/** route('/domains/:host', loader, {label, allowed, bare}): `:name` parts become ctx.params. */
export function route(pattern, load, meta = {}) {
  const keys = [];
  const re = new RegExp(`^${pattern.replace(/:(\w+)/g, (_, k) => { keys.push(k); return '([^/]+)'; })}$`);
  routes.push({ pattern, re, keys, load, meta });
}

export function parse(hash = location.hash) {
  const raw = hash.replace(/^#/, '') || '/';
  const cut = raw.indexOf('?');
  const path = cut < 0 ? raw : raw.slice(0, cut);
  const qs = cut < 0 ? '' : raw.slice(cut + 1);
  return { path, query: Object.fromEntries(new URLSearchParams(qs)), full: raw };
}

export function match(path) {
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
export function safeNext(next) {
  if (typeof next !== 'string' || !/^\/[a-z]/.test(next) || /[\\\s]/.test(next)) return '/dashboard';
  const { path } = parse(`#${next}`);
  return path === '/login' || path === '/setup' || !match(path) ? '/dashboard' : next;
}

export function go(path) {
  const target = `#${path}`;
  if (location.hash === target) renderFn && renderFn();
  else location.hash = target;
}

/**
 * Another page in place of the one asked for (`/` is the dashboard, a page
 * that needs a login is the login): the URL is replaced, with no history
 * entry and no hashchange, and the page renders at once. Back never lands on
 * a page that only sends the user on.
 */
export function redirect(path) {
  history.replaceState(history.state, '', `#${path}`);
  renderFn && renderFn();
}

export function start(render) {
  renderFn = render;
  window.addEventListener('hashchange', render);
  render();
}

// Hash routes (#/domains/x?y=z): the panel is one page, and the hash keeps
// every view linkable without any server route but `/`.

const routes = [];
let renderFn = null;

/** route('/domains/:host', loader, {scope, title}) */
export function route(pattern, load, meta = {}) {
  const keys = [];
  const re = new RegExp(`^${pattern.replace(/:(\w+)/g, (_, k) => { keys.push(k); return '([^/]+)'; })}$`);
  routes.push({ pattern, re, keys, load, meta });
}

export function parse(hash = location.hash) {
  const raw = hash.replace(/^#/, '') || '/';
  const [path, qs = ''] = raw.split('?');
  return { path, query: Object.fromEntries(new URLSearchParams(qs)), full: raw };
}

export function match(path) {
  for (const r of routes) {
    const m = r.re.exec(path);
    if (m) {
      const params = {};
      r.keys.forEach((k, i) => { params[k] = decodeURIComponent(m[i + 1]); });
      return { ...r, params };
    }
  }
  return null;
}

export function go(path) {
  const target = `#${path}`;
  if (location.hash === target) renderFn && renderFn();
  else location.hash = target;
}

export function start(render) {
  renderFn = render;
  window.addEventListener('hashchange', render);
  render();
}

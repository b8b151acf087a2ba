// The one way the panel talks to the node: JSON over fetch with the session
// cookie. Errors become ApiError with the API's code, message and field.
// An edit sends the revision its form was drawn from (If-Match), so a save
// never silently overwrites a change someone else made meanwhile (412).

const STALE = 'Someone else changed this since you opened it, so nothing was saved. Reload the page to see their change, then make yours again.';

class ApiError extends Error {
  constructor(status, error = {}, extra = {}) {
    super(error.code === 'precondition_failed' ? STALE : error.message || `the node answered ${status}`);
    this.status = status;
    this.code = error.code || 'http_error';
    this.field = error.field || null;
    this.refs = error.refs || null;
    this.steps = extra.steps || null;
    this.retryAfter = extra.retryAfter ?? null;
  }
}

const handlers = { unauthenticated: null, enrolment: null };

/** The app decides what a lost session or a required 2FA enrolment does. */
export function onAuthProblem(kind, fn) {
  handlers[kind] = fn;
}

// Routes whose 401 belongs to the form that called them, not to the session.
const AUTH_ROUTES = ['/api/login', '/api/login/2fa', '/api/login/2fa/passkey-options', '/api/login/passkey',
  '/api/login/passkey/options', '/api/setup', '/api/session', '/api/logout'];

export async function api(method, path, body, { text = false, revision } = {}) {
  const init = { method, credentials: 'include', headers: { Accept: 'application/json' } };
  if (revision !== undefined) init.headers['If-Match'] = `"${revision}"`;
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch {
    throw new ApiError(0, { code: 'network', message: 'the node cannot be reached; check that it is running' });
  }
  if (response.status === 204) return null;
  const raw = await response.text();
  let data = null;
  try { data = raw ? JSON.parse(raw) : null; } catch { data = null; }
  if (!response.ok) {
    const error = new ApiError(response.status, data && data.error ? data.error : {}, {
      steps: data && data.steps,
      retryAfter: response.headers.has('Retry-After') ? Number(response.headers.get('Retry-After')) : null,
    });
    if (error.status === 401 && error.code === 'unauthenticated' && !AUTH_ROUTES.includes(path) && handlers.unauthenticated) {
      handlers.unauthenticated();
    } else if (error.code === 'two_factor_enrollment_required' && handlers.enrolment) {
      handlers.enrolment();
    }
    throw error;
  }
  if (text) return { text: raw, disposition: response.headers.get('Content-Disposition') || '' };
  return data;
}

export const get = (path) => api('GET', path);
// opts.revision: the revision the edit was made on, sent as If-Match.
export const post = (path, body = {}, opts = {}) => api('POST', path, body, opts);
export const put = (path, body, opts = {}) => api('PUT', path, body, opts);
export const del = (path, opts = {}) => api('DELETE', path, undefined, opts);

/** Query string from an object, skipping empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== '' && v !== null && v !== undefined) q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}

/**
 * One path segment from data (a host, an id), percent-encoded. "." and ".."
 * are refused: URL parsing resolves them (even as %2E) into another API path.
 */
export function enc(segment) {
  const s = String(segment);
  if (s === '.' || s === '..') throw new ApiError(404, { code: 'not_found', message: `there is no record named "${s}"` });
  return encodeURIComponent(s);
}

// The cache settings of a rule (cache_mode, query policy, methods, max_body,
// stale windows): controls whose "default" choice names what the API gives a
// new rule on the chosen bucket's type, and the members a form submission sends.

import { h } from './dom.js';
import { field } from './forms.js';

const MIB = 1048576;
const DEFAULT_MAX_BODY = 10 * MIB;
/** What a new rule gets when the create names no cache member (docs/API.md, POST /api/rules). */
const KIND_DEFAULTS = {
  http: { cache_mode: 'origin', query: 'include', methods: 'all' },
  other: { cache_mode: 'override', query: 'ignore', methods: 'read' },
};
function kindDefaults(kind) { return kind === 'http' ? KIND_DEFAULTS.http : KIND_DEFAULTS.other; }

/** The default choice's text: what the API gives a new rule on this bucket type (any type when unknown). */
function defaultLabel(kind, name) {
  return kind ? `Default: ${kindDefaults(kind)[name]} (${kind} bucket)` : 'Default of the bucket\'s type';
}

/** The cache controls; r is the stored rule when editing, kindOf(bucketId) the bucket's type or null. */
export function cacheControls(r, kindOf, bucketSelect) {
  const choice = (name, label, options, hint) => field({ label, name, hint,
    value: r ? (typeof r[name] === 'string' ? r[name] : 'only') : '',
    options: [...(r ? [] : [['', defaultLabel(null, name)]]), ...options] });
  const mode = choice('cache_mode', 'Cache mode', [['origin', 'origin: the site\'s caching headers'], ['override', 'override: every 200 for the TTL']],
    'In origin mode the cache TTL only caps the freshness of an answer that carries none of its own.');
  const query = choice('query', 'Query string', [['include', 'include: key and origin keep it'], ['ignore', 'ignore: dropped'], ['only', 'only the names below']],
    'Parameters of a signed link (exp, kid, sig, ip) never reach the origin.');
  const only = field({ label: 'Query parameters kept', name: 'query_only', value: r && typeof r.query === 'object' ? r.query.only.join(', ') : '',
    autocapitalize: 'none', spellcheck: 'false', placeholder: 'page, lang', hint: '1 to 64 names, separated by commas.' });
  const methods = choice('methods', 'Methods', [['all', 'all: others forwarded uncached'], ['read', 'read: GET and HEAD only']],
    'Other methods reach http buckets only; S3 and folder buckets answer them 405.');
  const number = (name, label, value, max, hint) => field({ label, name, type: 'number', min: 0, max, value, hint });
  const rest = [
    number('max_body', 'Largest forwarded body (bytes)', r ? r.max_body : DEFAULT_MAX_BODY, 1073741824, `A longer request body is refused with 413. Default ${DEFAULT_MAX_BODY} (10 MiB).`),
    number('stale_while_revalidate', 'Stale while revalidate (s)', r ? r.stale_while_revalidate : 0, 31536000, 'Serve a stale answer this long while it is refreshed in the background; only when the origin\'s answer names no stale-while-revalidate of its own. 0: off.'),
    number('stale_if_error', 'Stale if error (s)', r ? r.stale_if_error : 0, 31536000, 'Serve a stale answer this long while the origin fails; only when the origin\'s answer names no stale-if-error of its own. 0: off.'),
  ];
  const querySelect = query.querySelector('select');
  const toggle = () => {
    const on = querySelect.value === 'only';
    only.hidden = !on;
    only.querySelector('input').disabled = !on;
  };
  querySelect.addEventListener('change', toggle);
  toggle();
  if (!r && bucketSelect) {
    const relabel = () => {
      const kind = kindOf(bucketSelect.value);
      for (const [name, f] of [['cache_mode', mode], ['query', query], ['methods', methods]]) f.querySelector('option[value=""]').textContent = defaultLabel(kind, name);
    };
    bucketSelect.addEventListener('change', relabel);
    relabel();
  }
  return h('fieldset', { class: 'stack' }, h('legend', {}, 'Cache and methods'),
    h('div', { class: 'form-grid' }, mode, query, only, methods, ...rest));
}

/** The cache members to send: on create the ones chosen (a default choice is left to the API), on edit the changed ones. */
export function cacheBody(v, r) {
  const body = {};
  const chosen = {
    cache_mode: v.cache_mode, methods: v.methods, max_body: v.max_body,
    stale_while_revalidate: v.stale_while_revalidate, stale_if_error: v.stale_if_error,
    query: v.query === 'only' ? { only: [...new Set((v.query_only || '').split(',').map((s) => s.trim()).filter(Boolean))].sort() } : v.query,
  };
  const unset = { cache_mode: '', methods: '', query: '', max_body: DEFAULT_MAX_BODY, stale_while_revalidate: 0, stale_if_error: 0 };
  for (const [k, value] of Object.entries(chosen)) {
    if (value === null || value === undefined) continue;
    const before = r ? r[k] : unset[k];
    if (JSON.stringify(value) !== JSON.stringify(before)) body[k] = value;
  }
  return body;
}

// A rule's browser controls: CORS (which sites' scripts may read its content,
// and the preflight the node answers) and hotlink protection (which pages may
// embed it). The controls, and the members a form submission sends.

import { h } from './dom.js';
import { field, checkbox } from './forms.js';

/** The entries of a list typed one per line or separated by commas, each once. */
const entries = (text) => [...new Set((text || '').split(/[\s,]+/).map((s) => s.trim()).filter(Boolean))];

/** The controls; r is the stored rule when editing. */
export function browserControls(r) {
  const cors = r && r.cors;
  const ref = r && r.referers;
  return h('fieldset', { class: 'stack' }, h('legend', {}, 'Browsers: CORS and hotlinks'),
    h('div', { class: 'form-grid' },
      field({ label: 'CORS origins', name: 'cors.origins', type: 'textarea', rows: 3, cls: 'wide', value: cors ? cors.origins.join('\n') : '',
        autocapitalize: 'none', placeholder: 'https://app.example.com', hint: 'Sites whose scripts may read this content, one per line; * for any site. Empty: CORS off.' }),
      field({ label: 'Preflight methods', name: 'cors.methods', value: cors ? cors.methods.join(', ') : 'GET, HEAD', autocapitalize: 'none', spellcheck: 'false',
        hint: 'What the node\'s answer to a preflight allows.' }),
      field({ label: 'Preflight request headers', name: 'cors.headers', value: cors ? cors.headers.join(', ') : '', autocapitalize: 'none', spellcheck: 'false',
        placeholder: 'x-token', hint: 'Headers a script may send; * for any.' }),
      field({ label: 'Preflight max age (s)', name: 'cors.max_age', type: 'number', min: 0, max: 86400, value: cors && cors.max_age !== null ? cors.max_age : '',
        hint: 'How long a browser keeps the preflight answer. Empty: its default (5 s).' }),
      field({ label: 'Pages allowed to embed', name: 'referers.allow', type: 'textarea', rows: 3, cls: 'wide', value: ref ? ref.allow.join('\n') : '',
        autocapitalize: 'none', placeholder: 'example.com\n*.example.com', hint: 'Host names, one per line; *.name for every name below it. The domain itself always may.' })),
    h('div', { class: 'checks' },
      checkbox({ label: 'Hotlink protection', name: 'referers.on', checked: !!ref, hint: 'Refuse (403) requests from pages not listed above.' }),
      checkbox({ label: 'Allow requests without a Referer', name: 'referers.empty', checked: ref ? ref.empty : true, hint: 'Browsers and privacy tools often leave it out.' })));
}

/** The members to send: on create the ones set, on edit the changed ones. */
export function browserBody(v, r) {
  const origins = entries(v['cors.origins']);
  const methods = entries(v['cors.methods']);
  const cors = origins.length ? { origins, methods: methods.length ? methods : ['GET', 'HEAD'], headers: entries(v['cors.headers']), max_age: v['cors.max_age'] } : null;
  const referers = v['referers.on'] ? { allow: entries(v['referers.allow']), empty: v['referers.empty'] } : null;
  const body = {};
  for (const [k, value] of Object.entries({ cors, referers })) {
    if (JSON.stringify(value) !== JSON.stringify(r ? r[k] : null)) body[k] = value;
  }
  return body;
}

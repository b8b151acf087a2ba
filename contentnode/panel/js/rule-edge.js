// A rule's edge controls in the rule editor: who may fetch (access: allowed and
// denied networks, and a country list when the node has a country database),
// how often (rate_limit) and the response headers it adds (headers); and the
// members a form submission sends. The API validates; its errors land at the
// control they name (data-field, forms.js showError).

import { h } from './dom.js';
import { field, button } from './forms.js';

const COUNTRY_MODES = [['', 'No country list'], ['allow', 'Only these countries'], ['deny', 'All but these countries']];

function words(text) { return (text || '').split(/[\s,]+/).filter(Boolean); }

/** countryDb: GET /api/rules' country_database ({available, missing}). */
export function edgeControls(r, countryDb) {
  const access = (r && r.access) || { allow: [], deny: [] };
  const cidrs = (name, label, hint) => field({ label, name: `access.${name}`, type: 'textarea', rows: 2,
    value: access[name].join('\n'), autocapitalize: 'none', placeholder: name === 'allow' ? '10.0.0.0/8' : '192.0.2.0/24', hint });
  const stored = access.countries || null;
  const storedMode = stored ? Object.keys(stored)[0] : '';
  let countries;
  if (countryDb && countryDb.available) {
    const mode = field({ label: 'Countries', name: 'access.countries', value: storedMode, options: COUNTRY_MODES,
      hint: 'Addresses the country database does not place (private ones too) are in no list.' });
    const codes = field({ label: 'Country codes', name: 'country_codes', value: stored ? stored[storedMode].join(', ') : '',
      autocapitalize: 'characters', spellcheck: 'false', placeholder: 'DE, FR', hint: 'Two-letter codes (ISO 3166-1), separated by commas.' });
    const select = mode.querySelector('select');
    const toggle = () => {
      codes.hidden = !select.value;
      codes.querySelector('input').disabled = !select.value;
      codes.querySelector('input').dataset.field = `access.countries.${select.value}`;   // where the API names its errors
    };
    select.addEventListener('change', toggle);
    toggle();
    countries = [mode, codes];
  } else {
    countries = [h('p', { class: 'hint wide' }, `Country lists need a country database; this node lacks ${(countryDb && countryDb.missing) || 'one'}.`)];
  }
  const limit = (r && r.rate_limit) || {};
  const number = (name, label, max, hint) => field({ label, name: `rate_limit.${name}`, type: 'number', min: 1, max, value: limit[name], hint });

  const rows = h('div', { class: 'stack header-rows' });
  const addRow = (name = '', value = '') => {
    const n = rows.children.length + 1;
    const nameField = field({ label: `Header ${n} name`, name: `header_name.${n}`, value: name, autocapitalize: 'none', spellcheck: 'false', placeholder: 'X-Frame-Options' });
    const valueField = field({ label: `Header ${n} value`, name: `header_value.${n}`, value, spellcheck: 'false', placeholder: 'DENY' });
    const input = nameField.querySelector('input');
    const mark = () => { input.dataset.field = `headers.${input.value.trim()}`; };
    input.addEventListener('input', mark);
    mark();
    const row = h('div', { class: 'header-row' }, nameField, valueField,
      button('Remove', { kind: 'secondary', class: 'btn btn-secondary btn-sm', 'aria-label': `Remove header ${n}`,
        onclick: () => { row.querySelectorAll('input').forEach((i) => { i.value = ''; i.disabled = true; }); row.hidden = true; } }));
    rows.append(row);
  };
  for (const [name, value] of Object.entries((r && r.headers) || {})) addRow(name, value);
  if (!rows.children.length) addRow();

  return h('div', { class: 'stack' },
    h('fieldset', { class: 'stack' }, h('legend', {}, 'Who may fetch'),
      h('div', { class: 'form-grid' },
        cidrs('allow', 'Allowed networks', 'CIDRs, one a line; none: every address not denied.'),
        cidrs('deny', 'Denied networks', 'Refused whatever else allows them (403).'),
        ...countries)),
    h('fieldset', { class: 'stack' }, h('legend', {}, 'Rate limit'),
      h('div', { class: 'form-grid' },
        number('rate', 'Requests a second per client', 100000, 'Empty: no limit. IPv6 clients count by their /64.'),
        number('burst', 'Burst', 1000000, 'Requests a client may make at once before the rate applies (429 past it).'))),
    h('fieldset', { class: 'stack' }, h('legend', {}, 'Response headers'),
      h('p', { class: 'hint' }, 'Added to the rule\'s answers, replacing the answer\'s own of the same name.'),
      rows, h('div', { class: 'form-actions start' }, button('Add header', { kind: 'secondary', class: 'btn btn-secondary btn-sm', onclick: () => addRow() }))));
}

function accessOf(v, r) {
  const out = { allow: words(v['access.allow']), deny: words(v['access.deny']) };
  const mode = v['access.countries'];
  if (mode) out.countries = { [mode]: [...new Set(words(v.country_codes).map((c) => c.toUpperCase()))].sort() };
  else if (mode === undefined && r && r.access && r.access.countries) out.countries = r.access.countries;   // no database here: kept
  return out.allow.length || out.deny.length || out.countries ? out : null;
}

function headersOf(v) {
  const out = {};
  for (const [key, name] of Object.entries(v)) {
    if (!key.startsWith('header_name.') || !name.trim()) continue;
    out[name.trim()] = v[`header_value.${key.slice('header_name.'.length)}`] || '';
  }
  return Object.keys(out).length ? out : null;
}

/** The edge members to send: on create the ones set, on edit the changed ones. */
export function edgeBody(v, r) {
  const rate = v['rate_limit.rate'];
  const burst = v['rate_limit.burst'];
  const chosen = {
    access: accessOf(v, r),
    rate_limit: rate === null && burst === null ? null : { ...(rate !== null ? { rate } : {}), ...(burst !== null ? { burst } : {}) },
    headers: headersOf(v),
  };
  const body = {};
  for (const [k, value] of Object.entries(chosen)) {
    if (JSON.stringify(value) !== JSON.stringify(r ? r[k] ?? null : null)) body[k] = value;
  }
  return body;
}

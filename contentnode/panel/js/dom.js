// Building DOM without innerHTML: text always goes through textContent, so
// data from the API can never become markup.

const SVG_NS = 'http://www.w3.org/2000/svg';
const SVG_TAGS = new Set(['svg', 'path', 'rect', 'line', 'g', 'text', 'circle', 'polyline', 'title']);
const URL_ATTRS = new Set(['href', 'src', 'action', 'formaction', 'xlink:href']);

/** Links the panel makes: its own hash routes and blob downloads, never a scheme taken from data. */
function safeUrl(value) {
  const url = String(value);
  if (url.startsWith('#') || url.startsWith(`blob:${location.origin}/`)) return url;
  throw new Error(`refused link target ${JSON.stringify(url.slice(0, 40))}`);
}

function append(el, child) {
  if (child === null || child === undefined || child === false) return;
  if (Array.isArray(child)) { child.forEach((c) => append(el, c)); return; }
  el.append(child instanceof Node ? child : document.createTextNode(String(child)));
}

/** h('button', {class: 'btn', onclick: fn}, 'Save') -> element. */
export function h(tag, attrs, ...children) {
  const el = SVG_TAGS.has(tag) ? document.createElementNS(SVG_NS, tag) : document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith('on')) {
      if (typeof value !== 'function') throw new Error(`${key} takes a function`); // never an inline handler
      el.addEventListener(key.slice(2), value);
    } else if (key === 'style') throw new Error('no style attribute: the CSP refuses it; use a class');
    else if (key === 'class') el.setAttribute('class', Array.isArray(value) ? value.filter(Boolean).join(' ') : value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key === 'value' && 'value' in el && !SVG_TAGS.has(tag)) el.value = value;
    else if (key === 'checked' || key === 'selected' || key === 'open') el[key] = Boolean(value);
    else if (URL_ATTRS.has(key)) el.setAttribute(key, safeUrl(value));
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  children.forEach((c) => append(el, c));
  return el;
}

function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

/** Replace an element's children. */
export function mount(el, ...children) {
  clear(el);
  children.forEach((c) => append(el, c));
  return el;
}

let counter = 0;
export function uid(prefix = 'f') {
  counter += 1;
  return `${prefix}-${counter}`;
}

/** A small inline SVG icon from a path list (stroke icons, 24px grid). */
export function icon(paths, cls = 'icon') {
  return h('svg', { class: cls, viewBox: '0 0 24 24', 'aria-hidden': 'true', focusable: 'false' },
    ...paths.map((d) => h('path', { d })));
}

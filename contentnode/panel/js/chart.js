// The traffic chart: a small SVG line chart drawn by hand (no library),
// redrawn on resize, with a hover / arrow-key read-out.

import { h, mount } from './dom.js';
import { clock } from './format.js';

/** A round axis maximum and a tick count that keeps every tick round. */
function niceMax(v) {
  const p = 10 ** Math.floor(Math.log10(v));
  const m = v / p;
  const top = m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10;
  return [top * p, top === 2 ? 4 : 5];
}

/**
 * points: the API's points; series: [{label, value(p) -> number, cls}];
 * fmt: number -> text for the axis and read-out; longTimes: label days too.
 */
export function lineChart(points, series, { fmt = String, longTimes = false, label = 'Traffic' } = {}) {
  const H = 240; const padL = 48; const padR = 10; const padT = 12; const padB = 26;
  const svg = h('svg', { 'data-testid': 'traffic-chart', role: 'img', tabindex: '0' });
  const tip = h('div', { class: 'tip', hidden: true });
  const wrap = h('div', { class: 'chart' }, svg, tip);
  const totals = series.map((s) => points.reduce((a, p) => a + s.value(p), 0));
  svg.setAttribute('aria-label', `${label}: ${series.map((s, i) => `${s.label} ${fmt(totals[i])} in total`).join(', ')}. Use the arrow keys to read each point.`);
  const [max, tickCount] = niceMax(Math.max(4, ...points.flatMap((p) => series.map((s) => s.value(p)))));
  let width = 0; let idx = -1;

  const x = (i) => padL + (points.length < 2 ? 0 : (i * (width - padL - padR)) / (points.length - 1));
  const y = (v) => padT + (H - padT - padB) * (1 - v / max);

  function draw() {
    if (!width) return;
    svg.setAttribute('viewBox', `0 0 ${width} ${H}`);
    const grid = h('g', { class: 'grid' }); const axis = h('g', { class: 'axis' });
    for (let t = 0; t <= tickCount; t += 1) {
      const v = (max * t) / tickCount; const yy = y(v);
      grid.append(h('line', { x1: padL, x2: width - padR, y1: yy, y2: yy }));
      axis.append(h('text', { x: padL - 8, y: yy + 4, 'text-anchor': 'end' }, fmt(v)));
    }
    const ticks = Math.max(2, Math.min(7, Math.floor(width / 110)));
    for (let t = 0; t < ticks; t += 1) {
      const i = Math.round((t * (points.length - 1)) / (ticks - 1));
      axis.append(h('text', { x: x(i), y: H - 6, 'text-anchor': t === 0 ? 'start' : t === ticks - 1 ? 'end' : 'middle' }, clock(points[i].t, longTimes)));
    }
    const paths = series.map((s, k) => {
      const d = points.map((p, i) => `${i ? 'L' : 'M'}${x(i).toFixed(1)},${y(s.value(p)).toFixed(1)}`).join('');
      const out = [h('path', { class: `line-${k + 1}`, d })];
      if (k === 0 && points.length) out.unshift(h('path', { class: 'area-1', d: `${d}L${x(points.length - 1)},${y(0)}L${x(0)},${y(0)}Z` }));
      return out;
    }).flat();
    const cursor = idx >= 0 ? [h('line', { class: 'cursor', x1: x(idx), x2: x(idx), y1: padT, y2: H - padB }),
      h('circle', { class: 'dot', cx: x(idx), cy: y(series[0].value(points[idx])), r: 4 })] : [];
    mount(svg, grid, axis, ...paths, ...cursor);
    if (idx >= 0) {
      const p = points[idx];
      mount(tip, h('p', {}, h('strong', {}, clock(p.t, true))),
        ...series.map((s) => h('p', {}, h('span', {}, s.label), h('strong', {}, fmt(s.value(p))))));
      tip.hidden = false;
      const left = Math.min(Math.max(0, x(idx) + 12), width - 170);
      tip.style.left = `${left}px`;
    } else tip.hidden = true;
  }

  function pick(i) { idx = Math.max(-1, Math.min(points.length - 1, i)); draw(); }
  svg.addEventListener('pointermove', (e) => {
    const r = svg.getBoundingClientRect();
    pick(Math.round(((e.clientX - r.left - padL) / (width - padL - padR)) * (points.length - 1)));
  });
  svg.addEventListener('pointerleave', () => pick(-1));
  svg.addEventListener('blur', () => pick(-1));
  svg.addEventListener('keydown', (e) => {
    if (e.key === 'ArrowRight') { pick(idx < 0 ? points.length - 1 : idx + 1); e.preventDefault(); }
    if (e.key === 'ArrowLeft') { pick(idx < 0 ? points.length - 1 : Math.max(0, idx - 1)); e.preventDefault(); }
    if (e.key === 'Escape') pick(-1);
  });
  new ResizeObserver((entries) => {
    const w = Math.round(entries[0].contentRect.width);
    if (w && w !== width) { width = w; draw(); }
  }).observe(wrap);
  return wrap;
}

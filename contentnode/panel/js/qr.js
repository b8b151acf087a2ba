// A QR code as one SVG path, from the vendored lean-qr nano build (loaded
// only when needed). The text (an otpauth URI) never leaves the page.

import { h } from './dom.js';

export async function qrSvg(text, label) {
  const { generate, correction } = await import('../vendor/lean-qr/nano.mjs');
  const q = generate(text, { minCorrectionLevel: correction.M });
  const n = q.size;
  let d = '';
  for (let y = 0; y < n; y += 1) {
    for (let x = 0; x < n; x += 1) if (q.get(x, y)) d += `M${x + 4} ${y + 4}h1v1h-1z`;
  }
  return h('svg', { class: 'qr', viewBox: `0 0 ${n + 8} ${n + 8}`, role: 'img', 'aria-label': label, 'shape-rendering': 'crispEdges' },
    h('rect', { class: 'qr-bg', x: 0, y: 0, width: n + 8, height: n + 8 }), h('path', { class: 'qr-on', d }));
}

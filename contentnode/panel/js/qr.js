// A QR code as one SVG path, from the vendored qrcode-generator (loaded only
// when needed). The text (an otpauth URI) never leaves the page.

import { h } from './dom.js';

export async function qrSvg(text, label) {
  const { qrcode } = await import('../vendor/qrcode-generator/qrcode.mjs');
  const q = qrcode(0, 'M');
  q.addData(text);
  q.make();
  const n = q.getModuleCount();
  let d = '';
  for (let r = 0; r < n; r += 1) {
    for (let c = 0; c < n; c += 1) if (q.isDark(r, c)) d += `M${c + 4} ${r + 4}h1v1h-1z`;
  }
  return h('svg', { class: 'qr', viewBox: `0 0 ${n + 8} ${n + 8}`, role: 'img', 'aria-label': label, 'shape-rendering': 'crispEdges' },
    h('rect', { class: 'qr-bg', x: 0, y: 0, width: n + 8, height: n + 8 }), h('path', { class: 'qr-on', d }));
}

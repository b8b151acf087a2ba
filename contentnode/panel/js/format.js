// Formatting of times, sizes and counts for people.

// The first Intl formatter a page builds costs tens of milliseconds (locale
// data), so each is built on first use, never at import: the login page,
// which formats nothing, does not pay for them.
function lazy(make) {
  let made = null;
  return () => made || (made = make());
}

const dateTime = lazy(() => new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'short' }));
const shortTime = lazy(() => new Intl.DateTimeFormat(undefined, { hour: '2-digit', minute: '2-digit' }));
const shortDay = lazy(() => new Intl.DateTimeFormat(undefined, { weekday: 'short', hour: '2-digit', minute: '2-digit' }));
const number = lazy(() => new Intl.NumberFormat());

export function when(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : dateTime().format(d);
}

export function clock(iso, long = false) {
  const d = new Date(iso);
  return (long ? shortDay : shortTime)().format(d);
}

export function ago(iso) {
  if (!iso) return 'never';
  const seconds = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
  const future = seconds < 0;
  const s = Math.abs(seconds);
  let text;
  if (s < 45) text = 'a few seconds';
  else if (s < 3600) text = `${Math.round(s / 60)} min`;
  else if (s < 86400) text = `${Math.round(s / 3600)} h`;
  else text = `${Math.round(s / 86400)} d`;
  return future ? `in ${text}` : `${text} ago`;
}

export function daysUntil(iso) {
  return Math.floor((new Date(iso).getTime() - Date.now()) / 86400000);
}

export function bytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KB', 'MB', 'GB', 'TB'];
  let v = Number(n);
  let i = 0;
  while (v >= 1000 && i < units.length - 1) { v /= 1000; i += 1; }
  return `${i === 0 ? v : v.toFixed(v < 10 ? 1 : 0)} ${units[i]}`;
}

export function count(n) {
  return number().format(n ?? 0);
}

export function compact(n) {
  if (n < 1000) return String(n);
  if (n < 1e6) return `${(n / 1000).toFixed(n < 10000 ? 1 : 0)}k`;
  return `${(n / 1e6).toFixed(1)}M`;
}

export function duration(seconds) {
  const s = Number(seconds);
  if (s % 86400 === 0 && s >= 86400) return `${s / 86400} d`;
  if (s % 3600 === 0 && s >= 3600) return `${s / 3600} h`;
  if (s % 60 === 0 && s >= 60) return `${s / 60} min`;
  return `${s} s`;
}

export function ms(v) {
  return v === null || v === undefined ? '' : `${Number(v).toFixed(v < 10 ? 1 : 0)} ms`;
}

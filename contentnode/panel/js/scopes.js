// Scope checks for showing or hiding controls. The server still decides.

export const ALL_SCOPES = [
  'metrics:read', 'domains:read', 'domains:write', 'buckets:read', 'buckets:write',
  'routes:read', 'routes:write', 'settings:write', 'users:manage', 'notifications:manage',
];

/** The scopes implied by a list: x:write brings x:read. */
function withImplied(scopes) {
  const out = new Set(scopes);
  for (const s of scopes) if (s.endsWith(':write')) out.add(s.replace(':write', ':read'));
  return out;
}

let current = new Set();

export function setScopes(scopes) {
  current = withImplied(scopes || []);
}

export function can(scope) {
  return current.has(scope);
}

export function canAny(...scopes) {
  return scopes.some((s) => current.has(s));
}

let sharedReadOnly = false;

/** On a fleet replica shared objects are edited on the primary: their write controls hide. */
export function setSharedReadOnly(on) {
  sharedReadOnly = Boolean(on);
}

/** can(scope) for a control that changes a shared object (domains, buckets, rules, link keys). */
export function canShared(scope) {
  return !sharedReadOnly && current.has(scope);
}

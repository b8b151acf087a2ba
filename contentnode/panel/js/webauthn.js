// The browser side of passkeys: the node speaks WebAuthn's JSON forms
// (base64url strings); the browser's API wants ArrayBuffers. Chromium and
// Firefox convert themselves (parse...FromJSON, toJSON); older browsers get
// the same conversion done here.

const PKC = () => window.PublicKeyCredential;

/** Whether this page can use passkeys at all (a secure context: https, or http on localhost). */
export function passkeysAvailable() {
  return typeof PKC() === 'function' && Boolean(navigator.credentials) && window.isSecureContext;
}

function fromB64url(text) {
  const b64 = text.replace(/-/g, '+').replace(/_/g, '/') + '==='.slice((text.length + 3) % 4);
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0)).buffer;
}

function toB64url(buffer) {
  let s = '';
  for (const byte of new Uint8Array(buffer)) s += String.fromCharCode(byte);
  return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

const descriptors = (list) => (list || []).map((d) => ({ ...d, id: fromB64url(d.id) }));

function creationOptions(json) {
  if (typeof PKC().parseCreationOptionsFromJSON === 'function') return PKC().parseCreationOptionsFromJSON(json);
  return { ...json, challenge: fromB64url(json.challenge), user: { ...json.user, id: fromB64url(json.user.id) },
    excludeCredentials: descriptors(json.excludeCredentials) };
}

function requestOptions(json) {
  if (typeof PKC().parseRequestOptionsFromJSON === 'function') return PKC().parseRequestOptionsFromJSON(json);
  return { ...json, challenge: fromB64url(json.challenge), allowCredentials: descriptors(json.allowCredentials) };
}

function credentialJSON(credential) {
  if (typeof credential.toJSON === 'function') return credential.toJSON();
  const r = credential.response;
  const response = { clientDataJSON: toB64url(r.clientDataJSON) };
  if (r.attestationObject) {
    response.attestationObject = toB64url(r.attestationObject);
    response.transports = typeof r.getTransports === 'function' ? r.getTransports() : [];
  } else {
    response.authenticatorData = toB64url(r.authenticatorData);
    response.signature = toB64url(r.signature);
    response.userHandle = r.userHandle ? toB64url(r.userHandle) : null;
  }
  return { id: credential.id, rawId: toB64url(credential.rawId), type: credential.type, response,
    authenticatorAttachment: credential.authenticatorAttachment ?? null,
    clientExtensionResults: credential.getClientExtensionResults() };
}

/** A cancelled or timed-out ceremony, as a message for the form (the API's errors pass through). */
function ceremonyError(err) {
  if (err && err.name === 'NotAllowedError') return { message: 'The passkey request was cancelled or timed out.' };
  if (err && err.name === 'InvalidStateError') return { message: 'This authenticator already holds a passkey for your account.' };
  if (err && err.name && !err.status) return { message: `The browser could not use a passkey: ${err.message || err.name}` };
  return err;
}

/** navigator.credentials.create() with the node's creation options; the credential as JSON. */
export async function createPasskey(optionsJSON) {
  try {
    return credentialJSON(await navigator.credentials.create({ publicKey: creationOptions(optionsJSON) }));
  } catch (err) { throw ceremonyError(err); }
}

/** navigator.credentials.get() with the node's request options; the credential as JSON. */
export async function getPasskey(optionsJSON) {
  try {
    return credentialJSON(await navigator.credentials.get({ publicKey: requestOptions(optionsJSON) }));
  } catch (err) { throw ceremonyError(err); }
}

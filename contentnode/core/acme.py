"""An RFC 8555 (ACME) client for HTTP-01 issuance, written on `cryptography`.

Small on purpose: one account key (EC P-256 signs ES256; an existing RSA key
signs RS256), the account found or created by newAccount, one order per
issuance, HTTP-01 only (the public port answers the challenge from a
ChallengeStore), finalize with a CSR, download the PEM chain. Every request
goes through the caller's `fetch` (the node's outbound guard); badNonce is
retried as the RFC asks, and every poll loop is bounded.
"""

import base64
import hashlib
import json
import os
import re
import threading
import time

from contentnode.core.certs import make_csr
from contentnode.core.netguard import OutboundError
from contentnode.core.text import json_loads
from contentnode.fileio import atomic_write, ensure_private_dir

JOSE = "application/jose+json"
BAD_NONCE = "urn:ietf:params:acme:error:badNonce"
NONCE_RETRIES = 5
MAX_POLLS = 60
MAX_RETRY_AFTER = 10.0
_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,256}")  # RFC 8555 8.3: a base64url token


class AcmeError(Exception):
    """Issuance failed; `step` names the stage (directory, account, order, ...)."""

    def __init__(self, step: str, message: str):
        super().__init__(message)
        self.step = step
        self.message = message


class ChallengeStore:
    """HTTP-01 tokens the public port must answer, shared between threads.

    With public workers (`folder` given) each token is also a file there, so
    whichever worker process receives the CA's request can answer it; the
    daemon (`clear`) starts with an empty folder.
    """

    def __init__(self, folder: str | None = None, clear: bool = False):
        self._tokens: dict[str, str] = {}
        self._lock = threading.Lock()
        self._folder = folder
        if folder is not None:
            ensure_private_dir(folder)
            if clear:
                for name in os.listdir(folder):
                    os.unlink(os.path.join(folder, name))

    def put(self, token: str, key_authorization: str):
        with self._lock:
            self._tokens[token] = key_authorization
        if self._folder is not None and _TOKEN.fullmatch(token):
            atomic_write(os.path.join(self._folder, token), key_authorization.encode("ascii"))

    def get(self, token: str):
        with self._lock:
            found = self._tokens.get(token)
        if found is None and self._folder is not None and _TOKEN.fullmatch(token):
            try:
                with open(os.path.join(self._folder, token), "rb") as f:
                    found = f.read(1024).decode("ascii")
            except (FileNotFoundError, UnicodeDecodeError):
                return None
        return found

    def remove(self, token: str):
        with self._lock:
            self._tokens.pop(token, None)
        if self._folder is not None and _TOKEN.fullmatch(token):
            try:
                os.unlink(os.path.join(self._folder, token))
            except FileNotFoundError:
                pass


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _int_bytes(value: int, length: int | None = None) -> bytes:
    length = length or max(1, (value.bit_length() + 7) // 8)
    return value.to_bytes(length, "big")


def jwk(key) -> dict:
    """The public JWK of an account key (RFC 7518), members in thumbprint order."""
    from cryptography.hazmat.primitives.asymmetric import ec
    numbers = key.public_key().public_numbers()
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return {"crv": "P-256", "kty": "EC", "x": b64url(_int_bytes(numbers.x, 32)),
                "y": b64url(_int_bytes(numbers.y, 32))}
    return {"e": b64url(_int_bytes(numbers.e)), "kty": "RSA", "n": b64url(_int_bytes(numbers.n))}


def thumbprint(key) -> str:
    """RFC 7638 JWK thumbprint, the second half of a key authorization."""
    canonical = json.dumps(jwk(key), sort_keys=True, separators=(",", ":")).encode("ascii")
    return b64url(hashlib.sha256(canonical).digest())


def algorithm(key) -> str:
    from cryptography.hazmat.primitives.asymmetric import ec
    return "ES256" if isinstance(key, ec.EllipticCurvePrivateKey) else "RS256"


def sign(key, data: bytes) -> bytes:
    """JWS signature of data: ES256 as r||s, or RS256."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
    if isinstance(key, ec.EllipticCurvePrivateKey):
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
        return _int_bytes(r, 32) + _int_bytes(s, 32)
    return key.sign(data, padding.PKCS1v15(), hashes.SHA256())


def load_account_key(path: str):
    """The account key at path, created (EC P-256, mode 0600) when missing."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    try:
        with open(path, "rb") as f:
            key = serialization.load_pem_private_key(f.read(), password=None)
    except FileNotFoundError:
        key = ec.generate_private_key(ec.SECP256R1())
        ensure_private_dir(os.path.dirname(path))
        atomic_write(path, key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        return key
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp256r1":
        return key
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size >= 2048:
        return key
    raise AcmeError("account", f"account key {path} must be EC P-256 or RSA of 2048 bits or more")


def _problem(result) -> tuple:
    """(type, detail) of an ACME problem document."""
    try:
        doc = json_loads(result.body)
        return str(doc.get("type", "")), str(doc.get("detail", ""))
    except (ValueError, AttributeError):
        return "", result.body[:200].decode("utf-8", "replace")


class AcmeClient:
    """One issuance session against one directory."""

    def __init__(self, directory_url: str, account_key, fetch, contact: str | None = None,
                 sleep=time.sleep):
        self.directory_url = directory_url
        self.key = account_key
        self.contact = contact
        self._fetch = fetch
        self._sleep = sleep
        self._nonce = None
        self._directory: dict | None = None
        self._kid: str | None = None

    def _request(self, step, url, method="GET", headers=None, body=None):
        try:
            return self._fetch(url, method=method, headers=headers, body=body)
        except OutboundError as exc:
            raise AcmeError(step, f"{exc.message} ({url})") from None

    def _json(self, step, result) -> dict:
        try:
            doc = json_loads(result.body)
        except ValueError:
            raise AcmeError(step, "the ACME server answered something that is not JSON") from None
        if not isinstance(doc, dict):
            raise AcmeError(step, "the ACME server answered an unexpected JSON document")
        return doc

    def directory(self) -> dict:
        if self._directory is None:
            result = self._request("directory", self.directory_url)
            if result.status != 200:
                raise AcmeError("directory", f"directory answered HTTP {result.status}")
            doc = self._json("directory", result)
            missing = [k for k in ("newNonce", "newAccount", "newOrder") if not isinstance(doc.get(k), str)]
            if missing:
                raise AcmeError("directory", f"directory lacks {', '.join(missing)}")
            self._directory = doc
        return self._directory

    def _fresh_nonce(self, step) -> str:
        result = self._request(step, self.directory()["newNonce"], method="HEAD")
        nonce = result.headers.get("replay-nonce")
        if not nonce:
            raise AcmeError(step, "the ACME server gave no Replay-Nonce")
        return nonce

    def _signed(self, url, payload, nonce) -> bytes:
        protected = {"alg": algorithm(self.key), "nonce": nonce, "url": url}
        if self._kid:
            protected["kid"] = self._kid
        else:
            protected["jwk"] = jwk(self.key)
        protected_b64 = b64url(json.dumps(protected).encode("utf-8"))
        payload_b64 = "" if payload is None else b64url(json.dumps(payload).encode("utf-8"))
        signature = sign(self.key, f"{protected_b64}.{payload_b64}".encode("ascii"))
        return json.dumps({"protected": protected_b64, "payload": payload_b64,
                           "signature": b64url(signature)}).encode("ascii")

    def post(self, step, url, payload=None, accept=None):
        """A signed POST (payload None = POST-as-GET); badNonce retried, problems raised."""
        for _ in range(NONCE_RETRIES):
            nonce = self._nonce or self._fresh_nonce(step)
            self._nonce = None
            headers = {"Content-Type": JOSE}
            if accept:
                headers["Accept"] = accept
            result = self._request(step, url, method="POST", headers=headers,
                                   body=self._signed(url, payload, nonce))
            self._nonce = result.headers.get("replay-nonce")
            if result.status < 400:
                return result
            kind, detail = _problem(result)
            if kind != BAD_NONCE:
                raise AcmeError(step, f"{detail or 'request refused'} ({kind or f'HTTP {result.status}'})")
        raise AcmeError(step, f"the ACME server refused {NONCE_RETRIES} nonces in a row")

    def account(self) -> str:
        """Find or create the account of our key; returns its URL (kid)."""
        if self._kid is None:
            payload: dict[str, object] = {"termsOfServiceAgreed": True}
            if self.contact:
                payload["contact"] = [f"mailto:{self.contact}"]
            result = self.post("account", self.directory()["newAccount"], payload)
            kid = result.headers.get("location")
            if not kid:
                raise AcmeError("account", "newAccount answered without a Location")
            self._kid = kid
        return self._kid

    def _poll(self, step, url, done: str, pending: tuple) -> dict:
        for _ in range(MAX_POLLS):
            result = self.post(step, url)
            doc = self._json(step, result)
            status = doc.get("status")
            if status == done:
                return doc
            if status not in pending:
                raise AcmeError(step, self._failure_text(doc, status))
            retry = result.headers.get("retry-after", "")
            self._sleep(min(float(retry), MAX_RETRY_AFTER) if retry.isascii() and retry.isdigit() else 1.0)
        raise AcmeError(step, f"still not {done} after {MAX_POLLS} polls")

    @staticmethod
    def _failure_text(doc, status) -> str:
        errors = [doc.get("error")] + [c.get("error") for c in doc.get("challenges", []) if isinstance(c, dict)]
        for error in errors:
            if isinstance(error, dict) and error.get("detail"):
                return f"{status}: {error['detail']}"
        return f"status {status!r}"

    def _authorize(self, authz_url: str, challenges: ChallengeStore):
        authz = self._json("authorization", self.post("authorization", authz_url))
        if authz.get("status") == "valid":
            return
        http01 = [c for c in authz.get("challenges", []) if isinstance(c, dict) and c.get("type") == "http-01"]
        if not http01 or not isinstance(http01[0].get("token"), str):
            raise AcmeError("authorization", "the CA offered no http-01 challenge")
        if not _TOKEN.fullmatch(http01[0]["token"]) or not isinstance(http01[0].get("url"), str):
            raise AcmeError("authorization", "the CA's http-01 challenge has a malformed token or url")
        token = http01[0]["token"]
        challenges.put(token, f"{token}.{thumbprint(self.key)}")
        try:
            self.post("challenge", http01[0]["url"], {})
            self._poll("challenge", authz_url, "valid", ("pending", "processing"))
        finally:
            challenges.remove(token)

    def issue(self, hosts: list, challenges: ChallengeStore, cert_key) -> str:
        """Order, prove and finalize a certificate for hosts; returns the PEM chain.

        A CA answer of the wrong shape (a missing member, a list where an object
        belongs) is an AcmeError("protocol"), never an exception of another kind.
        """
        try:
            return self._issue(hosts, challenges, cert_key)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise AcmeError("protocol", f"the ACME server's answer has an unexpected shape "
                                        f"({type(exc).__name__})") from None

    def _issue(self, hosts: list, challenges: ChallengeStore, cert_key) -> str:
        self.account()
        identifiers = [{"type": "dns", "value": h} for h in hosts]
        result = self.post("order", self.directory()["newOrder"], {"identifiers": identifiers})
        order_url = result.headers.get("location")
        order = self._json("order", result)
        if not order_url or not isinstance(order.get("authorizations"), list):
            raise AcmeError("order", "newOrder answered an incomplete order")
        for authz_url in order["authorizations"]:
            self._authorize(authz_url, challenges)
        order = self._poll("order", order_url, "ready", ("pending",))
        csr = make_csr(hosts, cert_key)
        self.post("finalize", order["finalize"], {"csr": b64url(csr)})
        order = self._poll("finalize", order_url, "valid", ("processing", "ready"))
        if not isinstance(order.get("certificate"), str):
            raise AcmeError("finalize", "the valid order names no certificate")
        chain = self.post("download", order["certificate"], accept="application/pem-certificate-chain")
        text = chain.body.decode("ascii", "replace")
        if "-----BEGIN CERTIFICATE-----" not in text:
            raise AcmeError("download", "the certificate download is not PEM")
        return text

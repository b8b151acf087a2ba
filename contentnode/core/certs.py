"""Certificates: validate what an operator or a CA hands us, keep it, serve it.

An uploaded bundle is checked before it can break a live TLS listener: it must
parse, the key must belong to the leaf, the host must be among its names
(RFC 6125 wildcards), it must be valid now and the chain must be in order.
Each host's key and chain live together in one 0600 file that is replaced
atomically, so the SNI selector can never see a key from one bundle with the
chain of another, and it notices a replaced file on the next handshake.
"""

import hashlib
import os
import re
import ssl
import threading
from dataclasses import dataclass

from contentnode.clock import rfc3339
from contentnode.fileio import atomic_write, ensure_private_dir

MAX_CHAIN = 8
MIN_RSA_BITS = 2048


def _x509():
    """cryptography.x509, imported when a certificate is first read or made: its import is about a
    sixth of a daemon's start-up CPU, spent for nothing on a node that never reads a certificate."""
    from cryptography import x509
    return x509


class CertError(ValueError):
    """A bad bundle; `field` names the offending input (cert_pem or key_pem)."""

    def __init__(self, field, message):
        super().__init__(message)
        self.field = field


@dataclass
class Bundle:
    """A validated chain (leaf first) with its private key, both as PEM text."""

    chain: list
    chain_pem: str
    key_pem: str

    @property
    def leaf(self):
        return self.chain[0]


def load_chain(pem) -> list:
    """The certificates of a PEM text, in the order given."""
    if not isinstance(pem, str) or "-----BEGIN CERTIFICATE-----" not in pem:
        raise CertError("cert_pem", "cert_pem must hold at least one PEM certificate")
    x509 = _x509()
    try:
        chain = x509.load_pem_x509_certificates(pem.encode("ascii"))
    except (ValueError, UnicodeError):
        raise CertError("cert_pem", "cert_pem is not a readable PEM certificate chain") from None
    if len(chain) > MAX_CHAIN:
        raise CertError("cert_pem", f"the chain holds more than {MAX_CHAIN} certificates")
    return chain


def load_key(pem):
    """An unencrypted RSA (2048 bits or more) or EC private key from PEM text."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    if not isinstance(pem, str) or "PRIVATE KEY-----" not in pem:
        raise CertError("key_pem", "key_pem must hold a PEM private key")
    try:
        key = serialization.load_pem_private_key(pem.encode("ascii"), password=None)
    except TypeError:
        raise CertError("key_pem", "key_pem is encrypted; upload it without a passphrase") from None
    except (ValueError, UnicodeError):
        raise CertError("key_pem", "key_pem is not a readable PEM private key") from None
    if isinstance(key, rsa.RSAPrivateKey):
        if key.key_size < MIN_RSA_BITS:
            raise CertError("key_pem", f"RSA keys must have at least {MIN_RSA_BITS} bits")
    elif not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertError("key_pem", "only RSA and EC private keys are supported")
    return key


def dns_names(cert) -> list:
    """The DNS names of a certificate's subjectAltName, lower case.

    CertError when the extensions cannot be parsed (cryptography reads them lazily).
    """
    x509 = _x509()
    try:
        ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except x509.ExtensionNotFound:
        return []
    except (ValueError, x509.DuplicateExtension, x509.UnsupportedGeneralNameType) as exc:
        raise CertError("cert_pem", f"the certificate's extensions cannot be read ({type(exc).__name__})") from None
    return [name.lower().rstrip(".") for name in ext.value.get_values_for_type(x509.DNSName)]


def name_matches(host: str, pattern: str) -> bool:
    """RFC 6125 §6.4.3: a wildcard only as the whole leftmost label, matching one label."""
    host, pattern = host.lower(), pattern.lower()
    if not pattern.startswith("*."):
        return "*" not in pattern and host == pattern
    base = pattern[2:]
    if not base or "*" in base:
        return False
    first, dot, rest = host.partition(".")
    return bool(first) and bool(dot) and rest == base


def covers(cert, host: str) -> bool:
    """True when one of the certificate's DNS names matches the host."""
    return any(name_matches(host, pattern) for pattern in dns_names(cert))


def _same_key(cert, key) -> bool:
    from cryptography.hazmat.primitives import serialization
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    try:
        return cert.public_key().public_bytes(*spki) == key.public_key().public_bytes(*spki)
    except ValueError:
        return False


def _check_times(chain, now: float):
    for position, cert in enumerate(chain):
        which = "the certificate" if position == 0 else f"chain certificate {position + 1}"
        if cert.not_valid_after_utc.timestamp() < now:
            raise CertError("cert_pem", f"{which} expired on {rfc3339(cert.not_valid_after_utc.timestamp())}")
        if cert.not_valid_before_utc.timestamp() > now:
            raise CertError("cert_pem", f"{which} is not valid before {rfc3339(cert.not_valid_before_utc.timestamp())}")


def _check_order(chain):
    for position in range(len(chain) - 1):
        child, parent = chain[position], chain[position + 1]
        try:
            child.verify_directly_issued_by(parent)
        except Exception:  # ValueError, TypeError or InvalidSignature: all mean "not its issuer"
            raise CertError(
                "cert_pem",
                f"chain out of order: certificate {position + 2} did not issue certificate {position + 1} "
                "(give the leaf first, then each issuer)") from None


def to_pem(chain) -> str:
    from cryptography.hazmat.primitives import serialization
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in chain)


def validate_bundle(host: str, cert_pem, key_pem, now: float | None) -> Bundle:
    """Check an uploaded or issued bundle for `host`; CertError says what is wrong.

    `now` None leaves the validity period unchecked: a fleet replica installs the
    certificate its primary serves, expired or not, rather than refuse the bundle."""
    from cryptography.hazmat.primitives import serialization
    chain = load_chain(cert_pem)
    key = load_key(key_pem)
    if not _same_key(chain[0], key):
        if any(_same_key(cert, key) for cert in chain[1:]):
            raise CertError("cert_pem", "chain out of order: the certificate of the key must come first")
        raise CertError("key_pem", "the private key does not belong to the certificate")
    if not covers(chain[0], host):
        names = ", ".join(dns_names(chain[0])) or "none"
        raise CertError("cert_pem", f"the certificate does not cover {host} (its names: {names})")
    if now is not None:
        _check_times(chain, now)
    _check_order(chain)
    key_text = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()).decode("ascii")
    return Bundle(chain, to_pem(chain), key_text)


def _issuer_text(cert) -> str:
    from cryptography.x509.oid import NameOID
    names = cert.issuer.get_attributes_for_oid(NameOID.COMMON_NAME)
    organisations = cert.issuer.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    if names:
        text = str(names[0].value)
        return f"{text} ({organisations[0].value})" if organisations else text
    return cert.issuer.rfc4514_string()


def summary(cert, host: str | None = None) -> dict:
    """What the panel shows about a certificate (never key material)."""
    from cryptography.hazmat.primitives import serialization
    out: dict[str, object] = {
        "sans": dns_names(cert),
        "issuer": _issuer_text(cert),
        "not_before": rfc3339(cert.not_valid_before_utc.timestamp()),
        "not_after": rfc3339(cert.not_valid_after_utc.timestamp()),
        "fingerprint": hashlib.sha256(cert.public_bytes(serialization.Encoding.DER)).hexdigest(),
    }
    if host is not None:
        out["matches_host"] = covers(cert, host)
    return out


def summary_of_der(der: bytes, host: str) -> dict:
    """Summary of a certificate a server presented (DER), for the domain test.

    The server chose these bytes: one that cannot be read is reported, not raised.
    """
    x509 = _x509()
    try:
        return summary(x509.load_der_x509_certificate(der), host)
    except (ValueError, x509.DuplicateExtension, x509.UnsupportedGeneralNameType) as exc:
        return {"error": f"the certificate the server presented cannot be read ({type(exc).__name__})"}


def load_der(der: bytes):
    """A certificate from DER bytes (ValueError when they are not one)."""
    return _x509().load_der_x509_certificate(der)


def make_csr(hosts: list, key) -> bytes:
    """A DER CSR naming the hosts, for ACME finalize."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.x509.oid import NameOID
    x509 = _x509()
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
    builder = builder.add_extension(
        x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]), critical=False)
    return builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.DER)


def new_key_pem() -> tuple:
    """A fresh EC P-256 key and its unencrypted PKCS#8 PEM."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    key = ec.generate_private_key(ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode("ascii")
    return key, pem


class CertStore:
    """One file per host under <data dir>/certs: private key then chain, mode 0600."""

    def __init__(self, folder: str):
        self.folder = folder
        ensure_private_dir(folder)

    def path(self, host: str) -> str:
        return os.path.join(self.folder, f"{host}.pem")

    def save(self, host: str, bundle: Bundle):
        atomic_write(self.path(host), (bundle.key_pem + bundle.chain_pem).encode("ascii"))

    def read(self, host: str) -> tuple[str, str] | None:
        """(key PEM, chain PEM) of host's file, or None when there is none or it is unreadable."""
        try:
            with open(self.path(host), encoding="ascii") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            return None
        end = re.search(r"-----END [A-Z ]*PRIVATE KEY-----\n?", text)
        if end is None:
            return None
        return text[:end.end()], text[end.end():]

    def hosts(self) -> list:
        """The hosts that have a file."""
        return sorted(name[:-4] for name in os.listdir(self.folder) if name.endswith(".pem"))

    def delete(self, host: str):
        try:
            os.unlink(self.path(host))
        except FileNotFoundError:
            pass

    def leaf(self, host: str):
        """The stored leaf certificate of host, or None."""
        try:
            with open(self.path(host), encoding="ascii") as f:
                return _x509().load_pem_x509_certificates(f.read().encode("ascii"))[0]
        except (OSError, ValueError):
            return None

    def stamp(self, host: str):
        """Changes whenever the host's file is replaced; None when there is none."""
        try:
            st = os.stat(self.path(host))
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)


def tls_server_context() -> ssl.SSLContext:
    """Server side defaults: TLS 1.2 or newer, no compression, server cipher order."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    return context


class SniSelector:
    """Builds the listener's SSLContext; each handshake picks the context of its SNI host.

    Per-host contexts are cached with the store file's stamp, so a renewed or
    uploaded certificate is used by the next connection without a restart.
    """

    def __init__(self, store: CertStore):
        self.store = store
        self._cache: dict[str, tuple[tuple[int, int, int], ssl.SSLContext]] = {}
        self._lock = threading.Lock()

    def context_for(self, host: str):
        """The SSLContext serving host, or None when it has no certificate."""
        stamp = self.store.stamp(host)
        if stamp is None:
            return None
        with self._lock:
            cached = self._cache.get(host)
            if cached and cached[0] == stamp:
                return cached[1]
        context = tls_server_context()
        try:
            context.load_cert_chain(self.store.path(host))
        except (OSError, ssl.SSLError):
            return None
        with self._lock:
            self._cache[host] = (stamp, context)
        return context

    def _select(self, sock, server_name, _initial):
        host = (server_name or "").lower().rstrip(".")
        context = self.context_for(host) if host else None
        if context is None:
            return ssl.ALERT_DESCRIPTION_UNRECOGNIZED_NAME
        sock.context = context
        return None

    def server_context(self) -> ssl.SSLContext:
        context = tls_server_context()
        context.sni_callback = self._select
        return context

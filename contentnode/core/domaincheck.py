"""Does a name reach this node? And what does a visitor of it see?

The check resolves the name (A and AAAA), fetches the public verification page
through what DNS answered with a fresh random nonce, and compares the proof
with this node's own (HMAC under the node secret, constant-time compare): a
name that reaches another node answers a different proof and fails. Each step
is reported with its outcome and time in ms (core.steps) so the panel can say exactly
where it broke. Names resolve through the system resolver, or through one DNS
server (host:port) when the operator names one.
"""

import ssl
import time

from contentnode.core.certs import summary_of_der
from contentnode.core import verify
from contentnode.core.dns import ResolveError, resolve
from contentnode.core.netguard import OutboundError, default_tls_context, fetch
from contentnode.core.steps import Steps
from contentnode.core.text import json_loads

SHOWN_HEADERS = ("content-type", "content-length", "cache-control", "location", "server",
                 "strict-transport-security", "etag", "last-modified", "age")




def _unverified_tls() -> ssl.SSLContext:
    # The proof, not the certificate, authenticates the node in a check.
    context = default_tls_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _bracket(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def check_domain(host: str, scheme: str, port: int, secret: bytes, policy,
                 timeout: float = 10.0) -> Steps:
    """Run the domain check against this node's secret."""
    steps = Steps()
    started = time.monotonic()
    try:
        found = resolve(host, policy.dns_server)
    except ResolveError as exc:
        steps.add("resolve", False, str(exc), started)
        return steps
    addresses = found["A"] + found["AAAA"]
    if not addresses:
        steps.add("resolve", False, f"{host} has no A or AAAA record: it does not resolve", started)
        return steps
    steps.add("resolve", True, f"A: {', '.join(found['A']) or 'none'}; AAAA: {', '.join(found['AAAA']) or 'none'}",
              started)

    started = time.monotonic()
    nonce = verify.new_nonce()
    target = host if scheme == "https" else _bracket(addresses[0])
    url = f"{scheme}://{target}:{port}{verify.CHECK_PATH}?nonce={nonce}"
    try:
        result = fetch(url, policy, headers={"Host": f"{host}:{port}"}, timeout=timeout, max_bytes=65536,
                       ssl_context=_unverified_tls() if scheme == "https" else None)
    except OutboundError as exc:
        steps.add("fetch", False, f"{scheme}://{host}:{port}{verify.CHECK_PATH}: {exc.message}", started)
        return steps
    if result.status != 200:
        steps.add("fetch", False, f"the verification page answered HTTP {result.status} from {result.address}", started)
        return steps
    steps.add("fetch", True, f"HTTP 200 from {result.address} port {port}", started)

    started = time.monotonic()
    steps.add("proof", *_judge_proof(result.body, nonce, secret), started)
    return steps


def _judge_proof(body: bytes, nonce: str, secret: bytes) -> tuple[bool, str]:
    try:
        page = json_loads(body)
        proof, echoed, node = page["proof"], page["nonce"], page.get("node")
    except (ValueError, KeyError, TypeError):
        return False, "the page is not a verification page of a contentnode"
    if not isinstance(proof, str) or echoed != nonce:
        return False, "the page did not answer for the nonce that was sent"
    if not verify.proof_matches(secret, nonce, proof):
        return False, f"the proof is not this node's: the name reaches another node ({node})"
    return True, "the proof matches this node"


def visit(url: str, host: str, policy, timeout: float = 10.0) -> dict:
    """Fetch url as a visitor would: status, chosen headers, timings, the certificate."""
    out = {"url": url, "ok": False}
    try:
        result = fetch(url, policy, timeout=timeout, max_bytes=8 << 20)
        trusted, trust_error = True, None
    except OutboundError as exc:
        if exc.step != "tls" or not url.startswith("https:"):
            out.update(error={"step": exc.step, "message": exc.message})
            return out
        trusted, trust_error = False, exc.message
        try:
            result = fetch(url, policy, timeout=timeout, max_bytes=8 << 20, ssl_context=_unverified_tls())
        except OutboundError as again:
            out.update(error={"step": again.step, "message": again.message})
            return out
    out.update(ok=result.status < 400, status=result.status, address=result.address,
               headers={k: v for k, v in result.headers.items() if k in SHOWN_HEADERS},
               size=len(result.body), timings=result.timings)
    if result.peer_cert:
        certificate = summary_of_der(result.peer_cert, host)
        certificate["trusted"] = trusted
        if trust_error:
            certificate["trust_error"] = trust_error
        out["certificate"] = certificate
    return out

"""Does the fleet's bucket honour conditional writes? Ask it, with scratch objects.

The issuer lease (fleet/lease.py) is only as good as the bucket's conditional
writes, and some S3-compatible servers accept `If-None-Match` / `If-Match`
and silently ignore them. So before trusting them the node tries: a second
create with `If-None-Match: *` must be refused, a write and a delete with a
wrong `If-Match` must be refused (and the right ETag accepted), the bucket
must date its answers (a lease's age is judged by its clock), and of several
writers racing to create one object exactly one may win. Anything
else, a transport failure included, answers `conditional_writes: false`: no
lease is attempted and the primary stays the only issuer.
"""

import secrets
import threading
import time

from contentnode.clock import rfc3339
from contentnode.core.s3 import S3Client
from contentnode.core.s3_errors import S3Error
from contentnode.core.steps import Steps
from contentnode.core.text import http_date

RACERS = 4
CONTENT_TYPE = "application/octet-stream"
WRONG_ETAG = '"00000000000000000000000000000000"'


class ProbeFailed(Exception):
    """One check's verdict: the bucket did not behave as a conditional write needs."""


def refused(exc: S3Error) -> bool:
    """A conditional write the server turned down: 412, or 409 (a concurrent write, a lost race)."""
    return exc.status in (412, 409)


def _expect_refusal(action, what: str) -> None:
    try:
        action()
    except S3Error as exc:
        if refused(exc):
            return
        raise
    raise ProbeFailed(f"{what} was accepted: the server ignores the condition")


def _body(client: S3Client, key: str) -> bytes | None:
    fetched = client.get_bytes(key)
    return None if fetched is None else fetched.body


def _check_create_once(client: S3Client, key: str) -> str:
    client.put_object(key, b"first", CONTENT_TYPE, {"if-none-match": "*"})
    _expect_refusal(lambda: client.put_object(key, b"second", CONTENT_TYPE, {"if-none-match": "*"}),
                    "a second create with If-None-Match: *")
    if _body(client, key) != b"first":
        raise ProbeFailed("the refused second create changed the object anyway")
    return "a second create with If-None-Match: * was refused and changed nothing"


def _check_clock(client: S3Client, key: str) -> str:
    """The lease's age is the bucket's Date minus the object's Last-Modified: both must be there."""
    info = client.head_object(key)
    said, modified = http_date(info.headers.get("date")), http_date(info.last_modified)
    if said is None or modified is None:
        raise ProbeFailed("the bucket's answers carry no Date or Last-Modified, so a lease's age "
                          "cannot be judged by the bucket's clock")
    return f"the bucket dates its answers (the object is {max(0.0, said - modified):.0f} s old by its clock)"


def _check_if_match(client: S3Client, key: str) -> str:
    _expect_refusal(lambda: client.put_object(key, b"wrong", CONTENT_TYPE, {"if-match": WRONG_ETAG}),
                    "a write with a wrong If-Match ETag")
    fetched = client.get_bytes(key)
    if fetched is None or fetched.body != b"first":
        raise ProbeFailed("the refused write with a wrong If-Match changed the object anyway")
    client.put_object(key, b"third", CONTENT_TYPE, {"if-match": fetched.etag})
    return "a write with a wrong If-Match ETag was refused; the right ETag was accepted"


def _check_conditional_delete(client: S3Client, key: str) -> str:
    _expect_refusal(lambda: client.delete_object(key, {"if-match": WRONG_ETAG}),
                    "a delete with a wrong If-Match ETag")
    fetched = client.get_bytes(key)
    if fetched is None:
        raise ProbeFailed("the refused delete with a wrong If-Match deleted the object anyway")
    client.delete_object(key, {"if-match": fetched.etag})
    if client.get_bytes(key) is not None:
        raise ProbeFailed("a delete with the right If-Match ETag left the object in place")
    return "a delete with a wrong If-Match ETag was refused; the right ETag deleted it"


def _check_race(client: S3Client, key: str) -> str:
    """RACERS threads create one object at once; exactly one must win, and its body must stay."""
    start = threading.Barrier(RACERS)
    outcomes: list = [None] * RACERS

    def racer(index: int):
        try:
            start.wait(10)
            client.put_object(key, f"racer {index}".encode(), CONTENT_TYPE, {"if-none-match": "*"})
            outcomes[index] = "won"
        except S3Error as exc:
            outcomes[index] = "lost" if refused(exc) else exc
        except threading.BrokenBarrierError as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=racer, args=(i,), name=f"fleet-probe-{i}") for i in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(client.timeout + 15)
    failures = [o for o in outcomes if o not in ("won", "lost")]
    if failures:
        raise S3Error("race", f"a racing writer failed: {failures[0]}")
    winners = [i for i, o in enumerate(outcomes) if o == "won"]
    if len(winners) != 1:
        raise ProbeFailed(f"{len(winners)} of {RACERS} racing creates with If-None-Match: * succeeded")
    if _body(client, key) != f"racer {winners[0]}".encode():
        raise ProbeFailed("the object does not hold the winning writer's body")
    return f"of {RACERS} racing creates with If-None-Match: * exactly one won"


CHECKS = [
    ("create_once", _check_create_once),
    ("bucket_clock", _check_clock),
    ("if_match", _check_if_match),
    ("conditional_delete", _check_conditional_delete),
    ("race", _check_race),
]


def probe(client: S3Client, prefix: str, now: float) -> dict:
    """Run every check under `<prefix>probe/<random>/` (removed afterwards).

    Answers {"conditional_writes", "checks": [{"name","ok","detail","ms"}], "probed_at"}
    (`now` is the caller's clock, in epoch seconds). Later checks need
    the objects of earlier ones, so the first failing check ends the probe.
    """
    folder = f"{prefix}probe/{secrets.token_hex(8)}/"
    keys = {"create_once": folder + "cas", "bucket_clock": folder + "cas", "if_match": folder + "cas", "conditional_delete": folder + "cas",
            "race": folder + "race"}
    steps = Steps()
    try:
        for name, check in CHECKS:
            started = time.monotonic()
            try:
                detail = check(client, keys[name])
            except ProbeFailed as exc:
                steps.add(name, False, str(exc), started)
                break
            except S3Error as exc:
                steps.add(name, False, f"the bucket failed the check: {exc.message}", started, code=exc.code)
                break
            steps.add(name, True, detail, started)
    finally:
        for key in sorted(set(keys.values())):
            try:
                client.delete_object(key)
            except S3Error:
                pass  # a scratch object left behind is harmless; the next probe uses a new folder
    return {"conditional_writes": steps.ok and len(steps.items) == len(CHECKS), "checks": steps.items,
            "probed_at": rfc3339(now)}

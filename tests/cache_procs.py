"""Real processes sharing one cache folder, each driving a Cache object, for the tests of the
cache across processes (tests/test_cache_processes.py, tests/test_cache_faults.py).

A CacheProcess is a child `python -m tests.cache_procs` holding one Cache, as the daemon (slot
None) or a public worker holds it; the test sends it JSON commands on stdin, each run on a
thread of its own, and reads the answers (matched by id) from stdout. The origin is a folder
(FileOrigin): each object's current body is a file, every fetch is logged, and a fetch can be
held after its first half until the test lets it go; so fills stay in flight as long as a test
needs, across processes. This reaches thousands of cache operations a second, which full HTTP
daemons would not, while kill -9 still hits real processes.
"""

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import threading
import time

HOLD_LIMIT = 30.0     # a held fetch goes on by itself after this long (bounded loops)


class FileOrigin:
    """Objects as files under `folder`: `<name>.body` (current version), `<name>.fetches` (one byte
    per fetch, so its size is the count: a shared log of every fetch was read whole at every
    fetch and every look, quadratic over a run's thousands of fills), `hold-<name>-<n>` (fetch n
    waits after its first half while this file exists)."""

    def __init__(self, folder: str):
        self.folder = folder
        os.makedirs(folder, exist_ok=True)

    @staticmethod
    def name(host: str, path: str) -> str:
        return hashlib.sha256(f"{host}{path}".encode()).hexdigest()[:20]

    def put(self, host: str, path: str, body: bytes) -> None:
        target = os.path.join(self.folder, self.name(host, path) + ".body")
        with open(target + ".new", "wb") as out:
            out.write(body)
        os.replace(target + ".new", target)

    def hold(self, host: str, path: str, fetch_number: int) -> str:
        marker = os.path.join(self.folder, f"hold-{self.name(host, path)}-{fetch_number}")
        open(marker, "wb").close()
        return marker

    def fetches(self, host: str, path: str) -> int:
        try:
            return os.stat(os.path.join(self.folder, self.name(host, path) + ".fetches")).st_size
        except FileNotFoundError:
            return 0

    # -- the child's side ---------------------------------------------------------

    def fetcher(self, host: str, path: str, answer_type):
        def fetch():
            name = self.name(host, path)
            with open(os.path.join(self.folder, name + ".fetches"), "ab") as log:
                fcntl.flock(log, fcntl.LOCK_EX)
                number = 1 + os.fstat(log.fileno()).st_size
                log.write(b".")
            try:
                with open(os.path.join(self.folder, name + ".body"), "rb") as source:
                    body = source.read()
            except FileNotFoundError:
                return answer_type(404)
            marker = os.path.join(self.folder, f"hold-{name}-{number}")
            return answer_type(200, {"content_type": "application/octet-stream"}, len(body),
                               self._chunks(body, marker))
        return fetch

    @staticmethod
    def _chunks(body: bytes, marker: str):
        half = len(body) // 2
        yield body[:half]
        deadline = time.monotonic() + HOLD_LIMIT
        while os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.002)
        yield body[half:]


class CacheProcess:
    """The test's handle on one child process holding a Cache of `root`."""

    def __init__(self, root: str, origin: FileOrigin, max_bytes: int, processes: int, slot: int | None):
        self.root, self.origin, self.slot = root, origin, slot
        setup = {"root": root, "origin": origin.folder, "max_bytes": max_bytes, "processes": processes,
                 "slot": slot}
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        self.process = subprocess.Popen([sys.executable, "-m", "tests.cache_procs", json.dumps(setup)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=here)
        self._answers: dict[int, dict] = {}
        self._arrived = threading.Condition()
        self._ids = iter(range(1, 1 << 62))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.call("ping", timeout=30)

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self):
        for line in self.process.stdout:
            answer = json.loads(line)
            with self._arrived:
                self._answers[answer["id"]] = answer
                self._arrived.notify_all()
        with self._arrived:
            self._answers[-1] = {"error": "process ended"}
            self._arrived.notify_all()

    def send(self, op: str, **args) -> int:
        """Start a command; wait() for its answer."""
        number = next(self._ids)
        self.process.stdin.write((json.dumps(dict(args, op=op, id=number)) + "\n").encode())
        self.process.stdin.flush()
        return number

    def wait(self, number: int, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        with self._arrived:
            while number not in self._answers:
                if -1 in self._answers:
                    raise RuntimeError(f"cache process {self.pid} ended before answering")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"cache process {self.pid} did not answer command {number}")
                self._arrived.wait(left)
            answer = self._answers.pop(number)
        if "error" in answer:
            raise RuntimeError(f"cache process {self.pid}: {answer['error']}")
        return answer

    def call(self, op: str, timeout: float = 30, **args) -> dict:
        return self.wait(self.send(op, **args), timeout)

    def get(self, host: str, path: str, ttl: int = 600, first_half_then_close: bool = False) -> dict:
        return self.call("get", host=host, path=path, ttl=ttl, first_half_then_close=first_half_then_close)

    def cache_descriptors(self) -> list:
        """What this process's descriptors on files of the cache folder point at (a file no
        longer on disk ends with " (deleted)")."""
        found = []
        for fd in os.listdir(f"/proc/{self.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{self.pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith(self.root + "/"):
                found.append(target)
        return found

    def deleted_descriptors(self) -> list:
        """This process's descriptors on files of the cache folder that are no longer on disk."""
        return [target for target in self.cache_descriptors() if target.endswith(" (deleted)")]

    def kill(self) -> None:
        self.process.kill()
        self.process.wait(10)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def disk_bytes(root: str) -> int:
    """Bytes of the cache folder's entry and temp files (not the books' own file)."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            if name != "ledger":
                try:
                    total += os.path.getsize(os.path.join(folder, name))
                except FileNotFoundError:
                    pass
    return total


# -- the child --------------------------------------------------------------------


def _serve(setup: dict) -> None:
    from contentnode.core.cache import Cache
    from contentnode.core.cache_fill import OriginAnswer

    cache = Cache(setup["root"], setup["max_bytes"], time.time, processes=setup["processes"],
                  worker_slot=setup["slot"])
    origin = FileOrigin(setup["origin"])
    out_lock = threading.Lock()

    def answer(number, **fields):
        with out_lock:
            sys.stdout.write(json.dumps(dict(fields, id=number)) + "\n")
            sys.stdout.flush()

    def run(command):
        number = command["id"]
        try:
            op = command["op"]
            if op == "ping":
                answer(number)
            elif op == "get":
                host, path = command["host"], command["path"]
                result = cache.get((host, path, ""), origin.fetcher(host, path, OriginAnswer), command["ttl"])
                if command["first_half_then_close"]:
                    next(result.chunks())
                    result.close()
                    answer(number, hit=result.hit)
                    return
                hit, status = result.hit, result.status
                body = result.read_all() if status == 200 else b""
                answer(number, hit=hit, status=status, body=body.decode("latin-1"))
            elif op == "purge":
                kind = command["kind"]
                purged = (cache.purge_all() if kind == "all" else
                          cache.purge_prefix(command["host"], command["prefix"]) if kind == "prefix" else
                          cache.purge_url(command["host"], command["path"]))
                answer(number, purged=purged)
            elif op == "settle":
                cache.settle()
                answer(number)
            elif op == "stats":
                answer(number, total=cache.total, **cache.stats())
            else:
                answer(number, error=f"unknown op {op}")
        except Exception as exc:  # the test sees it as the answer's error
            answer(number, error=f"{type(exc).__name__}: {exc}")

    for line in sys.stdin:
        threading.Thread(target=run, args=(json.loads(line),), daemon=True).start()


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))

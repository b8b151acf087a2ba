"""The public HTTP cache test suite against a node in front of the suite's own origin server.

The suite is the npm release of github.com/http-tests/cache-tests (tests/cache_suite/package.json,
installed by `make peers`); its code is never committed here. Its server is the origin of an http
bucket, its client asks the node's public port, and every required or optimal test the node does
not pass must be listed in tests/cache_suite/known_failures.json with its reason: a failure not
listed fails this test, and so does a listed test that passed (the list stays true), unless the
list marks it flaky. docs/cache-tests.md has the figures and the policy.
"""

import json
import os
import re
import subprocess
import time
from collections import Counter

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node, stop_process
from tests.peers.check import CACHE_SUITE, NODEJS

PACKAGE = os.path.join(CACHE_SUITE, "node_modules", "http-cache-tests")
KNOWN = os.path.join(CACHE_SUITE, "known_failures.json")
ARTIFACTS = os.path.join(os.path.dirname(CACHE_SUITE), "artifacts")   # git-ignored: the last run's
REPORT, RESULTS = os.path.join(ARTIFACTS, "cache_suite.txt"), os.path.join(ARTIFACTS, "cache_suite.json")
HOST = "cache.example.test"   # the node's domain; client_local.mjs answers 127.0.0.1 for it
# The suite starts 100 tests at once from one address: the defaults (64 connections, 8 requests
# in progress) answer a part of them 503 "overloaded" before the test has begun.
NODE_ENV = {"CONTENTNODE_MAX_CONNECTIONS_PER_CLIENT": "1024", "CONTENTNODE_MAX_REQUESTS_PER_CLIENT": "128"}
RUN_TIMEOUT = 600     # seconds for the whole suite (about 20 s on a quiet 2-core machine)
ALONE_TIMEOUT = 60    # seconds for one test run again alone
ALONE_AT_MOST = 5     # new failures run again alone, each with its exchange printed
ROWS = ("required passed", "required failed", "optimal passed", "setup failures", "harness errors")


def _env(**npm_config) -> dict:
    """A child's environment: only what node needs, and the suite's settings as npm would pass them
    (both spellings of `id` set: the client reads the second when the first is unset)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/"),
           "LANG": "C.UTF-8", "NO_COLOR": "1"}
    for name, value in npm_config.items():
        env[f"npm_config_{name}"] = env[f"npm_package_config_{name}"] = value
    return env


def _start_origin(tmp_path) -> tuple[subprocess.Popen, int]:
    """The suite's server on a free loopback port: its log (every request) goes to a file, whose
    first line says the address it listens on, or why it could not start."""
    log_path = tmp_path / "origin.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [NODEJS, "--import", os.path.join(CACHE_SUITE, "bind_local.mjs"),
             os.path.join(PACKAGE, "server", "server.mjs")],
            env=_env(protocol="http", port="0", pidfile=str(tmp_path / "origin.pid")), cwd=tmp_path,
            stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        first = log_path.read_text().partition("\n")[0]
        if first.startswith("Listening on http://127.0.0.1:"):
            return proc, int(first.rstrip("/").rsplit(":", 1)[1])
        time.sleep(0.05)
    stop_process(proc, 5)
    raise AssertionError(f"the suite's server did not start:\n{log_path.read_text()}")


def _start_node(tmp_path, origin_port: int) -> Node:
    """A node whose one rule sends everything of HOST to the origin, in the shared cache mode."""
    node = Node(str(tmp_path), env=NODE_ENV).start()
    admin = node.client()
    assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    bucket = admin.post("/api/buckets", {"name": "suite", "type": "http", "url": f"http://127.0.0.1:{origin_port}"})
    assert bucket.status == 201, bucket.body
    assert admin.post("/api/domains", {"host": HOST}).status == 201
    rule = admin.post("/api/rules", {"domain": HOST, "path": "/", "bucket": bucket.json["id"],
                                     "cache_ttl": 3600, "cache_mode": "origin"})
    assert rule.status == 201, rule.body
    return node


def _client(public_port: int, test_id: str, timeout: float) -> subprocess.CompletedProcess:
    """The suite's client against the node: every test (test_id ""), or one with its exchange shown."""
    return subprocess.run(
        [NODEJS, "--no-warnings", "--import", os.path.join(CACHE_SUITE, "client_local.mjs"),
         os.path.join(PACKAGE, "cli.mjs")],
        env=_env(id=test_id, base=f"http://{HOST}:{public_port}"), cwd=CACHE_SUITE,
        capture_output=True, text=True, timeout=timeout)


def _suite_facts() -> dict:
    """Each test's kind and the published results' index, from the installed suite itself."""
    out = subprocess.run([NODEJS, os.path.join(CACHE_SUITE, "suite_facts.mjs")], cwd=CACHE_SUITE,
                         env=_env(), capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def count(results: dict, kinds: dict) -> Counter:
    """The issue's way of counting a results file: `true` passes, a failure entry fails, `Setup`
    entries apart (and entries of the harness itself, a TypeError or FetchError, apart too);
    checks and tests the suite does not define are not counted."""
    counts = Counter({row: 0 for row in ROWS})
    for test_id, value in results.items():
        kind = kinds.get(test_id)
        if kind not in ("required", "optimal"):
            continue
        if value is True:
            counts[f"{kind} passed"] += 1
        elif value[0] == "Setup":
            counts["setup failures"] += 1
        elif value[0] != "Assertion":
            counts["harness errors"] += 1
        elif kind == "required":
            counts["required failed"] += 1
    return counts


def _table(ours: Counter, facts: dict) -> str:
    """This run's counts above the published rows of the same release (browsers left out)."""
    lines = ["| | " + " | ".join(ROWS) + " |", "|---" * (len(ROWS) + 1) + "|",
             "| contentnode (this run) | " + " | ".join(str(ours[row]) for row in ROWS) + " |"]
    for entry in facts["published"]:
        if entry["type"] == "browser":
            continue
        with open(os.path.join(PACKAGE, "results", entry["file"])) as f:
            theirs = count(json.load(f), facts["kinds"])
        lines.append(f"| {entry['name']} {entry['version']} (published) | "
                     + " | ".join(str(theirs[row]) for row in ROWS) + " |")
    return "\n".join(lines)


def compare(results: dict, kinds: dict, known: dict) -> tuple[list, list]:
    """(failures not listed, listed tests that passed): what makes the run fail. A test the list
    marks flaky may do either."""
    flaky, listed = known["flaky"], known["not_passed"]
    new = sorted(t for t, v in results.items() if kinds.get(t) in ("required", "optimal")
                 and v is not True and t not in listed and t not in flaky)
    passed = sorted(t for t in listed if results.get(t) is True)
    return new, passed


def _report(new: list, passed: list, results: dict, kinds: dict, alone: dict) -> str:
    lines = []
    for test_id in new:
        kind, message = results[test_id][0], results[test_id][1]
        lines.append(f"NEW FAILURE {test_id} ({kinds[test_id]}): {kind}: {message}")
        if test_id in alone:
            lines.append(f"  run again alone:\n{alone[test_id]}")
    for test_id in passed:
        lines.append(f"PASSED BUT LISTED {test_id}: remove it from known_failures.json \"not_passed\" "
                     "(or move it to \"flaky\" with the reason it fails some runs)")
    return "\n".join(lines)


def _alone(public_port: int, test_id: str) -> str:
    """One test run again by itself against the same node: its requests and the node's answers."""
    try:
        out = _client(public_port, test_id, ALONE_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"    (no result in {ALONE_TIMEOUT} s)"
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.stdout + out.stderr)   # its colours
    return "\n".join("    " + line for line in text.splitlines())


def _known() -> dict:
    with open(KNOWN) as f:
        return json.load(f)


def test_the_list_is_of_the_installed_release_and_names_its_counted_tests():
    known = _known()
    with open(os.path.join(PACKAGE, "package.json")) as f:
        installed = "http-cache-tests " + json.load(f)["version"]
    assert installed == known["release"], f"the list is for {known['release']}, {installed} is installed: " \
        "run the new release and write the list again (docs/cache-tests.md)"
    kinds = _suite_facts()["kinds"]
    counted = {t for t, k in kinds.items() if k in ("required", "optimal")}
    assert set(known["not_passed"]) | set(known["flaky"]) <= counted, \
        "known_failures.json names a test the suite does not define, or a check (not counted)"
    assert not set(known["not_passed"]) & set(known["flaky"]), "a test is listed both as not passed and as flaky"
    assert all(reason.strip() for reason in [*known["not_passed"].values(), *known["flaky"].values()])


def test_the_suite_finds_no_failure_the_list_does_not_name(tmp_path):
    known = _known()
    facts = _suite_facts()
    kinds = facts["kinds"]
    origin, origin_port = _start_origin(tmp_path)
    node = None
    try:
        node = _start_node(tmp_path, origin_port)
        started = time.monotonic()
        try:
            run = _client(node.public_port, "", RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the suite's client gave no results in {RUN_TIMEOUT} s") from None
        seconds = time.monotonic() - started
        try:
            results = json.loads(run.stdout)
        except ValueError:
            raise AssertionError(f"the suite's client gave no results (exit {run.returncode}):\n"
                                 f"{run.stdout[-2000:]}\n{run.stderr[-4000:]}") from None
        new, passed = compare(results, kinds, known)
        alone = {t: _alone(node.public_port, t) for t in new[:ALONE_AT_MOST]}
    finally:
        if node is not None:
            node.close()
        stop_process(origin, 5)
    table = _table(count(results, kinds), facts)
    flaky_failed = sorted(t for t in known["flaky"] if results.get(t) not in (True, None))
    summary = (f"{len(results)} results in {seconds:.0f} s; flaky tests that failed this run: "
               f"{', '.join(flaky_failed) or 'none'}\n{table}\n")
    os.makedirs(ARTIFACTS, exist_ok=True)
    with open(REPORT, "w") as f:
        f.write(summary)
    with open(RESULTS, "w") as f:
        json.dump(results, f, indent=1)
    print(summary)
    assert not (new or passed), f"{_report(new, passed, results, kinds, alone)}\n\n{summary}"

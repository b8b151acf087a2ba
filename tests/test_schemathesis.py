"""Schemathesis against the live daemon with an administrator's session: every
operation of docs/openapi.json, bounded examples, zero failures (docs/API.md, "Conventions").

Excluded: POST /api/logout and POST /api/backup/restore, which would end or
replace the very session under test. tests/schemathesis.toml counts 413 (a
body over the 64 KiB limit, refused before it is read) as a rejection of
schema-violating data.
"""

import json
import os
import re
import subprocess
import sys

from tests.accounts import code, mid_step_offset
from tests.node import ADMIN_PASSWORD, ADMIN_USER

HERE = os.path.dirname(os.path.abspath(__file__))
DOCUMENT = os.path.join(os.path.dirname(HERE), "docs", "openapi.json")
CONFIG = os.path.join(HERE, "schemathesis.toml")
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance,negative_data_rejection")
EXCLUDED = ("/api/logout", "/api/backup/restore")
MAX_EXAMPLES = 5


def test_schemathesis_finds_no_failure(node):
    client = node.client()
    login = client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert login.status == 201, login.body
    cookie = login.headers["set-cookie"].split(";", 1)[0]
    # Generated policies may demand 2FA of administrators: an enrolled one keeps using the session.
    offset = mid_step_offset(node)
    secret = client.post("/api/me/2fa/setup", {"password": ADMIN_PASSWORD}).json["secret"]
    assert client.post("/api/me/2fa/enable", {"code": code(secret, offset)}).status == 200
    st = os.path.join(os.path.dirname(sys.executable), "st")
    assert os.path.exists(st), "schemathesis is missing: make .venv/.test-installed"
    command = [st, "--config-file", CONFIG, "run", DOCUMENT, "--url", f"http://127.0.0.1:{node.admin_port}",
               "-H", f"Cookie: {cookie}", "--checks", CHECKS, "--max-examples", str(MAX_EXAMPLES), "--workers", "1", "--seed", "1"]
    for path in EXCLUDED:
        command += ["--exclude-path", path]
    # a bound against a hang, not a speed check: ~50 s alone, and 240 s ran out once beside other whole runs
    run = subprocess.run(command, capture_output=True, text=True, timeout=900)
    report = run.stdout + run.stderr
    tested = re.search(r"Tested: (\d+)", report)
    cases = re.search(r"(\d+) generated", report)
    print(f"schemathesis: {tested and tested.group(1)} operations, {cases and cases.group(1)} test cases")
    shown = re.sub(r"(\\u00ad)+", "<soft hyphens>", report)  # generated text can fill any report
    assert run.returncode == 0, shown[-8000:]
    session = client.get("/api/session").json  # the session lasted the whole run: every operation was reached
    assert session["authenticated"] and not session["two_factor_enrollment_required"], session
    with open(DOCUMENT, encoding="utf-8") as f:
        operations = sum(len(item) for item in json.load(f)["paths"].values())
    assert tested and int(tested.group(1)) == operations - len(EXCLUDED)
    assert cases and int(cases.group(1)) > operations

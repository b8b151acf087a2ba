"""contrib/: the example config tells the truth about defaults, the unit passes systemd's checks.

systemd-analyze is a test peer (tests/peers/check.py: `make test` installs Debian's systemd).
"""

import os
import re
import shutil
import subprocess
import sys
import tomllib

from contentnode.config import OPTIONS
from tests.node import ROOT
from tests.peers.check import SYSTEMD_ANALYZE

CONFIG = os.path.join(ROOT, "contrib", "contentnode.toml")
UNIT = os.path.join(ROOT, "contrib", "contentnode.service")
INSTALLED_COMMAND = "/usr/local/bin/contentnode"
DEFAULTS = {option.name: option.default for option in OPTIONS}


def config_lines():
    with open(CONFIG, encoding="utf-8") as f:
        return f.read().splitlines()


def test_each_commented_line_shows_the_real_default():
    shown = {}
    for line in config_lines():
        match = re.match(r"#\s*([a-z_]+\s*=.*)$", line)
        if match:
            shown.update(tomllib.loads(match.group(1).split("  #")[0]))
    assert shown, "no commented-out defaults found"
    for name, value in shown.items():
        assert name in DEFAULTS, f"{name} is no start-up option"
        assert value == DEFAULTS[name], f"{name}: the file shows {value!r}, the default is {DEFAULTS[name]!r}"
    # data_dir and folder_roots (<data dir>/sites) have defaults that depend on where the node runs:
    # the file explains them in words
    assert set(DEFAULTS) - set(shown) <= {"data_dir", "folder_roots"} | set(tomllib.load(open(CONFIG, "rb")))


def test_set_values_are_options_that_differ_from_the_default():
    with open(CONFIG, "rb") as f:
        chosen = tomllib.load(f)
    for name, value in chosen.items():
        assert name in DEFAULTS and value != DEFAULTS[name], name
        line = next(line for line in config_lines() if line.startswith(name))
        assert f"default {DEFAULTS[name]}" in line, f"{name}: say what the default is beside it"


def test_unit_restarts_but_not_on_a_config_error():
    with open(UNIT, encoding="utf-8") as f:
        unit = f.read()
    for line in ("Type=notify", "RestartPreventExitStatus=2", "ProtectProc=invisible", "ProcSubset=pid",
                 "PrivateMounts=yes", f"ExecStart={INSTALLED_COMMAND} serve"):
        assert line in unit, line
    result = subprocess.run([sys.executable, "-m", "contentnode", "serve", "--admin-port", "99999"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert result.returncode == 2 and "admin_port" in result.stderr


def test_unit_verifies_clean(tmp_path):
    """Against the installed command when `make install` ran, else against the test venv's."""
    unit = os.path.join(tmp_path, "contentnode.service")
    shutil.copy(UNIT, unit)
    if not os.access(INSTALLED_COMMAND, os.X_OK):
        venv_command = os.path.join(os.path.dirname(sys.executable), "contentnode")
        with open(UNIT, encoding="utf-8") as f:
            text = f.read().replace(f"ExecStart={INSTALLED_COMMAND} ", f"ExecStart={venv_command} ")
        with open(unit, "w", encoding="utf-8") as f:
            f.write(text)
    result = subprocess.run([SYSTEMD_ANALYZE, "verify", unit], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout + result.stderr) == (0, "")


def _syscalls(name: str, seen=None) -> set:
    """A system call, or a @group expanded (nested groups too) as systemd-analyze lists it."""
    if not name.startswith("@"):
        return {name}
    seen = seen if seen is not None else set()
    if name in seen:
        return set()
    seen.add(name)
    listed = subprocess.run([SYSTEMD_ANALYZE, "syscall-filter", name], capture_output=True, text=True,
                            timeout=60, check=True).stdout.split("\n", 1)[1]
    found = set()
    for line in listed.splitlines():
        entry = line.strip()
        if entry and not entry.startswith("#"):
            found |= _syscalls(entry, seen)
    return found


def test_unit_filter_answers_eperm_and_allows_what_the_node_calls():
    """The filter as systemd applies it (the first line an allow list, `~` lines take away,
    later lines give back) lets every call through that the node makes at start or per
    request, and a denied one fails with EPERM instead of SIGSYS (docs/API.md, "Refused OS calls")."""
    with open(UNIT, encoding="utf-8") as f:
        unit = f.read()
    assert "SystemCallErrorNumber=EPERM" in unit.splitlines()
    allowed: set = set()
    for line in unit.splitlines():
        if line.startswith("SystemCallFilter="):
            value = line.split("=", 1)[1]
            names = set().union(*(_syscalls(n) for n in value.lstrip("~").split()))
            allowed = allowed - names if value.startswith("~") else allowed | names
    for call in ("sched_setaffinity", "sched_getaffinity", "prctl", "sendfile", "fcntl", "flock",
                 "mmap", "fsync", "accept4", "clone3"):
        assert call in allowed, call
    assert {"setuid", "setrlimit", "nice"}.isdisjoint(allowed)   # still taken away

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

"""The offline commands open the data dir only: they never import the admin API or the App.

Each command runs in its own interpreter with `-X importtime`, which names every
module the process imported; contentnode.api (the handlers) and contentnode.app
(the composition root) must not be among them.
"""

import json
import os
import subprocess
import sys

FORBIDDEN = ("contentnode.api", "contentnode.app")
PASSWORD = "offline layering passphrase"


def _imported_modules(stderr: str) -> set:
    """Module names from `-X importtime` lines: 'import time: self | cumulative | name'."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


def _run(data_dir, *args, input_text=None):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "contentnode", *args, "--data-dir", data_dir],
                            input=input_text, capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    modules = _imported_modules(result.stderr)
    assert "contentnode.cli" in modules  # the importtime report was read
    leaked = sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in FORBIDDEN))
    assert not leaked, f"`contentnode {' '.join(args)}` imported {leaked}"
    return result


def _give_node_identity(data_dir):
    """The identity the daemon writes on its first start: a restore refuses a backup without one."""
    path = os.path.join(data_dir, "state.json")
    with open(path, encoding="utf-8") as f:
        state = json.load(f)
    state["node"] = {"id": "layering-node", "secret": "ab" * 16}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(state, f)


def test_offline_commands_never_import_the_api_or_the_app(tmp_path):
    data_dir = str(tmp_path / "data")
    backup_file = str(tmp_path / "backup.json")
    _run(data_dir, "user", "create", "root", "--role", "admin", input_text=PASSWORD + "\n")
    assert "root" in _run(data_dir, "user", "list").stdout
    _run(data_dir, "audit", "verify")
    _give_node_identity(data_dir)
    assert "wrote a plain backup" in _run(data_dir, "backup", "export", backup_file).stdout
    assert "restored a plain backup" in _run(data_dir, "backup", "restore", backup_file).stdout

"""The layering is enforced, not described: import contracts, ruff and mypy all pass.

The tools come from the test venv (the folder of sys.executable), never from PATH,
so the check runs the versions setup.cfg's test extra installed. Their output is
the failure message.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)


def _tool(name):
    path = os.path.join(BIN, name)
    assert os.path.exists(path), f"{name} is missing from {BIN}: run `make .venv/.test-installed`"
    return path


@pytest.mark.parametrize("command", [
    ["lint-imports", "--config", ".importlinter"],  # contracts in .importlinter
    ["ruff", "check", "contentnode"],               # rules in pyproject.toml [tool.ruff]
    ["mypy"],                                       # the whole package, pyproject.toml [tool.mypy]
], ids=["import-contracts", "ruff", "mypy"])
def test_check_passes(command):
    result = subprocess.run([_tool(command[0]), *command[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}{result.stderr}"

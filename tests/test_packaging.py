"""The sdist carries the license, contrib/, docs/ and the whole test suite with its helpers.

Built offline from the test venv's setuptools; the wheel install into a clean
venv needs the package registry and runs in CI (tests/dist_check.py).
"""

import shutil
import subprocess
import sys

from tests.dist_check import ROOT, sdist_problems


def test_sdist_carries_license_contrib_docs_and_every_test_file(tmp_path):
    # built from a copy: setuptools writes its egg-info beside the sources
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", "var", ".pytest_cache", ".hypothesis"))
    result = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir",
                             str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (sdist,) = (tmp_path / "dist").glob("contentnode-*.tar.gz")
    assert sdist_problems(str(sdist)) == []

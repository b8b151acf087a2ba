"""An earlier build's contentnode package as plain files, for tests that start real daemons of it
on a data dir and then this checkout's (upgrades): taken with `git archive` from this repository's
history, as tests/boot_packages.py takes its previous version."""

import os
import subprocess

from tests.node import ROOT


def previous_tree(tmp_path_factory, commit: str, absent: str) -> str:
    """The folder holding `commit`'s contentnode package; `absent` (a path inside the package) must
    not exist there, so the tree is truly from before what the test upgrades to. A checkout
    without that commit (a shallow clone) fails here, naming it: the test needs the history,
    never a stand-in."""
    dest = str(tmp_path_factory.mktemp("previous-build"))
    archive = subprocess.run(["git", "archive", commit, "contentnode"], cwd=ROOT, capture_output=True)
    assert archive.returncode == 0, (f"git archive {commit} failed (a shallow clone lacks the previous "
                                     f"build): {archive.stderr.decode()}")
    subprocess.run(["tar", "-x", "-C", dest], input=archive.stdout, check=True)
    assert not os.path.exists(os.path.join(dest, "contentnode", absent))
    return dest

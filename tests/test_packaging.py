"""The sdist carries the license, contrib/, docs/ and the whole test suite with its helpers;
`make install` refuses an interpreter the unit could not run.

Built offline from the test venv's setuptools; the wheel install into a clean
venv needs the package registry and runs in CI (tests/dist_check.py).
"""

import os
import shutil
import subprocess
import sys
import tempfile

from tests.dist_check import ROOT, sdist_problems


def test_sdist_carries_license_contrib_docs_and_every_test_file(tmp_path):
    # built from a copy: setuptools writes its egg-info beside the sources. Left out: what a test run or
    # a tool writes into the checkout (git ignores it all), which a fresh clone's sdist never holds; the
    # panel tests' screenshots alone (tests/artifacts, ~24 MB) tripled the build's CPU (gzip).
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", "var", ".pytest_cache", ".hypothesis",
        "artifacts", ".mypy_cache", ".ruff_cache", ".import_linter_cache", ".schemathesis"))
    result = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "--outdir",
                             str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (sdist,) = (tmp_path / "dist").glob("contentnode-*.tar.gz")
    assert sdist_problems(str(sdist)) == []


def test_make_install_refuses_an_interpreter_in_a_home_folder(tmp_path):
    """The unit hides /root, /home and /run/user (ProtectHome=yes): a venv on an interpreter
    there could not start, so `make install` refuses it before it touches anything. The
    interpreter is reached through a symlink outside home, as pyenv's shims or a
    /usr/local/bin link would be: the Makefile judges the path the link resolves to."""
    # a folder the unit would hide, whatever $HOME says (CI runs with a fresh HOME under /tmp)
    homes = [folder for folder in ("/root", os.path.realpath(os.path.expanduser("~")), "/home")
             if folder.startswith(("/root", "/home")) and os.access(folder, os.W_OK)]
    assert homes, "this test needs a writable folder under /root or /home to hold a stand-in interpreter"
    home = homes[0]
    ran = tmp_path / "ran"
    with tempfile.TemporaryDirectory(prefix="contentnode-install-test-", dir=home) as in_home:
        interpreter = os.path.join(in_home, "python3")
        with open(interpreter, "w", encoding="utf-8") as f:
            f.write(f"#!/bin/sh\ntouch {ran}\nexit 0\n")   # never run: the check comes first
        os.chmod(interpreter, 0o755)
        link = tmp_path / "python3"
        link.symlink_to(interpreter)
        target = {name: tmp_path / name.lower() for name in ("PREFIX", "BINDIR", "UNITDIR", "CONFDIR")}
        result = subprocess.run(["make", "--no-print-directory", "-C", ROOT, "install", f"INSTALL_PYTHON={link}",
                                 *(f"{name}={path}" for name, path in target.items())],
                                capture_output=True, text=True, timeout=60)
    assert result.returncode != 0, result.stdout + result.stderr
    assert (f"make install: {link} ({interpreter}) is not a system interpreter the unit can run "
            "(ProtectHome=yes hides home folders)") in result.stderr, result.stderr
    assert not ran.exists() and not any(path.exists() for path in target.values())


def test_check_deb_refuses_a_compiled_file_of_another_architecture(tmp_path):
    """packaging/check_deb.py reads every ELF header in a package: an x86_64 extension module in
    an arm64 package (a wheel of the wrong platform) is named, and so is a missing dependency."""
    sys.path.insert(0, os.path.join(ROOT, "packaging"))
    import check_deb

    stage = tmp_path / "stage"
    site = stage / check_deb.SITE
    module = site / "cryptography" / "hazmat" / "bindings" / "_rust.abi3.so"
    module.parent.mkdir(parents=True)
    shutil.copy(os.path.realpath(sys.executable), module)   # this machine's own ELF: x86_64 or aarch64
    (stage / "DEBIAN").mkdir()
    (stage / "DEBIAN" / "control").write_text(
        "Package: contentnode\nVersion: 0.2.0\nArchitecture: arm64\nMaintainer: t <t@localhost>\n"
        f"Depends: {check_deb.DEPENDS}, libc6 (>= 2.34)\nDescription: test\n")
    for script in ("postinst", "prerm", "postrm"):
        (stage / "DEBIAN" / script).write_text("#!/bin/sh\nset -e\nexit 0\n")
        (stage / "DEBIAN" / script).chmod(0o755)
    (stage / "usr" / "bin").mkdir(parents=True)
    (stage / "usr" / "bin" / "contentnode").symlink_to("/opt/contentnode/bin/contentnode")
    unit = stage / "lib" / "systemd" / "system" / "contentnode.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/usr/bin/contentnode serve\n")
    package = tmp_path / "contentnode_0.2.0_arm64.deb"
    built = subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(stage), str(package)],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    machine = check_deb.elf_machine(str(module))
    assert machine in ("x86_64", "aarch64")
    problems = check_deb.problems(str(package), "arm64", "0.2.0")
    wrong = f"built for another architecture: /opt/contentnode/lib/python3.11/site-packages/cryptography/hazmat/bindings/_rust.abi3.so: {machine}"
    assert (wrong in problems) == (machine != "aarch64"), problems
    assert f"missing: /{check_deb.SITE}/PIL/__init__.py" in problems
    assert "missing: /etc/contentnode/contentnode.toml" in problems
    assert "conffiles must list /etc/contentnode/contentnode.toml alone" in problems
    assert check_deb.problems(str(package), "amd64", "0.2.0")[0] == "Architecture: 'arm64', expected 'amd64'"

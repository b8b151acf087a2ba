"""What tests/boot_check.py installs, and the arm64 package it cannot boot.

The packages come from packaging/build_deb.py: this checkout's from dist/ (`make deb`),
built again when missing or older than its sources; the previous version's (UPGRADE_FROM)
built with this checkout's recipe and cached. The build steps and the roots are cached
under $XDG_CACHE_HOME/contentnode-boot (`built_once`).
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "packaging"))

import check_deb  # noqa: E402

# The last commit of main before the unit was booted for real: state it wrote must load.
UPGRADE_FROM = "ae929b2"
SUITE = "bookworm"
# The arm64 root qemu runs the arm64 package in: its files only (mmdebstrap --variant=extract).
ARM64_PACKAGES = "python3"
QEMU = "/usr/bin/qemu-aarch64-static"
BUILD_DEB = os.path.join(ROOT, "packaging", "build_deb.py")
# What the amd64 package is made of: a file newer than dist/'s package means building it again.
PACKAGED = ("contentnode", "contrib", "packaging/build_deb.py", "packaging/deb", "setup.cfg", "README.md", "docs/API.md", "LICENSE")
INSIDE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def log(message: str) -> None:
    print(f"boot-check: {message}", flush=True)


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "contentnode-boot")


def built_once(name: str, key: str, build) -> str:
    """`build(tmp_dir)` once per key; the result is renamed into place only when complete."""
    final = os.path.join(cache_dir(), f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:16]}")
    if os.path.isdir(final):
        log(f"{name}: cached at {final}")
        return final
    os.makedirs(cache_dir(), exist_ok=True)
    for stale in os.listdir(cache_dir()):   # an earlier key's build, or one cut short
        if stale.startswith(f"{name}-"):
            shutil.rmtree(os.path.join(cache_dir(), stale), ignore_errors=True)
    work = final + ".partial"
    started = time.monotonic()
    build(work)
    os.rename(work, final)
    log(f"{name}: built in {time.monotonic() - started:.0f} s")
    return final


def build_arm64_root(path: str) -> None:
    subprocess.run(["mmdebstrap", "--quiet", "--variant=extract", "--architectures=arm64",
                    f"--include={ARM64_PACKAGES}", SUITE, path], check=True, timeout=900)


def newest_source() -> float:
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", *PACKAGED],
                           cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    return max(os.path.getmtime(os.path.join(ROOT, os.fsdecode(name))) for name in filter(None, names)
               if os.path.isfile(os.path.join(ROOT, os.fsdecode(name))))


def this_package(arch: str) -> str:
    """dist/'s package of this checkout (`make deb`, as CI runs it before this check), built
    again when missing or older than a file it is made of."""
    sys.path.insert(0, os.path.dirname(BUILD_DEB))
    import build_deb
    path = os.path.join(ROOT, "dist", f"contentnode_{build_deb.version_of(ROOT)}_{arch}.deb")
    if not os.path.exists(path) or os.path.getmtime(path) < newest_source():
        log(f"{path}: missing or older than its sources, building it")
        subprocess.run([sys.executable, BUILD_DEB, "--arch", arch], check=True, timeout=1800)
    return path


def build_previous_package(path: str) -> None:
    """UPGRADE_FROM's tree packaged with this checkout's recipe (it had none of its own)."""
    checkout_copy(os.path.join(path, "source"), UPGRADE_FROM)
    subprocess.run([sys.executable, BUILD_DEB, "--source", os.path.join(path, "source"), "--out", path,
                    "--arch", "amd64"], check=True, timeout=1800)
    shutil.rmtree(os.path.join(path, "source"))


def packaging_key() -> str:
    """UPGRADE_FROM and the recipe (build_deb.py, the maintainer scripts): what its package is made of."""
    digest = hashlib.sha256()
    recipe = [BUILD_DEB] + sorted(os.path.join(ROOT, "packaging", "deb", n)
                                  for n in os.listdir(os.path.join(ROOT, "packaging", "deb")))
    for path in recipe:
        with open(path, "rb") as f:
            digest.update(f.read())
    return f"{UPGRADE_FROM} {digest.hexdigest()}"


def checkout_copy(dest: str, commit: str | None) -> None:
    """The working tree (tracked and untracked, not ignored) or one commit, as plain files."""
    os.makedirs(dest)
    if commit:
        archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
        return
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, check=True, capture_output=True).stdout.split(b"\0")
    for name in filter(None, names):
        source = os.path.join(ROOT, os.fsdecode(name))
        if os.path.isfile(source):
            target = os.path.join(dest, os.fsdecode(name))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(source, target)


def arm64(package: str, timings: dict) -> None:
    """The arm64 package: every compiled file aarch64; under qemu-aarch64-static, in an arm64
    Debian root with the package's files extracted into a copy, `contentnode --version` and an
    import of every compiled dependency. binfmt_misc is not needed: qemu runs the venv's
    python3 (Debian's arm64 /usr/bin/python3.11) itself, inside a chroot."""
    started = time.monotonic()
    version = os.path.basename(package).split("_")[1]
    problems = check_deb.problems(package, "arm64", version)
    assert not problems, "\n".join(problems)
    if not os.access(QEMU, os.X_OK):
        raise AssertionError(f"{QEMU} is missing: apt-get install -y qemu-user-static")
    root = built_once("root-arm64", f"{SUITE} {ARM64_PACKAGES}", build_arm64_root)
    with tempfile.TemporaryDirectory(prefix="boot-check-arm64-") as work:
        tree = os.path.join(work, "root")
        subprocess.run(["cp", "-a", root, tree], check=True)
        subprocess.run(["dpkg-deb", "-x", package, tree], check=True)
        compiled = check_deb.compiled_files(os.path.join(tree, "opt"))
        shutil.copy(QEMU, os.path.join(tree, "qemu-aarch64-static"))
        python = ["chroot", tree, "/qemu-aarch64-static", "/opt/contentnode/bin/python3", "-I"]
        said = subprocess.run([*python, "/usr/bin/contentnode", "--version"], capture_output=True, text=True,
                              timeout=300, env={"PATH": INSIDE_PATH, "LANG": "C.UTF-8"})
        assert said.returncode == 0 and said.stdout.strip() == f"contentnode {version}", said
        imported = subprocess.run([*python, "-c", "import platform, argon2, _cffi_backend, brotli, backports.zstd, "
                                   "PIL.Image, cryptography.hazmat.bindings._rust; print(platform.machine())"],
                                  capture_output=True, text=True, timeout=300, env={"PATH": INSIDE_PATH})
        assert imported.returncode == 0 and imported.stdout.strip() == "aarch64", imported
    timings["arm64"] = time.monotonic() - started
    log(f"arm64 package: {len(compiled)} compiled files, all aarch64; under qemu: {said.stdout.strip()}, "
        "every compiled dependency imports")

"""`make deb`: dist/contentnode_<version>_amd64.deb and _arm64.deb, built on an amd64 machine.

    .venv/bin/python packaging/build_deb.py [--source DIR] [--out DIR] [--arch amd64|arm64 ...]

Each package is self-contained so that `apt install ./contentnode_<version>_<arch>.deb`
needs no network and no pip: a venv under /opt/contentnode on Debian 12's /usr/bin/python3
(3.11) holding the program and every runtime dependency and extra, installed here from
wheels for the target architecture (`pip download --platform ...` fills a wheelhouse per
architecture, `pip install --target --platform ... --no-index` unpacks it), the launcher
/usr/bin/contentnode, the systemd unit, the example configuration as a conffile, the docs,
and maintainer scripts (packaging/deb/) that reload systemd and never touch the data.
--source builds another checkout with this same recipe (the boot check builds the version
it upgrades from that way). packaging/check_deb.py checks every package it writes.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import check_deb  # noqa: E402

PREFIX = "/opt/contentnode"
PYTHON = "3.11"
SITE = f"{PREFIX}/lib/python{PYTHON}/site-packages"
EXTRAS = ("images", "zstd", "brotli", "geoip")
ARCHES = check_deb.ARCHES
# Debian 12 has glibc 2.36: any manylinux wheel up to that runs there; pip takes the first it finds.
GLIBC_MINORS = range(36, 16, -1)
DEPENDS = check_deb.DEPENDS   # and libc6, as new as the newest manylinux tag the wheels need
LEGACY_MANYLINUX = {"manylinux1": 5, "manylinux2010": 12, "manylinux2014": 17}   # glibc 2.<n>
RECOMMENDS = "ca-certificates, systemd"
# The unit in contrib/ names the paths `make install` uses; the package's are these.
UNIT_PATHS = {"/usr/local/bin/contentnode": "/usr/bin/contentnode",
              f"{PREFIX}/share/doc/contentnode/": "/usr/share/doc/contentnode/"}
DOCS = {"README.md": "README.md", "docs/API.md": "API.md", "LICENSE": "copyright"}
LAUNCHER = f"""#!{PREFIX}/bin/python3 -I
# contentnode from its Debian package: the venv in {PREFIX} on Debian's python3.
import sys

from contentnode.cli import main

sys.exit(main())
"""


def log(message: str) -> None:
    print(f"make deb: {message}", flush=True)


def run(argv: list, **kw) -> None:
    subprocess.run(argv, check=True, timeout=1800, **kw)


def version_of(source: str) -> str:
    with open(os.path.join(source, "contentnode", "__init__.py"), encoding="utf-8") as f:
        found = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M)
    if not found:
        raise SystemExit(f"make deb: no __version__ in {source}/contentnode/__init__.py")
    return found.group(1)


def pip_target(machine: str) -> list:
    """pip's options for wheels of CPython 3.11 on glibc Linux of `machine`, binaries only."""
    platforms = [f"manylinux_2_{minor}_{machine}" for minor in GLIBC_MINORS] + [f"manylinux2014_{machine}"]
    return ["--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp", "--abi", "cp311",
            *(f"--platform={platform}" for platform in platforms)]


def program_wheel(source: str, work: str) -> str:
    """contentnode's own wheel, built from a copy of `source` (the build writes beside its sources)."""
    copy = os.path.join(work, "source")
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", "var", ".pytest_cache", ".hypothesis"))
    wheels = os.path.join(work, "program")
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels, copy])
    (name,) = os.listdir(wheels)
    return os.path.join(wheels, name)


def extras_of(source: str) -> tuple:
    """The extras this checkout declares (an older one may lack zstd and brotli)."""
    with open(os.path.join(source, "setup.cfg"), encoding="utf-8") as f:
        declared = set(re.findall(r"^(\w+) =\s*$", f.read().split("[options.extras_require]", 1)[-1], re.M))
    return tuple(extra for extra in EXTRAS if extra in declared)


def fill_venv(stage: str, wheel: str, extras: tuple, machine: str, wheelhouse: str) -> None:
    """The program, its dependencies and extras for `machine`, as a venv on /usr/bin/python3."""
    wanted = f"{wheel}[{','.join(extras)}]" if extras else wheel
    pip = [sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check"]
    run([*pip, "download", *pip_target(machine), "--dest", wheelhouse, wanted])
    os.unlink(os.path.join(wheelhouse, os.path.basename(wheel)))   # the program comes from `wheel` alone
    run([*pip, "install", *pip_target(machine), "--no-index", "--find-links", wheelhouse,
         "--target", stage + SITE, wanted])
    shutil.rmtree(stage + SITE + "/bin", ignore_errors=True)   # console scripts for the build's python
    os.makedirs(stage + PREFIX + "/bin")
    os.symlink("/usr/bin/python3", stage + PREFIX + "/bin/python3")
    os.symlink("python3", stage + PREFIX + "/bin/python")
    with open(stage + PREFIX + "/pyvenv.cfg", "w", encoding="utf-8") as f:
        f.write(f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {PYTHON}\n")
    write(stage + PREFIX + "/bin/contentnode", LAUNCHER, 0o755)
    os.makedirs(stage + "/usr/bin")
    os.symlink(PREFIX + "/bin/contentnode", stage + "/usr/bin/contentnode")


def glibc_needed(stage: str) -> int:
    """The newest glibc 2.<n> any installed wheel needs: each wheel runs from the oldest
    manylinux tag it carries, the package from the newest of those (Debian 12 has 2.36)."""
    site = stage + SITE
    needed = 17
    for name in os.listdir(site):
        if name.endswith(".dist-info") and os.path.exists(os.path.join(site, name, "WHEEL")):
            with open(os.path.join(site, name, "WHEEL"), encoding="utf-8") as f:
                tags = re.findall(r"^Tag: \S+-\S+-(\S+)$", f.read(), re.M)
            minors = [int(m.group(1)) for tag in tags for m in [re.match(r"manylinux_2_(\d+)_", tag)] if m]
            minors += [minor for tag in tags for legacy, minor in LEGACY_MANYLINUX.items()
                       if tag.startswith(legacy + "_")]
            if minors:
                needed = max(needed, min(minors))
    return needed


def write(path: str, text: str, mode: int = 0o644) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(path, mode)


def read(source: str, name: str) -> str:
    with open(os.path.join(source, name), encoding="utf-8") as f:
        return f.read()


def add_files(stage: str, source: str) -> None:
    """The unit (with the package's paths), the example configuration, the docs, DEBIAN/ scripts."""
    unit = read(source, "contrib/contentnode.service")
    for old, new in UNIT_PATHS.items():
        unit = unit.replace(old, new)
    write(stage + "/lib/systemd/system/contentnode.service", unit)
    write(stage + "/etc/contentnode/contentnode.toml", read(source, "contrib/contentnode.toml"))
    for name, target in DOCS.items():
        write(stage + "/usr/share/doc/contentnode/" + target, read(source, name))
    for script in ("postinst", "prerm", "postrm"):
        write(f"{stage}/DEBIAN/{script}", read(HERE, f"deb/{script}"), 0o755)
    write(stage + "/DEBIAN/conffiles", "/etc/contentnode/contentnode.toml\n")


def normalize(stage: str) -> int:
    """Modes as Debian wants them (0755 folders and programs, 0644 the rest); the size in KiB."""
    total = 0
    for dirpath, _dirnames, filenames in os.walk(stage):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue
            mode = os.stat(path).st_mode
            library = name.endswith(".so") or ".so." in name   # loaded, never run
            os.chmod(path, 0o755 if mode & 0o111 and not library else 0o644)
            if not path.startswith(os.path.join(stage, "DEBIAN")):
                total += os.path.getsize(path)
    return (total + 1023) // 1024


def control(version: str, arch: str, size_kib: int, glibc: int) -> str:
    return f"""Package: contentnode
Version: {version}
Architecture: {arch}
Maintainer: contentnode developers <contentnode@localhost>
Installed-Size: {size_kib}
Depends: {DEPENDS}, libc6 (>= 2.{glibc})
Recommends: {RECOMMENDS}
Section: net
Priority: optional
Description: administration daemon of a small content routing node
 contentnode serves files from S3 buckets and folders under customer domains
 with a disk cache, signed links and images, managed through a JSON API on a
 loopback admin port and a web panel. This package carries its own Python
 dependencies (in {PREFIX}) and runs on Debian's python3.
"""


def build(source: str, out: str, arch: str, wheel: str, work: str, wheelhouses: str) -> str:
    version = version_of(source)
    stage = os.path.join(work, f"stage-{arch}")
    fill_venv(stage, wheel, extras_of(source), ARCHES[arch], os.path.join(wheelhouses, arch))
    add_files(stage, source)
    size_kib = normalize(stage)
    write(stage + "/DEBIAN/control", control(version, arch, size_kib, glibc_needed(stage)))
    os.makedirs(out, exist_ok=True)
    package = os.path.join(out, f"contentnode_{version}_{arch}.deb")
    run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", stage, package], stdout=subprocess.DEVNULL)
    problems = check_deb.problems(package, arch, version)
    if problems:
        raise SystemExit("make deb: " + package + ":\n  " + "\n  ".join(problems))
    log(f"{package}: {os.path.getsize(package) / 1e6:.1f} MB, {size_kib / 1024:.0f} MB installed")
    return package


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--source", default=ROOT, help="the checkout to package (default: this one)")
    parser.add_argument("--out", default=os.path.join(ROOT, "dist"))
    parser.add_argument("--arch", action="append", choices=sorted(ARCHES), help="default: every one")
    parser.add_argument("--wheelhouse", default=os.path.join(ROOT, "build", "deb-wheels"),
                        help="wheels per architecture, kept between builds")
    args = parser.parse_args(argv)
    if not shutil.which("dpkg-deb"):
        raise SystemExit("make deb needs dpkg-deb: apt-get install -y dpkg")
    with tempfile.TemporaryDirectory(prefix="contentnode-deb-") as work:
        wheel = program_wheel(os.path.abspath(args.source), work)
        for arch in args.arch or sorted(ARCHES):
            build(os.path.abspath(args.source), args.out, arch, wheel, work, args.wheelhouse)
    return 0


if __name__ == "__main__":
    sys.exit(main())

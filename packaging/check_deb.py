"""What a built contentnode .deb must hold, read from the file itself.

    python3 packaging/check_deb.py dist/contentnode_<version>_<arch>.deb ...

packaging/build_deb.py runs it on every package it writes; the boot check runs it on the
arm64 package it cannot boot. It reads the control fields, the conffiles, the paths the
unit and the launcher need, the dependencies' modules, and the ELF header of every file:
each compiled file (extension modules and the libraries wheels bundle) must be built for
the package's architecture, or the package would install and then fail to import.
"""

import os
import re
import subprocess
import sys
import tempfile

ARCHES = {"amd64": "x86_64", "arm64": "aarch64"}
ELF_MACHINES = {62: "x86_64", 183: "aarch64"}   # e_machine values (EM_X86_64, EM_AARCH64)
DEPENDS = "python3 (>= 3.11), python3 (<< 3.12)"
SITE = "opt/contentnode/lib/python3.11/site-packages"
# One file per runtime dependency and extra that must be in the venv (relative to SITE).
MODULES = ("contentnode/__init__.py", "argon2/__init__.py", "_argon2_cffi_bindings/__init__.py",
           "cffi/__init__.py", "pyotp/__init__.py", "cryptography/__init__.py", "PIL/__init__.py")
MODULES_NEWER = ("brotli.py", "backports/zstd/__init__.py")   # extras since 0.2.0
PATHS = ("usr/bin/contentnode", "opt/contentnode/pyvenv.cfg", "opt/contentnode/bin/contentnode",
         "lib/systemd/system/contentnode.service", "etc/contentnode/contentnode.toml",
         "usr/share/doc/contentnode/README.md", "usr/share/doc/contentnode/copyright")


def elf_machine(path: str) -> str | None:
    """The architecture an ELF file is built for ("x86_64", "aarch64", "em<n>"), None if not ELF."""
    with open(path, "rb") as f:
        head = f.read(20)
    if len(head) < 20 or head[:4] != b"\x7fELF":
        return None
    order = "little" if head[5] == 1 else "big"
    machine = int.from_bytes(head[18:20], order)
    return ELF_MACHINES.get(machine, f"em{machine}")


def compiled_files(tree: str) -> dict:
    """{path relative to tree: machine} for every regular ELF file under tree."""
    found = {}
    for dirpath, _dirnames, filenames in os.walk(tree):
        for name in filenames:
            path = os.path.join(dirpath, name)
            if os.path.isfile(path) and not os.path.islink(path):
                machine = elf_machine(path)
                if machine:
                    found[os.path.relpath(path, tree)] = machine
    return found


def field(package: str, name: str) -> str:
    return subprocess.run(["dpkg-deb", "--field", package, name], capture_output=True, text=True,
                          check=True).stdout.strip()


def problems(package: str, arch: str, version: str) -> list:
    """Everything wrong with `package` as contentnode `version` for `arch` (empty: fine)."""
    found = []
    for name, wanted in (("Package", "contentnode"), ("Version", version), ("Architecture", arch)):
        if field(package, name) != wanted:
            found.append(f"{name}: {field(package, name)!r}, expected {wanted!r}")
    if not re.fullmatch(re.escape(DEPENDS) + r", libc6 \(>= 2\.(1[7-9]|2\d|3[0-6])\)", field(package, "Depends")):
        found.append(f"Depends: {field(package, 'Depends')!r}, expected {DEPENDS}, libc6 (>= 2.<n>) of Debian 12")
    with tempfile.TemporaryDirectory(prefix="contentnode-check-") as tree:
        subprocess.run(["dpkg-deb", "--raw-extract", package, tree], check=True)
        conffiles = os.path.join(tree, "DEBIAN", "conffiles")
        listed = []
        if os.path.exists(conffiles):
            with open(conffiles, encoding="utf-8") as f:
                listed = f.read().split()
        if listed != ["/etc/contentnode/contentnode.toml"]:
            found.append("conffiles must list /etc/contentnode/contentnode.toml alone")
        newer = tuple(int(part) for part in re.findall(r"\d+", version)[:2]) >= (0, 2)
        for path in PATHS + tuple(f"{SITE}/{m}" for m in MODULES + (MODULES_NEWER if newer else ())):
            if not os.path.lexists(os.path.join(tree, path)):
                found.append(f"missing: /{path}")
        if os.readlink(os.path.join(tree, "usr/bin/contentnode")) != "/opt/contentnode/bin/contentnode":
            found.append("/usr/bin/contentnode must link to /opt/contentnode/bin/contentnode")
        with open(os.path.join(tree, "lib/systemd/system/contentnode.service"), encoding="utf-8") as f:
            if "ExecStart=/usr/bin/contentnode serve" not in f.read():
                found.append("the unit must run /usr/bin/contentnode")
        for script in ("postinst", "prerm", "postrm"):
            path = os.path.join(tree, "DEBIAN", script)
            if subprocess.run(["sh", "-n", path]).returncode:
                found.append(f"{script}: not valid sh")
            with open(path, encoding="utf-8") as f:
                commands = [line for line in f.read().splitlines() if not line.lstrip().startswith(("#", "echo", '"'))]
            if any(re.search(r"\b(pip|curl|wget)\b|/var/lib", line) for line in commands):
                found.append(f"{script}: must not fetch anything or touch the data")
        compiled = compiled_files(os.path.join(tree, "opt"))
        wrong = sorted(f"/opt/{path}: {machine}" for path, machine in compiled.items() if machine != ARCHES[arch])
        found += [f"built for another architecture: {line}" for line in wrong]
        if not compiled:
            found.append("no compiled file at all: the dependencies' extension modules are missing")
    return found


def main(argv: list) -> int:
    failed = 0
    for package in argv:
        match = re.search(r"contentnode_([^_]+)_([a-z0-9]+)\.deb$", package)
        if not match:
            print(f"{package}: not a contentnode_<version>_<arch>.deb", file=sys.stderr)
            return 2
        found = problems(package, match.group(2), match.group(1))
        print(f"{package}: " + ("ok" if not found else "\n  " + "\n  ".join(found)))
        failed += bool(found)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

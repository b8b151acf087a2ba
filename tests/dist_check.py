"""Build the sdist and wheel, install the wheel into a clean venv, run it to /healthz.

    .venv/bin/python tests/dist_check.py      (make dist-check; .ci/run runs it)

Needs the package registry for the build requirements and the runtime
dependencies, so it is a CI step, not a test (tests talk to loopback only).
tests/test_packaging.py checks the sdist's contents offline with `sdist_problems`.
"""

import os
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALWAYS = ("LICENSE", "README.md", "contrib/contentnode.service", "contrib/contentnode.toml",
          "docs/API.md", "docs/DEVELOPING.md")


def source_files(folder: str) -> set:
    """Files of `folder` (relative to the checkout) that git tracks, or all of them outside git."""
    result = subprocess.run(["git", "ls-files", folder], cwd=ROOT, capture_output=True, text=True)
    if result.returncode == 0 and result.stdout.strip():
        return set(result.stdout.split())
    found = set()
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, folder)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        found.update(os.path.relpath(os.path.join(dirpath, f), ROOT) for f in filenames)
    return found


def sdist_problems(sdist: str) -> list:
    """What the sdist lacks: the license, contrib/, docs/, packaging/ (`make deb`), and the whole
    test suite with its helpers."""
    with tarfile.open(sdist) as tar:
        members = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    wanted = set(ALWAYS) | source_files("tests") | source_files("contrib") | source_files("docs") | source_files("packaging")
    return sorted(f"missing from the sdist: {name}" for name in wanted - members)


def run(argv, **kw):
    print("+", " ".join(argv), flush=True)
    return subprocess.run(argv, check=True, timeout=600, **kw)


def serve_to_healthz(command: str, workdir: str) -> None:
    ready = os.path.join(workdir, "ready")
    env = dict(os.environ, CONTENTNODE_READY_FILE=ready)
    proc = subprocess.Popen([command, "serve", "--data-dir", os.path.join(workdir, "data"),
                             "--admin-port", "0", "--public-port", "0", "--public-bind", "127.0.0.1"],
                            env=env, cwd=workdir)
    try:
        deadline = time.monotonic() + 60
        while not (os.path.exists(ready) and len(open(ready).read().split()) == 2):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"installed contentnode did not start (exit {proc.poll()})")
            time.sleep(0.1)
        admin_port = int(open(ready).read().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/healthz", timeout=10) as answer:
            body = answer.read()
            print(f"/healthz answered {answer.status}: {body.decode()}")
            if answer.status != 200:
                raise SystemExit("/healthz did not answer 200")
    finally:
        proc.terminate()
        proc.wait(30)
    if proc.returncode != 0:
        raise SystemExit(f"installed contentnode exited with {proc.returncode} on SIGTERM")


def main() -> int:
    sys.path.insert(0, ROOT)
    from contentnode import __version__

    with tempfile.TemporaryDirectory(prefix="contentnode-dist-") as tmp:
        dist = os.path.join(tmp, "dist")
        run([sys.executable, "-m", "build", "--outdir", dist, ROOT])  # the wheel is built from the sdist
        sdist = os.path.join(dist, f"contentnode-{__version__}.tar.gz")
        wheel = os.path.join(dist, f"contentnode-{__version__}-py3-none-any.whl")
        problems = sdist_problems(sdist)
        if problems:
            print("\n".join(problems), file=sys.stderr)
            return 1
        venv = os.path.join(tmp, "venv")
        run([sys.executable, "-m", "venv", venv])
        run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--quiet", wheel])
        command = os.path.join(venv, "bin", "contentnode")
        version = subprocess.run([command, "--version"], capture_output=True, text=True, check=True).stdout.strip()
        print(f"contentnode --version: {version}")
        if version != f"contentnode {__version__}":
            raise SystemExit(f"--version printed {version!r}")
        serve_to_healthz(command, tmp)
    print("dist check passed: sdist and wheel build, the wheel installs into a clean venv and serves /healthz")
    return 0


if __name__ == "__main__":
    sys.exit(main())

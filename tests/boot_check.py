"""`make boot-check`: the installed unit under a real systemd as PID 1, on one CPU and on two.

A small Debian 12 root (mmdebstrap: systemd, dbus, python3) is booted with
systemd-nspawn (its own PID, mount and network namespaces; only loopback inside, so
its ports 80 and 9090 clash with nothing on the host), and commands run inside through
nsenter. Inside: `apt install ./contentnode_<version>_amd64.deb` (the package `make deb`
built, packaging/build_deb.py), `systemctl start contentnode`, and tests/boot_probe.py
drives the node over HTTP from inside the container. Run as root (README, "Installing
for real"; docs/DEVELOPING.md).

Two boots:
- two CPUs: the package of the previous version (UPGRADE_FROM, built with this
  checkout's recipe), data made through the API, the service stopped, this version's
  package installed over it (every byte of the data unchanged), everything still there;
  then every path that touches the OS under the unit's sandbox and filter, an access log
  file in the unit's LogsDirectory moved and reopened on SIGHUP, folder buckets in the
  default root and in /srv, restart, kill -9, a configuration error, a state file from a
  newer version, a denied call (EPERM); at the end `apt remove` (program gone, config and
  data kept byte for byte) and `apt purge` (config gone, data kept);
- one CPU (`--cpu-affinity=0`): the previous package running, this one installed over
  it (the service restarted on it by postinst), start, serve, journal.
The arm64 package cannot boot here: every compiled file in it must be aarch64
(packaging/check_deb.py), and `contentnode --version` and the compiled modules' imports
run under qemu-aarch64-static in an arm64 Debian root (its files extracted, nothing run
natively).

tests/boot_packages.py finds or builds the packages and checks the arm64 one.
No network inside: apt installs the package files alone (Depends: python3 only), the
probe's venv comes from a wheelhouse the host fills with its own pip. The roots, the
wheelhouse and the previous version's package are cached under
$XDG_CACHE_HOME/contentnode-boot (a second run skips those builds; CI starts empty).
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.boot_packages import (  # noqa: E402
    INSIDE_PATH, SUITE, arm64, build_previous_package, built_once, checkout_copy, log, packaging_key, this_package)
from tests.peers.check import CHALLTESTSRV, DEBIAN_BOOT, DEBIAN_PEERS, PEBBLE, missing_debian, weed_path  # noqa: E402

PACKAGES = "systemd,systemd-sysv,dbus,python3,python3-venv,ca-certificates,procps"
DEBS = "/srv/debs"   # inside; readable by apt's own user (_apt), unlike /root
DATA = "/var/lib/private/contentnode"
APT = {"DEBIAN_FRONTEND": "noninteractive"}
BOOT_TIMEOUT = 60
STEP_TIMEOUT = 300


def build_root(path: str) -> None:
    subprocess.run(["mmdebstrap", "--quiet", "--variant=minbase", f"--include={PACKAGES}", SUITE, path],
                   check=True, timeout=900)


PROBE_WHEELS = ("cryptography", "Pillow", "pytest")


def build_wheelhouse(path: str) -> None:
    """The probe's venv (certificates, images, the S3 peer's imports), as wheels."""
    os.makedirs(path)
    subprocess.run([sys.executable, "-m", "pip", "--quiet", "--disable-pip-version-check", "wheel",
                    "--wheel-dir", path, *PROBE_WHEELS], check=True, cwd=ROOT, timeout=900)


class Container:
    """One booted copy of the root; `run` executes a command inside, as root."""

    def __init__(self, root: str, workdir: str, binds: dict, cpus: str | None):
        self.log_path = os.path.join(workdir, "nspawn.log")
        argv = ["systemd-nspawn", "--quiet", "-D", root, "--register=no", "--keep-unit", "--boot",
                "--private-network", "--volatile=overlay",
                *(f"--bind-ro={host}:{inside}" for host, inside in binds.items())]
        if cpus is not None:
            argv.append(f"--cpu-affinity={cpus}")
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        self.init_pid = self._find_init()
        state = self._wait_running()
        if state not in ("running", "degraded"):
            raise RuntimeError(f"systemd inside did not come up: {state!r}\n{self.tail()}")
        if state == "degraded":
            log("systemd is degraded inside: " + self.run("systemctl", "--failed", "--no-legend").stdout.strip())

    def _find_init(self) -> int:
        """The container's PID 1 as the host sees it: nspawn's child whose own PID inside is 1."""
        deadline = time.monotonic() + BOOT_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited with {self.proc.returncode}:\n{self.tail()}")
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
                        status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
                    with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
                        comm = f.read().strip()
                except OSError:
                    continue
                if (int(status["PPid"]) == self.proc.pid and status["NSpid"].split()[-1] == "1"
                        and comm == "systemd"):
                    return int(pid)
            time.sleep(0.1)
        raise RuntimeError(f"no init process under systemd-nspawn:\n{self.tail()}")

    def _wait_running(self) -> str:
        """`is-system-running --wait` once systemd answers at all (before that: offline)."""
        deadline = time.monotonic() + BOOT_TIMEOUT
        while True:
            state = self.run("systemctl", "is-system-running", "--wait", check=False,
                             timeout=BOOT_TIMEOUT).stdout.strip()
            if state in ("running", "degraded") or time.monotonic() > deadline:
                return state
            time.sleep(0.3)

    def tail(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()[-3000:]

    def command(self, *argv, env: dict | None = None) -> list:
        environment = {"PATH": INSIDE_PATH, "HOME": "/root", "LANG": "C.UTF-8", **(env or {})}
        return ["nsenter", "-t", str(self.init_pid), "-a", "env", "-i",
                *(f"{k}={v}" for k, v in environment.items()), *argv]

    def run(self, *argv, env=None, check=True, timeout=STEP_TIMEOUT, input_text=None):
        result = subprocess.run(self.command(*argv, env=env), capture_output=True, text=True,
                                timeout=timeout, input=input_text)
        if check and result.returncode != 0:
            raise RuntimeError(f"inside: {' '.join(argv)} -> {result.returncode}\n{result.stdout}{result.stderr}")
        return result

    def sh(self, script: str, **kw):
        return self.run("sh", "-euc", script, **kw)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()   # SIGTERM: nspawn asks the container's systemd to power off
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


class Probe:
    """tests/boot_probe.py inside, kept running across node restarts (it holds the S3 origin)."""

    def __init__(self, box: Container):
        self.proc = subprocess.Popen(
            box.command("/root/probe/bin/python", "-m", "tests.boot_probe",
                        env={"PYTHONPATH": "/root/src-new", "PYTHONDONTWRITEBYTECODE": "1"}),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")

    def __call__(self, step: str, **args) -> dict:
        self.proc.stdin.write(json.dumps({"step": step, **args}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"probe ended during {step} (exit {self.proc.wait(timeout=10)})")
        answer = json.loads(line)
        if "error" in answer:
            raise AssertionError(f"probe step {step}: {answer['error']}")
        log(f"{step}: ok {answer.get('said', '')}")
        return answer

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def install(box: Container, package: str, timings: dict) -> str:
    """`apt install ./<package>` inside (no network: nothing to fetch); the version it reports.
    An upgrade keeps the operator's changed config file (dpkg would ask; the check answers "keep")."""
    started = time.monotonic()
    box.sh(f"cd {DEBS} && apt-get install -y -q -o Dpkg::Options::=--force-confold ./{package}", env=APT)
    timings.setdefault("apt_install", []).append(round(time.monotonic() - started, 1))
    return box.run("contentnode", "--version").stdout.strip()


def data_sums(box: Container) -> str:
    """sha256 of every file of the data (the service stopped: nothing writes meanwhile)."""
    return box.sh(f"cd {DATA} && find . -type f -print0 | sort -z | xargs -0 sha256sum").stdout


def unit_state(box: Container) -> dict:
    shown = box.run("systemctl", "show", "contentnode", "-p", "ActiveState,SubState,MainPID,NRestarts,"
                    "ExecMainStatus,ExecMainCode,Result").stdout
    return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)


def wait_for(box: Container, what: str, check, timeout: float = 40) -> dict:
    deadline = time.monotonic() + timeout
    state = unit_state(box)
    while not check(state):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: unit state {state}\n{journal(box)[-3000:]}")
        time.sleep(0.3)
        state = unit_state(box)
    return state


def journal(box: Container, since: str | None = None) -> str:
    """The unit's journal (from `since`, a time inside); `-o cat`: the messages alone."""
    return box.run("journalctl", "-u", "contentnode", "--no-pager", "-o", "cat",
                   *([f"--since=@{since}"] if since else [])).stdout


def journal_shows(box: Container, check, since: str | None = None, timeout: float = 15) -> str:
    """journald reads the daemon's stderr on its own time: poll until `check(text)` holds."""
    deadline = time.monotonic() + timeout
    text = journal(box, since)
    while not check(text) and time.monotonic() < deadline:
        time.sleep(0.3)
        text = journal(box, since)
    return text


def set_config(box: Container, text: str) -> None:
    box.run("tee", "/etc/contentnode/contentnode.toml", input_text=text)


def start(box: Container) -> dict:
    box.run("systemctl", "restart", "contentnode")
    return wait_for(box, "running", lambda s: s.get("ActiveState") == "active" and s.get("SubState") == "running")


def prepare(box: Container) -> None:
    """The probe's venv: cryptography (certificates), Pillow (images), pytest (the S3 peer imports it)."""
    box.sh("python3 -m venv /root/probe && /root/probe/bin/python -m pip install --quiet --disable-pip-version-check --no-index "
           "--find-links /wheelhouse cryptography Pillow pytest")


CONFIG_TWO_CPUS = """public_port = 80
public_workers = 2
"""


def two_cpus(box: Container, packages: dict, timings: dict) -> None:
    prepare(box)
    started = time.monotonic()
    old = install(box, packages["old"], timings)
    # The old unit kills the old daemon's public workers with SIGSYS (31) when they pin
    # their CPU (the bug this check was written for): that version runs with affinity off.
    set_config(box, CONFIG_TWO_CPUS + 'public_cpu_affinity = "off"\n')
    start(box)
    probe = Probe(box)
    try:
        probe("origin")
        made = probe("make_data")
        box.run("systemctl", "stop", "contentnode")
        before = data_sums(box)
        new = install(box, packages["new"], timings)
        assert new != old, f"contentnode --version did not change on upgrade: {old!r}"
        assert data_sums(box) == before, "installing the new package changed the data"
        assert unit_state(box)["ActiveState"] == "inactive", "the upgrade started a stopped service"
        log(f"upgrade: {old} -> {new} by the package, {len(before.splitlines())} data files unchanged")
        set_config(box, CONFIG_TWO_CPUS)
        start(box)
        probe("data_intact", **made)
        timings["upgrade"] = time.monotonic() - started

        started = time.monotonic()
        state = unit_state(box)

        def read_facts():
            return box.sh(f"""
            stat -c '%a %u' /var/lib/private/contentnode
            awk '/^Uid:/ {{print $2}}' /proc/{state['MainPID']}/status
            awk '/^Cpus_allowed_list:/ {{print $2}}' /proc/{state['MainPID']}/status
            for worker in $(pgrep -P {state['MainPID']}); do
                grep -h '^Cpus_allowed_list:' /proc/$worker/task/*/status | sort -u | tr -d '\t' | tr '\n' ' '
                echo
            done
        """).stdout.strip().split("\n")

        def pinned_of(workers):
            return [{cpu for cpu in found.replace("Cpus_allowed_list:", "").split() if cpu != cpus}
                    for found in workers]

        # a worker pins its public threads once it serves: look until both do (or 20 s passed)
        deadline = time.monotonic() + 20
        while True:
            facts = read_facts()
            mode_owner, uid, cpus, workers = facts[0], facts[1], facts[2], facts[3:]
            pinned = pinned_of(workers)
            if len(workers) == 2 and all(len(one) == 1 for one in pinned) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert mode_owner == f"700 {uid}", f"state dir mode and owner: {mode_owner}, daemon uid {uid}"
        assert int(uid) >= 61184, f"not a dynamic user: uid {uid}"   # systemd's DynamicUser range
        assert "-" in cpus or "," in cpus, f"the daemon may run on CPUs {cpus} only"
        assert len(workers) == 2, f"public workers running: {workers}"
        # each worker's public threads keep to one CPU: sched_setaffinity ran under the filter
        assert all(len(one) == 1 for one in pinned) and pinned[0] != pinned[1], workers
        log(f"dynamic uid {uid}, state dir {mode_owner}, CPUs {cpus}, 2 public workers pinned to "
            f"{' and '.join(one.pop() for one in pinned)}")
        probe("exercise", **made)
        startup = ("contentnode 0.", "admin API on", "public port on", "served by 2 worker processes")
        text = journal_shows(box, lambda text: all(line in text for line in startup))
        for line in startup:
            assert line in text, f"journal lacks {line!r}:\n{text[-3000:]}"
        assert "the OS refused" not in text, "a call was refused under the shipped unit:\n" + text[-3000:]
        access_log_file(box, probe)
        folder_buckets(box, probe)

        box.run("systemctl", "restart", "contentnode")
        wait_for(box, "restart", lambda s: s.get("SubState") == "running")
        probe("data_intact", **made)

        before = unit_state(box)
        box.run("kill", "-9", before["MainPID"])
        after = wait_for(box, "restart after kill -9", lambda s: s.get("SubState") == "running"
                         and s.get("MainPID") not in ("0", before["MainPID"]))
        assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1, (before, after)
        probe("data_intact", **made)

        acme(box, probe)
        denied_call(box, probe, made)
        config_error(box)
        newer_state(box)
        set_config(box, CONFIG_TWO_CPUS)
        start(box)
        probe("data_intact", **made)
        timings["unit"] = time.monotonic() - started
        remove_and_purge(box)
    finally:
        probe.close()


def remove_and_purge(box: Container) -> None:
    """`apt remove`: the service stopped, the program gone, config and data byte for byte;
    `apt purge`: the config folder gone too, the data still byte for byte."""
    config = box.run("sha256sum", "/etc/contentnode/contentnode.toml").stdout
    box.run("apt-get", "remove", "-y", "-q", "contentnode", env=APT)
    assert unit_state(box)["ActiveState"] == "inactive", unit_state(box)
    data = data_sums(box)
    assert box.run("test", "-e", "/usr/bin/contentnode", check=False).returncode == 1
    assert box.run("test", "-e", "/opt/contentnode", check=False).returncode == 1
    assert box.run("sha256sum", "/etc/contentnode/contentnode.toml").stdout == config
    box.run("apt-get", "purge", "-y", "-q", "contentnode", env=APT)
    assert box.run("test", "-e", "/etc/contentnode", check=False).returncode == 1
    assert data_sums(box) == data and "state.json" in data, "purge touched the data"
    log(f"apt remove: program gone, config and {len(data.splitlines())} data files kept; "
        "apt purge: /etc/contentnode gone, data kept")


def drop_in(box: Container, text: str | None) -> None:
    """The unit's one drop-in (None: removed), then daemon-reload."""
    folder = "/etc/systemd/system/contentnode.service.d"
    if text is None:
        box.run("rm", "-rf", folder)
    else:
        box.run("mkdir", "-p", folder)
        box.run("tee", f"{folder}/boot-check.conf", input_text="[Service]\n" + text)
    box.run("systemctl", "daemon-reload")


ACCESS_LOG = "/var/log/contentnode/access.log"
# What README's "Installing for real" tells an operator: as root, with Debian's umask 022, files
# into <folder root>/<site>/, world-readable (the service's dynamic user is nobody's owner).
SITES = {"site.boot.test": ("/var/lib/contentnode/sites/site", "index.html", "from the default folder root\n"),
         "srv.boot.test": ("/srv/sites/srv", "hello.txt", "from a folder root in /srv\n")}
CONFIG_FOLDER_ROOTS = 'folder_roots = ["/var/lib/contentnode/sites", "/srv/sites"]\n'


def access_log_file(box: Container, probe: Probe) -> None:
    """access_log set in the config file to the unit's LogsDirectory; moved away and SIGHUP'd
    as logrotate does, the next line goes to a new file."""
    set_config(box, CONFIG_TWO_CPUS + f'access_log = "{ACCESS_LOG}"\n')
    start(box)
    probe("access_line", marker="before-rotation", file=ACCESS_LOG)
    uid = unit_state_uid(box)
    found = box.sh(f"readlink /var/log/contentnode; stat -c '%a %u' /var/log/private/contentnode {ACCESS_LOG}")
    assert found.stdout.split("\n")[:3] == ["private/contentnode", f"750 {uid}", f"600 {uid}"], found.stdout
    box.run("mv", ACCESS_LOG, ACCESS_LOG + ".1")
    box.run("systemctl", "kill", "-s", "HUP", "contentnode")
    deadline = time.monotonic() + 10
    while box.run("test", "-e", ACCESS_LOG, check=False).returncode and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)   # every process (the daemon and both workers) reopens on its own SIGHUP
    probe("access_line", marker="after-rotation", file=ACCESS_LOG, not_in=ACCESS_LOG + ".1")
    assert "path=/before-rotation " not in box.run("cat", ACCESS_LOG).stdout
    log(f"access log: {ACCESS_LOG} (-> /var/log/private/contentnode, 0750), reopened on SIGHUP after a move")


def unit_state_uid(box: Container) -> str:
    """The dynamic user's uid the running daemon has."""
    pid = unit_state(box)["MainPID"]
    return box.sh(f"awk '/^Uid:/ {{print $2}}' /proc/{pid}/status").stdout.strip()


def folder_buckets(box: Container, probe: Probe) -> None:
    """Folder buckets under the unit: the default root (/var/lib/contentnode/sites, really
    /var/lib/private/contentnode/sites) and /srv/sites through folder_roots (read-only to the
    service under ProtectSystem=strict, which is all it needs)."""
    set_config(box, CONFIG_TWO_CPUS + CONFIG_FOLDER_ROOTS)
    start(box)
    for folder, name, text in SITES.values():
        box.sh(f"umask 022 && mkdir -p {folder} && printf '%s' '{text}' > {folder}/{name}")
    probe("folders", sites=SITES)
    set_config(box, CONFIG_TWO_CPUS)


def acme(box: Container, probe: Probe) -> None:
    """ACME against pebble inside: the daemon trusts pebble's listener and resolves through its DNS."""
    peer = probe("acme_prepare")
    drop_in(box, f"Environment=SSL_CERT_FILE={peer['ca_file']} CONTENTNODE_DNS_RESOLVER={peer['dns']}\n")
    start(box)
    probe("acme_issue")
    drop_in(box, None)


def denied_call(box: Container, probe: Probe, made: dict) -> None:
    """The filter denies sched_setaffinity (a drop-in): logged once per process, node serves."""
    drop_in(box, "SystemCallFilter=~sched_setaffinity\n")
    since = box.run("date", "+%s").stdout.strip()
    state = start(box)
    probe("exercise", **made)
    line = "the OS refused sched_setaffinity (EPERM)"
    text = journal_shows(box, lambda text: text.count(line) >= 2, since)
    refused = text.count(line)
    assert refused == 2, f"expected one line per public worker (2), got {refused}:\n{text[-3000:]}"
    assert unit_state(box)["MainPID"] == state["MainPID"], "the daemon restarted under the denied call"
    drop_in(box, None)
    log("denied sched_setaffinity: one warning line per public worker, the node served on")


def config_error(box: Container) -> None:
    """Exit 2 is a configuration error: systemd must not restart it."""
    set_config(box, CONFIG_TWO_CPUS + "admin_port = 99999\n")
    before = unit_state(box)
    box.run("systemctl", "restart", "contentnode", check=False)
    state = wait_for(box, "config error", lambda s: s.get("ActiveState") == "failed")
    time.sleep(3)   # longer than RestartSec: a restart would have happened by now
    state = unit_state(box)
    assert state["ActiveState"] == "failed" and state["ExecMainStatus"] == "2", state
    assert state["NRestarts"] == "0" or state["NRestarts"] == before["NRestarts"], state
    assert "admin_port" in journal_shows(box, lambda text: "admin_port" in text[-2000:])[-2000:]
    log("configuration error: exit 2, not restarted")


def newer_state(box: Container) -> None:
    """A state file from a newer schema is refused (exit 2) and left byte for byte."""
    set_config(box, CONFIG_TWO_CPUS)
    path = "/var/lib/private/contentnode/state.json"
    box.run("python3", "-c", f"""
import json
with open({path!r}) as f: state = json.load(f)
state["schema"] += 1
with open({path!r}, "w") as f: json.dump(state, f)
""")
    before = box.run("sha256sum", path).stdout
    box.run("systemctl", "restart", "contentnode", check=False)
    state = wait_for(box, "newer state", lambda s: s.get("ActiveState") == "failed")
    assert state["ExecMainStatus"] == "2", state
    assert box.run("sha256sum", path).stdout == before, "the newer state file was rewritten"
    text = journal_shows(box, lambda text: "written by a newer contentnode" in text[-2000:])[-2000:]
    assert "written by a newer contentnode" in text, text
    box.run("python3", "-c", f"""
import json
with open({path!r}) as f: state = json.load(f)
state["schema"] -= 1
with open({path!r}, "w") as f: json.dump(state, f)
""")
    box.run("systemctl", "reset-failed", "contentnode")
    log("state from a newer version: exit 2, file unchanged")


def one_cpu(box: Container, packages: dict, timings: dict) -> None:
    prepare(box)
    started = time.monotonic()
    upgrade_running(box, packages, timings)
    start(box)
    probe = Probe(box)
    try:
        probe("origin")
        made = probe("make_data")
        probe("exercise", **made)
    finally:
        probe.close()
    text = journal_shows(box, lambda text: "public port on" in text)
    assert "public port on" in text and "the OS refused" not in text, text[-3000:]
    pid = unit_state(box)["MainPID"]
    cpus = box.sh(f"awk '/^Cpus_allowed_list:/ {{print $2}}' /proc/{pid}/status").stdout.strip()
    assert cpus == "0", f"the daemon may run on CPUs {cpus}, not on CPU 0 alone"
    log(f"one CPU: the daemon runs on CPU {cpus}")
    timings["one_cpu"] = time.monotonic() - started


def upgrade_running(box: Container, packages: dict, timings: dict) -> None:
    """The new package over the old one while the service runs: postinst restarts it on the
    new program (a new main process whose start-up line names the new version)."""
    install(box, packages["old"], timings)
    shipped = box.run("cat", "/etc/contentnode/contentnode.toml").stdout
    set_config(box, shipped + 'public_cpu_affinity = "off"\n')   # the old unit's filter kills pinning workers
    before = start(box)
    since = box.run("date", "+%s").stdout.strip()
    new = install(box, packages["new"], timings)
    after = wait_for(box, "restart by the upgrade", lambda s: s.get("SubState") == "running"
                     and s.get("MainPID") not in ("0", before["MainPID"]))
    text = journal_shows(box, lambda text: f"{new}, data dir" in text, since)
    assert f"{new}, data dir" in text, f"no start-up line of {new} after the upgrade:\n{text[-3000:]}"
    set_config(box, shipped)   # the example configuration as the package ships it, from here on
    log(f"upgrade of a running service: restarted on {new} (main PID {before['MainPID']} -> {after['MainPID']})")


@contextlib.contextmanager
def booted(root: str, wheels: str, packages: dict, cpus: str | None):
    """The root booted with the packages in DEBS and the probe's sources (this checkout's tests/)."""
    with tempfile.TemporaryDirectory(prefix="boot-check-") as work:
        checkout_copy(os.path.join(work, "src-new"), None)
        debs = os.path.join(work, "debs")
        os.makedirs(debs)
        os.chmod(work, 0o755)   # apt's own user (_apt) reads the packages through the bind
        for path in packages.values():
            shutil.copy(path, debs)
        binds = {wheels: "/wheelhouse", weed_path(): "/usr/local/bin/weed", PEBBLE: PEBBLE, CHALLTESTSRV: CHALLTESTSRV,
                 os.path.join(work, "src-new"): "/root/src-new", debs: DEBS}
        box = Container(root, work, binds, cpus)
        try:
            yield box
        except BaseException:
            print(f"--- journal inside:\n{journal(box)[-4000:]}", file=sys.stderr)
            raise
        finally:
            box.close()


def main() -> int:
    if os.geteuid() != 0:
        print("boot-check boots a container: run it as root", file=sys.stderr)
        return 1
    missing = missing_debian(DEBIAN_BOOT | DEBIAN_PEERS)
    if missing:
        print(f"boot-check needs Debian packages: apt-get install -y {' '.join(missing)}", file=sys.stderr)
        return 1
    if len(os.sched_getaffinity(0)) < 2:
        print("boot-check runs the unit on two CPUs and on one: this machine gives it one", file=sys.stderr)
        return 1
    if not os.access(weed_path(), os.X_OK):
        print(f"boot-check needs {weed_path()} (make peers installs it)", file=sys.stderr)
        return 1
    started = time.monotonic()
    root = built_once("root", f"{SUITE} {PACKAGES}", build_root)
    wheels = built_once("wheels", " ".join(PROBE_WHEELS), build_wheelhouse)
    previous = built_once("previous-package", packaging_key(), build_previous_package)
    packages = {"new": this_package("amd64"), "old": os.path.join(previous, os.listdir(previous)[0])}
    arm64_package = this_package("arm64")
    timings: dict = {"prepare": time.monotonic() - started}
    arm64(arm64_package, timings)
    with booted(root, wheels, packages, None) as box:
        two_cpus(box, {k: os.path.basename(v) for k, v in packages.items()}, timings)
    with booted(root, wheels, packages, "0") as box:
        one_cpu(box, {k: os.path.basename(v) for k, v in packages.items()}, timings)
    timings["total"] = time.monotonic() - started
    sizes = ", ".join(f"{os.path.basename(p)} {os.path.getsize(p) / 1e6:.1f} MB"
                      for p in (packages["new"], arm64_package))
    log(f"packages: {sizes}; apt install inside: {timings.pop('apt_install')} s")
    log("passed: " + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

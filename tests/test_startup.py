"""Command line, configuration precedence and errors, data dir safety, corrupt state."""

import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import sys
import time

import pytest

from contentnode import __version__
from tests.node import ROOT, Node


@pytest.fixture(scope="module")
def untouched_node(tmp_path_factory):
    """A started daemon no test changes (setup still open), for the tests that only look at one."""
    node = Node(str(tmp_path_factory.mktemp("untouched"))).start()
    yield node
    node.close()


def run_cli(*args, env=None, cwd=None, timeout=20):
    full_env = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([sys.executable, "-m", "contentnode", *args], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout)


def test_version():
    result = run_cli("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"contentnode {__version__}"


def test_bad_flag_value_names_value_and_source(tmp_path):
    result = run_cli("serve", "--data-dir", str(tmp_path), "--admin-port", "ninety")
    assert result.returncode == 2
    assert "admin_port = 'ninety' (flag --admin-port): not a whole number" in result.stderr


def test_bad_env_value_names_env(tmp_path):
    result = run_cli("serve", "--data-dir", str(tmp_path), env={"CONTENTNODE_PUBLIC_PORT": "70000"})
    assert result.returncode == 2
    assert "public_port = '70000' (environment CONTENTNODE_PUBLIC_PORT)" in result.stderr


def test_bad_config_file_values(tmp_path):
    config = tmp_path / "c.toml"
    config.write_text('admin_bind = "not-an-address"\n')
    result = run_cli("serve", "--config", str(config), "--data-dir", str(tmp_path))
    assert result.returncode == 2 and f"config file {config}" in result.stderr and "admin_bind" in result.stderr
    config.write_text('unknown_key = 1\n')
    result = run_cli("serve", "--config", str(config))
    assert result.returncode == 2 and "unknown key 'unknown_key'" in result.stderr
    config.write_text('admin_port = [\n')
    result = run_cli("serve", "--config", str(config))
    assert result.returncode == 2 and "not valid TOML" in result.stderr
    config.write_bytes(b'admin_port = "\xff"\n')
    result = run_cli("serve", "--config", str(config))
    assert result.returncode == 2 and "not valid TOML" in result.stderr and "Traceback" not in result.stderr


def test_precedence_file_env_flag(tmp_path):
    from contentnode import config as cfg
    config = tmp_path / "c.toml"
    config.write_text("admin_port = 1111\npublic_port = 2222\nidle_timeout = 5\n")
    loaded = cfg.load(str(config), {"public_port": "4444"}, environ={"CONTENTNODE_ADMIN_PORT": "3333"})
    assert (loaded.admin_port, loaded.public_port, loaded.idle_timeout) == (3333, 4444, 5.0)
    assert loaded.sources["admin_port"] == "environment CONTENTNODE_ADMIN_PORT"
    assert loaded.sources["idle_timeout"] == f"config file {config}"
    assert loaded.sources["max_connections"] == "default"


def test_data_dir_and_files_are_private(untouched_node):
    assert stat.S_IMODE(os.stat(untouched_node.data_dir).st_mode) == 0o700
    for name in ("state.json", "sessions.json"):
        path = os.path.join(untouched_node.data_dir, name)
        if os.path.exists(path):
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, name


def test_corrupt_state_stops_daemon_and_keeps_file(tmp_path):
    first = Node(str(tmp_path)).start()
    first.stop()
    path = os.path.join(first.data_dir, "state.json")
    with open(path, "r+b") as f:
        f.seek(0, 2)
        f.write(b"{garbage")
    with open(path, "rb") as f:
        damaged = f.read()
    result = run_cli("serve", "--data-dir", first.data_dir, "--admin-port", "0", "--public-port", "0")
    assert result.returncode == 1
    assert "is corrupt" in result.stderr and path in result.stderr
    with open(path, "rb") as f:
        assert f.read() == damaged  # never silently reset


def test_newer_schema_refused_as_a_configuration_error(tmp_path):
    """Exit 2, which the unit does not restart (RestartPreventExitStatus=2), and the file
    left byte for byte: a downgrade must never rewrite what a newer version wrote."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    written = json.dumps({"schema": 999, "users": {"later": {"format": "of a newer version"}}}).encode()
    (data / "state.json").write_bytes(written)
    result = run_cli("serve", "--data-dir", str(data), "--admin-port", "0", "--public-port", "0")
    assert result.returncode == 2, result.stderr
    assert "written by a newer contentnode" in result.stderr and "install that version" in result.stderr
    assert (data / "state.json").read_bytes() == written


def test_second_daemon_on_same_data_dir_refused(untouched_node):
    result = run_cli("serve", "--data-dir", untouched_node.data_dir, "--admin-port", "0", "--public-port", "0")
    assert result.returncode == 1 and "in use by another contentnode process" in result.stderr


def test_default_data_dir_is_contentnode_data_in_current_folder(tmp_path):
    """An empty folder of the default name (as systemd's StateDirectory or a mkdir leaves it) is taken."""
    (tmp_path / "contentnode-data").mkdir(mode=0o755)
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-m", "contentnode", "serve", "--admin-port", "0", "--public-port", "0",
                             "--public-bind", "127.0.0.1"], cwd=str(tmp_path), stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=ROOT, CONTENTNODE_READY_FILE=str(ready)))
    try:
        deadline = time.monotonic() + 20
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "contentnode-data" / "state.json").exists()
        assert stat.S_IMODE(os.stat(tmp_path / "contentnode-data").st_mode) == 0o700
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    text = err.decode()
    assert "setup required" in text and str(tmp_path / "contentnode-data") in text and "stopped" in text


# --- safe defaults and messages (issue 10 item 6) ------------------------------

def _serve(*args, env=None, cwd=None, prefix=()):
    """One `serve` run expected to stop by itself; admin and public on loopback, port 0 unless given."""
    defaults = {"--admin-port": "0", "--public-port": "0", "--public-bind": "127.0.0.1"}
    for flag, value in defaults.items():
        if flag not in args:
            args += (flag, value)
    full_env = dict(os.environ, PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([*prefix, sys.executable, "-m", "contentnode", "serve", *args], capture_output=True,
                          text=True, env=full_env, cwd=cwd, timeout=30)


def _snapshot(folder):
    return (stat.S_IMODE(os.stat(folder).st_mode),
            {p.name: p.read_bytes() for p in folder.iterdir()})


def test_unrelated_folder_of_the_default_name_is_never_taken_over(tmp_path):
    """Run from a folder that already holds someone's `contentnode-data`: exit 2, nothing touched."""
    theirs = tmp_path / "contentnode-data"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("not the node's")
    os.chmod(theirs, 0o755)
    before = _snapshot(theirs)
    result = _serve(cwd=str(tmp_path))
    assert result.returncode == 2, result.stderr
    assert str(theirs) in result.stderr and "refusing to take it over" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert _snapshot(theirs) == before  # mode 0755 and the one file, no state.json, no lock


def test_data_dir_below_a_regular_file_is_refused(tmp_path):
    blocker = tmp_path / "plain-file"
    blocker.write_text("x")
    os.chmod(blocker, 0o644)
    result = _serve("--data-dir", str(blocker / "data"))
    assert result.returncode == 2
    assert f"{blocker} is a file, not a folder" in result.stderr and "Traceback" not in result.stderr
    assert stat.S_IMODE(os.stat(blocker).st_mode) == 0o644 and blocker.read_text() == "x"


@pytest.mark.parametrize("env,args,message", [
    ({"CONTENTNODE_LOG_LEVEL": "loud"}, (), "log_level = 'loud' (environment CONTENTNODE_LOG_LEVEL)"),
    ({}, ("--log-level", "loud"), "argument --log-level: invalid choice: 'loud'"),
    ({"CONTENTNODE_ADMIN_BIND": "localhost"}, (), "admin_bind = 'localhost'"),
    ({"CONTENTNODE_CONFIG": "/nonexistent/contentnode.toml"}, (), "cannot read /nonexistent/contentnode.toml"),
    ({"CONTENTNODE_MAX_CONNECTIONS": "0"}, (), "max_connections = '0'"),
    ({"CONTENTNODE_DATA_DIR": ""}, (), "data_dir = '' (environment CONTENTNODE_DATA_DIR): an empty path"),
])
def test_config_errors_exit_2_with_one_line(tmp_path, env, args, message):
    """RestartPreventExitStatus=2 in the unit: a config error must not be retried, and reads as one line."""
    result = _serve("--data-dir", str(tmp_path / "data"), *args, env=env)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists()  # a config error creates nothing


@pytest.mark.parametrize("listener", ["admin", "public"])
def test_port_in_use_names_the_listener_address_and_port(tmp_path, listener):
    import socket
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        result = _serve("--data-dir", str(tmp_path / "data"), f"--{listener}-port", str(port))
    finally:
        holder.close()
    assert result.returncode == 1
    assert (f"the {listener} listener cannot bind 127.0.0.1 port {port}: the port is in use; "
            "another program holds it") in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_port_held_by_another_contentnode_says_so(untouched_node, tmp_path):
    result = _serve("--data-dir", str(tmp_path / "second"), "--admin-port", str(untouched_node.admin_port))
    assert result.returncode == 1
    assert (f"the admin listener cannot bind 127.0.0.1 port {untouched_node.admin_port}: the port is in use; "
            "another contentnode answers there") in result.stderr, result.stderr


def _without(*capabilities):
    """Run as root but without these capabilities (setpriv from util-linux), as an unprivileged user would."""
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to drop capabilities for this test"
    return (setpriv, "--bounding-set=" + ",".join("-" + c for c in capabilities))


def test_low_port_without_capability_says_what_is_missing(tmp_path):
    result = _serve("--data-dir", str(tmp_path / "data"), "--public-port", "80",
                    prefix=_without("net_bind_service"))
    assert result.returncode == 1
    assert "the public listener cannot bind 127.0.0.1 port 80: permission denied" in result.stderr, result.stderr
    assert "CAP_NET_BIND_SERVICE" in result.stderr


def test_unwritable_data_dir_names_path_owner_and_mode(tmp_path):
    """Root ignores file modes; without CAP_DAC_OVERRIDE it meets them like any user would."""
    parent = tmp_path / "owned-by-nobody"
    parent.mkdir()
    os.chmod(parent, 0o755)
    os.chown(parent, pwd.getpwnam("nobody").pw_uid, -1)
    result = _serve("--data-dir", str(parent / "data"),
                    prefix=_without("dac_override", "dac_read_search", "fowner"))
    assert result.returncode == 1
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert (f"{parent / 'data'} is not writable: {parent} belongs to nobody with mode 0755 "
            f"and contentnode runs as {me}") in result.stderr, result.stderr
    assert f"chown -R {me} {parent}" in result.stderr and "Traceback" not in result.stderr
    assert not (parent / "data").exists()


def _access_lines(text):
    return [line for line in text.splitlines() if "contentnode.access" in line]


def test_banner_at_stored_error_level_and_environment_beats_it(node, admin):
    assert admin.put("/api/settings", {"log_level": "error"}).status == 200
    node.stop()
    os.truncate(node.log_path, 0)
    node.start()
    node.client().get("/healthz")
    log = node.log()
    assert f"data dir {node.data_dir}" in log and f"admin API on http://127.0.0.1:{node.admin_port}" in log
    assert f"public port on http://127.0.0.1:{node.public_port}" in log
    assert not _access_lines(log)  # the stored level holds for everything else
    node.stop()
    os.truncate(node.log_path, 0)
    node.extra_env["CONTENTNODE_LOG_LEVEL"] = "info"
    node.start()
    node.client().get("/healthz")
    time.sleep(0.2)
    assert _access_lines(node.log()), node.log()  # environment > stored setting
    node.stop()
    os.truncate(node.log_path, 0)
    node.extra_env.pop("CONTENTNODE_LOG_LEVEL")
    node.args = ["--log-level", "info"]
    node.start()
    node.client().get("/healthz")
    time.sleep(0.2)
    assert _access_lines(node.log())  # flag > stored setting


def test_open_setup_beyond_loopback_warns(tmp_path):
    beyond = Node(str(tmp_path), args=("--admin-bind", "0.0.0.0")).start()
    try:
        assert "beyond loopback, while setup is still open" in beyond.log()
    finally:
        beyond.kill()


def test_open_setup_on_loopback_does_not_warn(untouched_node):
    assert "setup required" in untouched_node.log() and "beyond loopback" not in untouched_node.log()


def test_request_timeout_is_the_former_name_of_header_timeout(tmp_path):
    from contentnode import config as cfg
    config = tmp_path / "c.toml"
    config.write_text("request_timeout = 7\n")
    loaded = cfg.load(str(config), environ={})
    assert loaded.header_timeout == 7.0 and loaded.sources["header_timeout"] == f"config file {config}"
    both = cfg.load(str(config), environ={"CONTENTNODE_HEADER_TIMEOUT": "3"})
    assert both.header_timeout == 3.0   # the new name wins
    assert cfg.load(None, environ={}).header_timeout == 10.0


def test_a_missing_runtime_dependency_stops_the_start_with_one_line(tmp_path):
    """cryptography and pyotp are imported where they are used, not at start (docs/DEVELOPING.md,
    "Tests"); a node without one of them still refuses to start, saying which, and creates nothing."""
    data = tmp_path / "data"
    script = ("import sys; sys.modules['pyotp'] = None; from contentnode.cli import main; "
              "sys.exit(main(sys.argv[1:]))")
    result = subprocess.run([sys.executable, "-c", script, "serve", "--data-dir", str(data), "--admin-port", "0",
                             "--public-port", "0"], capture_output=True, text=True, timeout=20,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    assert result.returncode == 2, result.stderr
    assert "missing Python package pyotp" in result.stderr and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not data.exists()


def test_a_start_imports_none_of_the_late_imported_packages(tmp_path):
    """What only some paths use (keys, second factors, SMTP, S3 answers, a config file) is imported
    there, not by every start (docs/DEVELOPING.md, "Tests"): the App built, started, set up and
    stopped in a fresh interpreter leaves these packages unimported, the media-type table unbuilt
    (building it reads the system's mime.types files) and the HTTP-date patterns uncompiled; both are
    made at their first use."""
    late = ["cryptography", "pyotp", "smtplib", "xml.etree.ElementTree", "tomllib", "urllib.request",
            "concurrent.futures"]
    script = f"""
import mimetypes, sys
from contentnode.core import folders, http_cache
from tests.inprocess import InProcessNode
from tests.node import ADMIN_PASSWORD, ADMIN_USER
node = InProcessNode({str(tmp_path)!r}).start()
assert node.client().post("/api/setup", {{"username": ADMIN_USER, "password": ADMIN_PASSWORD}}).status == 201
node.close()
print(" ".join(name for name in {late!r} if name in sys.modules))
print(mimetypes.inited, http_cache._date_forms.cache_info().currsize)
assert folders.content_type("a.woff2") == "font/woff2" and mimetypes.inited
assert http_cache.http_date("Sun, 06 Nov 1994 08:49:37 GMT") == 784111777.0
assert http_cache._date_forms.cache_info().currsize == 1
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    assert result.returncode == 0, result.stderr
    unimported, made_late = result.stdout.splitlines()
    assert unimported.split() == [], unimported
    assert made_late == "False 0"


def test_a_command_line_naming_a_command_builds_only_its_parser_and_reads_the_same():
    """`contentnode serve ...` (and each offline command) adds only its own subcommand's parser: the
    start skips building the others (docs/DEVELOPING.md, "Tests"). The usage line, which error messages
    print, and each subcommand's help are what the whole command line gives."""
    from contentnode.cli import COMMANDS, build_parser

    def subcommands(parser):
        (action,) = [a for a in parser._actions if a.dest == "command"]
        return action.choices

    whole = build_parser([])
    assert list(subcommands(whole)) == list(COMMANDS)
    for name in COMMANDS:
        only = build_parser([name, "--data-dir", "x"])
        assert list(subcommands(only)) == [name]
        assert only.format_usage() == whole.format_usage()
        assert subcommands(only)[name].format_help() == subcommands(whole)[name].format_help()
    assert list(subcommands(build_parser(["--version", "serve"]))) == list(COMMANDS)
    result = run_cli("serve", "--data-dir", "x", "surplus")
    assert result.returncode == 2
    words = " ".join(result.stderr.split())   # argparse wraps the usage line at the terminal's width
    assert words.startswith("usage: contentnode [-h] [--version] {" + ",".join(COMMANDS) + "} ..."), result.stderr
    assert "unrecognized arguments: surplus" in result.stderr


def test_a_started_daemon_collects_garbage_with_its_start_frozen(tmp_path):
    """`contentnode serve` collects no garbage while it imports and builds the App; once started, what
    the start built is frozen (later collections and the one at exit skip it: docs/DEVELOPING.md,
    "Tests") and collection is on again."""
    script = ("import gc, os, sys; from contentnode import sdnotify; "
              "sdnotify.notify = lambda state: (print(gc.isenabled(), gc.get_freeze_count(), gc.get_count()[0]), "
              "sys.stdout.flush(), os._exit(0)); "
              "from contentnode.cli import main; "
              f"main(['serve', '--data-dir', {str(tmp_path / 'data')!r}, '--admin-port', '0', '--public-port', '0'])")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                            env=dict(os.environ, PYTHONPATH=ROOT, CONTENTNODE_DRAIN_SECONDS="0"))
    assert result.returncode == 0, result.stderr
    enabled, frozen, young = result.stdout.split()
    assert enabled == "True"
    assert int(frozen) > 20000, frozen   # the start's objects (about 50,000)
    assert int(young) < 1000, young       # nothing of the start left for the next collection to traverse

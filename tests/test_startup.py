"""Command line, configuration precedence and errors, data dir safety, corrupt state."""

import json
import os
import signal
import stat
import subprocess
import sys
import time

from contentnode import __version__
from tests.node import ROOT, Node


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


def test_precedence_file_env_flag(tmp_path):
    from contentnode import config as cfg
    config = tmp_path / "c.toml"
    config.write_text("admin_port = 1111\npublic_port = 2222\nidle_timeout = 5\n")
    loaded = cfg.load(str(config), {"public_port": "4444"}, environ={"CONTENTNODE_ADMIN_PORT": "3333"})
    assert (loaded.admin_port, loaded.public_port, loaded.idle_timeout) == (3333, 4444, 5.0)
    assert loaded.sources["admin_port"] == "environment CONTENTNODE_ADMIN_PORT"
    assert loaded.sources["idle_timeout"] == f"config file {config}"
    assert loaded.sources["max_connections"] == "default"


def test_data_dir_and_files_are_private(node):
    assert stat.S_IMODE(os.stat(node.data_dir).st_mode) == 0o700
    for name in ("state.json", "sessions.json"):
        path = os.path.join(node.data_dir, name)
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


def test_newer_schema_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    (data / "state.json").write_text(json.dumps({"schema": 999}))
    result = run_cli("serve", "--data-dir", str(data), "--admin-port", "0", "--public-port", "0")
    assert result.returncode == 1 and "newer contentnode" in result.stderr


def test_second_daemon_on_same_data_dir_refused(node):
    result = run_cli("serve", "--data-dir", node.data_dir, "--admin-port", "0", "--public-port", "0")
    assert result.returncode == 1 and "in use by another contentnode process" in result.stderr


def test_default_data_dir_is_var_in_current_folder(tmp_path):
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-m", "contentnode", "serve", "--admin-port", "0", "--public-port", "0",
                             "--public-bind", "127.0.0.1"], cwd=str(tmp_path), stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONPATH=ROOT, CONTENTNODE_READY_FILE=str(ready)))
    try:
        deadline = time.monotonic() + 20
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "var" / "state.json").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    text = err.decode()
    assert "setup required" in text and str(tmp_path / "var") in text and "stopped" in text

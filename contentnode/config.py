"""Start-up configuration: defaults < TOML config file < CONTENTNODE_* environment < flags.

One schema with typed values. A bad value stops start-up with a message that
names the key, the value and where it came from. Runtime settings that the
API changes (node name, ACME, cache cap...) live in the state store instead.
"""

import ipaddress
import os
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable


MAX_PUBLIC_WORKERS = 32
MAX_DRAIN_SECONDS = 300
ADMIN_MAX_CONNECTIONS = 256   # the admin listener keeps a thread per connection: max_connections caps it lower


class ConfigError(Exception):
    pass


def _port(value):
    port = _int(value)
    if not 0 <= port <= 65535:
        raise ValueError("a port is 0 to 65535")
    return port


def _int(value):
    if isinstance(value, bool):
        raise ValueError("not a whole number")
    if isinstance(value, str):
        value = value.strip()
        if not value.lstrip("-").isdigit():
            raise ValueError("not a whole number")
    if isinstance(value, float) and not value.is_integer():
        raise ValueError("not a whole number")
    return int(value)


def _at_least(low: int):
    def parse(value):
        number = _int(value)
        if number < low:
            raise ValueError(f"must be at least {low}")
        return number
    return parse


_positive_int = _at_least(1)


def _worker_count(value):
    number = _positive_int(value)
    if number > MAX_PUBLIC_WORKERS:
        raise ValueError(f"at most {MAX_PUBLIC_WORKERS}")
    return number


def _seconds_between(low: float, high: float):
    def parse(value):
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError("not a number of seconds") from None
        if not low <= number <= high:
            raise ValueError(f"must be between {low:g} and {high:g} seconds")
        return number
    return parse


_seconds = _seconds_between(0.1, 86400)


def _poll_seconds(value):
    number = _int(value)
    if not 1 <= number <= 3600:
        raise ValueError("must be a whole number of seconds from 1 to 3600")
    return number


def _address(value):
    text = str(value).strip()
    ipaddress.ip_address(text)
    return text


def _text(value):
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


def _path(value):
    text = _text(value)
    if not text.strip() or "\0" in text:
        raise ValueError("an empty path or one holding a NUL byte names no folder")
    return text


def _folder_roots(value):
    """A list of folders (TOML array), or one string of them joined by ":" (environment, flag)."""
    if isinstance(value, str):
        value = [part for part in value.split(os.pathsep) if part.strip()]
    if not isinstance(value, list):
        raise ValueError("a list of folders (in the environment or a flag: folders joined by \":\")")
    return [_path(item) for item in value]


LOG_LEVELS = ("debug", "info", "warning", "error")


def _log_level(value):
    level = str(value).strip().lower()
    if level not in LOG_LEVELS:
        raise ValueError("one of " + ", ".join(LOG_LEVELS))
    return level


CPU_AFFINITY = ("auto", "off")


def _cpu_affinity(value):
    choice = str(value).strip().lower()
    if choice not in CPU_AFFINITY:
        raise ValueError("one of " + ", ".join(CPU_AFFINITY))
    return choice


def _dns_server(value):
    text = str(value).strip()
    if text:
        host, port = (text[1:].split("]:") if text.startswith("[") else
                      text.split(":") if text.count(":") == 1 else (text, "53"))
        ipaddress.ip_address(host)
        _port(port)
    return text


def _access_log(value):
    text = _text(value).strip()
    if text in ("on", "off"):
        return text
    return os.path.abspath(_path(text))


def _optional_path(value):
    """A file path made absolute, or "" for none."""
    text = _text(value).strip()
    return os.path.abspath(_path(text)) if text else ""


_whole_or_zero = _at_least(0)
_drain_seconds = _seconds_between(0, MAX_DRAIN_SECONDS)


DEFAULT_DATA_DIR = "contentnode-data"  # a name no other program's folder is likely to have
DEFAULT_FOLDER_ROOT = "sites"          # folder_roots' default: <data dir>/sites, made at start


@dataclass(frozen=True)
class Option:
    name: str
    parse: Callable[[Any], Any]
    default: Any
    help: str
    choices: tuple | None = None  # offered by the command line's --help


OPTIONS = (
    Option("data_dir", _path, DEFAULT_DATA_DIR,
           "folder for state, keys, certificates, cache, logs; the node only takes a new, empty or own folder"),
    Option("folder_roots", _folder_roots, None, "folders that folder buckets may serve from (joined by \":\" "
           f"in the environment or a flag); default: <data dir>/{DEFAULT_FOLDER_ROOT}, made at start"),
    Option("admin_bind", _address, "127.0.0.1", "address of the admin API (keep it on loopback)"),
    Option("admin_port", _port, 9090, "port of the admin API"),
    Option("public_bind", _address, "0.0.0.0", "address of the public port"),
    Option("public_port", _port, 8080, "port of the public content, verification and ACME traffic"),
    Option("public_workers", _worker_count, 1, "processes serving the public port (see docs/API.md, "
           "Public worker processes); 1: the daemon serves it itself"),
    Option("public_cpu_affinity", _cpu_affinity, "auto", "auto: the public port's threads keep to one CPU "
           "(each worker its own), off: the scheduler moves them", CPU_AFFINITY),
    Option("max_connections", _positive_int, 16384, "open connections per public listener and process (the "
           f"admin listener: at most {ADMIN_MAX_CONNECTIONS}); when full, the longest-idle one is closed"),
    Option("max_connections_per_client", _positive_int, 64, "open connections per client address (IPv6: its "
           "/64) on a public listener (a trusted proxy is not capped); more are refused"),
    Option("max_requests_per_client", _positive_int, 8, "requests of one client address (IPv6: its /64) "
           "served at once per public listener and process; its others wait, parked, for one to end"),
    Option("max_unfinished_head_bytes", _positive_int, 32 << 20, "bytes of unfinished request heads a "
           "public listener holds per process; past it, the connections with the oldest are closed"),
    Option("public_threads", _positive_int, 128, "threads per public listener and process that serve requests "
           "(idle connections hold none)"),
    Option("header_timeout", _seconds, 10.0, "seconds a client has to send a whole request head from its first "
           "byte (and a new connection its first byte)"),
    Option("send_timeout", _seconds, 60.0, "seconds an answer (or a request body) may go without a byte moving"),
    Option("request_timeout", _seconds, 10.0, "the former name of header_timeout, which wins when both are set"),
    Option("idle_timeout", _seconds, 60.0, "seconds a keep-alive connection may stay idle"),
    Option("log_level", _log_level, "info", "least severe log line written; beats a level stored "
           "through the API", LOG_LEVELS),
    Option("access_log", _access_log, "on", "access lines: on (stderr, beside the log), off, or a file "
           "path (created 0600, reopened on SIGHUP); see docs/API.md, Logs"),
    Option("access_log_rate", _whole_or_zero, 1000, "access lines written a second per process; more are "
           "counted and reported, not written; 0: no budget"),
    Option("drain_seconds", _drain_seconds, 5.0, "on SIGTERM, seconds the node keeps serving while the "
           "public /healthz answers 503 draining, before it closes its listeners"),
    Option("hash_memory_kib", _positive_int, 19456, "argon2id memory per password hash"),
    Option("hash_time_cost", _positive_int, 2, "argon2id iterations"),
    Option("max_concurrent_hashes", _positive_int, 2, "password hashes computed at once"),
    Option("update_public_key", _text, "", "Ed25519 public key (base64) for update manifests; empty: the shipped key"),
    Option("fleet_poll_seconds", _poll_seconds, 10, "seconds between a fleet node's looks at the bucket "
           "(see docs/API.md, Fleet)"),
    Option("backup_poll_seconds", _seconds, 30.0, "seconds between the scheduled backup's looks at the clock "
           "(a run starts at most this long after its time)"),
    Option("geoip_db", _optional_path, "", "a country MMDB file (GeoLite2-Country, DB-IP lite) for the rules' "
           "access.countries, read with the geoip extra (maxminddb); empty: no country lists (docs/API.md, Edge controls)"),
    Option("traffic_save_seconds", _seconds, 3600.0, "seconds between saves of the traffic top summaries "
           "(and at a clean stop); see docs/API.md, Traffic insight"),
    Option("dns_resolver", _dns_server, "", "DNS server (ip or ip:port) for every outbound request; empty: the system resolver"),
)
_BY_NAME = {o.name: o for o in OPTIONS}


class Config:
    """Typed start-up values; `sources[name]` says where each came from."""

    def __init__(self, values: dict, sources: dict):
        self._values = values
        self.sources = sources

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def values(self) -> dict:
        """Every value by name (what a public worker process is started with)."""
        return dict(self._values)


def _apply(values, sources, name, raw, source):
    option = _BY_NAME.get(name)
    if option is None:
        raise ConfigError(f"config: unknown key {name!r} ({source})")
    try:
        values[name] = option.parse(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"config: {name} = {raw!r} ({source}): {exc}") from None
    sources[name] = source


def load(config_file: str | None = None, flags: dict | None = None, environ=None) -> Config:
    environ = os.environ if environ is None else environ
    values = {o.name: o.default for o in OPTIONS}
    sources = {o.name: "default" for o in OPTIONS}
    config_file = config_file or environ.get("CONTENTNODE_CONFIG")
    if config_file:
        import tomllib   # only a start with a config file reads TOML
        try:
            with open(config_file, "rb") as f:
                table = tomllib.load(f)
        except OSError as exc:
            raise ConfigError(f"config: cannot read {config_file}: {exc.strerror}") from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(f"config: {config_file} is not valid TOML: {exc}") from None
        for name, raw in table.items():
            _apply(values, sources, name, raw, f"config file {config_file}")
    for option in OPTIONS:
        key = "CONTENTNODE_" + option.name.upper()
        if key in environ:
            _apply(values, sources, option.name, environ[key], f"environment {key}")
    for name, raw in (flags or {}).items():
        if raw is not None:
            _apply(values, sources, name, raw, f"flag --{name.replace('_', '-')}")
    if sources["header_timeout"] == "default" and sources["request_timeout"] != "default":
        values["header_timeout"], sources["header_timeout"] = values["request_timeout"], sources["request_timeout"]
    values["data_dir"] = os.path.abspath(values["data_dir"])
    if values["folder_roots"] is None:
        values["folder_roots"] = [os.path.join(values["data_dir"], DEFAULT_FOLDER_ROOT)]
    values["folder_roots"] = [os.path.abspath(root) for root in values["folder_roots"]]
    return Config(values, sources)

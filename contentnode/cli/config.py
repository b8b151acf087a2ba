"""`contentnode config export | plan FILE | apply FILE`: the node's configuration as one TOML file.

These commands speak to a running node's admin API (`--url`, default the
local admin port; `--token` or CONTENTNODE_TOKEN, an API token with the
scopes of the sections involved): GET /api/config and POST /api/config/apply
(docs/API.md, "Configuration as code"). Secrets are never written in the
file: a secret member is a reference, {env = "NAME"} or {file = "/path"},
that this command resolves before it sends the document; a literal value
there is refused before anything is sent.
"""

import getpass
import json
import os
import sys

from contentnode.cli import toml_out
from contentnode.core import notify
from contentnode.core.buckets import BUCKET

TIMEOUT = 60


class Failed(Exception):
    """What the command prints before it exits 1; nothing was changed."""


class Client:
    """An admin API session opened with `login`, the POST /api/login body: {"token"}, or
    {"username", "password"} (a change of the policy needs a password session)."""

    def __init__(self, url: str, login: dict):
        self.url = url.rstrip("/")
        self.cookie = None
        answer, headers = self.call("POST", "/api/login", login)
        cookie = headers.get("Set-Cookie", "")
        self.cookie = cookie.split(";", 1)[0] or None

    def call(self, method: str, path: str, body=None, if_match: int | None = None):
        import urllib.error   # with urllib.request: 20 modules every other command does without
        import urllib.request
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.cookie:
            request.add_header("Cookie", self.cookie)
        if if_match is not None:
            request.add_header("If-Match", f'"{if_match}"')
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
                return json.loads(response.read() or b"null"), response.headers
        except urllib.error.HTTPError as exc:
            try:
                error = json.loads(exc.read())["error"]
                message = error["message"] + (f" (field {error['field']})" if error.get("field") else "")
            except (ValueError, KeyError, TypeError):
                message = exc.reason
            raise Failed(f"{method} {path}: {exc.code} {message}") from None
        except OSError as exc:
            raise Failed(f"cannot reach {self.url}: {exc}") from None


def _resolve(reference, where: str) -> str:
    """The value of a secret reference {env = "NAME"} or {file = "/path"}; Failed for anything else."""
    if not isinstance(reference, dict) or len(reference) != 1 or not set(reference) <= {"env", "file"}:
        raise Failed(f"{where} must be a reference, {{env = \"NAME\"}} or {{file = \"/path\"}}, never the "
                     "secret itself: secrets are not written in configuration files")
    (kind, name), = reference.items()
    if not isinstance(name, str) or not name:
        raise Failed(f"{where}: the {kind} reference must name a variable or a file")
    if kind == "env":
        if name not in os.environ:
            raise Failed(f"{where}: the environment variable {name} is not set")
        return os.environ[name]
    try:
        with open(name, encoding="utf-8") as f:
            return f.read().rstrip("\r\n")
    except OSError as exc:
        raise Failed(f"{where}: cannot read {name}: {exc.strerror}") from None


def load(path: str) -> dict:
    """The document of a TOML file with its secret references resolved."""
    import tomllib
    try:
        with open(path, "rb") as f:
            document = tomllib.load(f)
    except OSError as exc:
        raise Failed(f"cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise Failed(f"{path} is not valid TOML: {exc}") from None
    for holder, secret, where in _secrets(document):
        holder[secret] = _resolve(holder[secret], where)
    return document


def _secrets(document: dict):
    """(holder, member, "section.name.member") of each secret member a document gives: a bucket's
    (the bucket record's secret fields) and a notification channel's (notify.SECRETS)."""
    holders = [(bucket, BUCKET.secrets(), f"buckets.{name}") for name, bucket in _table(document, "buckets").items()]
    holders += [(_table(_table(document, "notifications"), part), frozenset({secret}), f"notifications.{part}")
                for part, secret in notify.SECRETS.items()]
    return [(holder, secret, f"{where}.{secret}") for holder, members, where in holders
            if isinstance(holder, dict) for secret in sorted(members & holder.keys())]


def _table(document, name: str):
    item = document.get(name) if isinstance(document, dict) else None
    return item if isinstance(item, dict) else {}


def _places(document: dict) -> dict:
    """{"domains.<host>" | "buckets.<name>" | "rules.<domain><path>" | "settings" | "notifications.<part>"
    | "policy": record} of a document."""
    out = {f"domains.{host}": record for host, record in document.get("domains", {}).items()}
    out.update({f"buckets.{name}": record for name, record in document.get("buckets", {}).items()})
    out.update({f"rules.{r['domain']}{r['path']}": r for r in document.get("rules", [])})
    out.update({f"notifications.{part}": record for part, record in document.get("notifications", {}).items()})
    out.update({name: document[name] for name in ("settings", "policy") if name in document})
    return out


def diff(old: dict, new: dict, secrets_changed=()) -> list:
    """The lines of a plan: + created, ~ changed member: old → new, - deleted; a secret the document
    gives another value than the node holds as "~ <member>: (secret changed)", neither value shown."""
    before, after = _places(old), _places(new)
    lines = [f"~ {where}: (secret changed)" for where in secrets_changed]
    for place in sorted(before.keys() | after.keys()):
        if place not in before:
            lines.append(f"+ {place} {json.dumps(after[place], ensure_ascii=False)}")
        elif place not in after:
            lines.append(f"- {place}")
        else:
            a, b = before[place], after[place]
            lines += [f"~ {place}.{name}: {json.dumps(a.get(name))} → {json.dumps(b.get(name))}"
                      for name in sorted(a.keys() | b.keys()) if a.get(name) != b.get(name)]
    return lines


def _client(config, args) -> Client:
    url = args.url or os.environ.get("CONTENTNODE_URL") or f"http://127.0.0.1:{config.admin_port}"
    if args.user:
        password = os.environ.get("CONTENTNODE_PASSWORD") or getpass.getpass(f"password of {args.user}: ")
        return Client(url, {"username": args.user, "password": password})
    token = args.token or os.environ.get("CONTENTNODE_TOKEN")
    if not token:
        raise Failed("an API token is needed: --token or CONTENTNODE_TOKEN (make one in the panel or "
                     "with POST /api/me/tokens), or --user to log in with a password")
    return Client(url, {"token": token})


def export(config, args) -> str:
    answer, _ = _client(config, args).call("GET", "/api/config")
    return f"# contentnode configuration (revision {answer['revision']}); secrets are not exported: a bucket's\n" \
           f"# secret_key and a notification channel's {', '.join(notify.SECRETS.values())} are given as\n" \
           f"# references, e.g. secret_key = {{env = \"NAME\"}} or {{file = \"/path\"}} (a <secret>_set flag alone\n" \
           "# keeps the node's; <secret>_set = false clears a channel's)\n\n" \
           + toml_out.dumps(_without_nulls(answer["document"]))


def _without_nulls(item):
    """The document as TOML can hold it: a member that is null (a rule's unset access, rate_limit or
    headers) is left out, which a later apply reads as that member's default, null."""
    if isinstance(item, dict):
        return {k: _without_nulls(v) for k, v in item.items() if v is not None}
    if isinstance(item, list):
        return [_without_nulls(v) for v in item]
    return item


def _plan(client: Client, document: dict, revision: int | None) -> tuple[int, list]:
    current, _ = client.call("GET", "/api/config")
    revision = current["revision"] if revision is None else revision
    outcome, _ = client.call("POST", "/api/config/apply", {"document": document, "dry_run": True}, revision)
    return revision, diff(current["document"], outcome["document"], outcome["secrets_changed"])


def plan(config, args) -> str:
    document = load(args.file)
    revision, lines = _plan(_client(config, args), document, None)
    summary = "no changes" if not lines else f"{len(lines)} change{'s' if len(lines) > 1 else ''}"
    return "\n".join([*lines, f"{summary} (revision {revision}); apply them with: "
                                f"contentnode config apply {args.file} --revision {revision}"])


def apply(config, args) -> str:
    document = load(args.file)
    client = _client(config, args)
    revision, lines = _plan(client, document, args.revision)
    if not lines:
        return f"no changes (revision {revision})"
    outcome, _ = client.call("POST", "/api/config/apply", {"document": document}, revision)
    return "\n".join([*lines, f"applied: the configuration is at revision {outcome['revision']}"])


def _runner(action):
    def run(config, args) -> int:
        try:
            print(action(config, args))
            return 0
        except Failed as exc:
            print(f"contentnode config: {exc}; nothing changed", file=sys.stderr)
            return 1
    return run


def add_parser(sub) -> None:
    parser = sub.add_parser("config", help="the node's configuration as a TOML file (export, plan, apply)")
    actions = parser.add_subparsers(dest="action", required=True)
    for name, action, help_text in (("export", export, "print the configuration as TOML, secrets left out"),
                                    ("plan", plan, "print what applying FILE would change"),
                                    ("apply", apply, "make the node's configuration FILE's, in one transaction")):
        p = actions.add_parser(name, help=help_text)
        if name != "export":
            p.add_argument("file", metavar="FILE")
        if name == "apply":
            p.add_argument("--revision", type=int, help="the revision plan printed: refused if the "
                                                        "configuration changed since (412)")
        p.add_argument("--url", help="the admin API (CONTENTNODE_URL; default the local admin port)")
        p.add_argument("--token", help="an API token (CONTENTNODE_TOKEN)")
        p.add_argument("--user", help="log in as this user instead, the password from CONTENTNODE_PASSWORD or "
                                      "asked (a change of the policy is refused to a token session)")
        p.add_argument("--config", help="the node's config file (for its admin port)")
        p.set_defaults(run=_runner(action))

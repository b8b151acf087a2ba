"""Configuration as code (docs/API.md, "Configuration as code"): `contentnode config export | plan |
apply` and GET /api/config, POST /api/config/apply, against nodes built in the test process (the
commands run as processes: all they do to a node is HTTP to its admin port)."""

import os
import secrets
import subprocess
import sys
import tomllib

import pytest

from contentnode.api import ROUTES
from tests.inprocess import InProcessNode
from tests.node import ADMIN_PASSWORD, ADMIN_USER, ROOT

pytestmark = pytest.mark.in_process

SECRET = "media-secret-value-0123456789"
REDIRECT = {"to": "https://example.com/new", "code": 308, "keep_path": False}
BUCKET = {"type": "s3", "endpoint": "http://127.0.0.1:9", "region": "eu-west-1", "bucket": "media",
          "access_key": "AKIDEXAMPLE", "secret_key": SECRET}
DOMAIN_EDGE = {"access": {"allow": ["198.51.100.0/24"], "deny": ["198.51.100.7/32"]},
               "error_pages": {"404": "errors/404.html", "5xx": "errors/5xx.html"}}
SITE = {"type": "http", "url": "http://127.0.0.1:9/site", "host_header": "client", "read_timeout": 7}


ALL_SCOPES = ("domains:write", "buckets:write", "routes:write", "settings:write", "notifications:manage", "users:manage")


def _token(client, scopes=ALL_SCOPES) -> str:
    made = client.post("/api/me/tokens", {"name": f"config-{secrets.token_hex(4)}", "scopes": list(scopes), "password": ADMIN_PASSWORD})
    assert made.status == 201, made.body
    return made.json["secret"]


def _cli(node, token, *args, env=None):
    """`contentnode config ARGS` against the node, logged in with the API token, or with the admin's
    password when token is None."""
    login = ["--token", token] if token is not None else ["--user", ADMIN_USER]
    env = dict(env or {}, **({"CONTENTNODE_PASSWORD": ADMIN_PASSWORD} if token is None else {}))
    return subprocess.run([sys.executable, "-m", "contentnode", "config", *args, "--url",
                           f"http://127.0.0.1:{node.admin_port}", *login],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})))


def _populate(admin) -> None:
    assert admin.post("/api/domains", {"host": "example.com"}).status == 201
    assert admin.post("/api/domains", {"host": "old.example.com"}).status == 201
    assert admin.post("/api/domains/redirect", {"host": "old.example.com", **REDIRECT}).status == 200
    assert admin.put("/api/domains/example.com", DOMAIN_EDGE).status == 200
    media = admin.post("/api/buckets", dict(BUCKET, name="Media")).json["id"]
    site = admin.post("/api/buckets", dict(SITE, name="site")).json["id"]
    for body in ({"domain": "example.com", "path": "/static", "bucket": media, "prefix": "s/", "cache_ttl": 60,
                  "signed": True, "query": {"only": ["v", "w"]}},
                 {"domain": "example.com", "path": "/", "bucket": site, "enabled": False}):
        assert admin.post("/api/rules", body).status == 201


def _answers(client) -> dict:
    """What the API answers of domains, buckets and rules, ids, times and revisions aside."""
    drop = {"id", "created_at", "updated_at", "revision"}
    names = {b["id"]: b["name"] for b in client.get("/api/buckets").json["buckets"]}
    clean = lambda record: {k: v for k, v in record.items() if k not in drop}  # noqa: E731
    return {"domains": [clean(d) for d in client.get("/api/domains").json["domains"]],
            "buckets": [clean(b) for b in client.get("/api/buckets").json["buckets"]],
            "rules": [dict(clean(r), bucket=names[r["bucket"]]) for r in client.get("/api/rules").json["rules"]]}


def _revision(client) -> int:
    return client.get("/api/config").json["revision"]


def _second(tmp_path, name):
    os.makedirs(tmp_path / name)
    node = InProcessNode(str(tmp_path / name)).start()
    client = node.client()
    assert client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
    return node, client


def test_export_apply_to_a_fresh_node_then_plan_is_empty(node, admin, tmp_path):
    _populate(admin)
    exported = _cli(node, _token(admin), "export")
    assert exported.returncode == 0, exported.stderr
    assert SECRET not in exported.stdout and "secret_key_set = true" in exported.stdout
    document = tomllib.loads(exported.stdout)
    assert document["domains"]["old.example.com"]["redirect"] == REDIRECT
    assert document["domains"]["example.com"]["error_pages"] == DOMAIN_EDGE["error_pages"]
    assert "access" not in document["domains"]["old.example.com"]
    assert document["rules"][1]["query"] == {"only": ["v", "w"]} and document["rules"][1]["bucket"] == "Media"
    path = tmp_path / "node.toml"
    path.write_text(exported.stdout.replace("secret_key_set = true", 'secret_key = {env = "MEDIA_SECRET"}'))

    fresh, client = _second(tmp_path, "fresh")
    try:
        token = _token(client)
        planned = _cli(fresh, token, "plan", str(path), env={"MEDIA_SECRET": SECRET})
        assert planned.returncode == 0, planned.stderr
        assert "+ domains.old.example.com" in planned.stdout and "+ rules.example.com/static" in planned.stdout
        assert _answers(client)["domains"] == []   # a plan changes nothing
        applied = _cli(fresh, token, "apply", str(path), env={"MEDIA_SECRET": SECRET})
        assert applied.returncode == 0, applied.stderr
        assert _answers(client) == _answers(admin)
        media = [b for b in client.get("/api/buckets").json["buckets"] if b["name"] == "Media"][0]
        assert media["secret_key_set"] is True and SECRET not in str(client.get("/api/config").json)

        revision = _revision(client)
        again = _cli(fresh, token, "plan", str(path), env={"MEDIA_SECRET": SECRET})
        assert again.returncode == 0 and again.stdout.startswith("no changes"), again.stdout
        second = _cli(fresh, token, "apply", str(path), env={"MEDIA_SECRET": SECRET})
        assert second.returncode == 0 and second.stdout.startswith("no changes"), second.stdout
        same = client.post("/api/config/apply", {"document": tomllib.loads(path.read_text().replace(
            '{env = "MEDIA_SECRET"}', f'"{SECRET}"'))}, headers={"If-Match": f'"{revision}"'})
        assert same.status == 200 and same.json["changes"]["rules"] == {"created": 0, "changed": 0, "deleted": 0}
        assert _revision(client) == revision   # a second apply of the same document moves nothing
    finally:
        fresh.close()


def test_an_edit_between_plan_and_apply_is_refused_and_nothing_applied(node, admin, tmp_path):
    _populate(admin)
    token = _token(admin)
    path = tmp_path / "node.toml"
    path.write_text(_cli(node, token, "export").stdout.replace('region = "eu-west-1"', 'region = "us-east-1"')
                    .replace("[domains.\"example.com\"]", "[domains.\"example.com\"]\n\n[domains.\"new.example\"]"))
    planned = _cli(node, token, "plan", str(path))
    assert planned.returncode == 0, planned.stderr
    assert '~ buckets.Media.region: "eu-west-1" → "us-east-1"' in planned.stdout
    assert "+ domains.new.example" in planned.stdout
    revision = _revision(admin)
    assert f"--revision {revision}" in planned.stdout
    before = _answers(admin)
    assert admin.post("/api/domains", {"host": "between.example"}).status == 201   # the concurrent edit
    applied = _cli(node, token, "apply", str(path), "--revision", str(revision))
    assert applied.returncode == 1 and "412" in applied.stderr and "nothing changed" in applied.stderr
    after = _answers(admin)
    assert [d["host"] for d in after["domains"]] == ["between.example", "example.com", "old.example.com"]
    assert after["buckets"] == before["buckets"]   # nothing of the document half-applied
    stale = admin.post("/api/config/apply", {"document": {"domains": {}}}, headers={"If-Match": f'"{revision}"'})
    assert stale.status == 412 and stale.headers["etag"] == f'"{_revision(admin)}"'


def test_a_domains_access_and_error_pages_follow_the_document(admin):
    _populate(admin)
    document = admin.get("/api/config").json["document"]
    assert document["domains"]["example.com"]["access"]["deny"] == ["198.51.100.7/32"]
    bad = dict(document, domains=dict(document["domains"], **{"example.com": {"error_pages": {"200": "x.html"}}}))
    refused = admin.post("/api/config/apply", {"document": bad},
                         headers={"If-Match": f'"{_revision(admin)}"'})
    assert refused.status == 400 and refused.json["error"]["field"].startswith("domains.example.com.error_pages")
    assert admin.get("/api/domains/example.com").json["error_pages"] == DOMAIN_EDGE["error_pages"]
    document["domains"]["example.com"] = {"error_pages": {"404": "errors/gone.html"}}   # access left out
    applied = admin.post("/api/config/apply", {"document": document},
                         headers={"If-Match": f'"{_revision(admin)}"'})
    assert applied.status == 200, applied.body
    domain = admin.get("/api/domains/example.com").json
    assert domain["access"] is None and domain["error_pages"] == {"404": "errors/gone.html"}


def test_a_check_outcome_moves_no_config_revision_but_a_delete_does(admin):
    _populate(admin)
    revision = _revision(admin)
    rule = admin.get("/api/rules").json["rules"][0]
    admin.post("/api/buckets/check", {"id": rule["bucket"]})   # writes last_check, not the document
    assert _revision(admin) == revision
    assert admin.delete(f"/api/rules/{rule['id']}").status == 204
    assert _revision(admin) > revision


def test_a_literal_secret_is_refused_by_the_cli(node, admin, tmp_path):
    path = tmp_path / "node.toml"
    path.write_text('[buckets.media]\ntype = "s3"\nendpoint = "http://127.0.0.1:9"\nregion = "r"\n'
                    f'bucket = "media"\naccess_key = "AK"\nsecret_key = "{SECRET}"\n')
    result = _cli(node, _token(admin), "apply", str(path))
    assert result.returncode == 1
    assert "buckets.media.secret_key must be a reference" in result.stderr and SECRET not in result.stderr
    assert admin.get("/api/buckets").json["buckets"] == []
    missing = _cli(node, _token(admin), "plan", str(path).replace("node.toml", "none.toml"))
    assert missing.returncode == 1 and "cannot read" in missing.stderr


def test_a_bad_record_changes_nothing(admin):
    document = {"domains": {"example.com": {}},
                "buckets": {"media": dict(BUCKET, endpoint="ftp://x")}}
    refused = admin.post("/api/config/apply", {"document": document}, headers={"If-Match": "*"})
    assert refused.status == 400 and refused.json["error"]["field"] == "buckets.media.endpoint"
    assert admin.get("/api/domains").json["domains"] == []
    unknown = admin.post("/api/config/apply", {"document": {"rules": [{"domain": "example.com", "path": "/",
                                                                        "bucket": "nope"}]}})
    assert unknown.status == 400 and unknown.json["error"]["field"] == "rules[0].domain"
    dry = admin.post("/api/config/apply", {"document": document | {"buckets": {"media": BUCKET}}, "dry_run": True})
    assert dry.status == 200 and list(dry.json["document"]["domains"]) == ["example.com"]
    assert dry.json["document"]["buckets"]["media"]["secret_key_set"] is True
    assert admin.get("/api/domains").json["domains"] == []   # a dry run changes nothing


def test_a_bucket_left_without_a_secret_keeps_the_nodes(admin):
    _populate(admin)
    document = admin.get("/api/config").json["document"]
    document["buckets"]["Media"]["region"] = "us-east-1"   # still "secret_key_set": true, no secret_key
    changed = admin.post("/api/config/apply", {"document": document})
    assert changed.status == 200 and changed.json["changes"]["buckets"]["changed"] == 1
    media = [b for b in admin.get("/api/buckets").json["buckets"] if b["name"] == "Media"][0]
    assert media["region"] == "us-east-1" and media["secret_key_set"] is True
    check = admin.post("/api/buckets/test", {"id": media["id"], "key": "k"})
    assert check.status == 200   # the stored secret still signs (the endpoint itself is closed)


def test_each_section_needs_its_scope(node, admin):
    from tests.test_tokens import _token_client
    _populate(admin)
    reader, _ = _token_client(node, _token(admin, scopes=("domains:write", "buckets:read")))
    assert reader.get("/api/config").error_code == "forbidden"   # routes:read missing
    writer, _ = _token_client(node, _token(admin, scopes=("domains:write", "buckets:read", "routes:read")))
    assert writer.get("/api/config").error_code == "forbidden"   # the settings, notifications, policy scopes
    document = admin.get("/api/config").json["document"]
    refused = writer.post("/api/config/apply", {"document": document})
    assert refused.status == 403 and "buckets:write, routes:write" in refused.json["error"]["message"]
    only = writer.post("/api/config/apply", {"document": {"domains": {**document["domains"], "x.example": {}}}})
    assert only.status == 200 and only.json["changes"]["domains"]["created"] == 1


def test_a_fleet_replica_refuses_apply_as_every_shared_write():
    route = next(r for r in ROUTES if (r.method, r.pattern) == ("POST", "/api/config/apply"))
    assert route.fleet_shared and route.if_match


# The secret of each channel, and how the file gives it: every kind of reference appears.
CHANNEL_SECRETS = {"email.password": "smtp-password-0123456789",
                   "telegram.bot_token": "123456:ABCDEFGHIJKLMNOPQRSTUVWXyz",
                   "webhook.secret": "webhook-secret-0123456789abcdef",
                   "ntfy.token": "tk_ntfy-token-0123456789"}
CHANNELS = {
    "email": {"enabled": True, "host": "127.0.0.1", "port": 2525, "security": "none", "username": "mailer",
              "password": CHANNEL_SECRETS["email.password"], "from": "node@example.com", "to": ["ops@example.com"]},
    "telegram": {"enabled": True, "bot_token": CHANNEL_SECRETS["telegram.bot_token"], "chat_id": "-100123",
                 "api_url": "http://127.0.0.1:9/tg"},
    "webhook": {"enabled": True, "url": "http://127.0.0.1:9/hook", "secret": CHANNEL_SECRETS["webhook.secret"]},
    "ntfy": {"enabled": False, "server": "https://ntfy.example.com", "topic": "alerts",
             "token": CHANNEL_SECRETS["ntfy.token"]},
    "events": {"backup_failed": False, "user_created": False},
}
SETTINGS = {"node_name": "edge-a", "link_grace_seconds": 600, "trusted_proxies": ["10.0.0.0/8"],
            "log_level": "warning", "public_url": "https://cdn.example.com"}
POLICY = {"password_min_length": 14, "lockout_threshold": 7, "session_idle_timeout": 1800, "passkeys": "off"}


def _populate_whole(admin) -> None:
    assert admin.put("/api/settings", SETTINGS).status == 200
    changed = admin.put("/api/notifications", CHANNELS)
    assert changed.status == 200, changed.body
    assert admin.put("/api/policy", POLICY).status == 200


def _whole_answers(client) -> dict:
    """What GET /api/settings, /api/notifications and /api/policy answer, revisions aside."""
    out = {}
    for name in ("settings", "notifications", "policy"):
        answer = client.get(f"/api/{name}")
        assert answer.status == 200, answer.body
        out[name] = {k: v for k, v in answer.json.items() if k != "revision"}
    return out


def _with_references(exported: str, tmp_path) -> str:
    """The exported file with each channel's secret given as a reference: email's and webhook's from the
    environment, telegram's and ntfy's from files."""
    (tmp_path / "bot_token").write_text(CHANNEL_SECRETS["telegram.bot_token"] + "\n")
    (tmp_path / "ntfy_token").write_text(CHANNEL_SECRETS["ntfy.token"])
    for flag, reference in (("password_set = true", 'password = {env = "SMTP_PASSWORD"}'),
                            ("bot_token_set = true", f'bot_token = {{file = "{tmp_path / "bot_token"}"}}'),
                            ("secret_set = true", 'secret = {env = "WEBHOOK_SECRET"}'),
                            ("token_set = true", f'token = {{file = "{tmp_path / "ntfy_token"}"}}'),
                            ("secret_key_set = true", 'secret_key = {env = "MEDIA_SECRET"}')):
        assert exported.count(f"\n{flag}\n") == 1, flag
        exported = exported.replace(f"\n{flag}\n", f"\n{reference}\n")
    return exported


SECRET_ENV = {"SMTP_PASSWORD": CHANNEL_SECRETS["email.password"], "WEBHOOK_SECRET": CHANNEL_SECRETS["webhook.secret"],
              "MEDIA_SECRET": SECRET}


def test_settings_channels_and_policy_travel_to_a_fresh_node(node, admin, tmp_path):
    _populate(admin)
    _populate_whole(admin)
    exported = _cli(node, _token(admin), "export")
    assert exported.returncode == 0, exported.stderr
    for value in [SECRET, *CHANNEL_SECRETS.values()]:
        assert value not in exported.stdout   # no secret value anywhere in an export
    document = tomllib.loads(exported.stdout)
    assert document["settings"]["node_name"] == "edge-a" and document["policy"]["password_min_length"] == 14
    assert document["notifications"]["email"]["password_set"] is True
    assert document["notifications"]["events"]["backup_failed"] is False
    path = tmp_path / "node.toml"
    path.write_text(_with_references(exported.stdout, tmp_path))

    fresh, client = _second(tmp_path, "fresh")
    try:
        token = _token(client)
        before = _whole_answers(client)
        by_token = _cli(fresh, token, "apply", str(path), env=SECRET_ENV)
        assert by_token.returncode == 1 and "403" in by_token.stderr and "policy" in by_token.stderr
        assert _whole_answers(client) == before and _answers(client)["domains"] == []   # nothing applied

        applied = _cli(fresh, None, "apply", str(path), env=SECRET_ENV)
        assert applied.returncode == 0, applied.stderr
        assert "~ settings.node_name: \"contentnode\" → \"edge-a\"" in applied.stdout
        assert "~ policy.password_min_length: 12 → 14" in applied.stdout
        assert "~ notifications.email.password_set: false → true" in applied.stdout
        for value in CHANNEL_SECRETS.values():
            assert value not in applied.stdout
        assert _whole_answers(client) == _whole_answers(admin)
        assert _answers(client) == _answers(admin)
        resolved = tomllib.loads(path.read_text().replace('{env = "SMTP_PASSWORD"}', f'"{CHANNEL_SECRETS["email.password"]}"')
                                 .replace('{env = "WEBHOOK_SECRET"}', f'"{CHANNEL_SECRETS["webhook.secret"]}"')
                                 .replace('{env = "MEDIA_SECRET"}', f'"{SECRET}"'))
        resolved["notifications"]["telegram"]["bot_token"] = CHANNEL_SECRETS["telegram.bot_token"]
        resolved["notifications"]["ntfy"]["token"] = CHANNEL_SECRETS["ntfy.token"]
        dry = client.post("/api/config/apply", {"document": resolved, "dry_run": True})
        assert dry.status == 200 and dry.json["secrets_changed"] == []   # the node holds the secrets the files give

        revision = _revision(client)
        again = _cli(fresh, token, "plan", str(path), env=SECRET_ENV)
        assert again.returncode == 0 and again.stdout.startswith("no changes"), again.stdout
        second = _cli(fresh, None, "apply", str(path), env=SECRET_ENV)
        assert second.returncode == 0 and second.stdout.startswith("no changes"), second.stdout
        same = client.post("/api/config/apply", {"document": resolved}, headers={"If-Match": f'"{revision}"'})
        assert same.status == 200 and all(c == {"created": 0, "changed": 0, "deleted": 0}
                                          for c in same.json["changes"].values()), same.json["changes"]
        assert _revision(client) == revision and _whole_answers(client) == _whole_answers(admin)
    finally:
        fresh.close()


def test_plan_shows_a_changed_secret_without_its_value(node, admin, tmp_path):
    _populate(admin)
    _populate_whole(admin)
    token = _token(admin)
    path = tmp_path / "node.toml"
    path.write_text(_with_references(_cli(node, token, "export").stdout, tmp_path))
    assert _cli(node, token, "plan", str(path), env=SECRET_ENV).stdout.startswith("no changes")
    other = {"SMTP_PASSWORD": "another-smtp-password", "MEDIA_SECRET": "another-media-secret"}
    planned = _cli(node, token, "plan", str(path), env=dict(SECRET_ENV, **other))
    assert planned.returncode == 0, planned.stderr
    assert "~ notifications.email.password: (secret changed)" in planned.stdout
    assert "~ buckets.Media.secret_key: (secret changed)" in planned.stdout
    assert "2 changes" in planned.stdout and "webhook" not in planned.stdout, planned.stdout
    for value in [*other.values(), SECRET, *CHANNEL_SECRETS.values()]:
        assert value not in planned.stdout and value not in planned.stderr
    revision = _revision(admin)
    applied = _cli(node, token, "apply", str(path), env=dict(SECRET_ENV, **other))
    assert applied.returncode == 0 and "(secret changed)" in applied.stdout, applied.stderr
    assert _revision(admin) > revision   # a changed secret is a change of the configuration
    back = _cli(node, token, "plan", str(path), env=dict(SECRET_ENV, **other))
    assert back.stdout.startswith("no changes"), back.stdout


def test_a_setting_channel_or_policy_change_moves_the_config_revision(admin):
    revision = _revision(admin)
    assert admin.put("/api/settings", {"node_name": "moved"}).status == 200
    assert _revision(admin) > revision
    revision = _revision(admin)
    assert admin.put("/api/notifications", {"events": {"backup_failed": False}}).status == 200
    assert _revision(admin) > revision
    revision = _revision(admin)
    assert admin.put("/api/policy", {"lockout_threshold": 9}).status == 200
    assert _revision(admin) > revision
    revision = _revision(admin)
    assert admin.put("/api/policy", {"lockout_threshold": 9}).status == 200   # the same value: no change
    assert _revision(admin) == revision


def test_a_literal_channel_secret_is_refused_by_the_cli(node, admin, tmp_path):
    path = tmp_path / "node.toml"
    literal = CHANNEL_SECRETS["telegram.bot_token"]
    path.write_text(f'[settings]\nnode_name = "x"\n\n[notifications.telegram]\nenabled = true\n'
                    f'chat_id = "-100123"\nbot_token = "{literal}"\n')
    result = _cli(node, _token(admin), "apply", str(path))
    assert result.returncode == 1 and literal not in result.stderr
    assert "notifications.telegram.bot_token must be a reference" in result.stderr
    assert admin.get("/api/settings").json["node_name"] == "contentnode"


def test_each_whole_section_needs_its_scope(node, admin):
    from tests.test_tokens import _token_client
    document = admin.get("/api/config").json["document"]
    document["domains"] = {"example.com": {}}
    document["notifications"]["events"]["backup_failed"] = False
    document["settings"]["node_name"] = "scoped"
    lacking = [s for s in ALL_SCOPES if s != "notifications:manage"]
    writer, _ = _token_client(node, _token(admin, scopes=lacking))
    refused = writer.post("/api/config/apply", {"document": document})
    assert refused.status == 403 and "notifications:manage" in refused.json["error"]["message"]
    assert admin.get("/api/domains").json["domains"] == [] and admin.get("/api/settings").json["node_name"] == "contentnode"
    assert admin.get("/api/notifications").json["events"]["backup_failed"] is True   # nothing applied
    for section, scope in (("settings", "settings:write"), ("policy", "users:manage")):
        writer, _ = _token_client(node, _token(admin, scopes=[s for s in ALL_SCOPES if s != scope]))
        refused = writer.post("/api/config/apply", {"document": {section: document[section]}})
        assert refused.status == 403 and scope in refused.json["error"]["message"], section
    bad = admin.post("/api/config/apply", {"document": {"policy": {"password_min_length": 3}}})
    assert bad.status == 400 and bad.json["error"]["field"] == "policy.password_min_length"
    generate = admin.post("/api/config/apply", {"document": {"notifications": {"webhook": {"generate_secret": True}}}})
    assert generate.status == 400 and generate.json["error"]["field"] == "notifications.webhook.generate_secret"


def test_secret_flags_and_a_policy_taking_effect_at_once(node, admin):
    from tests.accounts import PASSWORD, create_user
    assert admin.put("/api/notifications", {"webhook": CHANNELS["webhook"]}).status == 200
    webhook = {"enabled": False, "url": CHANNELS["webhook"]["url"]}
    kept = admin.post("/api/config/apply", {"document": {"notifications": {"webhook": dict(webhook, secret_set=True)}}})
    assert kept.status == 200 and kept.json["secrets_changed"] == []
    assert admin.get("/api/notifications").json["webhook"]["secret_set"] is True   # the flag alone keeps it
    cleared = admin.post("/api/config/apply", {"document": {"notifications": {"webhook": dict(webhook, secret_set=False)}}})
    assert cleared.status == 200 and cleared.json["secrets_changed"] == ["notifications.webhook.secret"]
    assert admin.get("/api/notifications").json["webhook"]["secret_set"] is False
    missing = admin.post("/api/config/apply", {"document": {"notifications": {"telegram": {"bot_token_set": True}}}})
    assert missing.status == 400 and missing.json["error"]["field"] == "notifications.telegram.bot_token"
    assert "reference" in missing.json["error"]["message"]

    applied = admin.post("/api/config/apply", {"document": {"policy": {"lockout_threshold": 2, "lockout_duration": 60}}})
    assert applied.status == 200 and applied.json["changes"]["policy"]["changed"] == 1
    create_user(admin, "bob")
    client = node.client()
    assert client.login("bob", "not the right one").status == 401
    assert client.login("bob", "not the right one").status == 401
    assert client.login("bob", PASSWORD).status == 429   # the applied lockout limits hold at once

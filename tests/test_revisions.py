"""Safe concurrent edits (docs/API.md, "Revisions, ETag and If-Match") against the real daemon: every updatable
object carries a revision that grows with each change, answers carry its ETag,
and a PUT or DELETE whose If-Match names another revision gets 412 and changes
nothing - also when two clients race, after a restart and across a restore."""

import json
import os
import threading

import pytest

from tests.accounts import PASSWORD, create_user, logged_in

pytestmark = pytest.mark.in_process  # HTTP to the App; restarts and offline commands: a daemon process

PASSPHRASE = "a long backup passphrase"
BUCKET = {"name": "origin", "endpoint": "http://127.0.0.1:9", "region": "us-east-1", "bucket": "media",
          "access_key": "AKIDEXAMPLE", "secret_key": "very-secret-key", "path_style": True}


def made(response):
    assert response.status == 201, response.body
    return response.json


def make_domain(admin):
    return made(admin.post("/api/domains", {"host": "www.example.test"}))


def make_bucket(admin):
    return made(admin.post("/api/buckets", BUCKET))


def make_rule(admin):
    make_domain(admin)
    bucket = make_bucket(admin)
    return made(admin.post("/api/rules", {"domain": "www.example.test", "path": "/static", "bucket": bucket["id"]}))


class Kind:
    """How to read, change (two different ways) and delete one kind of updatable object."""

    def __init__(self, name, create, path, change, delete=True):
        self.name, self.create, self.path, self.change, self.delete = name, create, path, change, delete

    def setup(self, admin) -> str:
        """Create the object; the path it is read at."""
        return self.path(self.create(admin))

    def write(self, admin, path, number, headers=None):
        """Change the object (`number` picks one of several distinct changes)."""
        method, target, body = self.change(path, number)
        return admin.request(method, target, body, headers=headers)


def _redirect(path, number):
    return "POST", "/api/domains/redirect", {"host": path.rsplit("/", 1)[1], "to": f"https://to{number}.example/"}


KINDS = [
    Kind("rule", make_rule, lambda r: f"/api/rules/{r['id']}", lambda p, n: ("PUT", p, {"cache_ttl": 60 + n})),
    Kind("bucket", make_bucket, lambda b: f"/api/buckets/{b['id']}", lambda p, n: ("PUT", p, {"region": f"eu-{n}"})),
    Kind("domain", make_domain, lambda d: f"/api/domains/{d['host']}", _redirect),
    Kind("user", lambda a: create_user(a, "olga", "viewer"), lambda u: f"/api/users/{u['id']}",
         lambda p, n: ("PUT", p, {"role": "custom", "scopes": ["metrics:read"] if n % 2 else ["domains:read"]})),
    Kind("settings", lambda a: None, lambda _: "/api/settings",
         lambda p, n: ("PUT", p, {"node_name": f"edge-{n}"}), delete=False),
    Kind("policy", lambda a: None, lambda _: "/api/policy",
         lambda p, n: ("PUT", p, {"lockout_threshold": 10 + n}), delete=False),
    Kind("notifications", lambda a: None, lambda _: "/api/notifications",
         lambda p, n: ("PUT", p, {"email": {"port": 2500 + n}}), delete=False),
]
DELETABLE = [k for k in KINDS if k.delete]
ids = [k.name for k in KINDS]


def read(admin, path):
    answer = admin.get(path)
    assert answer.status == 200, answer.body
    assert answer.headers["etag"] == f'"{answer.json["revision"]}"'
    return answer.json


def match(revision) -> dict:
    return {"If-Match": f'"{revision}"'}


@pytest.mark.parametrize("kind", KINDS, ids=ids)
def test_revision_and_etag_grow_with_each_change(admin, kind):
    """Revisions come from one node-wide counter: each change gives a higher one, not always one more."""
    path = kind.setup(admin)
    first = read(admin, path)
    assert first["revision"] >= 1
    changed = kind.write(admin, path, 1)
    assert changed.status == 200, changed.body
    second = changed.json["revision"]
    assert second > first["revision"] and changed.headers["etag"] == f'"{second}"'
    assert read(admin, path) == changed.json
    with_match = kind.write(admin, path, 2, headers=match(second))
    assert with_match.status == 200 and with_match.json["revision"] > second
    starred = kind.write(admin, path, 3, headers={"If-Match": "*"}).json["revision"]
    assert starred > with_match.json["revision"] and read(admin, path)["revision"] == starred


@pytest.mark.parametrize("kind", KINDS, ids=ids)
def test_a_stale_if_match_gets_412_and_changes_nothing(node, admin, kind):
    path = kind.setup(admin)
    kind.write(admin, path, 1)
    before = read(admin, path)
    stale = kind.write(admin, path, 2, headers=match(before["revision"] - 1))
    assert stale.status == 412 and stale.error_code == "precondition_failed", stale.body
    assert "changed since you read it" in stale.json["error"]["message"]
    assert stale.headers["etag"] == f'"{before["revision"]}"'
    assert read(admin, path) == before
    ahead = kind.write(admin, path, 2, headers=match(before["revision"] + 5))
    assert ahead.status == 412 and read(admin, path) == before


@pytest.mark.parametrize("kind", DELETABLE, ids=[k.name for k in DELETABLE])
def test_delete_with_if_match(admin, kind):
    path = kind.setup(admin)
    kind.write(admin, path, 1)
    before = read(admin, path)
    stale = admin.delete(path, headers=match(1))
    assert stale.status == 412 and stale.error_code == "precondition_failed"
    assert read(admin, path) == before
    assert admin.delete(path, headers=match(before["revision"])).status == 204
    assert admin.get(path).status == 404
    assert admin.delete(path, headers={"If-Match": "*"}).status == 404


def test_delete_without_if_match_applies(admin):
    path = KINDS[0].setup(admin)
    KINDS[0].write(admin, path, 1)
    assert admin.delete(path).status == 204 and admin.get(path).status == 404


@pytest.mark.parametrize("kind", [KINDS[2], KINDS[3]], ids=["domain", "user"])
def test_a_name_deleted_and_added_again_never_repeats_a_revision(admin, kind):
    """ABA: a domain deleted and added again restarted at revision 1, so a client holding "1" from the
    deleted domain wrote a redirect onto the new one. Both are reached by name (host, username)."""
    by_name = {"domain": "/api/domains/www.example.test", "user": "/api/users/olga"}[kind.name]
    kind.setup(admin)
    stale = read(admin, by_name)["revision"]
    assert admin.delete(by_name).status == 204
    kind.setup(admin)
    again = read(admin, by_name)
    assert again["revision"] > stale
    refused = kind.write(admin, by_name, 1, headers=match(stale))
    assert refused.status == 412 and refused.error_code == "precondition_failed", refused.body
    assert read(admin, by_name) == again


@pytest.mark.parametrize("value", ['W/"1"', "1", '"0"', '"01"', '"1", "2"', '"abc"', '"1', "", "**"])
def test_a_malformed_if_match_is_refused(admin, value):
    path = KINDS[0].setup(admin)
    before = read(admin, path)
    answer = KINDS[0].write(admin, path, 1, headers={"If-Match": value})
    assert answer.status == 400 and answer.error_code == "invalid", answer.body
    assert answer.json["error"]["field"] == "If-Match"
    assert read(admin, path) == before


def test_if_match_where_no_revisioned_object_changes_is_refused(admin):
    path = KINDS[0].setup(admin)
    for method, target in (("GET", path), ("PUT", "/api/https"), ("POST", "/api/rules")):
        answer = admin.request(method, target, {} if method != "GET" else None, headers=match(1))
        assert answer.status == 400 and answer.json["error"]["field"] == "If-Match", (target, answer.body)


@pytest.mark.parametrize("kind", KINDS, ids=ids)
def test_revision_in_a_body_is_refused(admin, kind):
    path = kind.setup(admin)
    before = read(admin, path)
    method, target, body = kind.change(path, 1)
    answer = admin.request(method, target, dict(body, revision=before["revision"]))
    assert answer.status == 400 and answer.json["error"]["field"] == "revision"
    assert "If-Match" in answer.json["error"]["message"]
    assert read(admin, path) == before


def test_lists_carry_no_etag_and_show_each_revision(admin):
    rule = make_rule(admin)
    listed = admin.get("/api/rules")
    assert "etag" not in listed.headers
    assert listed.json["rules"][0]["revision"] == rule["revision"] >= 1
    assert admin.get("/api/buckets").json["buckets"][0]["revision"] >= 1
    assert admin.get("/api/domains").json["domains"][0]["revision"] >= 1
    assert all(u["revision"] >= 1 for u in admin.get("/api/users").json["users"])


def test_a_write_that_changes_nothing_keeps_the_revision(admin):
    revision = admin.put("/api/settings", {"node_name": "edge-9"}).json["revision"]
    again = admin.put("/api/settings", {"node_name": "edge-9"}, headers=match(revision))
    assert again.status == 200 and again.json["revision"] == revision
    policy = read(admin, "/api/policy")["revision"]
    assert admin.put("/api/policy", {}).json["revision"] == policy


@pytest.mark.parametrize("kind", KINDS[:3], ids=ids[:3])
def test_the_same_values_again_keep_revision_and_updated_at(node, admin, kind):
    """Records with updated_at (rules, buckets, domains): a repeated write, later, changes neither."""
    path = kind.setup(admin)
    first = kind.write(admin, path, 1).json
    node.set_clock_offset(5)  # a second write at another time must not rewrite updated_at
    for _ in range(2):
        again = kind.write(admin, path, 1)
        assert again.status == 200 and again.json["revision"] == first["revision"], again.json
        assert again.json["updated_at"] == first["updated_at"]
    assert read(admin, path)["revision"] == first["revision"]
    changed = kind.write(admin, path, 2).json
    assert changed["revision"] > first["revision"] and changed["updated_at"] > first["updated_at"]


@pytest.mark.daemon_process
def test_other_paths_raise_the_revision_too(node, admin):
    """Any write to the record counts: a login (last_login_at), a password reset, the offline CLI."""
    user = create_user(admin, "olga", "viewer")
    path = f"/api/users/{user['id']}"
    logged_in(node, "olga")
    after_login = read(admin, path)
    assert after_login["revision"] > user["revision"] and after_login["last_login_at"] is not None
    reset = admin.put(f"{path}/password", {"password": PASSWORD + "!"}, headers=match(after_login["revision"]))
    assert reset.status == 200 and reset.json["revision"] > after_login["revision"]
    stale = match(after_login["revision"])
    assert admin.put(f"{path}/password", {"password": PASSWORD + "?"}, headers=stale).status == 412
    node.stop()
    done = node.cli("user", "reset-password", "olga", input_text=PASSWORD + "#\n")
    assert done.returncode == 0, done.stderr
    node.start()
    assert read(admin, path)["revision"] > reset.json["revision"]


def race(node, admin, kind, path, revision, number) -> list:
    """Two clients send a change each with If-Match: revision at the same moment; their answers."""
    gate = threading.Barrier(2)
    answers = [None, None]

    def writer(slot):
        client = node.client()
        client.cookies = dict(admin.cookies)
        gate.wait()
        answers[slot] = kind.write(client, path, number + slot, headers=match(revision))

    threads = [threading.Thread(target=writer, args=(slot,)) for slot in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return answers


@pytest.mark.parametrize("kind", [KINDS[0], KINDS[4]], ids=["rule", "settings"])
def test_two_writers_on_one_revision_exactly_one_wins(node, admin, kind):
    path = kind.setup(admin)
    for round_ in range(4):
        revision = read(admin, path)["revision"]
        answers = race(node, admin, kind, path, revision, 10 * round_)
        assert sorted(a.status for a in answers) == [200, 412], [a.body for a in answers]
        winner = next(a for a in answers if a.status == 200)
        assert read(admin, path) == winner.json and winner.json["revision"] > revision


@pytest.mark.daemon_process
def test_revisions_survive_a_restart(node, admin):
    path = KINDS[0].setup(admin)
    KINDS[0].write(admin, path, 1)
    admin.put("/api/policy", {"lockout_threshold": 9})
    rule, policy = read(admin, path), read(admin, "/api/policy")
    node.restart()
    assert read(admin, path) == rule and read(admin, "/api/policy") == policy
    assert KINDS[0].write(admin, path, 2, headers=match(1)).status == 412


@pytest.mark.parametrize("passphrase", [PASSPHRASE, None], ids=["encrypted", "plain"])
def test_backup_carries_revisions_and_a_restore_never_lowers_one(admin, passphrase):
    rule_path = KINDS[0].setup(admin)
    KINDS[0].write(admin, rule_path, 1)
    bucket_path = "/api/buckets/" + admin.get("/api/buckets").json["buckets"][0]["id"]
    admin.put("/api/settings", {"node_name": "before"})
    exported = admin.post("/api/backup/export", {"passphrase": passphrase} if passphrase else {})
    assert exported.status == 200
    backed_up = read(admin, rule_path)["revision"]
    if passphrase is None:
        assert exported.json["data"]["rules"][rule_path.rsplit("/", 1)[1]]["revision"] == backed_up
    KINDS[0].write(admin, rule_path, 2)
    admin.put("/api/settings", {"node_name": "after"})
    changed_rule, bucket = read(admin, rule_path), read(admin, bucket_path)
    settings_before = read(admin, "/api/settings")["revision"]
    assert changed_rule["revision"] > backed_up

    body = {"backup": exported.json, **({"passphrase": passphrase} if passphrase else {})}
    assert admin.post("/api/backup/restore", body).status == 200
    rule = read(admin, rule_path)
    assert rule["cache_ttl"] == 61 and rule["revision"] > max(changed_rule["revision"], settings_before)
    assert read(admin, bucket_path) == bucket  # unchanged by the restore: same revision
    settings = read(admin, "/api/settings")
    assert settings["node_name"] == "before" and settings["revision"] > settings_before
    assert admin.put(rule_path, {"cache_ttl": 5}, headers=match(changed_rule["revision"])).status == 412
    assert admin.put(rule_path, {"cache_ttl": 5}, headers=match(backed_up)).status == 412


def test_a_restore_refuses_a_broken_revision(node, admin):
    KINDS[0].setup(admin)
    plain = admin.post("/api/backup/export", {}).json
    rule_id = next(iter(plain["data"]["rules"]))
    revision = plain["data"]["rules"][rule_id]["revision"]
    plain["data"]["rules"][rule_id]["revision"] = "seven"
    answer = admin.post("/api/backup/restore", {"backup": plain})
    assert answer.status == 400 and "revision" in answer.json["error"]["message"], answer.body
    assert read(admin, f"/api/rules/{rule_id}")["revision"] == revision
    plain["data"]["rules"][rule_id]["revision"] = revision
    plain["data"]["revisions"]["counter"] = 0
    answer = admin.post("/api/backup/restore", {"backup": plain})
    assert answer.status == 400 and "revisions.counter" in answer.json["error"]["message"], answer.body


@pytest.mark.daemon_process
def test_a_state_file_from_before_revisions_loads_at_revision_1(node, admin):
    path = KINDS[0].setup(admin)
    admin.put("/api/settings", {"node_name": "older"})
    node.stop()
    state_file = os.path.join(node.data_dir, "state.json")
    with open(state_file) as f:
        doc = json.load(f)
    for section in ("rules", "domains", "buckets", "users"):
        for record in doc[section].values():
            del record["revision"]
    del doc["revisions"]
    with open(state_file, "w") as f:
        json.dump(doc, f)
    node.start()
    assert read(admin, path)["revision"] == 1 and read(admin, "/api/settings")["revision"] == 1
    assert KINDS[0].write(admin, path, 1, headers=match(1)).json["revision"] > 1
    assert admin.put("/api/settings", {"node_name": "newer"}, headers=match(1)).json["revision"] > 1


# --- the store's stamping, without a daemon ---------------------------------------------------

def revisioned_store(tmp_path):
    from contentnode.schema import REVISIONED
    from contentnode.store import Store

    store = Store(str(tmp_path), {"rules": dict, "settings": dict, "revisions": dict}, revisioned=REVISIONED)
    store.load()
    return store


def test_the_store_raises_a_revision_only_when_a_record_changes(tmp_path):
    store = revisioned_store(tmp_path)
    with store.transaction() as doc:
        doc["rules"]["a"] = {"id": "a", "ttl": 1}
        doc["rules"]["b"] = {"id": "b", "ttl": 1, "revision": 7}  # brought along (a restore): counted past
    assert store.data["rules"]["a"]["revision"] == store.data["rules"]["b"]["revision"] == 8  # one commit, one number
    assert store.data["revisions"]["counter"] == 8
    with store.transaction() as doc:
        doc["rules"]["a"]["ttl"] = 2
        doc["rules"]["b"] = dict(doc["rules"]["b"])  # read and assigned, unchanged
    assert store.data["rules"]["a"]["revision"] == 9 and store.data["rules"]["b"]["revision"] == 8
    with store.transaction() as doc:
        doc["rules"]["a"]["revision"] = 1  # a writer cannot lower it
        doc["rules"]["b"]["revision"] = 99  # nor move it without a change
    assert store.data["rules"]["a"]["revision"] == 9 and store.data["rules"]["b"]["revision"] == 8
    with store.transaction() as doc:
        del doc["rules"]["a"]
        doc["rules"]["a"] = {"id": "a", "ttl": 3}  # gone and back in one write: still above the old one
    assert store.data["rules"]["a"]["revision"] == 10
    with store.transaction() as doc:
        del doc["rules"]["a"]
    assert store.data["revisions"]["config"] == store.data["revisions"]["counter"] == 11  # a delete moves the config
    with store.transaction() as doc:
        doc["rules"]["a"] = {"id": "a", "ttl": 3, "revision": 2}  # back after a delete: never a number seen before
    assert store.data["rules"]["a"]["revision"] == 12


def test_a_replaced_section_and_whole_objects_get_revisions_past_both(tmp_path):
    store = revisioned_store(tmp_path)
    for value in ("one", "two", "three"):
        with store.transaction() as doc:
            doc["rules"]["a"] = {"id": "a", "name": value}
            doc["settings"]["node_name"] = value
    # one number per commit, shared by everything it changed; the untouched objects stay at 1
    assert store.data["rules"]["a"]["revision"] == 4 and store.data["revisions"] == {
        "notifications": 1, "policy": 1, "settings": 4, "backup_schedule": 1, "config": 4, "counter": 4}
    with store.transaction() as doc:  # as a restore does: every section replaced by the backup's
        doc.clear()
        doc.update({"rules": {"a": {"id": "a", "name": "one", "revision": 9}}, "settings": {"node_name": "one"},
                    "revisions": {"settings": 1, "policy": "bogus", "counter": 6}})
    assert store.data["rules"]["a"]["revision"] == 10  # past the node's 4 and the backup's 9 and 6
    assert store.data["revisions"] == {"notifications": 1, "policy": 1, "settings": 10, "backup_schedule": 1,
                                      "config": 10, "counter": 10}
    with store.transaction() as doc:
        doc["settings"]["node_name"] = "one"  # the same value again
    assert store.data["revisions"]["settings"] == 10


def test_state_from_before_the_counter_starts_it_above_every_stored_revision(tmp_path):
    with open(tmp_path / "state.json", "w") as f:
        json.dump({"schema": 1, "rules": {"a": {"id": "a", "revision": 5}, "b": {"id": "b"}},
                   "revisions": {"settings": 7}}, f)
    store = revisioned_store(tmp_path)
    assert store.data["revisions"]["counter"] == 7 and store.data["rules"]["b"]["revision"] == 1
    with store.transaction() as doc:
        doc["rules"]["b"]["name"] = "changed"
    assert store.data["rules"]["b"]["revision"] == 8

"""A fleet of real daemons for the fleet tests: one primary and replicas on loopback,
SeaweedFS as the bucket, fleet_poll_seconds 1 (the documented start-up value)."""

import base64
import contextlib
import json
import os
import signal
import time
import uuid

import pytest

from contentnode.core import netguard
from contentnode.core.s3 import S3Client
from contentnode.core.s3_records import BucketConfig
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from contentnode.fleet import bundle, joinclaims, joincode, keys, members, publisher, shared
from contentnode.fleet.wire import Refused
from tests.content_setup import Site
from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node

POLL_ENV = {"CONTENTNODE_FLEET_POLL_SECONDS": "1"}


def opens_sealed(doc: dict, key: bytes) -> bool:
    """Whether `key` opens the sealed buckets part of a parsed bundle."""
    blob = base64.b64decode(doc["parts"]["buckets"]["sealed"])
    try:
        bundle.unseal(key, doc["fleet_id"], doc["seq"], "buckets", blob)
    except Refused:
        return False
    return True


def wait_for(condition, timeout: float = 15.0, every: float = 0.1, what: str = "condition"):
    """condition()'s first truthy value within `timeout` s, else AssertionError."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what} not reached within {timeout} s (last: {last!r})")


class FleetNode(Node):
    """A node polling every second (bench/bench_fleet.py sets poll_env to try other polls)."""

    poll_env = POLL_ENV

    def __init__(self, workdir: str, env: dict | None = None, args=()):
        super().__init__(workdir, env={**self.poll_env, **(env or {})}, args=args)


def admin_of(node: Node):
    client = node.client()
    if client.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status != 201:
        assert client.login(ADMIN_USER, ADMIN_PASSWORD).status == 200
    return client


def serving_fleet(tmp_factory, seaweed, replicas: int = 2, body: bytes = b"hello", timeout: float = 15.0):
    """A Fleet whose domain serves site/ of its content bucket at /, hello.txt in it, every
    replica at the primary's seq."""
    fleet = Fleet(tmp_factory, seaweed, replicas)
    before = fleet.seq()
    fleet.site.add_rule("/", prefix="site/")
    fleet.site.put("site/hello.txt", body, "text/plain")
    fleet.wait_synced(timeout, after=before)
    return fleet


def serving_fleet_fixture(**options):
    """The module fixture `fleet` of most fleet test files: serving_fleet(**options), closed
    after the module (assign it: `fleet = serving_fleet_fixture(replicas=1)`)."""
    @pytest.fixture(scope="module")
    def fleet(tmp_path_factory, seaweed):
        instance = serving_fleet(tmp_path_factory, seaweed, **options)
        yield instance
        instance.close()
    return fleet


class Fleet:
    """primary: a Site (bucket, domain, admin); replicas: FleetNodes that joined it."""

    def __init__(self, tmp_factory, seaweed, replicas: int = 2, host: str = "fleet.example.test",
                 node_class=FleetNode, endpoint: str | None = None):
        """`endpoint`: where the nodes reach the fleet bucket (default SeaweedFS itself)."""
        self.seaweed = seaweed
        self.fleet_bucket = "fleet-" + uuid.uuid4().hex[:10]
        seaweed.create_bucket(self.fleet_bucket)
        self.site = Site(str(tmp_factory.mktemp("primary")), seaweed, host=host, node_class=node_class)
        self.primary, self.admin = self.site.node, self.site.admin
        body = {"endpoint": endpoint or seaweed.endpoint, "region": seaweed.region, "bucket": self.fleet_bucket,
                "access_key": seaweed.access_key, "secret_key": seaweed.secret_key, "path_style": True}
        response = self.admin.post("/api/fleet/init", body)
        assert response.status == 200, response.body
        self.init_answer = response.json
        self.replicas, self.replica_admins = [], []
        for index in range(replicas):
            node = node_class(str(tmp_factory.mktemp(f"replica{index}"))).start()
            self.replicas.append(node)
            self.replica_admins.append(admin_of(node))
        for client in self.replica_admins:
            self.join(client)

    def join(self, client, dry_run: bool = False):
        code = self.admin.post("/api/fleet/join-codes", {}).json["code"]
        response = client.post("/api/fleet/join", {"code": code, "dry_run": dry_run})
        assert response.status == 200, response.body
        return response.json

    def seq(self) -> int:
        return self.admin.get("/api/fleet").json["seq"]

    def synced(self, clients=None, seq: int | None = None) -> bool:
        seq = self.seq() if seq is None else seq
        return all(c.get("/api/fleet").json["seq"] == seq for c in (clients or self.replica_admins))

    def wait_synced(self, timeout: float = 15.0, after: int | None = None):
        """Every replica at the primary's seq; with `after` (a seq read before a change), once the
        primary published past it (it debounces 0.3 s, longer on a busy machine)."""
        if after is not None:
            wait_for(lambda: self.seq() > after, timeout, what=f"the primary publishing past seq {after}")
        wait_for(lambda: self.synced(), timeout, what="every replica at the primary's seq")

    def served(self, node, path: str, host: str | None = None):
        return node.client("public", host=host or self.site.host).get(path)

    def bucket_objects(self) -> dict:
        """{key: bytes} of every object in the fleet bucket, read through the filer."""
        out = {}
        self._walk(f"/buckets/{self.fleet_bucket}/", out)
        return out

    def _walk(self, folder: str, out: dict):
        listing = json.loads(self.seaweed._filer("GET", folder + "?limit=10000",
                                                 headers={"Accept": "application/json"}))
        for entry in listing.get("Entries") or []:
            path = entry["FullPath"]
            if entry.get("Mode", 0) & 0o20000000000:  # os.ModeDir in Go
                self._walk(path + "/", out)
            else:
                try:
                    out[path] = self.seaweed._filer("GET", path)
                except RuntimeError as exc:   # deleted between the listing and the read (the primary
                    if " answered 404" not in str(exc):   # deletes expired joins, old statuses)
                        raise

    def state(self, node) -> dict:
        with open(os.path.join(node.data_dir, "state.json"), "rb") as f:
            return json.loads(f.read())

    # -- hand-made bundles, signed with the primary's real keys (or the ones given)

    def bucket_client(self) -> S3Client:
        s = self.seaweed
        return S3Client(BucketConfig(s.endpoint, s.region, self.fleet_bucket, s.access_key, s.secret_key, True),
                        netguard.OutboundPolicy(), timeout=10)

    def forge(self, *, seq_delta=1, fleet_id=None, issued_at=None, signing=None, key_certs=None, parts=None,
              fleet_key=None, extra_members=None) -> bytes:
        """A bundle made here as the primary makes it, at the primary's seq + seq_delta; its members
        the primary's and `extra_members` {node_id: public keys}."""
        state = self.state(self.primary)
        made = keys.load(self.primary.data_dir)
        sealing_id, sealing_key = members.load_sealing(self.primary.data_dir)
        parts = dict(parts or shared.parts_of(state))
        parts.setdefault(bundle.MEMBERS, members.part(state["fleet"]["fleet_id"], sealing_id, sealing_key, {
            node_id: row for node_id, row in state["fleet"]["members"].items()} | (extra_members or {}), {}))
        return bundle.build(fleet_id=fleet_id or state["fleet"]["fleet_id"], seq=state["fleet"]["seq"] + seq_delta,
                            issued_at=time.time() if issued_at is None else issued_at,
                            lifetime=publisher.LIFETIME_SECONDS, primary=state["node"]["id"],
                            key_certs=key_certs or state["fleet"]["key_certs"], signing=signing or made.signing,
                            fleet_key=fleet_key or sealing_key, parts=parts,
                            sealed=shared.SEALED)

    @contextlib.contextmanager
    def primary_paused(self):
        """The primary process stopped (SIGSTOP) for the block: a bundle a test puts in the bucket stays
        there, as when the primary is down (a live primary writes over a bundle it did not write at
        its next poll). Continued after, unless the block killed it."""
        os.kill(self.primary.proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            if self.primary.proc.poll() is None:
                os.kill(self.primary.proc.pid, signal.SIGCONT)

    def put_bundle(self, raw: bytes) -> None:
        self.bucket_client().put_object("contentnode/bundle.json", raw, "application/json")

    def big_parts(self, variant: str, count: int = 10000) -> dict:
        """The primary's parts with `count` rules more, each /<variant>/<i> to prefix <variant>/."""
        state = self.state(self.primary)
        bucket_id = next(iter(state["buckets"]))
        rules = {f"{variant}{i:05d}": {"id": f"{variant}{i:05d}", "prefix": f"{variant}/", "cache_ttl": 60,
                                      "signed": False, "images": False, "enabled": True, "domain": self.site.host,
                                      "path": f"/{variant}/{i}", "bucket": bucket_id, "revision": 1}
                 for i in range(count)}
        parts = shared.parts_of(state)
        return dict(parts, rules={**parts["rules"], **rules})

    def member_bundle(self) -> dict:
        """The bucket's bundle.json, parsed (its "members" part is plain)."""
        return json.loads(self.bucket_client().get_bytes("contentnode/bundle.json").body)

    def add_members(self, count: int) -> list:
        """[(node_id, MemberKeys)] of `count` members made here as a joiner makes itself one: a join
        code minted on the primary, a claim signed with the code's claim key carrying fresh member
        keys; returns once the primary lists them all (it reads claims every poll)."""
        made, client = [], self.bucket_client()
        for _ in range(count):
            code = self.admin.post("/api/fleet/join-codes", {}).json["code"]
            join_id, payload = joincode.redeem(code, netguard.OutboundPolicy(), time.time())
            member = members.MemberKeys(Ed25519PrivateKey.generate(), X25519PrivateKey.generate())
            node_id = uuid.uuid4().hex[:16]
            joinclaims.write_claim(client, "contentnode/", join_id, payload["claim_key"], node_id, time.time(),
                                   member.public())
            made.append((node_id, member))
        ids = {node_id for node_id, _ in made}
        wait_for(lambda: ids <= set(self.member_bundle()["parts"][bundle.MEMBERS]["data"]["members"]), 60,
                 what=f"the primary listing {count} more members in its bundle")
        return made

    def close(self):
        for node in [self.primary, *self.replicas]:
            node.close()

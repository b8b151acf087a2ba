"""Shared setup for the content path tests: one daemon, one SeaweedFS bucket, domains and rules."""

import http.client
import uuid

from tests.node import ADMIN_PASSWORD, ADMIN_USER, Node


class Site:
    """A node serving one SeaweedFS bucket under `host`; helpers for origin objects and rules."""

    def __init__(self, workdir, seaweed, host="cdn.example.test", node_class=Node):
        self.seaweed = seaweed
        self.host = host
        self.node = node_class(workdir).start()
        self.admin = self.node.client()
        response = self.admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD})
        assert response.status == 201, response.body
        self.bucket = "content-" + uuid.uuid4().hex[:12]
        seaweed.create_bucket(self.bucket)
        response = self.admin.post("/api/buckets", seaweed.bucket_definition(self.bucket))
        assert response.status == 201, response.body
        self.bucket_id = response.json["id"]
        self.add_domain(host)

    def add_domain(self, host):
        response = self.admin.post("/api/domains", {"host": host})
        assert response.status == 201, response.body

    def add_rule(self, path, **fields):
        body = {"domain": fields.pop("domain", self.host), "path": path, "bucket": self.bucket_id}
        body.update(fields)
        response = self.admin.post("/api/rules", body)
        assert response.status == 201, response.body
        return response.json["id"]

    def put(self, key, data, content_type="application/octet-stream"):
        self.seaweed.put_object(self.bucket, key, data, content_type)

    def origin_gets(self, key):
        """GETs for `key` that reached the origin (the counting front of SeaweedFS)."""
        return self.seaweed.count("GET", contains=f"/{self.bucket}/{key}")

    def get(self, path, headers=None, method="GET", host=None):
        return self.node.client("public", host=host or self.host).request(method, path, headers=headers)

    def raw_get(self, raw_path, host=None):
        """A request whose path is sent byte for byte (no client-side normalisation)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.node.public_port, timeout=30)
        try:
            conn.putrequest("GET", raw_path, skip_host=True)
            conn.putheader("Host", host or self.host)
            conn.endheaders()
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def close(self):
        self.node.close()

"""Acknowledged writes survive kill -9: a writer hammers the API while the daemon is SIGKILLed."""

import json
import os
import random
import threading
import time

from tests.node import ADMIN_PASSWORD, ADMIN_USER


def bucket_body(i):
    return {"name": f"crash-{i}", "endpoint": "http://127.0.0.1:9", "region": "us-east-1",
            "bucket": "crash-bucket", "access_key": "AKIDCRASH", "secret_key": "crash-secret"}


def test_acknowledged_writes_survive_sigkill(node, admin):
    rng = random.Random(20261121)
    acknowledged = []
    counter = iter(range(10**6))
    rounds = 0
    while len(acknowledged) < 200 or rounds < 5:
        assert rounds < 60, "too few writes were acknowledged; is the daemon answering?"
        rounds += 1
        stop = threading.Event()

        def writer():
            while not stop.is_set():
                i = next(counter)
                try:
                    r = admin.post("/api/buckets", bucket_body(i), timeout=5)
                except OSError:
                    return  # the daemon died mid-request: not acknowledged
                if r.status == 201:
                    acknowledged.append(r.json["id"])

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        time.sleep(rng.uniform(0.1, 0.6))
        node.kill()  # SIGKILL at a random moment
        stop.set()
        thread.join(10)
        # the state file parses and holds every acknowledged write
        with open(os.path.join(node.data_dir, "state.json"), "rb") as f:
            doc = json.loads(f.read())
        missing = [b for b in acknowledged if b not in doc["buckets"]]
        assert not missing, f"round {rounds}: {len(missing)} acknowledged writes lost"
        node.start()
        if admin.get("/api/me").status != 200:  # sessions are durable too, but log in again if needed
            assert admin.login(ADMIN_USER, ADMIN_PASSWORD).status == 200
    listed = {b["id"] for b in admin.get("/api/buckets").json["buckets"]}
    assert set(acknowledged) <= listed
    assert not [n for n in os.listdir(node.data_dir) if n.endswith(".tmp")]  # cleaned at start

"""The fleet's pure parts: key chains, bundle verification, purge replay, the store's commit
listener. The real-process tests are in test_fleet.py and test_fleet_refusals.py."""

import json
import os
import time

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contentnode.clock import rfc3339
from contentnode.fleet import bundle, challenges, joincode, keys, lease, shared, status
from contentnode.fleet.wire import Refused
from contentnode.store import Store

FLEET = "00112233aabbccdd"


def _chain():
    recovery_text, recovery_public = keys.new_recovery()
    first = Ed25519PrivateKey.generate()
    certs = [keys.certify(FLEET, 1, keys.public_text(first), rfc3339(time.time()),
                          keys.recovery_key(recovery_text), "recovery")]
    return first, certs, keys.Pin(1, keys.public_text(first), recovery_public), recovery_text


def _parts():
    return {"domains": {}, "buckets": {"b1": {"secret_key": "s3cr3t-value"}}, "rules": {},
            "links": {"current": None, "keys": {}}, "settings": {}, "purges": [], "certificates": {}}


def _open(raw, pin, fleet_key, applied=0, now=None):
    return bundle.open_bundle(bundle.parse(raw, FLEET, pin), fleet_id=FLEET, pin=pin, fleet_key=fleet_key, applied_seq=applied,
                              now=now or time.time(), names=shared.PARTS, sealed=shared.SEALED)


def _build(signing, certs, fleet_key, seq=1, issued_at=None):
    return bundle.build(fleet_id=FLEET, seq=seq, issued_at=issued_at or time.time(), lifetime=3600, primary="p",
                        key_certs=certs, signing=signing, fleet_key=fleet_key, parts=_parts(), sealed=shared.SEALED)


def test_a_bundle_round_trips_and_seals_its_secret_parts():
    signing, certs, pin, _ = _chain()
    fleet_key = os.urandom(32)
    raw = _build(signing, certs, fleet_key, seq=3)
    assert b"s3cr3t-value" not in raw
    opened = _open(raw, pin, fleet_key)
    assert opened.seq == 3 and opened.parts["buckets"]["b1"]["secret_key"] == "s3cr3t-value"
    assert _open(raw, pin, fleet_key, applied=3) is None  # equal seq: nothing to do
    with pytest.raises(Refused) as info:
        _open(raw, pin, fleet_key, applied=4)
    assert info.value.code == "older_seq"
    with pytest.raises(Refused) as info:
        _open(raw, pin, fleet_key, now=time.time() + 7200)
    assert info.value.code == "expired"


def test_a_sealed_part_moved_to_another_seq_does_not_open():
    signing, certs, pin, _ = _chain()
    fleet_key = os.urandom(32)
    one, two = json.loads(_build(signing, certs, fleet_key, seq=1)), json.loads(_build(signing, certs, fleet_key, 2))
    two["parts"]["buckets"] = one["parts"]["buckets"]
    unsigned = {k: v for k, v in two.items() if k != "signature"}
    two["signature"] = keys.sign(signing, bundle.canonical(unsigned))  # even re-signed by the primary's key
    with pytest.raises(Refused) as info:
        _open(bundle.canonical(two), pin, fleet_key)
    assert info.value.code == "sealed_part"


def test_key_epochs_chain_from_the_pinned_key_or_the_recovery_key_only():
    first, certs, pin, recovery_text = _chain()
    second, third = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    now = rfc3339(time.time())
    rotated = certs + [keys.certify(FLEET, 2, keys.public_text(second), now, first, "previous")]
    assert keys.signing_key_of(rotated, FLEET, pin) == keys.Pin(2, keys.public_text(second), pin.recovery_public_key)
    promoted = rotated + [keys.certify(FLEET, 3, keys.public_text(third), now, keys.recovery_key(recovery_text),
                                       "recovery")]
    assert keys.signing_key_of(promoted, FLEET, pin).public_key == keys.public_text(third)
    forged = certs + [keys.certify(FLEET, 2, keys.public_text(third), now, third, "previous")]
    with pytest.raises(Refused) as info:
        keys.signing_key_of(forged, FLEET, pin)
    assert info.value.code == "wrong_key_epoch"
    later_pin = keys.Pin(2, keys.public_text(second), pin.recovery_public_key)
    with pytest.raises(Refused) as info:  # back to epoch 1 after epoch 2 was pinned
        keys.signing_key_of(certs, FLEET, later_pin)
    assert info.value.code == "wrong_key_epoch"
    with pytest.raises(Refused):
        keys.recovery_key("cnr_tooshort")


def test_purge_replay_runs_what_is_new_and_everything_when_entries_were_missed():
    history = shared.record_purges(None, "t", [("url", "a", "/1"), ("prefix", "a", "/p/")])
    items = history["items"]
    assert [i["id"] for i in items] == [1, 2] and history["next"] == 3
    assert shared.purges_to_run(items, None) == (items, True, 2)        # never applied: everything
    assert shared.purges_to_run(items, 1) == (items[1:], False, 2)
    assert shared.purges_to_run(items, 2) == ([], False, 2)
    assert shared.purges_to_run(items[1:], 0)[1] is True                # entry 1 fell off: everything
    long = shared.record_purges(history, "t", [("url", "a", f"/{i}") for i in range(shared.PURGE_HISTORY_MAX)])
    assert len(long["items"]) == shared.PURGE_HISTORY_MAX and long["items"][-1]["id"] == 2 + shared.PURGE_HISTORY_MAX


def test_the_store_tells_its_listeners_which_sections_a_commit_changed(tmp_path):
    store = Store(str(tmp_path), {"a": dict, "b": dict})
    store.load()
    heard = []
    store.add_commit_listener(heard.append)
    store.add_commit_listener(lambda names: 1 / 0)  # a failing listener does not fail the write
    with store.transaction() as doc:
        doc["a"]["x"] = 1
    with store.transaction() as doc:
        doc["b"] = {}  # no change: no commit, nothing heard
    assert heard == [frozenset({"a"})] and store.data["a"] == {"x": 1}


def test_secret_files_are_private_and_round_trip(tmp_path):
    made = keys.Secrets(os.urandom(32), "AK", "SK", Ed25519PrivateKey.generate())
    keys.save(str(tmp_path), made)
    folder = os.path.join(str(tmp_path), "fleet")
    assert os.stat(folder).st_mode & 0o777 == 0o700
    assert all(os.stat(os.path.join(folder, n)).st_mode & 0o777 == 0o600 for n in os.listdir(folder))
    loaded = keys.load(str(tmp_path))
    assert loaded.fleet_key == made.fleet_key and keys.public_text(loaded.signing) == keys.public_text(made.signing)
    assert "SK" not in repr(loaded)
    keys.remove(str(tmp_path))
    assert keys.load(str(tmp_path)) is None


def test_readiness_and_re_signing_times():
    from contentnode.fleet import publisher, ready

    assert ready({}) and ready({"fleet": {"role": "primary"}})
    assert not ready({"fleet": {"role": "replica", "applied_at": None}})
    assert ready({"fleet": {"role": "replica", "applied_at": "2026-01-01T00:00:00Z"}})
    issued = time.time()
    state = {"issued_at": rfc3339(issued)}
    assert publisher.RESIGN_AFTER_SECONDS == 10 * 3600 < publisher.LIFETIME_SECONDS / 2
    assert not publisher.resign_due(state, issued + 10 * 3600 - 60)
    assert publisher.resign_due(state, issued + 10 * 3600)
    assert publisher.resign_due({}, issued)


def test_status_view_derives_lag_skew_and_unseen():
    from contentnode.fleet import status

    now = time.time()
    rows = status.view([{"node_id": "b", "seq": 7, "version": "0.1.0", "seen_at": rfc3339(now - 1), "poll_seconds": 1},
                        {"node_id": "a", "seq": 9, "version": "0.0.9", "seen_at": rfc3339(now - 10)},
                        {"node_id": "c", "unreadable": "the status is not valid"}], 9, "0.1.0", 1, now)
    assert [(r["node_id"], r["lag"], r["version_skew"], r["unseen"]) for r in rows] == [
        ("a", 0, True, True), ("b", 2, False, False), ("c", None, False, True)]
    assert status.problems(rows[2]) == {"unseen", "error"}



NOT_STRICT = [b'{"node_id": "0011223344556677", "seq": NaN}', b'{"holder": Infinity}', b'{"expires_at": 1e400}',
              b"[" * 3000 + b"]" * 3000]


@pytest.mark.parametrize("raw", NOT_STRICT, ids=["nan", "infinity", "too-large", "nested"])
def test_what_nodes_read_from_the_bucket_refuses_nan_and_deep_nesting_without_raising(raw):
    with pytest.raises(Refused) as refused:
        bundle.parse(raw, FLEET, _chain()[2])
    assert refused.value.code == "malformed"
    assert status._clean(raw, "0011223344556677", bytes(32)) is None
    assert lease._parse(raw, bytes(32)) == {}
    assert challenges.decode(raw, FLEET, "t", lambda data, signature: True, time.time()) is None
    with pytest.raises(Refused) as refused:
        joincode.redeem(joincode.PREFIX + joincode._urlsafe(raw), None, time.time())
    assert refused.value.code == "bad_join_code"

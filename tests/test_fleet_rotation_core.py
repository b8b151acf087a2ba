"""fleet/promotion: a rotation cut by kill -9 is completed or dropped at start, so the signing
key on disk always matches the key chain the state publishes; and who may be promoted."""

import os

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from contentnode.fleet import keys, promotion
from contentnode.fleet.promotion import NEXT_FILE, finish_rotation
from contentnode.fleet.wire import Refused, unb64


def _setup(tmp_path):
    data_dir = str(tmp_path)
    old, new = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    keys.save_signing(data_dir, old)
    keys.save_signing(data_dir, new, NEXT_FILE)
    return data_dir, old, new


def _signing_public(data_dir):
    with open(os.path.join(keys.folder(data_dir), keys.SIGNING_FILE), "rb") as f:
        seed = unb64(f.read().decode("ascii").strip(), "key", 32)
    return keys.public_text(Ed25519PrivateKey.from_private_bytes(seed))


def test_killed_after_the_state_named_the_new_key(tmp_path):
    data_dir, _, new = _setup(tmp_path)
    finish_rotation(data_dir, {"role": "primary", "pin": {"public_key": keys.public_text(new)}})
    assert _signing_public(data_dir) == keys.public_text(new)
    assert not os.path.exists(os.path.join(keys.folder(data_dir), NEXT_FILE))


def test_killed_before_the_state_named_it(tmp_path):
    data_dir, old, _ = _setup(tmp_path)
    finish_rotation(data_dir, {"role": "primary", "pin": {"public_key": keys.public_text(old)}})
    assert _signing_public(data_dir) == keys.public_text(old)
    assert not os.path.exists(os.path.join(keys.folder(data_dir), NEXT_FILE))


def test_nothing_pending_changes_nothing(tmp_path):
    data_dir = str(tmp_path)
    key = Ed25519PrivateKey.generate()
    keys.save_signing(data_dir, key)
    finish_rotation(data_dir, {"role": "replica"})
    assert _signing_public(data_dir) == keys.public_text(key)


@pytest.mark.parametrize("state, refused", [
    ({"role": "replica", "seq": 0, "applied_at": None}, "never_applied"),      # every bundle refused since it joined
    ({"role": "replica", "seq": None}, "never_applied"),
    ({"role": "replica", "seq": 7, "applied_at": "2026-11-24T10:00:00Z"}, None),
    ({"role": "replica", "seq": 7, "applied_at": None}, None),                 # a demoted primary: it published seq 7
    ({"role": "primary", "seq": 7}, "not_replica"),
    ({"role": "standalone"}, "not_replica"),
])
def test_who_may_be_promoted(state, refused):
    if refused is None:
        promotion.check_promotable(state)
    else:
        with pytest.raises(Refused) as caught:
            promotion.check_promotable(state)
        assert caught.value.code == refused

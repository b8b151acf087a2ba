"""The cap on waiting passwordless challenges, in process: one client is an IPv4 address or an
IPv6 /64, so addresses taken from one /64 cannot fill the cap every sign-in shares."""

import pytest

from contentnode.auth import passkeys
from contentnode.auth.ratelimit import address_group, address_key, token_key
from contentnode.clock import Clock


@pytest.mark.parametrize("ip,group", [
    ("192.0.2.1", "192.0.2.1"),
    ("2001:db8:1:2:aaaa:bbbb:cccc:dddd", "2001:db8:1:2::/64"),
    ("2001:DB8:1:2::1", "2001:db8:1:2::/64"),
    ("::ffff:192.0.2.7", "192.0.2.7"),
])
def test_an_address_counts_by_its_group(ip, group):
    assert address_group(ip) == group
    assert address_key(ip) == f"ip:{group}" and token_key(ip) == f"token-ip:{group}"


def test_neighbouring_64s_are_apart():
    assert address_key("2001:db8:1:2::1") != address_key("2001:db8:1:3::1")


def _issue(challenges, address):
    return challenges.issue(passkeys.PASSWORDLESS, None, None, "localhost", "http://localhost:1", address)


def test_addresses_of_one_64_share_the_per_address_cap():
    challenges = passkeys.Challenges(Clock())
    accepted = 0
    for host in range(1, 33):  # 32 addresses x 16: once enough to fill the cap of 512 for everyone
        for _ in range(passkeys.MAX_ANONYMOUS_PER_ADDRESS):
            try:
                _issue(challenges, f"2001:db8:1:2::{host:x}")
                accepted += 1
            except passkeys.ChallengesFull:
                pass
    assert accepted == passkeys.MAX_ANONYMOUS_PER_ADDRESS
    with pytest.raises(passkeys.ChallengesFull):
        _issue(challenges, "2001:db8:1:2:ffff::1")
    assert _issue(challenges, "2001:db8:1:3::1").address == "2001:db8:1:3::/64"
    assert _issue(challenges, "192.0.2.1").address == "192.0.2.1"

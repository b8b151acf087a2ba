"""Renewal scheduling, backoff and expiry warnings."""

from contentnode.core.renewal import DAY, FIRST_BACKOFF, MAX_BACKOFF, Renewer


class _World:
    def __init__(self):
        self.certs = {}  # host -> (not_after, renewable)
        self.events = []
        self.renewed = []
        self.broken = set()

    def listing(self):
        return [(h, na, r) for h, (na, r) in self.certs.items()]

    def renew(self, host):
        if host in self.broken:
            raise RuntimeError(f"CA refused {host}")
        self.renewed.append(host)
        self.certs[host] = (self.certs[host][0] + 90 * DAY, True)

    def emit(self, name, **fields):
        self.events.append((name, fields))

    def renewer(self):
        return Renewer(self.listing, self.renew, self.emit)


def test_only_due_acme_certificates_are_renewed():
    w = _World()
    now = 1_000_000_000
    w.certs = {"due.example": (now + 29 * DAY, True), "fresh.example": (now + 60 * DAY, True),
               "uploaded.example": (now + 20 * DAY, False)}
    outcomes = w.renewer().run_once(now)
    assert outcomes == [("due.example", "renewed")]
    assert w.renewed == ["due.example"]
    assert w.events == []


def test_failure_backs_off_and_reports():
    w = _World()
    now = 1_000_000_000
    w.certs = {"a.example": (now + 20 * DAY, True)}
    w.broken.add("a.example")
    r = w.renewer()
    assert r.run_once(now) == [("a.example", "failed")]
    name, fields = w.events[-1]
    assert name == "cert_renewal_failed" and fields["attempts"] == 1 and "CA refused" in fields["error"]
    assert fields["retry_in_seconds"] == FIRST_BACKOFF
    assert r.run_once(now + FIRST_BACKOFF - 1) == [("a.example", "waiting")]
    assert r.run_once(now + FIRST_BACKOFF) == [("a.example", "failed")]
    assert w.events[-1][1]["retry_in_seconds"] == 2 * FIRST_BACKOFF
    assert r.backoff(20) == MAX_BACKOFF
    w.broken.clear()
    assert r.run_once(now + 3 * FIRST_BACKOFF) == [("a.example", "renewed")]
    # after a success the next due date starts a fresh count
    assert r.run_once(now + 3 * FIRST_BACKOFF) == []


def test_expiry_warnings_once_per_threshold():
    w = _World()
    now = 1_000_000_000
    w.certs = {"up.example": (now + 13 * DAY, False)}
    r = w.renewer()
    r.run_once(now)
    r.run_once(now + 60)
    assert w.events == [("cert_expiring", {"host": "up.example", "days_left": 13, "expired": False})]
    r.run_once(now + 11 * DAY)
    assert w.events[-1] == ("cert_expiring", {"host": "up.example", "days_left": 2, "expired": False})
    assert len(w.events) == 2


def test_first_sight_close_to_expiry_warns_once():
    w = _World()
    now = 1_000_000_000
    w.certs = {"late.example": (now - DAY, False)}
    w.renewer().run_once(now)
    assert w.events == [("cert_expiring", {"host": "late.example", "days_left": 0, "expired": True})]

"""The webhook and ntfy channels against real local receivers: the webhook's
signature is checked by the receiver's own code (tests/peers/webhook.py), and
ntfy's path, token and headers as ntfy documents them; retries, Retry-After,
redirects, the outbound rules, and the configuration rules of both."""

import http.client
import ssl
import time

import pytest

from contentnode.core import notify
from contentnode.core.fields import FieldError
from contentnode.core.netguard import OutboundPolicy
from contentnode.core.notify_http import retry_after, send_ntfy, send_webhook
from contentnode.core.notify_transport import DeliveryError
from tests.peers.webhook import NtfyReceiver, WebhookReceiver
from tests.test_notify_core import Recorder

SECRET = "whk-" + "s3cr3t" * 5
NTFY_TOKEN = "tk_" + "a" * 29
OPEN = OutboundPolicy(allow_private=True)
FAST = notify.RetryPolicy(first=0.05, factor=1.0)


def message(event="user_created", **fields):
    fields = fields or {"username": "alice", "role": "viewer", "by": "root"}
    return notify.make_message(event, fields, "edge-1", time.time())


def webhook_cfg(receiver, **extra):
    return dict(notify.DEFAULT_CONFIG["webhook"], enabled=True, url=receiver.url + "/hooks/cn", secret=SECRET,
                **extra)


def ntfy_cfg(receiver, **extra):
    return dict(notify.DEFAULT_CONFIG["ntfy"], enabled=True, server=receiver.url, topic="ops-alerts", **extra)


def run_queue(cfg, retry=FAST, event="user_created", fields=None, count=1, now=time.time):
    """Queue one event on a started notifier; the outcomes once `count` arrived."""
    rec = Recorder()
    n = notify.Notifier(lambda: cfg, lambda: OPEN, lambda: "edge-1", on_result=rec, retry=retry, timeout=2, now=now)
    n.start()
    try:
        n.handle_event(event, fields or {"username": "alice", "role": "viewer", "by": "root"})
        return rec.wait(count)
    finally:
        n.stop()


def configured(channel, receiver):
    cfg = notify.effective({})
    cfg[channel] = webhook_cfg(receiver) if channel == "webhook" else ntfy_cfg(receiver)
    return cfg


# --- webhook ---------------------------------------------------------------

def test_webhook_delivery_is_signed_and_verified_by_the_receiver():
    with WebhookReceiver(SECRET) as receiver:
        sent = message(private_key="PEM", username="alice")
        detail = send_webhook(webhook_cfg(receiver), sent, OPEN, time.time, timeout=5)
        got = receiver.wait_for(1)[0]
    assert detail == "HTTP 200 OK" and got["refused"] is None and got["path"] == "/hooks/cn"
    body = got["json"]
    assert body["id"] == sent.id == got["headers"]["X-Contentnode-Event-Id"]
    assert body["event"] == "user_created" == got["headers"]["X-Contentnode-Event"]
    assert body["node"] == "edge-1" and body["subject"] == "[edge-1] User created: alice"
    assert body["fields"] == {"username": "alice"}  # secret-looking fields never leave the node
    assert got["headers"]["Content-Type"] == "application/json"
    assert SECRET.encode() not in got["raw"] and SECRET not in str(got["headers"])


def test_webhook_with_another_secret_is_refused_by_the_receiver():
    with WebhookReceiver("another-secret-of-the-receiver") as receiver:
        with pytest.raises(DeliveryError) as err:
            send_webhook(webhook_cfg(receiver), message(), OPEN, time.time, timeout=5)
    assert str(err.value) == "the webhook answered HTTP 401: {\"error\": \"bad signature\"}"
    assert err.value.retry is False


def replay(receiver, captured):
    """Send a captured delivery again, byte for byte, as an eavesdropper would."""
    conn = http.client.HTTPConnection("127.0.0.1", receiver._server.port, timeout=5)
    headers = {k: v for k, v in captured["headers"].items() if k.lower() not in ("host", "connection")}
    conn.request("POST", captured["path"], body=captured["raw"], headers=headers)
    status = conn.getresponse().status
    conn.close()
    return status


def test_an_old_timestamp_and_a_replay_are_refused():
    """The timestamp is signed: a delivery signed 10 minutes ago is refused; one captured and
    sent again is a duplicate of an accepted event id at first, and refused once it is old."""
    with WebhookReceiver(SECRET) as receiver:
        with pytest.raises(DeliveryError) as err:
            send_webhook(webhook_cfg(receiver), message(), OPEN, lambda: time.time() - 600, timeout=5)
        assert "HTTP 400" in str(err.value) and "timestamp outside the tolerance" in str(err.value)
        assert err.value.retry is False
        send_webhook(webhook_cfg(receiver), message(), OPEN, time.time, timeout=5)
        captured = receiver.wait_for(2)[1]
        assert captured["status"] == 200 and captured["duplicate"] is False
        assert replay(receiver, captured) == 200 and receiver.deliveries[2]["duplicate"] is True
        receiver.clock_offset = 301
        assert replay(receiver, captured) == 400
    assert receiver.deliveries[3]["refused"] == "timestamp outside the tolerance"


def test_webhook_over_https_with_a_test_ca():
    with WebhookReceiver(SECRET, tls=True) as receiver:
        trusted = ssl.create_default_context(cafile=receiver.ca_file)
        assert send_webhook(webhook_cfg(receiver), message(), OPEN, time.time, 5, trusted) == "HTTP 200 OK"
        with pytest.raises(DeliveryError) as err:
            send_webhook(webhook_cfg(receiver), message(), OPEN, time.time, timeout=5)
        assert receiver.wait_for(1)[0]["refused"] is None and len(receiver.deliveries) == 1
    assert "certificate not trusted" in str(err.value) and err.value.retry is False


def test_two_server_errors_then_success_is_three_deliveries_of_one_event_id():
    with WebhookReceiver(SECRET) as receiver:
        receiver.fail_next(500, count=2)
        results = run_queue(configured("webhook", receiver))
        got = receiver.wait_for(3)
    assert results == [("webhook", "user_created", True, "HTTP 200 OK")]
    assert [d["status"] for d in got] == [500, 500, 200]
    assert len({d["json"]["id"] for d in got}) == 1 and len({d["raw"] for d in got}) == 1
    assert all(d["refused"] is None for d in got) and got[2]["duplicate"] is False


@pytest.mark.parametrize("status, deliveries", [(404, 1), (400, 1), (410, 1), (408, 4), (503, 4)])
def test_which_answers_are_retried(status, deliveries):
    with WebhookReceiver(SECRET) as receiver:
        receiver.fail_next(status, count=10)
        results = run_queue(configured("webhook", receiver))
        assert len(receiver.wait_for(deliveries)) == deliveries
        time.sleep(0.3)
        assert len(receiver.deliveries) == deliveries
    assert results[0][2] is False and f"HTTP {status}" in results[0][3]


def test_retry_after_is_honoured_up_to_its_cap():
    with WebhookReceiver(SECRET) as receiver:
        receiver.fail_next(429, headers={"Retry-After": "1"})
        receiver.fail_next(503, headers={"Retry-After": "3600"})
        results = run_queue(configured("webhook", receiver), retry=notify.RetryPolicy(
            first=0.05, factor=1.0, retry_after_cap=1.5))
        got = receiver.wait_for(3)
    assert results[0][2] is True
    first_wait, second_wait = got[1]["at"] - got[0]["at"], got[2]["at"] - got[1]["at"]
    assert 0.95 <= first_wait < 1.4 and 1.45 <= second_wait < 2.5  # asked 1 s; asked an hour, capped at 1.5 s


def test_retries_stop_at_the_total_time_limit():
    with WebhookReceiver(SECRET) as receiver:
        receiver.fail_next(503, count=5, headers={"Retry-After": "120"})
        results = run_queue(configured("webhook", receiver), retry=notify.RetryPolicy(
            first=0.05, factor=1.0, give_up_after=60))
        assert len(receiver.wait_for(1)) == 1
    assert results[0][2] is False
    assert results[0][3] == ("the webhook answered HTTP 503: {\"error\": \"scripted failure\"}, retry after 120 s "
                             "(not retried: the next try would pass 60 s after queueing)")


def test_a_timeout_is_retried():
    with WebhookReceiver(SECRET) as receiver:
        receiver.fail_next(200, delay=3)  # answers after the 2 s timeout
        results = run_queue(configured("webhook", receiver))
        got = receiver.wait_for(2)
    assert results[0][2] is True and got[0]["json"]["id"] == got[1]["json"]["id"]


def test_a_redirect_is_not_followed():
    with WebhookReceiver(SECRET) as receiver, WebhookReceiver(SECRET) as elsewhere:
        receiver.fail_next(302, headers={"Location": elsewhere.url + "/x"})
        with pytest.raises(DeliveryError) as err:
            send_webhook(webhook_cfg(receiver), message(), OPEN, time.time, timeout=5)
        assert elsewhere.deliveries == []
    assert "redirect (HTTP 302)" in str(err.value) and err.value.retry is False


@pytest.mark.parametrize("url, policy, why", [
    ("http://169.254.169.254/latest", OPEN, "link-local"),
    ("http://[fe80::1]/hook", OPEN, "link-local"),
    ("http://127.0.0.1:9/hook", OutboundPolicy(allow_private=False), "private or loopback"),
])
def test_the_outbound_rules_apply_at_send(url, policy, why):
    with pytest.raises(DeliveryError) as err:
        send_webhook(dict(notify.DEFAULT_CONFIG["webhook"], url=url, secret=SECRET), message(), policy,
                     time.time, timeout=2)
    assert why in str(err.value) and err.value.retry is False


# --- ntfy ------------------------------------------------------------------

def test_ntfy_publishes_to_the_topic_with_token_title_priority_and_tags():
    with NtfyReceiver(token=NTFY_TOKEN) as receiver:
        sent = message("cert_renewal_failed", host="a.example", error="rate limited", attempts=2,
                       retry_in_seconds=60)
        detail = send_ntfy(ntfy_cfg(receiver, token=NTFY_TOKEN), sent, OPEN, time.time, timeout=5)
        got = receiver.wait_for(1)[0]
    assert detail == "sent (id msg1)"
    assert got["path"] == "/ops-alerts" and got["authorization"] == f"Bearer {NTFY_TOKEN}"
    assert got["title"] == "[edge-1] Certificate renewal failed for a.example"
    assert got["priority"] == "4" and got["tags"] == "warning,cert_renewal_failed"
    assert got["message"] == sent.text


def test_ntfy_non_ascii_title_and_default_priority():
    with NtfyReceiver() as receiver:
        cfg = dict(ntfy_cfg(receiver), server=receiver.url + "/")
        send_ntfy(cfg, message(username="zoë"), OPEN, time.time, timeout=5)
        got = receiver.wait_for(1)[0]
    assert got["title"] == "[edge-1] User created: zoë" and got["priority"] == "3"
    assert got["tags"] == "bust_in_silhouette,user_created" and got["authorization"] is None


def test_ntfy_refusal_is_shown_and_not_retried():
    with NtfyReceiver(token=NTFY_TOKEN) as receiver:
        with pytest.raises(DeliveryError) as err:
            send_ntfy(ntfy_cfg(receiver, token="tk_wrong"), message(), OPEN, time.time, timeout=5)
    assert str(err.value) == "ntfy answered HTTP 403: forbidden" and err.value.retry is False
    assert "tk_wrong" not in str(err.value)


def test_ntfy_server_error_is_retried():
    with NtfyReceiver() as receiver:
        receiver.fail_next(502)
        results = run_queue(configured("ntfy", receiver))
        got = receiver.wait_for(2)
    assert [d["status"] for d in got] == [502, 200] and results == [("ntfy", "user_created", True, "sent (id msg2)")]


# --- configuration -----------------------------------------------------------

@pytest.mark.parametrize("body, field", [
    ({"webhook": {"url": "http://hooks.example.com/in"}}, "webhook.url"),
    ({"webhook": {"url": "ftp://hooks.example.com/in"}}, "webhook.url"),
    ({"webhook": {"url": "https://user:pw@hooks.example.com/"}}, "webhook.url"),
    ({"webhook": {"url": "https://hooks.example.com/in?token=x"}}, "webhook.url"),  # docs/API.md: no query
    ({"webhook": {"secret": "short"}}, "webhook.secret"),
    ({"webhook": {"secret": "has spaces in it, sixteen+"}}, "webhook.secret"),
    ({"webhook": {"secret": SECRET, "generate_secret": True}}, "webhook.generate_secret"),
    ({"webhook": {"generate_secret": "yes"}}, "webhook.generate_secret"),
    ({"webhook": {"enabled": True, "secret": SECRET}}, "webhook.url"),
    ({"ntfy": {"enabled": True}}, "ntfy.topic"),
    ({"ntfy": {"topic": "a/b"}}, "ntfy.topic"),
    ({"ntfy": {"topic": "x" * 65}}, "ntfy.topic"),
    ({"ntfy": {"server": "https://ntfy.example.com/?x=1"}}, "ntfy.server"),
    ({"ntfy": {"token": "has space"}}, "ntfy.token"),
    ({"ntfy": {"enabled": True, "topic": "t", "token": NTFY_TOKEN, "server": "http://192.168.1.5"}},
     "ntfy.server"),
])
def test_bad_channel_config_is_refused(body, field):
    with pytest.raises(FieldError) as err:
        notify.merge(notify.effective({}), body)
    assert err.value.field == field


def test_plain_http_only_to_the_operators_own_network():
    cfg = notify.merge(notify.effective({}), {
        "webhook": {"url": "http://10.1.2.3:8080/hook"},
        "ntfy": {"enabled": True, "topic": "t", "server": "http://127.0.0.1:8080", "token": NTFY_TOKEN}})
    assert cfg["webhook"]["url"] == "http://10.1.2.3:8080/hook" and cfg["ntfy"]["token"] == NTFY_TOKEN
    assert notify.merge(cfg, {"ntfy": {"server": "http://192.168.1.5", "token": None}})["ntfy"]["token"] is None


def test_a_secret_is_generated_when_enabled_without_one_and_on_request():
    cfg = notify.merge(notify.effective({}), {"webhook": {"enabled": True, "url": "https://hooks.example.com/"}})
    first = cfg["webhook"]["secret"]
    assert len(first) >= 40
    kept = notify.merge(cfg, {"webhook": {"url": "https://other.example.com/"}})  # the secret never leaves
    assert kept["webhook"]["secret"] == first
    rotated = notify.merge(kept, {"webhook": {"generate_secret": True}})["webhook"]["secret"]
    assert rotated != first and len(rotated) >= 40
    with pytest.raises(FieldError) as err:  # enabled: clearing it leaves nothing to sign with
        notify.merge(kept, {"webhook": {"secret": None}})
    assert err.value.field == "webhook.secret"


def test_the_ntfy_token_must_be_given_again_for_another_server():
    cfg = notify.merge(notify.effective({}), {"ntfy": {"topic": "t", "token": NTFY_TOKEN}})
    with pytest.raises(FieldError) as err:
        notify.merge(cfg, {"ntfy": {"server": "https://ntfy.attacker.example"}})
    assert err.value.field == "ntfy.token"


@pytest.mark.parametrize("url, policy, refused", [
    ("http://169.254.169.254/x", OPEN, True),
    ("https://[fe80::1]/x", OPEN, True),
    ("http://127.0.0.1:8080/x", OutboundPolicy(allow_private=False), True),
    ("http://127.0.0.1:8080/x", OPEN, False),
    ("https://hooks.invalid/x", OutboundPolicy(allow_private=False), False),  # names: vetted at each send
])
def test_address_literals_are_vetted_when_saved(url, policy, refused):
    body = {"webhook": {"url": url}}
    cfg = notify.merge(notify.effective({}), body)
    if not refused:
        notify.check_destinations(cfg, body, policy)
        return
    with pytest.raises(FieldError) as err:
        notify.check_destinations(cfg, body, policy)
    assert err.value.field == "webhook.url"


def test_backoff_is_exponential_with_jitter_and_honours_retry_after():
    import random
    policy = notify.RetryPolicy()
    rng = random.Random(7)
    for attempt, nominal in enumerate((5, 25, 125)):
        waits = [policy.delay(attempt, None, rng) for _ in range(200)]
        assert nominal / 2 <= min(waits) and max(waits) <= nominal and max(waits) - min(waits) > nominal / 4
    assert policy.delay(0, 60, rng) == 60 and policy.delay(0, 86400, rng) == 300


@pytest.mark.parametrize("header, seconds", [
    ("120", 120.0), (" 7 ", 7.0), ("99999999999999", 1e8), ("Tue, 24 Nov 2026 15:02:00 GMT", 120.0),
    ("Tue, 24 Nov 2026 14:00:00 GMT", 0.0), ("soon", None), ("-5", None), ("", None), (None, None),
])
def test_retry_after_takes_seconds_or_an_http_date(header, seconds):
    now = 1795532400.0  # 2026-11-24T15:00:00Z
    assert retry_after(header, lambda: now) == seconds

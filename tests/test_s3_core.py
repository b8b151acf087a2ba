"""core/s3: SigV4 against AWS's published vectors, and the client against a real SeaweedFS."""

import calendar
import hashlib
import select
import socket
import ssl
import time
import uuid

import pytest

from contentnode.core import netguard, s3, s3_errors, s3_origin, s3_records, s3_sign
from tests.certgen import cert_pem, key_pem, make_ca, make_leaf
from tests.peers.seaweed import seaweed  # noqa: F401  (session fixture)
from tests.peers.stub import LoopbackListener

# --- AWS Signature Version 4 test suite (AKIDEXAMPLE, 2015-08-30T12:36:00Z, us-east-1, "service")

SUITE_KEY = ("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
SUITE_DATE = "20150830T123600Z"
HOST = "example.amazonaws.com"

SUITE = [
    # name, method, raw path, query pairs, extra headers, body, expected signature
    ("get-vanilla", "GET", "/", [], {}, b"",
     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
    ("get-vanilla-query-order-key-case", "GET", "/", [("Param2", "value2"), ("Param1", "value1")], {}, b"",
     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
    ("get-vanilla-empty-query-key", "GET", "/", [("Param1", "value1")], {}, b"",
     "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"),
    ("get-vanilla-query-unreserved", "GET", "/",
     [("-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
       "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")], {}, b"",
     "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"),
    ("get-vanilla-utf8-query", "GET", "/", [("\u1234", "bar")], {}, b"",
     "2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04"),
    ("get-unreserved", "GET", "/-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
     [], {}, b"", "07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f"),
    ("get-utf8", "GET", "/\u1234", [], {}, b"",
     "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
    ("get-header-key-duplicate", "GET", "/", [], {"My-Header1": "value2,value2,value1"}, b"",
     "c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"),
    ("get-header-value-order", "GET", "/", [], {"My-Header1": "value4,value1,value3,value2"}, b"",
     "08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01"),
    ("get-header-value-trim", "GET", "/", [], {"My-Header1": " value1", "My-Header2": '"a   b   c"'}, b"",
     "acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"),
    ("post-vanilla", "POST", "/", [], {}, b"",
     "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
    ("post-vanilla-query", "POST", "/", [("Param1", "value1")], {}, b"",
     "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"),
    ("post-vanilla-query-nonunreserved", "POST", "/",
     [("@#$%^", ""), ("+", '/,?><`";:\\|][{}')], {}, b"",
     "66c82657c86e26fb25238d0e69f011edc4c6df5ae71119d7cb98ed9b87393c1e"),
    ("post-header-key-sort", "POST", "/", [], {"My-Header1": "value1"}, b"",
     "c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c"),
    ("post-header-value-case", "POST", "/", [], {"My-Header1": "VALUE1"}, b"",
     "cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d"),
    ("post-x-www-form-urlencoded", "POST", "/", [], {"Content-Type": "application/x-www-form-urlencoded"},
     b"Param1=value1", "ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"),
    ("post-x-www-form-urlencoded-parameters", "POST", "/", [],
     {"Content-Type": "application/x-www-form-urlencoded; charset=utf8"},
     b"Param1=value1", "1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe"),
]


@pytest.mark.parametrize("name,method,path,query,extra,body,expected", SUITE, ids=[c[0] for c in SUITE])
def test_sigv4_matches_aws_test_suite(name, method, path, query, extra, body, expected):
    headers = {"Host": HOST, "X-Amz-Date": SUITE_DATE, **extra}
    auth = s3_sign.authorization(method, s3_sign.uri_encode(path, keep_slash=True), s3_sign.canonical_query(query),
                            headers, hashlib.sha256(body).hexdigest(), *SUITE_KEY,
                            "us-east-1", "service", SUITE_DATE)
    assert auth.endswith(f"Signature={expected}")
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, ")


def test_canonical_request_of_get_vanilla_is_the_published_one():
    creq, signed = s3_sign.canonical_request("GET", "/", "", {"Host": HOST, "X-Amz-Date": SUITE_DATE},
                                        s3_sign.EMPTY_SHA256)
    assert creq == ("GET\n/\n\nhost:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
                    "host;x-amz-date\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    assert signed == "host;x-amz-date"


# --- the S3 developer guide's worked example: GET /test.txt, Range bytes=0-9, 2013-05-24

S3_DOC_KEY = ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
S3_DOC_TIME = calendar.timegm((2013, 5, 24, 0, 0, 0))


def _doc_client(path_style=False):
    cfg = s3_records.BucketConfig("https://s3.amazonaws.com", "us-east-1", "examplebucket", *S3_DOC_KEY,
                                  path_style=path_style)
    return s3.S3Client(cfg, netguard.OutboundPolicy(), clock=lambda: S3_DOC_TIME)


def test_client_signs_the_s3_guide_get_object_example():
    client = _doc_client()
    _, host, port, host_header, path = client.config.target("test.txt")
    assert (host, port, host_header, path) == ("examplebucket.s3.amazonaws.com", 443,
                                               "examplebucket.s3.amazonaws.com", "/test.txt")
    headers = client.signed_headers("GET", host_header, path, "", {"range": "bytes=0-9"})
    assert headers["Authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, "
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, "
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")


def test_client_signs_the_s3_guide_list_objects_example():
    client = _doc_client()
    query = s3_sign.canonical_query([("prefix", "J"), ("max-keys", "2")])
    assert query == "max-keys=2&prefix=J"
    headers = client.signed_headers("GET", "examplebucket.s3.amazonaws.com", "/", query)
    assert headers["Authorization"].endswith(
        "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")


# --- addressing and parsing


def test_path_style_and_virtual_hosted_targets():
    assert _doc_client(path_style=True).config.target("a b/c+d.txt")[1:] == (
        "s3.amazonaws.com", 443, "s3.amazonaws.com", "/examplebucket/a%20b/c%2Bd.txt")
    assert _doc_client(path_style=True).config.target(None)[4] == "/examplebucket"
    cfg = s3_records.BucketConfig("http://127.0.0.1:9000", "r", "bkt", "a", "s", path_style=True)
    assert cfg.target("k") == ("http", "127.0.0.1", 9000, "127.0.0.1:9000", "/bkt/k")
    cfg6 = s3_records.BucketConfig("http://[::1]:9000", "r", "bkt", "a", "s", path_style=True)
    assert cfg6.target("k")[3] == "[::1]:9000"
    virtual = s3_records.BucketConfig("http://minio.lan:9000", "r", "bkt", "a", "s")
    assert virtual.target("x/y")[1:] == ("bkt.minio.lan", 9000, "bkt.minio.lan:9000", "/x/y")


def test_an_endpoint_without_a_host_is_a_clear_error_not_a_made_up_host():
    """Once the target was "bkt.None" (virtual) or a TypeError (path style)."""
    for path_style in (False, True):
        cfg = s3_records.BucketConfig("http://", "r", "bkt", "a", "s", path_style=path_style)
        with pytest.raises(s3_errors.S3Error) as err:
            cfg.target("k")
        assert err.value.code == "url"


def test_config_repr_hides_the_secret():
    cfg = s3_records.BucketConfig("http://h", "r", "b", "AKID", "TOPSECRET")
    assert "TOPSECRET" not in repr(cfg) and "AKID" not in repr(cfg)


@pytest.mark.parametrize("status,s3_code,code", [
    (403, "SignatureDoesNotMatch", "credentials_refused"), (403, "InvalidAccessKeyId", "credentials_refused"),
    (404, "NoSuchBucket", "no_such_bucket"), (404, "NoSuchKey", "no_such_key"),
    (403, "RequestTimeTooSkewed", "clock_skew"), (403, "AccessDenied", "access_denied"),
    (400, "AuthorizationHeaderMalformed", "wrong_region"), (503, "SlowDown", "s3_error")])
def test_error_bodies_become_clear_causes(status, s3_code, code):
    body = f"<Error><Code>{s3_code}</Code><Message>detail here</Message></Error>".encode()
    err = s3_errors.error_from_response(status, {}, body, "object")
    assert (err.code, err.s3_code, err.status) == (code, s3_code, status)
    assert "detail here" in err.message


def test_bodyless_errors_are_interpreted_by_status():
    assert s3_errors.error_from_response(404, {}, b"", "object").code == "no_such_key"
    assert s3_errors.error_from_response(404, {}, b"", "bucket").code == "no_such_bucket"
    moved = s3_errors.error_from_response(301, {"x-amz-bucket-region": "eu-west-1"}, b"", "bucket")
    assert moved.code == "wrong_region" and "eu-west-1" in moved.message


def test_parse_list_with_namespace():
    body = (b'<?xml version="1.0"?><ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b"<IsTruncated>true</IsTruncated><NextContinuationToken>tok</NextContinuationToken>"
            b"<Contents><Key>a.txt</Key><Size>3</Size><ETag>\"e\"</ETag></Contents>"
            b"<Contents><Key>b.txt</Key><Size>4</Size></Contents></ListBucketResult>")
    page = s3_records.parse_list(body)
    assert [k["key"] for k in page.keys] == ["a.txt", "b.txt"]
    assert page.keys[0]["size"] == 3 and page.truncated and page.next_token == "tok"
    with pytest.raises(s3_errors.S3Error) as info:
        s3_records.parse_list(b"<not xml")
    assert info.value.code == "protocol"


# --- against a real SeaweedFS


@pytest.fixture(scope="module")
def bucket(seaweed):
    name = "core-" + uuid.uuid4().hex[:8]
    seaweed.create_bucket(name)
    seaweed.put_object(name, "docs/hello.txt", b"hello world", "text/plain")
    seaweed.put_object(name, "docs/deep/b.bin", bytes(range(256)) * 4)
    seaweed.put_object(name, "with space/\u00e9t\u00e9+1.txt", b"unicode", "text/plain")
    seaweed.put_object(name, "empty.txt", b"", "text/plain")
    return name


def _client(seaweed, bucket, **over):
    fields = {"endpoint": seaweed.endpoint, "region": seaweed.region, "bucket": bucket,
              "access_key": seaweed.access_key, "secret_key": seaweed.secret_key, "path_style": True}
    fields.update(over)
    return s3.S3Client(s3_records.BucketConfig(**fields), netguard.OutboundPolicy(), timeout=10)


def test_head_get_and_range_against_seaweed(seaweed, bucket):
    client = _client(seaweed, bucket)
    info = client.head_object("docs/hello.txt")
    assert (info.status, info.size, info.content_type) == (200, 11, "text/plain")
    with client.get_object("docs/deep/b.bin", (10, 19)) as stream:
        assert stream.info.status == 206 and stream.info.size == 1024
        assert b"".join(stream.chunks()) == bytes(range(10, 20))
    with client.get_object("with space/\u00e9t\u00e9+1.txt") as stream:
        assert stream.read() == b"unicode"


def test_get_refuses_an_object_over_the_cap(seaweed, bucket):
    with pytest.raises(s3_errors.S3Error) as info:
        _client(seaweed, bucket).get_object("docs/deep/b.bin", max_bytes=100)
    assert info.value.code == "too_large"


def test_list_pages_through_the_bucket(seaweed, bucket):
    client = _client(seaweed, bucket)
    first = client.list_objects(max_keys=2)
    assert len(first.keys) == 2 and first.truncated and first.next_token
    rest = client.list_objects(max_keys=10, token=first.next_token)
    keys = [k["key"] for k in first.keys + rest.keys]
    assert sorted(keys) == sorted(["docs/hello.txt", "docs/deep/b.bin", "with space/\u00e9t\u00e9+1.txt",
                                   "empty.txt"])
    assert [k["key"] for k in client.list_objects(prefix="docs/").keys] == ["docs/deep/b.bin",
                                                                            "docs/hello.txt"]


def test_check_ok_with_good_credentials(seaweed, bucket):
    report = s3_origin.check_bucket(_client(seaweed, bucket))
    assert report["ok"] is True
    assert [s["name"] for s in report["steps"]] == ["resolve", "connect", "authenticate", "list"]
    assert all(s["ok"] and s["ms"] >= 0 for s in report["steps"])


def test_check_names_the_wrong_secret(seaweed, bucket):
    report = s3_origin.check_bucket(_client(seaweed, bucket, secret_key="not-the-secret"))
    assert report["ok"] is False
    last = report["steps"][-1]
    assert (last["name"], last["ok"], last["code"]) == ("authenticate", False, "credentials_refused")
    assert "secret key" in last["detail"] and "not-the-secret" not in str(report)


def test_check_names_the_missing_bucket(seaweed):
    report = s3_origin.check_bucket(_client(seaweed, "no-such-bucket-here"))
    assert report["ok"] is False
    assert [(s["name"], s["ok"]) for s in report["steps"]][-2:] == [("authenticate", True), ("list", False)]
    assert report["steps"][-1]["code"] == "no_such_bucket"


def test_check_names_the_stopped_server(seaweed, bucket):
    with seaweed.stopped():
        report = s3_origin.check_bucket(_client(seaweed, bucket))
    assert report["ok"] is False
    last = report["steps"][-1]
    assert (last["name"], last["code"]) == ("connect", "connect") and "refused" in last["detail"]


def test_check_names_an_unresolvable_endpoint(seaweed, bucket):
    report = s3_origin.check_bucket(_client(seaweed, bucket, endpoint="http://no-such-host.invalid:9000"))
    assert report["steps"] == [report["steps"][0]] and report["steps"][0]["code"] == "resolve"


def test_check_refuses_a_forbidden_address(seaweed, bucket):
    client = s3.S3Client(_client(seaweed, bucket).config, netguard.OutboundPolicy(allow_private=False))
    report = s3_origin.check_bucket(client)
    assert report["ok"] is False and report["steps"][0]["code"] == "address"


def test_clock_skew_is_named(seaweed, bucket):
    client = _client(seaweed, bucket)
    client.clock = lambda: time.time() - 3 * 3600
    with pytest.raises(s3_errors.S3Error) as info:
        client.list_objects(max_keys=1)
    assert info.value.code == "clock_skew"


def test_probe_existing_missing_and_empty_objects(seaweed, bucket):
    client = _client(seaweed, bucket)
    found = s3_origin.probe_object(client, "docs/hello.txt")
    assert found["ok"] and found["size"] == 11 and found["content_type"] == "text/plain"
    assert found["first_bytes"] == "aGVsbG8gd29ybGQ=" and found["etag"]
    missing = s3_origin.probe_object(client, "docs/nope.txt")
    assert missing["ok"] is False and missing["status"] == 404
    assert missing["error"]["code"] == "no_such_key"
    empty = s3_origin.probe_object(client, "empty.txt")
    assert empty["ok"] and empty["size"] == 0 and empty["first_bytes"] == ""


# --- https endpoints: a TLS front (certificate from a test CA) before the same SeaweedFS


class TlsFront(LoopbackListener):
    """Terminates TLS on a loopback port and relays the bytes to an upstream port."""

    def __init__(self, upstream_port: int, workdir):
        ca, ca_key = make_ca()
        leaf, leaf_key = make_leaf(["localhost"], ca, ca_key, ips=["127.0.0.1"])
        (workdir / "leaf.pem").write_text(cert_pem(leaf))
        (workdir / "leaf.key").write_text(key_pem(leaf_key))
        self.ca_pem = cert_pem(ca)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(workdir / "leaf.pem", workdir / "leaf.key")
        self.upstream_port = upstream_port
        super().__init__()

    def handle(self, raw):
        raw.settimeout(10)
        try:
            client = self.context.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port), timeout=10)
        try:
            while True:
                ready = [client] if client.pending() else select.select([client, upstream], [], [], 10)[0]
                if not ready:
                    return
                for sock in ready:
                    data = sock.recv(65536)
                    if not data:
                        return
                    (upstream if sock is client else client).sendall(data)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()


@pytest.fixture(scope="module")
def tls_front(seaweed, tmp_path_factory):
    front = TlsFront(seaweed.ports["s3"], tmp_path_factory.mktemp("tls"))
    yield front
    front.close()


def test_https_endpoint_with_a_trusted_certificate(seaweed, bucket, tls_front):
    client = _client(seaweed, bucket, endpoint=f"https://localhost:{tls_front.port}")
    client.ssl_context = ssl.create_default_context(cadata=tls_front.ca_pem)
    report = s3_origin.check_bucket(client)
    assert report["ok"] is True, report
    assert "TLS" in report["steps"][1]["detail"] and "verified" in report["steps"][1]["detail"]
    assert s3_origin.probe_object(client, "docs/hello.txt")["first_bytes"] == "aGVsbG8gd29ybGQ="


def test_https_endpoint_with_an_untrusted_certificate_names_tls(seaweed, bucket, tls_front):
    report = s3_origin.check_bucket(_client(seaweed, bucket, endpoint=f"https://localhost:{tls_front.port}"))
    assert report["ok"] is False
    last = report["steps"][-1]
    assert (last["name"], last["code"]) == ("connect", "tls") and "not trusted" in last["detail"]


def test_a_silent_server_is_a_timeout(seaweed, bucket):
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts (backlog), never answers
        client = _client(seaweed, bucket, endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}")
        client.timeout = 0.5
        report = s3_origin.check_bucket(client)
    assert report["ok"] is False
    assert (report["steps"][-1]["name"], report["steps"][-1]["code"]) == ("authenticate", "timeout")


# --- writes, conditional reads and presigned URLs (the fleet's bucket calls)


def test_put_then_conditional_get_then_delete(seaweed, bucket):
    client = _client(seaweed, bucket)
    etag = client.put_object("fleet/one.json", b'{"a":1}', "application/json")
    assert etag
    got = client.get_bytes("fleet/one.json")
    assert (got.body, got.etag, got.not_modified) == (b'{"a":1}', etag, False)
    same = client.get_bytes("fleet/one.json", if_none_match=etag)
    assert same.not_modified and same.body is None
    newer = client.put_object("fleet/one.json", b'{"a":2}', "application/json")
    assert newer != etag
    changed = client.get_bytes("fleet/one.json", if_none_match=etag)
    assert (changed.body, changed.etag) == (b'{"a":2}', newer)
    client.delete_object("fleet/one.json")
    assert client.get_bytes("fleet/one.json") is None
    client.delete_object("fleet/one.json")  # deleting a missing object is no error


def test_put_is_signed_over_its_body_and_refuses_an_oversized_one(seaweed, bucket, monkeypatch):
    client = _client(seaweed, bucket)
    monkeypatch.setattr(s3, "PUT_MAX_BYTES", 10)
    with pytest.raises(s3_errors.S3Error) as info:
        client.put_object("fleet/big", b"x" * 11, "application/octet-stream")
    assert info.value.code == "too_large"
    assert client.get_bytes("fleet/big") is None
    wrong = _client(seaweed, bucket, secret_key="wrong" * 8)
    with pytest.raises(s3_errors.S3Error) as info:
        wrong.put_object("fleet/big", b"x", "application/octet-stream")
    assert info.value.status == 403 and info.value.code == "credentials_refused"


def test_get_bytes_caps_the_body(seaweed, bucket):
    with pytest.raises(s3_errors.S3Error) as info:
        _client(seaweed, bucket).get_bytes("docs/deep/b.bin", max_bytes=100)
    assert info.value.code == "too_large"


def test_get_bytes_of_a_missing_bucket_is_an_error_not_none(seaweed):
    with pytest.raises(s3_errors.S3Error) as info:
        _client(seaweed, "no-such-" + uuid.uuid4().hex[:8]).get_bytes("x")
    assert info.value.code == "no_such_bucket"


def test_presigned_get_works_until_it_expires(seaweed, bucket):
    client = _client(seaweed, bucket)
    client.put_object("fleet/joins/abc", b"sealed", "application/octet-stream")
    url = client.presign_get("fleet/joins/abc", 300)
    assert seaweed.secret_key not in url and "X-Amz-Signature=" in url
    result = netguard.fetch(url, netguard.OutboundPolicy())
    assert (result.status, result.body) == (200, b"sealed")
    tampered = url.replace("X-Amz-Expires=300", "X-Amz-Expires=301")
    assert netguard.fetch(tampered, netguard.OutboundPolicy()).status == 403
    past = _client(seaweed, bucket)
    past.clock = lambda: time.time() - 3600  # signed an hour ago, for 10 minutes
    expired = past.presign_get("fleet/joins/abc", 600)
    assert netguard.fetch(expired, netguard.OutboundPolicy()).status == 403


def test_presign_refuses_lifetimes_sigv4_does_not_allow(seaweed, bucket):
    client = _client(seaweed, bucket)
    for seconds in (0, s3.PRESIGN_MAX_SECONDS + 1):
        with pytest.raises(s3_errors.S3Error):
            client.presign_get("k", seconds)

"""A 304 that moves no body (docs/API.md, "Shared cache": revalidation; docs/ARCHITECTURE.md, the
entry file's head records): the node (built in the test process; a daemon where a test restarts,
stops or kills it, and the two-worker case), the scripted origin, the entry's file read from the
cache folder. The refresh appends a head record to the stored entry's file; the body's bytes and
inode stay; both public workers serve the refreshed head; the file is rewritten after MAX_HEADS
refreshes; a torn record (a death mid-append, by hand and by kill -9) leaves the head before it."""

import concurrent.futures
import gzip
import http.client
import os
import random
import threading
import time

import pytest

from contentnode.core.cache_entries import MAX_HEADS, MAX_HEADS_BYTES, read_header, read_heads
from tests.origin_server import OriginServer
from tests.test_origin_cache import fetch, shared_site
from tests.two_workers import start_two_workers, until_both_answer

pytestmark = pytest.mark.in_process   # HTTP to the App and its cache folder

BODY = bytes(range(256)) * 80          # 20 KB, not compressible by type (octet-stream)
TYPE = {"Content-Type": "application/octet-stream"}


def _origin():
    return OriginServer().start()


def entry_files(node) -> list[str]:
    root = os.path.join(node.data_dir, "cache")
    return sorted(os.path.join(root, sub, name) for sub in os.listdir(root) if len(sub) == 2
                  for name in os.listdir(os.path.join(root, sub)))


def only_entry(node) -> str:
    files = entry_files(node)
    assert len(files) == 1, files
    return files[0]


def entry_for(node, path: str) -> str:
    """The entry file of the URL path (its header's key)."""
    found = []
    for file in entry_files(node):
        fd = os.open(file, os.O_RDONLY)
        try:
            if read_header(fd)[0]["key"][1] == path:
                found.append(file)
        finally:
            os.close(fd)
    assert len(found) == 1, found
    return found[0]


def layout(path: str) -> dict:
    """What the entry file holds: inode, size, the header and body's bytes, its whole head records."""
    fd = os.open(path, os.O_RDONLY)
    try:
        header, offset = read_header(fd)
        st = os.fstat(fd)
        body_end = offset + header["size"]
        last, count, end = read_heads(fd, body_end, st.st_size)
        return {"inode": st.st_ino, "id": header["id"], "size": st.st_size, "front": os.pread(fd, body_end, 0),
                "body": os.pread(fd, header["size"], offset), "body_end": body_end, "heads": count,
                "heads_end": end, "last": last}
    finally:
        os.close(fd)


def head_field(head: dict, name: str) -> str | None:
    return dict(head["meta"]["fields"]).get(name)


def script(origin, path: str, cache_control: str, rev, **fields) -> None:
    """The origin answers `path` with BODY, this Cache-Control and X-Rev (and `fields`, x_new as
    X-New), and the path's own ETag (a conditional request with it answers 304)."""
    extra = {name.replace("_", "-").title(): value for name, value in fields.items()}
    origin.script(path, BODY, headers={**TYPE, "Cache-Control": cache_control, "X-Rev": str(rev), **extra},
                  etag=f'"{path}"')


def books_match_the_folder(node, admin) -> None:
    stats = admin.get("/api/cache").json
    assert stats["bytes"] == sum(os.path.getsize(p) for p in entry_files(node)), stats


def stored_layout(node, admin, origin, path: str, cache_control: str, rev: str) -> dict:
    """The site set up, `path` scripted and filled once: its entry file's layout."""
    shared_site(admin, origin)
    script(origin, path, cache_control, rev)
    assert fetch(node.public_port, path)[2] == BODY
    return layout(only_entry(node))


@pytest.mark.daemon_process   # restarts it
def test_a_304_appends_the_refreshed_head_and_leaves_the_body(node, admin):
    with _origin() as origin:
        before = stored_layout(node, admin, origin, "/r", "max-age=1", "1")
        assert before["heads"] == 0 and before["size"] == before["body_end"] and before["body"] == BODY
        node.set_clock_offset(2.2)   # past max-age=1 on the clock the cache reads
        script(origin, "/r", "max-age=300", "2", x_new="yes")
        status, headers, body = fetch(node.public_port, "/r")
        assert status == 200 and body == BODY
        assert headers["cache-status"].startswith("contentnode; fwd=stale; fwd-status=304; stored")
        assert (headers["x-rev"], headers["x-new"], headers["cache-control"], headers["etag"]) == \
            ("2", "yes", "max-age=300", '"/r"')
        after = layout(only_entry(node))
        # the same file, its header and body byte for byte, one whole record after them
        assert after["inode"] == before["inode"] and after["front"] == before["front"]
        assert after["heads"] == 1 and after["size"] == after["heads_end"] > before["size"]
        assert after["size"] - before["size"] < 2048
        assert head_field(after["last"], "x-rev") == "2" and head_field(after["last"], "x-new") == "yes"
        assert len(origin.requests_for("/r")) == 2
        books_match_the_folder(node, admin)
        # hits serve the refreshed head, with the Date the origin's 304 sent
        seen_date = headers["date"]
        for _ in range(3):
            status, headers, body = fetch(node.public_port, "/r")
            assert "hit" in headers["cache-status"] and body == BODY
            assert (headers["x-rev"], headers["x-new"], headers["date"]) == ("2", "yes", seen_date)
        assert len(origin.requests_for("/r")) == 2
        # a range is read from the same body
        status, headers, body = fetch(node.public_port, "/r", {"Range": "bytes=100-199"})
        assert status == 206 and body == BODY[100:200] and headers["x-rev"] == "2"
        # a restarted daemon reads the last head from disk
        node.restart()
        status, headers, body = fetch(node.public_port, "/r")
        assert "hit" in headers["cache-status"] and body == BODY and headers["x-rev"] == "2"
        assert layout(only_entry(node))["inode"] == before["inode"]


def test_refreshes_past_the_cap_rewrite_the_file_and_its_size_stays_bounded(node, admin):
    with _origin() as origin:
        first = stored_layout(node, admin, origin, "/m", "max-age=0", "0")
        ids = {first["id"]}
        for rev in range(1, 3 * (MAX_HEADS + 1) + 1):
            script(origin, "/m", "max-age=0", str(rev))
            status, headers, body = fetch(node.public_port, "/m")
            assert (status, body, headers["x-rev"]) == (200, BODY, str(rev))
            assert "fwd-status=304" in headers["cache-status"]
            now = layout(only_entry(node))
            assert now["body"] == BODY and now["size"] <= now["body_end"] + MAX_HEADS_BYTES
            assert now["heads"] == rev % (MAX_HEADS + 1)   # MAX_HEADS appended, then a new file
            if now["heads"] == 0:
                assert now["id"] not in ids and now["size"] == now["body_end"]
                assert f'"x-rev","{rev}"' in now["front"].decode("latin-1")   # the new head is the header's
                ids.add(now["id"])
            else:
                assert now["id"] in ids and head_field(now["last"], "x-rev") == str(rev)
        assert len(ids) == 4
        assert len(origin.requests_for("/m")) == 3 * (MAX_HEADS + 1) + 1
        books_match_the_folder(node, admin)


@pytest.mark.daemon_process   # stops and starts it
def test_a_torn_head_record_leaves_the_head_before_it(node, admin):
    with _origin() as origin:
        shared_site(admin, origin)
        script(origin, "/t", "max-age=0", "1")
        fetch(node.public_port, "/t")
        script(origin, "/t", "max-age=0", "2")
        fetch(node.public_port, "/t")
        script(origin, "/t", "max-age=300", "3")
        assert fetch(node.public_port, "/t")[1]["x-rev"] == "3"
        path = only_entry(node)
        whole = layout(path)
        assert whole["heads"] == 2
        node.stop()
        # the second record torn as a death mid-append leaves it
        os.truncate(path, whole["size"] - 7)
        torn = layout(path)
        assert torn["heads"] == 1 and head_field(torn["last"], "x-rev") == "2"
        node.start()
        asked = len(origin.requests_for("/t"))
        assert layout(path)["inode"] == whole["inode"]   # kept at start, not dropped as torn
        # the head that stands is the first record's (max-age=0): revalidated, not the torn max-age=300
        script(origin, "/t", "max-age=300", "4")
        status, headers, body = fetch(node.public_port, "/t")
        assert (status, body, headers["x-rev"]) == (200, BODY, "4")
        assert len(origin.requests_for("/t")) == asked + 1
        assert origin.requests_for("/t")[-1].headers["if-none-match"] == '"/t"'
        # the new record was written over the torn bytes
        again = layout(path)
        assert again["inode"] == whole["inode"] and again["heads"] == 2 and again["size"] == again["heads_end"]
        assert head_field(again["last"], "x-rev") == "4" and again["front"] == whole["front"]
        books_match_the_folder(node, admin)


@pytest.mark.daemon_process   # kills it
def test_kill_9_during_refreshes_leaves_a_servable_entry(node, admin):
    """The daemon killed at random moments while every request refreshes the entry: after each
    restart the entry answers its whole body with a head the origin sent."""
    rng = random.Random(31)
    with _origin() as origin:
        shared_site(admin, origin)
        script(origin, "/k", "max-age=0", "0")
        assert fetch(node.public_port, "/k")[2] == BODY
        sent = {"0"}
        for rev in range(1, 6):
            script(origin, "/k", "max-age=0", str(rev))
            sent.add(str(rev))
            stop = threading.Event()

            def hammer(port=node.public_port, stop=stop):
                while not stop.is_set():
                    try:
                        fetch(port, "/k")
                    except (OSError, http.client.HTTPException):   # the daemon was killed mid-answer
                        return

            threads = [threading.Thread(target=hammer) for _ in range(4)]
            for thread in threads:
                thread.start()
            time.sleep(0.3 + rng.random() * 0.7)
            node.kill()
            stop.set()
            for thread in threads:
                thread.join(30)
            path = only_entry(node)
            seen = layout(path)
            assert seen["body"] == BODY
            assert seen["last"] is None or head_field(seen["last"], "x-rev") in sent
            node.start()
            status, headers, body = fetch(node.public_port, "/k")
            assert (status, body, headers["x-rev"]) == (200, BODY, str(rev))
        books_match_the_folder(node, admin)


def in_parallel(node, path: str) -> list:
    """24 fetches of `path`, 8 connections at a time (both workers are then woken for some)."""
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        return list(pool.map(lambda _: fetch(node.public_port, path), range(24)))


WARM_MAX_AGE = 2   # seconds an answer of the two-worker test stays fresh while both workers fetch it


def test_both_public_workers_serve_the_refreshed_head(tmp_path):
    """One worker's 304 refresh is the other's too: it reads the appended head from disk before
    it would ask the origin, and memory hits end with the entry they held."""
    from tests.node import ADMIN_PASSWORD, ADMIN_USER
    node = start_two_workers(str(tmp_path))
    try:
        admin = node.client()
        assert admin.post("/api/setup", {"username": ADMIN_USER, "password": ADMIN_PASSWORD}).status == 201
        with _origin() as origin:
            shared_site(admin, origin)
            # max-age 2, not 1: the origin's Date has whole seconds (send_response), so an answer is up
            # to a second old when stored, and the warming requests must end while it is fresh (a second
            # at least now; at load average 8 the 20 of them outlasted what a max-age of 1 had left,
            # and one revalidated early)
            script(origin, "/b", f"max-age={WARM_MAX_AGE}", "1")
            for _ in range(20):   # both workers hold the entry (and its body, in memory)
                assert fetch(node.public_port, "/b")[2] == BODY
            time.sleep(WARM_MAX_AGE + 1.2)
            script(origin, "/b", "max-age=300", "2", x_new="yes")
            assert fetch(node.public_port, "/b")[1]["x-rev"] == "2"
            assert len(origin.requests_for("/b")) == 2
            answers = until_both_answer(node, lambda: in_parallel(node, "/b"))   # both workers answered
            assert {(a[0], a[2], a[1]["x-rev"], a[1]["x-new"], a[1]["cache-control"]) for a in answers} == \
                {(200, BODY, "2", "yes", "max-age=300")}
            assert len(origin.requests_for("/b")) == 2   # the other worker asked no origin
            assert layout(entry_for(node, "/b"))["heads"] == 1
            # stale-while-revalidate: the background refresh appends too, and both workers serve it
            script(origin, "/s", f"max-age={WARM_MAX_AGE}, stale-while-revalidate=60", "1")
            for _ in range(10):
                fetch(node.public_port, "/s")
            time.sleep(WARM_MAX_AGE + 1.2)
            script(origin, "/s", "max-age=300", "2")
            status, headers, body = fetch(node.public_port, "/s")
            assert (status, body, headers["x-rev"]) == (200, BODY, "1")
            assert 'detail="stale-while-revalidate"' in headers["cache-status"]
            deadline = time.monotonic() + 10
            while layout(entry_for(node, "/s"))["heads"] < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            answers = until_both_answer(node, lambda: in_parallel(node, "/s"))
            assert {(a[2], a[1]["x-rev"], a[1]["cache-control"]) for a in answers} == {(BODY, "2", "max-age=300")}
            assert len(origin.requests_for("/s")) == 2
            assert layout(entry_for(node, "/s"))["heads"] == 1
    finally:
        node.close()



def test_a_refreshed_answer_keeps_its_compressed_variant_under_the_new_head(node, admin):
    """The gzip variant is made from the body, which a refresh does not move: it is kept (not
    compressed again) and sent with the refreshed fields."""
    css = b"body { color: black; }\n" * 400
    gz = {"Accept-Encoding": "gzip"}
    with _origin() as origin:
        shared_site(admin, origin)
        origin.script("/c.css", css, headers={"Cache-Control": "max-age=1", "Content-Type": "text/css",
                                              "X-Rev": "1"}, etag='"c"')
        fetch(node.public_port, "/c.css", gz)                  # the fill, sent as the origin sent it
        status, headers, body = fetch(node.public_port, "/c.css", gz)
        assert headers["content-encoding"] == "gzip" and gzip.decompress(body) == css
        assert len(entry_files(node)) == 2                      # the stored answer and its gzip variant
        before = {p: layout(p) for p in entry_files(node)}
        node.set_clock_offset(2.2)
        origin.script("/c.css", css, headers={"Cache-Control": "max-age=300", "Content-Type": "text/css",
                                              "X-Rev": "2"}, etag='"c"')
        status, headers, body = fetch(node.public_port, "/c.css", gz)   # the refresh
        assert headers["x-rev"] == "2" and "fwd-status=304" in headers["cache-status"]
        status, headers, body = fetch(node.public_port, "/c.css", gz)
        assert (headers["content-encoding"], headers["x-rev"], headers["cache-control"]) == ("gzip", "2", "max-age=300")
        assert gzip.decompress(body) == css and "hit" in headers["cache-status"]
        after = {p: layout(p) for p in entry_files(node)}
        assert sorted(after) == sorted(before)
        assert sorted(after[p]["heads"] for p in after) == [0, 1]     # the source refreshed, the variant kept
        assert all(after[p]["front"] == before[p]["front"] for p in after)
        assert len(origin.requests_for("/c.css")) == 2

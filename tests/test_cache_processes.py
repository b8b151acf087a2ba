"""The cache shared by real processes (a daemon and public workers, each holding a Cache of one
folder): purges racing fills, one budget whoever stored the entries, restarts while workers
drain, entries replaced behind a process's back, single flight with abandoned fills, URL purges
forgetting only their URLs everywhere."""

import os
import time

import pytest

from contentnode.core.cache_entries import header_bytes, key_name
from contentnode.core.cache_ledger import INVALIDATION_RING
from tests.cache_procs import CacheProcess, FileOrigin, disk_bytes

HOST = "cdn.example.test"


@pytest.fixture
def folder(tmp_path):
    return str(tmp_path / "cache"), FileOrigin(str(tmp_path / "origin"))


@pytest.fixture
def started():
    processes = []
    yield processes
    for process in processes:
        process.close()


def spawn(started, folder, slot, max_bytes=1 << 20, processes=3):
    root, origin = folder
    process = CacheProcess(root, origin, max_bytes, processes, slot)
    started.append(process)
    return process


def wait_until(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def test_a_fill_committed_while_a_purge_walks_the_folder_is_not_kept(folder, started):
    """A fill that another process commits while the purge walks the folder must not survive it."""
    root, origin = folder
    daemon, worker, third = spawn(started, folder, None), spawn(started, folder, 1), spawn(started, folder, 2)
    for n in range(3000):          # a folder the purge takes a while to walk
        origin.put(HOST, f"/pad/{n}", b"p")
    for pending in [worker.send("get", host=HOST, path=f"/pad/{n}", ttl=600, first_half_then_close=False)
                    for n in range(3000)]:
        worker.wait(pending)
    survivors = []
    for attempt in range(24):
        path = f"/race/{attempt}"
        origin.put(HOST, path, b"old version " * 10)
        hold = origin.hold(HOST, path, 1)
        filling = worker.send("get", host=HOST, path=path, ttl=600, first_half_then_close=False)
        wait_until(lambda path=path: origin.fetches(HOST, path) == 1)
        origin.put(HOST, path, b"new version " * 10)
        purging = daemon.send("purge", kind="url", host=HOST, path=path)
        time.sleep(0.003 * attempt)    # let the fill commit at another moment of the walk each time
        os.unlink(hold)
        worker.wait(filling)
        daemon.wait(purging)
        after = third.get(HOST, path)
        if after["body"].startswith("old"):
            survivors.append((attempt, after["hit"]))
    assert survivors == [], "fills committed during the purge were served after it"


def entry_file(root: str, path: str) -> str:
    name = key_name((HOST, path, ""))
    return os.path.join(root, name[:2], name)


def test_a_url_purge_elsewhere_forgets_that_url_only(folder, started):
    """A URL purge in the daemon (as an unsafe method's invalidation does) removes the URL's
    stored answer; the worker then forgets that URL, but keeps the large file it holds open for
    another URL and stores its fill of a third one, in flight during the purge."""
    root, origin = folder
    daemon, worker = spawn(started, folder, None), spawn(started, folder, 1)
    origin.put(HOST, "/x", b"x1")
    origin.put(HOST, "/big", b"b" * 200_000)
    origin.put(HOST, "/slow", b"slow " * 100)
    worker.get(HOST, "/x")
    assert worker.get(HOST, "/x")["hit"]
    worker.get(HOST, "/big")
    assert worker.get(HOST, "/big")["hit"]            # its file stays open between hits
    hold = origin.hold(HOST, "/slow", 1)
    filling = worker.send("get", host=HOST, path="/slow", ttl=600, first_half_then_close=False)
    wait_until(lambda: origin.fetches(HOST, "/slow") == 1)
    origin.put(HOST, "/x", b"x2")
    assert daemon.call("purge", kind="url", host=HOST, path="/x")["purged"] == 1
    os.unlink(hold)
    assert worker.wait(filling)["body"] == "slow " * 100
    again = worker.get(HOST, "/x")
    assert (again["hit"], again["body"], origin.fetches(HOST, "/x")) == (False, "x2", 2)
    assert entry_file(root, "/big") in worker.cache_descriptors()
    assert worker.get(HOST, "/slow")["hit"] and origin.fetches(HOST, "/slow") == 1


def test_a_url_purge_that_finds_no_file_still_makes_every_process_forget_the_url(folder, started):
    """A worker holds a small body in memory whose file is gone from disk (evicted by another
    process, as far as it knows): a URL purge that finds nothing to remove still tells it, and its
    next request for the URL asks the origin, never answers the purged body."""
    root, origin = folder
    daemon, worker = spawn(started, folder, None), spawn(started, folder, 1)
    origin.put(HOST, "/x", b"x1")
    worker.get(HOST, "/x")
    assert worker.get(HOST, "/x")["hit"]
    os.unlink(entry_file(root, "/x"))
    origin.put(HOST, "/x", b"x2")
    assert daemon.call("purge", kind="url", host=HOST, path="/x")["purged"] == 0
    again = worker.get(HOST, "/x")
    assert (again["hit"], again["body"], origin.fetches(HOST, "/x")) == (False, "x2", 2)


def test_more_url_purges_than_the_books_keep_make_every_process_forget_everything(folder, started):
    """The books name the last INVALIDATION_RING objects purged: when more went by while a fill
    was in flight, nobody can tell whether its own object was among them, so it is not kept.
    (Each purge removes a stored answer: one that touches nothing, no file and no fill in flight,
    is in no fill's way.)"""
    daemon, worker = spawn(started, folder, None), spawn(started, folder, 1)
    origin = folder[1]
    for n in range(INVALIDATION_RING + 1):
        origin.put(HOST, f"/gone/{n}", b"g")
        daemon.get(HOST, f"/gone/{n}")
    origin.put(HOST, "/slow", b"slow " * 100)
    hold = origin.hold(HOST, "/slow", 1)
    filling = worker.send("get", host=HOST, path="/slow", ttl=600, first_half_then_close=False)
    wait_until(lambda: origin.fetches(HOST, "/slow") == 1)
    for n in range(INVALIDATION_RING + 1):
        assert daemon.call("purge", kind="url", host=HOST, path=f"/gone/{n}")["purged"] == 1
    os.unlink(hold)
    assert worker.wait(filling)["body"] == "slow " * 100
    assert not worker.get(HOST, "/slow")["hit"] and origin.fetches(HOST, "/slow") == 2


def test_entries_stored_by_a_dead_worker_are_evicted_by_the_others(folder, started):
    """One budget: the entries of a worker that was killed are evicted by the others' fills, so the
    cache keeps caching at its cap instead of streaming everything from the origin."""
    root, origin = folder
    daemon = spawn(started, folder, None, max_bytes=30_000)
    first = spawn(started, folder, 1, max_bytes=30_000)
    for n in range(30):             # the cap is reached: about 25 entries fit
        origin.put(HOST, f"/old/{n}", bytes([n]) * 1000)
        first.get(HOST, f"/old/{n}")
    assert daemon.call("stats")["entries"] >= 20
    first.kill()
    daemon.call("settle")
    second = spawn(started, folder, 1, max_bytes=30_000)
    for n in range(30):
        origin.put(HOST, f"/new/{n}", bytes([n]) * 1000)
        assert second.get(HOST, f"/new/{n}")["status"] == 200
        again = second.get(HOST, f"/new/{n}")
        assert again["hit"], f"/new/{n} was not kept: the cache is jammed at its cap"
        assert disk_bytes(root) <= 30_000


def test_a_process_closes_its_descriptor_of_a_file_another_process_evicted(folder, started):
    """A large entry kept open by one process and evicted by another must not stay pinned on disk,
    off the books, once the first process answers again."""
    root, origin = folder
    big = 200_000
    daemon = spawn(started, folder, None, max_bytes=3 * big)
    holder, evictor = spawn(started, folder, 1, max_bytes=3 * big), spawn(started, folder, 2, max_bytes=3 * big)
    origin.put(HOST, "/big", os.urandom(big // 2).hex().encode()[:big])
    holder.get(HOST, "/big")
    assert holder.get(HOST, "/big")["hit"]          # the hit keeps the file open between hits
    for n in range(4):                              # fills elsewhere push /big out
        origin.put(HOST, f"/other/{n}", b"o" * big)
        evictor.get(HOST, f"/other/{n}")
    assert not os.path.exists(os.path.join(root, key_name((HOST, "/big", ""))[:2], key_name((HOST, "/big", ""))))
    origin.put(HOST, "/small", b"s")
    holder.get(HOST, "/small")                      # any answer of the holder
    assert holder.deleted_descriptors() == []
    assert daemon.call("stats")["bytes"] <= 3 * big


def test_a_daemon_restarted_while_a_worker_fills_keeps_the_fill_and_the_books(folder, started):
    """kill -9 of the daemon and a new one started while an old worker is still filling: the new
    daemon neither resets the books under the worker nor deletes its temp file."""
    root, origin = folder
    daemon = spawn(started, folder, None)
    worker = spawn(started, folder, 1)
    origin.put(HOST, "/warm", b"w" * 5000)
    worker.get(HOST, "/warm")
    origin.put(HOST, "/slow", b"s" * 50_000)
    hold = origin.hold(HOST, "/slow", 1)
    filling = worker.send("get", host=HOST, path="/slow", ttl=600, first_half_then_close=False)
    wait_until(lambda: origin.fetches(HOST, "/slow") == 1)
    time.sleep(0.05)
    daemon.kill()
    restarted = spawn(started, folder, None)
    os.unlink(hold)
    answer = worker.wait(filling)
    assert answer["body"] == "s" * 50_000
    assert restarted.get(HOST, "/slow")["hit"]
    stats = restarted.call("stats")
    assert stats["bytes"] == disk_bytes(root), "the books differ from the folder"
    assert stats["max_bytes"] == 1 << 20


def test_an_entry_replaced_at_the_same_inode_is_never_read_with_the_old_layout(folder, started):
    """ext4 hands a freed inode to the next file: the file at an entry's path may hold another entry
    at the very inode a process indexed (here rewritten in place). The process must notice."""
    root, origin = folder
    spawn(started, folder, None)
    worker = spawn(started, folder, 1)
    origin.put(HOST, "/f", b"A" * 100)
    assert worker.get(HOST, "/f")["body"] == "A" * 100
    name = key_name((HOST, "/f", ""))
    path = os.path.join(root, name[:2], name)
    inode = os.stat(path).st_ino
    header = header_bytes({"key": [HOST, "/f", ""], "size": 100, "id": "b" * 16,
                           "meta": {"content_type": "text/plain", "etag": '"a much longer etag, moving the body"'},
                           "stored_at": time.time(), "expires_at": time.time() + 600})
    with open(path, "r+b") as entry:
        entry.truncate(0)
        entry.write(header + b"B" * 100)
    assert os.stat(path).st_ino == inode
    body = worker.get(HOST, "/f")["body"]
    assert body in ("A" * 100, "B" * 100), f"a mix of two entries was served: {body[:60]!r}..."


def test_an_abandoned_fill_does_not_free_its_key_for_other_processes(folder, started):
    """A fill whose readers all hung up is forgotten while its thread still holds the key: a second
    fill of the key in that process must not share the hold, or the first one's release frees the
    key for everyone and a third process fetches the origin as well."""
    root, origin = folder
    spawn(started, folder, None)
    first, other = spawn(started, folder, 1), spawn(started, folder, 2)
    origin.put(HOST, "/k", b"k" * 20_000)
    hold_one, hold_two = origin.hold(HOST, "/k", 1), origin.hold(HOST, "/k", 2)
    first.get(HOST, "/k", first_half_then_close=True)       # fill 1 abandoned, its thread held
    second = first.send("get", host=HOST, path="/k", ttl=600, first_half_then_close=False)
    time.sleep(0.2)
    os.unlink(hold_one)                                     # fill 1 notices it is abandoned and ends
    wait_until(lambda: origin.fetches(HOST, "/k") >= 2)
    third = other.send("get", host=HOST, path="/k", ttl=600, first_half_then_close=False)
    time.sleep(0.3)
    os.unlink(hold_two)
    assert first.wait(second)["body"] == "k" * 20_000
    assert other.wait(third)["body"] == "k" * 20_000
    assert origin.fetches(HOST, "/k") == 2, "another process fetched the key while a fill of it ran"

"""The state store: copy-on-access per record, atomic durable commits, exact JSON on disk."""

import copy
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contentnode.store as store_module
from contentnode.store import STATE_FILE, Store


def disk(store) -> bytes:
    with open(store.path, "rb") as f:
        return f.read()


def encoded(doc) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path), {})
    s.load()
    with s.transaction() as doc:
        doc["rules"] = {f"r{i}": {"id": f"r{i}", "path": f"/p{i}", "ttl": 60, "tags": ["a", {"x": i}]}
                        for i in range(50)}
        doc["settings"] = {"level": "info"}
    return s


def test_a_write_inside_one_record_leaves_the_other_records_objects_identical(store):
    before = store.data
    old_rules = before["rules"]
    with store.transaction() as doc:
        doc["rules"]["r7"]["ttl"] = 5
        doc["rules"]["r7"]["tags"][1]["x"] = "changed"
    after = store.data["rules"]
    assert after is not old_rules
    assert all(after[k] is old_rules[k] for k in old_rules if k != "r7")
    assert after["r7"] is not old_rules["r7"]
    assert after["r7"]["ttl"] == 5 and after["r7"]["tags"][1]["x"] == "changed"
    # the earlier snapshot is untouched: readers holding it never see a change
    assert old_rules["r7"]["ttl"] == 60 and old_rules["r7"]["tags"][1]["x"] == 7
    assert before["settings"] is store.data["settings"]
    assert disk(store) == encoded(store.data)


def test_records_read_by_iteration_are_private_copies_and_their_changes_are_kept(store):
    old = store.data["rules"]
    with store.transaction() as doc:
        for key, record in doc["rules"].items():
            if key == "r3":
                record["path"] = "/moved"
        assert all(r is not old[k] for k, r in doc["rules"].items())
        assert "r3" in doc["rules"] and "nope" not in doc["rules"] and len(doc["rules"]) == 50
    assert store.data["rules"]["r3"]["path"] == "/moved"
    assert old["r3"]["path"] == "/p3"
    assert store.data["rules"]["r4"] is old["r4"]  # read, unchanged: the snapshot object stays
    assert json.loads(disk(store)) == store.data


def test_an_exception_inside_the_block_changes_nothing(store):
    before, raw = store.data, disk(store)
    with pytest.raises(RuntimeError):
        with store.transaction() as doc:
            doc["rules"]["r1"]["ttl"] = 1
            del doc["rules"]["r2"]
            doc["settings"]["level"] = "debug"
            raise RuntimeError("abandon")
    assert store.data is before and disk(store) == raw
    assert before["rules"]["r1"]["ttl"] == 60 and "r2" in before["rules"]


def test_a_failed_write_leaves_memory_and_disk_unchanged(store, monkeypatch):
    before, raw = store.data, disk(store)
    snapshot = copy.deepcopy(before)

    def failing_write(path, data, mode=0o600):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(store_module, "atomic_write", failing_write)
    with pytest.raises(OSError):
        with store.transaction() as doc:
            doc["rules"]["r1"]["ttl"] = 1
            doc["rules"]["new"] = {"id": "new"}
            del doc["settings"]
    assert store.data is before and before == snapshot and disk(store) == raw
    monkeypatch.undo()
    with store.transaction() as doc:  # the store still works afterwards
        doc["rules"]["r1"]["ttl"] = 2
    assert store.data["rules"]["r1"]["ttl"] == 2 and json.loads(disk(store)) == store.data


def test_a_transaction_that_changes_nothing_does_not_write(store):
    stat = os.stat(store.path)
    with store.transaction() as doc:
        doc["rules"]["r1"]["ttl"] = 60       # the same value
        list(doc["rules"].values())
        doc["settings"] = {"level": "info"}  # an equal section
    assert os.stat(store.path).st_ino == stat.st_ino


def test_a_key_that_is_not_a_string_is_refused_and_nothing_changes(store):
    before, raw = store.data, disk(store)
    with pytest.raises(TypeError):
        with store.transaction() as doc:
            doc["rules"][5] = {"id": 5}
    assert store.data is before and disk(store) == raw


def test_the_file_is_private_and_reloads_to_the_same_document(store, tmp_path):
    with store.transaction() as doc:
        doc["rules"].pop("r0")
        doc["rules"]["r0"] = {"id": "r0", "text": "é ☃ \u2028"}  # deleted then given again: last
        doc.setdefault("extra", {}).update(a=1)
    assert list(store.data["rules"])[-1] == "r0"
    assert os.stat(store.path).st_mode & 0o777 == 0o600
    again = Store(str(tmp_path), {})
    again.load()
    assert again.data == store.data and list(again.data["rules"]) == list(store.data["rules"])
    assert disk(store) == encoded(store.data)


# A model-based check: any sequence of operations on a transaction gives the
# very document (values and key order) a plain dict gets, in memory and on disk.
keys = st.sampled_from(["a", "b", "c", "d", "e"])
values = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=3),
                      lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
                      max_leaves=6)
sections = st.sampled_from(["s1", "s2", "s3", "scalar"])
operations = st.lists(st.one_of(
    st.tuples(st.just("set"), sections, keys, values),
    st.tuples(st.just("del"), sections, keys),
    st.tuples(st.just("nested"), sections, keys, keys, values),
    st.tuples(st.just("pop"), sections, keys),
    st.tuples(st.just("replace"), sections, st.dictionaries(keys, values, max_size=3)),
    st.tuples(st.just("drop"), sections),
    st.tuples(st.just("clear"), sections),
    st.tuples(st.just("fail"),),
), max_size=12)


def apply(doc, op) -> None:
    kind, *args = op
    if kind == "fail":
        raise LookupError
    name = args[0]
    if kind == "replace":
        doc[name] = copy.deepcopy(args[1])
        return
    if kind == "drop":
        doc.pop(name, None)
        return
    section = doc.get(name)
    if not hasattr(section, "keys"):
        return
    if kind == "set":
        section[args[1]] = copy.deepcopy(args[2])
    elif kind == "del" and args[1] in section:
        del section[args[1]]
    elif kind == "pop":
        section.pop(args[1], None)
    elif kind == "clear":
        section.clear()
    elif kind == "nested" and isinstance(section.get(args[1]), dict):
        section[args[1]][args[2]] = copy.deepcopy(args[3])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(transactions=st.lists(operations, min_size=1, max_size=4))
def test_transactions_match_a_plain_dict_model(tmp_path_factory, transactions):
    s = Store(str(tmp_path_factory.mktemp("store")), {})
    s.load()
    with s.transaction() as doc:
        doc.update({"s1": {"a": {"b": 1}, "b": [1, {"c": 2}]}, "s2": {}, "scalar": 3})
    model = copy.deepcopy(s.data)
    for ops in transactions:
        attempt = copy.deepcopy(model)
        try:
            for op in ops:
                apply(attempt, op)
        except LookupError:
            attempt = None
        try:
            with s.transaction() as doc:
                for op in ops:
                    apply(doc, op)
        except LookupError:
            pass
        if attempt is not None:
            model = attempt
        assert s.data == model and list(s.data) == list(model)
        for name, value in model.items():
            if isinstance(value, dict):
                assert list(s.data[name]) == list(value)
        assert json.loads(disk(s)) == model
    again = Store(os.path.dirname(s.path), {})
    again.load()
    assert again.data == model
    assert STATE_FILE == os.path.basename(s.path)


def test_a_reader_never_sees_the_new_stamp_with_the_old_document(tmp_path, monkeypatch):
    """Two threads of a public worker follow() the daemon's write at once: the one that does not load
    must not return before the other has installed the document (a rule served 404 once, on the very
    next request after its 201, in a full run)."""
    import threading
    writer = Store(str(tmp_path), {})
    writer.load()
    writer.share_changes()
    reader = Store(str(tmp_path), {})
    reader.load()
    reader.share_changes()
    with writer.transaction() as doc:
        doc["rules"] = {"r1": {"id": "r1"}}
    writer.publish()
    loading, release = threading.Event(), threading.Event()
    real_migrate = store_module.migrate

    def slow_migrate(doc, path):
        loading.set()
        release.wait(5)
        return real_migrate(doc, path)

    monkeypatch.setattr(store_module, "migrate", slow_migrate)
    first = threading.Thread(target=reader.follow)
    first.start()
    assert loading.wait(5)
    seen = []
    second = threading.Thread(target=lambda: (reader.follow(), seen.append("rules" in reader.data)))
    second.start()
    second.join(0.3)
    release.set()
    first.join(5)
    second.join(5)
    assert seen == [True]

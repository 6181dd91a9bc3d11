"""The persistent cache's folder and values, without a server: entries read back only when whole,
atomic writes, least-recently-used eviction, pruning, keys that never name a weak ETag, kept
spans, and offline mode's switches."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remotetensors.sources.cache import keys
from remotetensors.sources.cache import store as store_module
from remotetensors.sources.cache.offline import offline, offline_error
from remotetensors.sources.cache.source import Kept
from remotetensors.sources.cache.store import (
    CacheStore,
    Entry,
    cache_folder,
    cache_max_bytes,
    decode,
    default_store,
    encode,
)


def test_an_entry_reads_back_and_its_key_is_not_written(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    key = keys.http_version("https://h/m.safetensors?X-Amz-Signature=secret", 'etag "a"', 9)
    assert store.put(key, {"kind": "file", "shown": "https://h/m.safetensors?***"}, b"payload")
    entry = store.get(key)
    assert entry is not None
    assert entry.payload == b"payload"
    assert entry.meta["kind"] == "file"
    raw = store.path_of(key).read_bytes()
    assert b"secret" not in raw  # only the key's hash is kept
    assert store.get(keys.http_latest("https://h/m.safetensors")) is None
    assert store.usage() == (1, len(raw))


@pytest.mark.parametrize("where", ["magic", "checksum", "meta", "payload", "last byte"])
def test_a_flipped_byte_anywhere_is_a_miss_and_the_entry_is_dropped(
    tmp_path: Path, where: str
) -> None:
    store = CacheStore(tmp_path)
    store.put("k", {"kind": "file", "shown": "x"}, b"0123456789")
    path = store.path_of("k")
    data = bytearray(path.read_bytes())
    at = {"magic": 0, "checksum": 10, "meta": 48, "payload": len(data) - 5, "last byte": -1}[where]
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    assert store.get("k") is None
    assert not path.exists()


def test_truncated_and_foreign_entries_are_misses(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    store.put("a", {"kind": "file"}, b"A" * 100)
    store.put("b", {"kind": "file"}, b"B" * 100)
    whole = store.path_of("a").read_bytes()
    for cut in (0, 7, 40, len(whole) - 1):
        store.path_of("a").write_bytes(whole[:cut])
        assert store.get("a") is None
    # b's entry under a's name: whole, but another key's.
    store.path_of("a").write_bytes(store.path_of("b").read_bytes())
    assert store.get("a") is None
    entry = store.get("b")
    assert entry is not None
    assert entry.payload == b"B" * 100
    infos = {info.path.name: info.ok for info in store.entries()}
    assert infos == {store.path_of("b").name: True}


def _corrupt(store: CacheStore, key: str) -> None:
    """Leave a corrupted entry of ``key`` (its last byte flipped)."""
    store.put(key, {"kind": "file", "n": "bad"}, b"0123456789")
    path = store.path_of(key)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def _good_entry_lands_after_decoding(monkeypatch: pytest.MonkeyPatch, writer: CacheStore) -> None:
    """Another process writes a good entry "k" (an atomic rename) right after this one has
    decoded what it read of "k"."""
    real = store_module.decode

    def decode_then_race(data: bytes, key: str | None) -> Entry | None:
        writer.put("k", {"kind": "file", "n": "good"}, b"good payload")
        return real(data, key)

    monkeypatch.setattr(store_module, "decode", decode_then_race)


def test_a_good_entry_written_after_a_corrupt_one_was_read_is_not_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process replaces the corrupt entry (an atomic rename) after this one has read
    # it and before it drops it: only the file that was read may go.
    store, writer = CacheStore(tmp_path), CacheStore(tmp_path)
    _corrupt(store, "k")
    _good_entry_lands_after_decoding(monkeypatch, writer)
    assert store.get("k") is None  # what it read was corrupt
    monkeypatch.undo()
    entry = store.get("k")
    assert entry is not None
    assert (entry.meta["n"], entry.payload) == ("good", b"good payload")


def test_a_good_entry_written_while_a_corrupt_one_is_set_aside_is_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The narrowest window: the good entry lands after the check that the file is still the
    # one read, just before the corrupt one is moved aside to be removed.
    store, writer = CacheStore(tmp_path), CacheStore(tmp_path)
    _corrupt(store, "k")
    path = store.path_of("k")
    real = os.rename

    def race_then_rename(source: Any, target: Any) -> None:
        if Path(source) == path:
            writer.put("k", {"kind": "file", "n": "good"}, b"good payload")
        real(source, target)

    monkeypatch.setattr(os, "rename", race_then_rename)
    assert store.get("k") is None
    monkeypatch.undo()
    entry = store.get("k")
    assert entry is not None
    assert (entry.meta["n"], entry.payload) == ("good", b"good payload")
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # nothing left aside
    # Without a race, the corrupt entry is dropped and nothing is left aside either.
    _corrupt(store, "k")
    assert store.get("k") is None
    assert list(path.parent.iterdir()) == []


def test_prune_drops_a_corrupt_entry_but_not_a_good_one_written_in_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, writer = CacheStore(tmp_path), CacheStore(tmp_path)
    _corrupt(store, "k")
    _good_entry_lands_after_decoding(monkeypatch, writer)
    assert store.prune() == (0, 0)
    monkeypatch.undo()
    entry = store.get("k")
    assert entry is not None
    assert entry.payload == b"good payload"
    _corrupt(store, "k")
    removed, _ = store.prune()
    assert removed == 1
    assert store.usage() == (0, 0)


@given(st.binary(max_size=300))
def test_any_bytes_decode_to_an_entry_or_nothing_never_an_exception(data: bytes) -> None:
    entry = decode(data, "k")
    if entry is not None:  # only what encode wrote for this key
        assert (
            encode("k", {k: v for k, v in entry.meta.items() if k != "key"}, entry.payload) == data
        )


def test_writes_are_atomic_and_leave_no_part_file(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    for i in range(20):
        store.put("k", {"kind": "file", "n": i}, os.urandom(1000))
    folder = store.path_of("k").parent
    assert sorted(p.name for p in folder.iterdir()) == [store.path_of("k").name]
    # A write that never finished (its process died) is ignored, then pruned once stale.
    part = folder / f"{store.path_of('k').name}.123.1.1.part"
    part.write_bytes(b"half an entry")
    assert store.usage()[0] == 1
    assert [info.path.name for info in store.entries()] == [store.path_of("k").name]
    store.prune(max_bytes=10**9)
    assert part.exists()  # maybe still being written
    os.utime(part, (time.time() - 7200, time.time() - 7200))
    store.prune(max_bytes=10**9)
    assert not part.exists()


def test_least_recently_used_entries_are_evicted_first(tmp_path: Path) -> None:
    store = CacheStore(tmp_path, max_bytes=10**9)
    for name in "abc":
        store.put(name, {"kind": "file"}, b"x" * 1000)
    size = store.path_of("a").stat().st_size
    past = time.time() - 100
    for age, name in enumerate("abc"):  # a oldest, then b, then c
        os.utime(store.path_of(name), (past + age, past + age))
    assert store.get("a") is not None  # a read touches it: now the most recent
    bounded = CacheStore(tmp_path, max_bytes=int(3.5 * size))
    bounded.put("d", {"kind": "file"}, b"x" * 1000)  # 4 entries > the bound: evict to 90 %
    left = {name for name in "abcd" if bounded.path_of(name).exists()}
    assert left == {"a", "c", "d"}


def test_prune_by_age_and_size_and_clear(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    for name in "abcd":
        store.put(name, {"kind": "file"}, b"x" * 100)
    size = store.path_of("a").stat().st_size
    old = time.time() - 3 * 86400
    os.utime(store.path_of("a"), (old, old))
    assert store.prune(older_than_seconds=86400) == (1, size)
    assert store.prune(max_bytes=2 * size) == (1, size)
    assert store.usage() == (2, 2 * size)
    assert store.clear() == (2, 2 * size)
    assert store.usage() == (0, 0)
    assert list(store.entries()) == []


def test_an_unwritable_folder_makes_the_cache_a_no_op(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    store = CacheStore(blocker)
    assert store.put("k", {"kind": "file"}, b"data") is False
    assert store.get("k") is None
    assert store.usage() == (0, 0)
    assert store.prune(max_bytes=0) == (0, 0)


def test_the_folder_and_bound_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REMOTETENSORS_CACHE", str(tmp_path / "here"))
    monkeypatch.setenv("REMOTETENSORS_CACHE_MAX_BYTES", "12345")
    assert cache_folder() == tmp_path / "here"
    store = default_store()
    assert (store.folder, store.max_bytes) == (tmp_path / "here", 12345)
    assert default_store() is store
    monkeypatch.setenv("REMOTETENSORS_CACHE_MAX_BYTES", "lots")
    with pytest.raises(ValueError, match=r"REMOTETENSORS_CACHE_MAX_BYTES='lots'"):
        cache_max_bytes()
    monkeypatch.delenv("REMOTETENSORS_CACHE")
    monkeypatch.delenv("REMOTETENSORS_CACHE_MAX_BYTES")
    import platformdirs

    assert cache_folder() == Path(platformdirs.user_cache_dir("remotetensors"))


def test_keys_name_versions_by_strong_validators_only() -> None:
    assert keys.strong_validator('W/"weak"', None) is None
    assert keys.strong_validator('W/"weak"', "Wed, 21 Oct 2015 07:28:00 GMT") == (
        "last-modified Wed, 21 Oct 2015 07:28:00 GMT"
    )
    assert keys.strong_validator('"strong"', "Wed, 21 Oct 2015") == 'etag "strong"'
    assert keys.strong_validator(None, None) is None
    # Tuples, not concatenations: no two different parts make one key.
    assert keys.hub_file("e", "models", "a/b", "c", "d/e") != keys.hub_file(
        "e", "models", "a/b", "c/d", "e"
    )


def test_kept_spans_join_and_serve_only_what_they_hold() -> None:
    kept = Kept(100).with_span(0, b"abcd").with_span(10, b"klmn").with_span(4, b"efgh")
    assert kept.spans == ((0, b"abcdefgh"), (10, b"klmn"))
    assert kept.head() == b"abcdefgh"
    assert kept.covers(2, 6) == b"cdef"
    assert kept.covers(6, 11) is None  # across a hole
    assert kept.covers(11, 14) == b"lmn"
    assert kept.with_span(6, b"ghijkl").spans == ((0, b"abcdefghijklmn"),)
    assert Kept(100).with_span(50, b"xy").head() == b""
    meta, payload = kept.entry("shown")
    from remotetensors.sources.cache.store import Entry

    assert Kept.of(Entry(meta, payload)) == kept
    assert Kept.of(Entry({**meta, "size": 12}, payload)) is None  # a span past the end
    assert Kept.of(Entry(meta, payload + b"!")) is None  # more bytes than the spans say
    assert Kept.of(Entry({**meta, "kind": "ref"}, payload)) is None


def test_offline_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    assert not offline()
    for variable in ("HF_HUB_OFFLINE", "REMOTETENSORS_OFFLINE"):
        for value, on in (("1", True), ("TRUE", True), ("yes", True), ("0", False), ("", False)):
            monkeypatch.setenv(variable, value)
            assert offline() is on, (variable, value)
        monkeypatch.delenv(variable)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    error = offline_error("hf://org/x/model.safetensors")
    assert isinstance(error, ConnectionError)
    assert str(error).startswith("hf://org/x/model.safetensors: offline (HF_HUB_OFFLINE is set)")
    assert "run once online" in str(error)


def test_only_a_hub_content_id_names_bytes() -> None:
    from remotetensors.sources.hub.listing import ListedFile, content_id_of_answer

    sha1, sha256 = "a" * 40, "b" * 64
    commit = {"X-Repo-Commit": "c" * 40}
    assert content_id_of_answer([{**commit, "ETag": f'"{sha1}"'}]) == sha1
    assert content_id_of_answer([{**commit, "X-Linked-Etag": f'"{sha256}"', "ETag": '"x"'}]) == (
        sha256
    )
    assert content_id_of_answer([{**commit, "ETag": '"1234-5678"'}]) is None  # size and date
    assert content_id_of_answer([{"ETag": f'"{sha1}"'}]) is None  # not the hub's own answer
    assert ListedFile("p", 1, sha1, sha256).content_id == sha256
    assert ListedFile("p", 1, "not-a-hash").content_id is None

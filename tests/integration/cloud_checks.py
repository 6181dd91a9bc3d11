"""What the GCS and Azure tests check alike, against their emulators (tests/emulators.py): a
real model read tensor by tensor, a slice's bytes, a version named in the location, the cache.
``test_gcs.py`` and ``test_azure.py`` call these with their emulator."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import safetensors.numpy

import remotetensors as rt
from remotetensors.cli import main
from remotetensors.reading.streams import START_STREAMS
from remotetensors.sources.base import ByteSource
from remotetensors.sources.fsspec import FsspecSource
from tests import minilm
from tests.emulators import Azurite, FakeGcs, Logged
from tests.integration.source_conformance import Replace, SourceTests
from tests.reference import write_reference

SLACK_BYTES = 64 * 1024
"""What a read may move beyond the bytes asked for (the first window's look-ahead)."""

_names = itertools.count()


@dataclass(frozen=True)
class Store:
    """An emulator as the checks use it: its scheme (``gs``, ``az``), a new bucket or container
    for each check, and its objects written directly."""

    scheme: str
    emulator: FakeGcs | Azurite

    def new(self, prefix: str) -> str:
        name = f"{prefix}-{next(_names)}"
        if isinstance(self.emulator, FakeGcs):
            return self.emulator.make_bucket(name)
        return self.emulator.make_container(name)

    def put(self, container: str, key: str, data: bytes) -> str:
        """Write an object; returns its version (generation or ETag)."""
        return self.emulator.put(container, key, data)

    def delete(self, container: str, key: str) -> None:
        self.emulator.delete(container, key)

    def url(self, container: str, key: str = "") -> str:
        return f"{self.scheme}://{container}/{key}"

    def options(self) -> dict[str, str]:
        return self.emulator.options()

    def mark(self) -> int:
        return len(self.emulator.log())

    def since(self, mark: int) -> tuple[list[Logged], list[Logged]]:
        """``(data reads, metadata requests)`` logged after ``mark``."""
        return self.emulator.reads(self.emulator.since(mark))


class StoreSourceTests(SourceTests):
    """The conformance suite over one object of a :class:`Store` (a subclass's autouse
    fixture sets ``store``), and what each read asks of the emulator."""

    store: Store
    container: str

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        self.container = self.store.new("conformance")
        self.store.put(self.container, "file.bin", data)
        url = self.store.url(self.container, "file.bin")
        return FsspecSource(url, storage_options=self.store.options()), self._replace

    def _replace(self, new: bytes) -> None:
        self.store.put(self.container, "file.bin", new)

    async def missing(self) -> ByteSource:
        url = self.store.url(self.store.new("conformance"), "absent.bin")
        return FsspecSource(url, storage_options=self.store.options())

    async def what_each_read_asks(self) -> tuple[str | None, list[Logged]]:
        """Open a 5000-byte object (100 bytes), read ``[500, 600)`` and ``[4000, 5000)``:
        ``(the version opened, the data reads logged)``, after checking that no metadata was
        asked."""
        source, _ = await self.make(b"x" * 5000)
        mark = self.store.mark()
        try:
            prefix = await source.open_prefix(100)
            await source.read(500, 600)
            await source.read(4000, 5000)
        finally:
            await source.aclose()
        data, metadata = self.store.since(mark)
        assert metadata == []
        return prefix.validator, data


def a_rewrite_between_open_and_read(store: Store, *, versioned: bool = False) -> None:
    """A 128 KiB tensor (beyond the first window) whose file is rewritten (same size, other
    values) after its first rows were read: reading it whole raises RemoteFileChangedError
    naming the location, or (``versioned``: the version opened stays readable) gives the old
    values, all of them; never a mix."""
    old = {"w": np.arange(32768, dtype=np.float32)}
    container = store.new("rewrite")
    store.put(container, "m.safetensors", write_reference(old))
    url = store.url(container, "m.safetensors")
    with rt.safe_open(url, storage_options=store.options()) as f:
        np.testing.assert_array_equal(f.get_slice("w")[:10], old["w"][:10])
        store.put(container, "m.safetensors", write_reference({"w": -old["w"]}))
        if versioned:
            np.testing.assert_array_equal(f.get_tensor("w"), old["w"])
            return
        with pytest.raises(rt.RemoteFileChangedError, match="changed since it was opened") as err:
            f.get_tensor("w")
        assert url in str(err.value)


def a_deletion_between_open_and_read(store: Store) -> None:
    """An object deleted after the open: the next read raises RemoteFileChangedError (the
    version opened is gone: GCS answers 404 at its generation, Azurite 412 to If-Match), not
    NotFoundError nor bytes of anything else."""
    container = store.new("deleted")
    store.put(container, "m.safetensors", write_reference({"w": np.arange(32768, dtype=np.int32)}))
    url = store.url(container, "m.safetensors")
    with rt.safe_open(url, storage_options=store.options()) as f:
        store.delete(container, "m.safetensors")
        with pytest.raises(rt.RemoteFileChangedError, match="changed since it was opened"):
            f.get_tensor("w")


@dataclass(frozen=True)
class ModelReads:
    """What reading every tensor of all-MiniLM-L6-v2 one by one after the open cost.

    Attributes:
        tensors: how many tensors were read.
        metadata: metadata requests logged after the open.
        data: data requests logged after the open.
        most_for_one: the most data requests one tensor took.
        received: bytes received at the client after the open.
        logged: bytes the emulator logged as sent after the open (0 for fake-gcs-server's
            media downloads).
        file_bytes: the file's tensor bytes.
    """

    tensors: int
    metadata: int
    data: int
    most_for_one: int
    received: int
    logged: int
    file_bytes: int


def read_the_model_tensor_by_tensor(store: Store) -> ModelReads:
    """Every tensor of all-MiniLM-L6-v2 (104, one of 46.9 MB) read one by one through
    ``open_model``: each equals what the reference reader reads from the same bytes, and after
    the open not one metadata request is logged, nor more than one data read per tensor part,
    nor more bytes than the tensors hold (the first window's tensors came with the open)."""
    container = store.new("minilm")
    files = minilm.files()
    for name, content in files.items():
        store.put(container, name, content)
    reference = safetensors.numpy.load(files["model.safetensors"])
    with rt.open_model(store.url(container), storage_options=store.options()) as m:
        opened, received = store.mark(), m.traffic.bytes
        most = 0
        for name in sorted(m.tensors):
            before = store.mark()
            np.testing.assert_array_equal(m.get_tensor(name), reference[name], err_msg=name)
            most = max(most, len(store.since(before)[0]))
        data, metadata = store.since(opened)
        reads = ModelReads(
            len(m.keys()),
            len(metadata),
            len(data),
            most,
            m.traffic.bytes - received,
            sum(e.sent for e in data),
            sum(array.nbytes for array in reference.values()),
        )
    assert reads.tensors == 104
    assert reads.metadata == 0
    # Every tensor in one request (the first window's came with the open), but the embedding
    # (45 MiB, more than a part): its requests run at once, each at most an even share of what
    # was still queued (reading/inflight.py), so it takes a few more than its parts.
    assert reads.tensors - 1 <= reads.data <= reads.tensors - 1 + reads.most_for_one
    assert 3 <= reads.most_for_one <= 2 * START_STREAMS, reads
    assert reads.received <= reads.file_bytes
    return reads


def slice_moves_its_bytes(store: Store) -> tuple[int, int, list[Logged]]:
    """Rows 1000:1010 of the embedding of a fresh file (opened anew, no cache entry): returns
    ``(bytes asked for, bytes received at the client, the data requests logged)``; the
    values must equal the reference's."""
    container = store.new("slice")
    data = minilm.files()["model.safetensors"]
    store.put(container, "model.safetensors", data)
    reference = safetensors.numpy.load(data)[minilm.EMBEDDINGS][1000:1010]
    mark = store.mark()
    with rt.safe_open(
        store.url(container, "model.safetensors"), storage_options=store.options()
    ) as f:
        got = f.get_slice(minilm.EMBEDDINGS)[1000:1010]
        received = f.traffic.bytes
    np.testing.assert_array_equal(got, reference)
    return reference.nbytes, received, store.since(mark)[0]


def cli_lines(*argv: str) -> list[str]:
    """What ``remotetensors ARGV`` prints (it must succeed)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(list(argv))
    assert status == 0, argv
    return out.getvalue().splitlines()


def cli_options(store: Store) -> list[str]:
    """The storage options as ``--option KEY=VALUE`` arguments."""
    return [arg for k, v in store.options().items() for arg in ("--option", f"{k}={v}")]


def tensor_names(store: Store, location: str) -> list[str]:
    """The tensor names ``remotetensors ls --json`` prints for ``location``."""
    printed = json.loads("\n".join(cli_lines("ls", location, "--json", *cli_options(store))))
    return sorted(_names_in(printed))


def _names_in(printed: Any) -> list[str]:
    if isinstance(printed, dict) and "tensors" in printed:
        return _names_in(printed["tensors"])
    if isinstance(printed, list):
        return [item["name"] if isinstance(item, dict) else str(item) for item in printed]
    return [str(name) for name in printed]


def cache_entries() -> list[str]:
    """The kinds of the entries in the test's own cache."""
    from remotetensors.sources.cache.store import CacheStore

    return sorted(info.kind for info in CacheStore(os.environ["REMOTETENSORS_CACHE"]).entries())


def of_file(
    logged: tuple[list[Logged], list[Logged]], name: str
) -> tuple[list[Logged], list[Logged]]:
    """``(data reads, metadata requests)`` of the object ``name`` only."""
    data, metadata = logged
    return _about(data, name), _about(metadata, name)


def _about(entries: list[Logged], name: str) -> list[Logged]:
    return [e for e in entries if e.target.split("?")[0].endswith("/" + name)]


def reopened(store: Store, location: str) -> tuple[list[Logged], list[Logged]]:
    """Open the model at ``location`` (a file) and close it: ``(data reads, metadata
    requests)`` of its file, from the emulator's log."""
    mark = store.mark()
    name = location.split("/")[-1].split("#")[0].split("?")[0]
    with rt.open_model(location, storage_options=store.options()):
        pass
    return of_file(store.since(mark), name)


async def a_recipe_reopens_the_version(store: Store) -> None:
    """A source's recipe (what another process opens: Dask workers, torch ranks) opens the
    same version, and refuses a rewritten object."""
    from remotetensors.sources.reopen import reopen

    container = store.new("recipe")
    store.put(container, "f.bin", b"x" * 100)
    source = FsspecSource(store.url(container, "f.bin"), storage_options=store.options())
    await source.open_prefix(10)
    recipe = source.recipe()
    await source.aclose()
    again = await reopen(recipe)
    try:
        assert await again.read(20, 25) == b"xxxxx"
    finally:
        await again.aclose()
    store.put(container, "f.bin", b"y" * 100)
    with pytest.raises(rt.RemoteFileChangedError, match="changed since it was opened"):
        await reopen(recipe)


def offline_a_kept_object_opens_without_a_request(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline (``HF_HUB_OFFLINE=1``), a kept object's header opens from the cache with no
    request; one never kept raises OfflineError naming it."""
    container = store.new("offline")
    store.put(container, "m.safetensors", write_reference({"w": np.ones(6, np.int8)}))
    url = store.url(container, "m.safetensors")
    with rt.safe_open(url, storage_options=store.options()) as f:
        assert f.keys() == ["w"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    mark = store.mark()
    with rt.safe_open(url, storage_options=store.options()) as f:
        assert (f.traffic.requests, f.keys()) == (0, ["w"])
    assert store.since(mark) == ([], [])
    other = store.url(container, "other.safetensors")
    with pytest.raises(rt.OfflineError, match=other):
        rt.safe_open(other, storage_options=store.options())

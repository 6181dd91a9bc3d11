"""Azure Blob Storage through adlfs and azure-storage-blob, against Azurite
(tests/emulators.py): the source conformance suite, reads with ``If-Match`` of the ETag opened
(no metadata request after the open, counted in Azurite's log), a rewrite between open and
read, the cache.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.sources.base import ByteSource
from remotetensors.sources.fsspec import FsspecSource
from tests.emulators import Azurite
from tests.integration.cloud_checks import (
    SLACK_BYTES,
    Store,
    cache_entries,
    of_file,
    read_the_model_tensor_by_tensor,
    reopened,
    slice_moves_its_bytes,
)
from tests.integration.source_conformance import Replace, SourceTests
from tests.reference import write_reference

_containers = itertools.count()
OLD = {"old": np.arange(6, dtype=np.float32)}
NEW = {"new": np.arange(9, dtype=np.int16)}


def new_container(emulator: Azurite, prefix: str = "azure") -> str:
    """A new, empty container's name."""
    return emulator.make_container(f"{prefix}-{next(_containers)}")


class TestAzureSource(SourceTests):
    @pytest.fixture(autouse=True)
    def _container(self, azurite: Azurite) -> None:
        self.emulator = azurite
        self.container = new_container(azurite, "conformance")

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        self.emulator.put(self.container, "file.bin", data)
        source = FsspecSource(
            f"az://{self.container}/file.bin", storage_options=self.emulator.options()
        )
        return source, lambda new: self._replace(new)

    def _replace(self, new: bytes) -> None:
        self.emulator.put(self.container, "file.bin", new)

    async def missing(self) -> ByteSource:
        return FsspecSource(
            f"az://{self.container}/absent.bin", storage_options=self.emulator.options()
        )

    async def test_what_each_read_asks(self) -> None:
        """One download to open, one per read (If-Match), no metadata request; each moves
        exactly its bytes (Azurite logs what it sent)."""
        source, _ = await self.make(b"x" * 5000)
        mark = len(self.emulator.log())
        await source.open_prefix(100)
        await source.read(500, 600)
        await source.read(4000, 5000)
        data, metadata = self.emulator.reads(self.emulator.since(mark))
        assert metadata == []
        assert [(e.status, e.sent) for e in data] == [(206, 100), (206, 100), (206, 1000)]
        await source.aclose()


def test_a_rewrite_between_open_and_read_is_refused(azurite: Azurite) -> None:
    container = new_container(azurite)
    old = {"w": np.arange(32768, dtype=np.float32)}  # 128 KiB: beyond the first window
    azurite.put(container, "m.safetensors", write_reference(old))
    with rt.safe_open(f"az://{container}/m.safetensors", storage_options=azurite.options()) as f:
        first = f.get_slice("w")[:10]
        azurite.put(container, "m.safetensors", write_reference({"w": -old["w"]}))
        with pytest.raises(rt.RemoteFileChangedError, match="ETag") as err:
            f.get_tensor("w")
    assert f"az://{container}/m.safetensors" in str(err.value)
    np.testing.assert_array_equal(first, old["w"][:10])
    assert azurite.log()[-1].status == 412  # the service refused the If-Match read


@pytest.fixture
def store(azurite: Azurite) -> Store:
    return Store("az", azurite)


def test_every_tensor_of_a_real_model_with_no_metadata_request(store: Store) -> None:
    """all-MiniLM-L6-v2 read tensor by tensor: the reference's values, and after the open not
    one metadata request (adlfs's info after each read sent 103 for the same reads)."""
    reads = read_the_model_tensor_by_tensor(store)
    assert reads.tensors == 104
    assert reads.metadata == 0
    assert reads.data >= reads.tensors - 1  # the smallest may sit in the first window
    assert reads.received <= reads.file_bytes


def test_a_slice_moves_its_bytes(store: Store) -> None:
    """Counted where Azurite counts: the bytes it logged as sent."""
    asked, received, data = slice_moves_its_bytes(store)
    assert sum(e.sent for e in data) == received
    assert received <= asked + SLACK_BYTES
    assert len(data) == 2  # the first window, then the rows


def test_abfs_is_the_same_blob(store: Store) -> None:
    container = store.new("abfs")
    store.put(container, "m.safetensors", write_reference(NEW))
    with rt.safe_open(f"abfs://{container}/m.safetensors", storage_options=store.options()) as f:
        np.testing.assert_array_equal(f.get_tensor("new"), NEW["new"])


def test_a_cached_blob_reopens_without_a_data_request(store: Store) -> None:
    """Re-opening a kept blob costs one metadata request (a HEAD) and no data request for it;
    a rewritten one is read anew."""
    container = store.new("cached")
    store.put(container, "m.safetensors", write_reference(NEW))
    url = store.url(container, "m.safetensors")
    data, metadata = reopened(store, url)
    assert ([e.status for e in data], metadata) == ([206], [])  # the first time: its window
    data, metadata = reopened(store, url)
    assert (data, [e.method for e in metadata]) == ([], ["HEAD"])  # from the cache
    with rt.open_model(url, storage_options=store.options()) as m:
        np.testing.assert_array_equal(m.get_tensor("new"), NEW["new"])  # If-Match: 206
    assert cache_entries() == ["file", "latest"]
    store.put(container, "m.safetensors", write_reference(OLD))
    mark = store.mark()
    with rt.open_model(url, storage_options=store.options()) as m:
        assert sorted(m.keys()) == ["old"]
    data, metadata = of_file(store.since(mark), "m.safetensors")
    assert [len(data), len(metadata)] == [1, 1]  # the revalidation, then the new version


def test_a_version_id_in_the_location_is_asked_for(store: Store) -> None:
    """``?versionid=`` stays with its file in ``open_model`` (not taken for a folder) and every
    download asks for that version. Azurite keeps no versions (with ``--loose`` it serves the
    current blob whatever version is asked): only the request is checked here."""
    container = store.new("versions")
    store.put(container, "m.safetensors", write_reference(NEW))
    version = "2026-11-28T00:00:00.0000000Z"
    mark = store.mark()
    url = store.url(container, "m.safetensors") + f"?versionid={version}"
    with rt.open_model(url, storage_options=store.options()) as m:
        np.testing.assert_array_equal(m.get_tensor("new"), NEW["new"])
    data, _ = of_file(store.since(mark), "m.safetensors")
    assert data
    assert all(e.target.endswith(f"?versionid={version}") for e in data)
    assert reopened(store, url) == ([], [])  # a named version is served from the cache

"""Google Cloud Storage through gcsfs, against fake-gcs-server (tests/emulators.py): the source
conformance suite, reads at the generation opened (no metadata request after the open, counted
in the emulator's log), a rewrite between open and read, ``#generation`` locations, the cache.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.sources.base import ByteSource
from remotetensors.sources.fsspec import FsspecSource
from tests.emulators import FakeGcs
from tests.integration.cloud_checks import (
    SLACK_BYTES,
    Store,
    cache_entries,
    of_file,
    read_the_model_tensor_by_tensor,
    reopened,
    slice_moves_its_bytes,
    tensor_names,
)
from tests.integration.source_conformance import Replace, SourceTests
from tests.reference import write_reference

_buckets = itertools.count()
OLD = {"old": np.arange(6, dtype=np.float32)}
NEW = {"new": np.arange(9, dtype=np.int16)}


def new_bucket(emulator: FakeGcs, prefix: str = "gcs") -> str:
    """A new, empty bucket's name."""
    return emulator.make_bucket(f"{prefix}-{next(_buckets)}")


class TestGcsSource(SourceTests):
    @pytest.fixture(autouse=True)
    def _bucket(self, gcs_emulator: FakeGcs) -> None:
        self.emulator = gcs_emulator
        self.bucket = new_bucket(gcs_emulator, "conformance")

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        self.emulator.put(self.bucket, "file.bin", data)
        source = FsspecSource(
            f"gs://{self.bucket}/file.bin", storage_options=self.emulator.options()
        )
        return source, lambda new: self._replace(new)

    def _replace(self, new: bytes) -> None:
        self.emulator.put(self.bucket, "file.bin", new)

    async def missing(self) -> ByteSource:
        return FsspecSource(
            f"gs://{self.bucket}/absent.bin", storage_options=self.emulator.options()
        )

    async def test_what_each_read_asks(self) -> None:
        """One media GET to open, one per read at the generation opened, no metadata."""
        source, _ = await self.make(b"x" * 5000)
        mark = len(self.emulator.log())
        prefix = await source.open_prefix(100)
        await source.read(500, 600)
        await source.read(4000, 5000)
        data, metadata = self.emulator.reads(self.emulator.since(mark))
        assert metadata == []
        assert len(data) == 3
        assert "generation=" not in data[0].target
        assert [e.target.endswith(f"generation={prefix.validator}") for e in data[1:]] == [
            True,
            True,
        ]
        await source.aclose()


def test_a_rewrite_between_open_and_read_is_refused(gcs_emulator: FakeGcs) -> None:
    bucket = new_bucket(gcs_emulator)
    old = {"w": np.arange(32768, dtype=np.float32)}  # 128 KiB: beyond the first window
    gcs_emulator.put(bucket, "m.safetensors", write_reference(old))
    with rt.safe_open(f"gs://{bucket}/m.safetensors", storage_options=gcs_emulator.options()) as f:
        first = f.get_slice("w")[:10]
        gcs_emulator.put(bucket, "m.safetensors", write_reference({"w": -old["w"]}))
        with pytest.raises(rt.RemoteFileChangedError, match="generation") as err:
            f.get_tensor("w")
    assert f"gs://{bucket}/m.safetensors" in str(err.value)
    np.testing.assert_array_equal(first, old["w"][:10])


@pytest.fixture
def store(gcs_emulator: FakeGcs) -> Store:
    return Store("gs", gcs_emulator)


def test_every_tensor_of_a_real_model_with_no_metadata_request(store: Store) -> None:
    """all-MiniLM-L6-v2 read tensor by tensor: the reference's values, and after the open not
    one metadata request (gcsfs's info sent 242 for the same reads, 71 of them listings)."""
    reads = read_the_model_tensor_by_tensor(store)
    assert reads.tensors == 104
    assert reads.metadata == 0
    assert reads.data >= reads.tensors - 1  # the smallest may sit in the first window
    # Every tensor byte once, no more (fake-gcs-server logs 0 for media downloads: the client
    # counts); the first window's tensors came before the open was over.
    assert reads.received <= reads.file_bytes


def test_a_slice_moves_its_bytes(store: Store) -> None:
    asked, received, data = slice_moves_its_bytes(store)
    assert received <= asked + SLACK_BYTES
    assert len(data) == 2  # the first window, then the rows


@pytest.fixture
def versioned(gcs_emulator: FakeGcs) -> tuple[Store, str, str, str]:
    """A bucket with object versioning holding two generations of m.safetensors: ``(store,
    bucket, old generation, new generation)``."""
    bucket = gcs_emulator.make_bucket(f"versioned-{next(_buckets)}", versioning=True)
    old = gcs_emulator.put(bucket, "m.safetensors", write_reference(OLD))
    new = gcs_emulator.put(bucket, "m.safetensors", write_reference(NEW))
    return Store("gs", gcs_emulator), bucket, old, new


def test_a_generation_in_the_location_opens_that_version(
    versioned: tuple[Store, str, str, str],
) -> None:
    store, bucket, old, new = versioned
    url = f"gs://{bucket}/m.safetensors"
    with rt.open_model(f"{url}#{old}", storage_options=store.options()) as m:
        assert sorted(m.keys()) == ["old"]
        np.testing.assert_array_equal(m.get_tensor("old"), OLD["old"])
    with rt.safe_open(f"{url}?generation={old}", storage_options=store.options()) as f:
        assert f.keys() == ["old"]
    with rt.open_model(url, storage_options=store.options()) as m:
        assert sorted(m.keys()) == ["new"]
    assert tensor_names(store, f"{url}#{old}") == ["old"]
    assert tensor_names(store, f"{url}#{new}") == ["new"]


def test_a_cached_object_reopens_without_a_data_request(
    versioned: tuple[Store, str, str, str],
) -> None:
    """Re-opening a kept object costs one metadata request and no data request for it (the
    probes for config.json beside it are discovery's, 404s); a generation named, none."""
    store, bucket, old, _ = versioned
    url = f"gs://{bucket}/m.safetensors"
    data, metadata = reopened(store, url)
    assert ([e.status for e in data], metadata) == ([206], [])  # the first time: its window
    data, metadata = reopened(store, url)
    assert (data, len(metadata)) == ([], 1)  # from the cache, revalidated
    np.testing.assert_array_equal(
        rt.safe_open(url, storage_options=store.options()).get_tensor("new"), NEW["new"]
    )
    assert cache_entries() == ["file", "latest"]
    assert len(reopened(store, f"{url}#{old}")[0]) == 1
    assert reopened(store, f"{url}#{old}") == ([], [])  # a generation cannot change
    store.put(bucket, "m.safetensors", write_reference(OLD))  # a third generation
    mark = store.mark()
    with rt.open_model(url, storage_options=store.options()) as m:
        assert sorted(m.keys()) == ["old"]
    data, metadata = of_file(store.since(mark), "m.safetensors")
    assert [len(data), len(metadata)] == [1, 1]  # the revalidation, then the new version


def test_a_rewrite_on_a_versioned_bucket_reads_the_old_bytes(gcs_emulator: FakeGcs) -> None:
    """With object versioning the generation opened stays readable: a rewrite between open
    and read gives the old bytes, all of them."""
    bucket = gcs_emulator.make_bucket(f"kept-{next(_buckets)}", versioning=True)
    old = {"w": np.arange(32768, dtype=np.float32)}  # 128 KiB: beyond the first window
    gcs_emulator.put(bucket, "m.safetensors", write_reference(old))
    with rt.safe_open(f"gs://{bucket}/m.safetensors", storage_options=gcs_emulator.options()) as f:
        gcs_emulator.put(bucket, "m.safetensors", write_reference({"w": -old["w"]}))
        np.testing.assert_array_equal(f.get_tensor("w"), old["w"])

"""Google Cloud Storage through gcsfs, against fake-gcs-server (tests/emulators.py): the source
conformance suite, reads at the generation opened (no metadata request after the open, counted
in the emulator's log), a rewrite between open and read, ``#generation`` locations, the cache.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import remotetensors as rt
from tests.emulators import FakeGcs
from tests.integration.cloud_checks import (
    SLACK_BYTES,
    Store,
    StoreSourceTests,
    a_deletion_between_open_and_read,
    a_recipe_reopens_the_version,
    a_rewrite_between_open_and_read,
    cache_entries,
    of_file,
    offline_a_kept_object_opens_without_a_request,
    read_the_model_tensor_by_tensor,
    reopened,
    slice_moves_its_bytes,
    tensor_names,
)
from tests.reference import write_reference

_buckets = itertools.count()
OLD = {"old": np.arange(6, dtype=np.float32)}
NEW = {"new": np.arange(9, dtype=np.int16)}


class VersionedStore(Store):
    """Its buckets keep every generation (object versioning)."""

    def new(self, prefix: str) -> str:
        assert isinstance(self.emulator, FakeGcs)
        return self.emulator.make_bucket(f"{prefix}-v{next(_buckets)}", versioning=True)


class TestGcsSource(StoreSourceTests):
    @pytest.fixture(autouse=True)
    def _store(self, gcs_emulator: FakeGcs) -> None:
        self.store = Store("gs", gcs_emulator)

    async def test_what_each_read_asks(self) -> None:
        """One media GET to open, one per read at the generation opened, no metadata."""
        generation, data = await self.what_each_read_asks()
        assert len(data) == 3
        assert "generation=" not in data[0].target
        assert all(e.target.endswith(f"generation={generation}") for e in data[1:])


def test_a_rewrite_between_open_and_read_is_refused(store: Store) -> None:
    a_rewrite_between_open_and_read(store)


def test_a_rewrite_on_a_versioned_bucket_reads_the_old_bytes(gcs_emulator: FakeGcs) -> None:
    """With object versioning the generation opened stays readable: a rewrite between open
    and read gives the old bytes, all of them."""
    a_rewrite_between_open_and_read(VersionedStore("gs", gcs_emulator), versioned=True)


@pytest.fixture
def store(gcs_emulator: FakeGcs) -> Store:
    return Store("gs", gcs_emulator)


def test_every_tensor_of_a_real_model_with_no_metadata_request(store: Store) -> None:
    """all-MiniLM-L6-v2 read tensor by tensor: the reference's values, and after the open not
    one metadata request (gcsfs's info sent 242 for the same reads, 71 of them listings)."""
    reads = read_the_model_tensor_by_tensor(store)
    assert reads.logged == 0  # fake-gcs-server logs no media bytes: the client counts


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


async def test_a_recipe_reopens_the_version(store: Store) -> None:
    await a_recipe_reopens_the_version(store)


def test_offline_a_kept_object_opens_without_a_request(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline_a_kept_object_opens_without_a_request(store, monkeypatch)


def test_a_deletion_between_open_and_read_is_refused(store: Store) -> None:
    a_deletion_between_open_and_read(store)

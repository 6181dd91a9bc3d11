"""Azure Blob Storage through adlfs and azure-storage-blob, against Azurite
(tests/emulators.py): the source conformance suite, reads with ``If-Match`` of the ETag opened
(no metadata request after the open, counted in Azurite's log), a rewrite between open and
read, the cache.
"""

from __future__ import annotations

import numpy as np
import pytest

import remotetensors as rt
from tests.emulators import Azurite
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
)
from tests.reference import write_reference

OLD = {"old": np.arange(6, dtype=np.float32)}
NEW = {"new": np.arange(9, dtype=np.int16)}


class TestAzureSource(StoreSourceTests):
    @pytest.fixture(autouse=True)
    def _store(self, azurite: Azurite) -> None:
        self.store = Store("az", azurite)

    async def test_what_each_read_asks(self) -> None:
        """One download to open, one per read (If-Match), no metadata request; each moves
        exactly its bytes (Azurite logs what it sent)."""
        _, data = await self.what_each_read_asks()
        assert [(e.status, e.sent) for e in data] == [(206, 100), (206, 100), (206, 1000)]


def test_a_rewrite_between_open_and_read_is_refused(store: Store, azurite: Azurite) -> None:
    a_rewrite_between_open_and_read(store)
    assert azurite.log()[-1].status == 412  # the service refused the If-Match read


@pytest.fixture
def store(azurite: Azurite) -> Store:
    return Store("az", azurite)


def test_every_tensor_of_a_real_model_with_no_metadata_request(store: Store) -> None:
    """all-MiniLM-L6-v2 read tensor by tensor: the reference's values, and after the open not
    one metadata request (adlfs's info after each read sent 103 for the same reads)."""
    reads = read_the_model_tensor_by_tensor(store)
    assert reads.logged == reads.received  # Azurite's count and the client's


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


async def test_a_recipe_reopens_the_version(store: Store) -> None:
    await a_recipe_reopens_the_version(store)


def test_offline_a_kept_object_opens_without_a_request(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    offline_a_kept_object_opens_without_a_request(store, monkeypatch)


def test_a_deletion_between_open_and_read_is_refused(store: Store) -> None:
    a_deletion_between_open_and_read(store)

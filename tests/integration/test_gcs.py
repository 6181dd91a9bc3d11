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
from tests.integration.source_conformance import Replace, SourceTests
from tests.reference import write_reference

_buckets = itertools.count()


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

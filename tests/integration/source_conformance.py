"""The tests every ByteSource passes. A backend's test module subclasses :class:`SourceTests`
and implements :meth:`SourceTests.make`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

import remotetensors as rt
from remotetensors.sources.base import ByteSource

Replace = Callable[[bytes], None]
"""Replaces the file's content (a new version of it)."""

DATA = bytes(range(256)) * 4099  # ~1 MiB with a recognisable pattern


class SourceTests:
    """Conformance tests for sources; subclasses provide :meth:`make`."""

    detects_changes = True
    """False for backends that report nothing but a file's size: there, as documented, a
    rewrite that keeps the size goes unseen (:meth:`test_same_size_rewrite` checks that this
    is all that goes unseen)."""

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        """A source over a file holding ``data``, and a way to replace the file."""
        raise NotImplementedError

    async def missing(self) -> ByteSource:
        """A source over a location that does not exist."""
        raise NotImplementedError

    @pytest.fixture
    async def opened(self) -> AsyncIterator[tuple[ByteSource, Replace]]:
        source, replace = await self.make(DATA)
        yield source, replace
        await source.aclose()

    async def test_prefix_gives_bytes_and_size(self) -> None:
        source, _ = await self.make(DATA)
        try:
            prefix = await source.open_prefix(1000)
            assert prefix.data == DATA[:1000]
            assert prefix.size == len(DATA)
        finally:
            await source.aclose()

    async def test_prefix_longer_than_the_file(self) -> None:
        source, _ = await self.make(b"short file")
        try:
            prefix = await source.open_prefix(1 << 20)
            assert prefix.data == b"short file"
            assert prefix.size == 10
        finally:
            await source.aclose()

    async def test_empty_file(self) -> None:
        source, _ = await self.make(b"")
        try:
            prefix = await source.open_prefix(64)
            assert prefix.data == b""
            assert prefix.size == 0
        finally:
            await source.aclose()

    async def test_suffix_gives_last_bytes_and_size(self) -> None:
        source, _ = await self.make(DATA)
        try:
            suffix = await source.open_suffix(1000)
            assert suffix.data == DATA[-1000:]
            assert (suffix.size, suffix.start) == (len(DATA), len(DATA) - 1000)
            assert await source.read(0, 10) == DATA[:10]  # the version is pinned, as by a prefix
        finally:
            await source.aclose()

    async def test_suffix_longer_than_the_file(self) -> None:
        source, _ = await self.make(b"short file")
        try:
            suffix = await source.open_suffix(1 << 20)
            assert (suffix.data, suffix.size, suffix.start) == (b"short file", 10, 0)
        finally:
            await source.aclose()

    async def test_suffix_of_an_empty_file(self) -> None:
        source, _ = await self.make(b"")
        try:
            suffix = await source.open_suffix(64)
            assert (suffix.data, suffix.size) == (b"", 0)
        finally:
            await source.aclose()

    async def test_suffix_then_a_changed_file_is_seen(self) -> None:
        if not self.detects_changes:
            pytest.skip("this backend reports only a size (see detects_changes)")
        source, replace = await self.make(DATA)
        try:
            await source.open_suffix(100)
            replace(DATA[::-1])
            with pytest.raises(rt.RemoteFileChangedError):
                await source.read(0, 100)
        finally:
            await source.aclose()

    async def test_exact_ranges(self, opened: tuple[ByteSource, Replace]) -> None:
        source, _ = opened
        await source.open_prefix(8)
        for start, end in [(0, 1), (5, 9000), (len(DATA) - 3, len(DATA)), (1000, 1000)]:
            assert await source.read(start, end) == DATA[start:end]
        buffer = bytearray(777)
        await source.read_into(12345, memoryview(buffer))
        assert bytes(buffer) == DATA[12345 : 12345 + 777]

    async def test_concurrent_reads(self, opened: tuple[ByteSource, Replace]) -> None:
        source, _ = opened
        await source.open_prefix(8)
        spans = [(i * 9973, i * 9973 + 5000) for i in range(60)]
        results = await asyncio.gather(*(source.read(a, b) for a, b in spans))
        assert results == [DATA[a:b] for a, b in spans]

    async def test_changed_file_is_an_error(self, opened: tuple[ByteSource, Replace]) -> None:
        source, replace = opened
        await source.open_prefix(8)
        replace(DATA[::-1] + b"more")
        with pytest.raises(rt.RemoteFileChangedError, match="changed") as err:
            await source.read(100, 200)
        assert source.location in str(err.value)

    async def test_same_size_rewrite(self, opened: tuple[ByteSource, Replace]) -> None:
        """A rewrite that keeps the size is an error wherever the backend reports a version;
        where it reports only the size, the documented weaker guarantee: the read goes on
        and returns the new bytes."""
        source, replace = opened
        await source.open_prefix(8)
        replace(DATA[::-1])
        if self.detects_changes:
            with pytest.raises(rt.RemoteFileChangedError, match="changed"):
                await source.read(100, 200)
        else:
            assert await source.read(100, 200) == DATA[::-1][100:200]

    async def test_missing_location(self) -> None:
        source = await self.missing()
        with pytest.raises(rt.NotFoundError) as err:
            await source.open_prefix(64)
        assert isinstance(err.value, FileNotFoundError)
        assert source.location in str(err.value)
        await source.aclose()

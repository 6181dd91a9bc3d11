"""Every source passes the same conformance tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from remotetensors.sources.base import ByteSource
from remotetensors.sources.fsspec import FsspecSource
from remotetensors.sources.http.source import HttpSource
from remotetensors.sources.local import LocalSource
from tests.integration.source_conformance import DATA, Replace, SourceTests
from tests.integration.test_models import close_s3
from tests.servers import FaultyServer


class TestHttpSource(SourceTests):
    @pytest.fixture(autouse=True)
    def _server(self) -> Iterator[None]:
        self.server = FaultyServer()
        yield
        self.server.stop()

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        url = self.server.put("file.bin", data)

        def replace(new: bytes) -> None:
            self.server.files["file.bin"] = new

        return HttpSource(url), replace

    async def missing(self) -> ByteSource:
        return HttpSource(f"{self.server.url}/f/absent.bin")


class TestHttpSourceBehindRedirect(TestHttpSource):
    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        _, replace = await super().make(data)
        return HttpSource(f"{self.server.url}/redirect/file.bin"), replace


def rewrite(path: Path, new: bytes) -> None:
    """Write ``new`` over ``path`` as a later write would, a second later: some kernels stamp
    modification times once per clock tick (4 ms), so two writes in one tick can share one."""
    before = path.stat().st_mtime_ns
    path.write_bytes(new)
    later = before + 1_000_000_000
    os.utime(path, ns=(later, later))


class TestLocalSource(SourceTests):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        path = self.folder / "file.bin"
        path.write_bytes(data)
        return LocalSource(path), lambda new: rewrite(path, new)

    async def missing(self) -> ByteSource:
        return LocalSource(self.folder / "absent.bin")


class TestFsspecMemory(SourceTests):
    @pytest.fixture(autouse=True)
    def _memory(self, request: pytest.FixtureRequest) -> Iterator[None]:
        import fsspec

        self.fs = fsspec.filesystem("memory")
        self.root = f"/conformance-{abs(hash(request.node.nodeid))}"
        yield
        if self.fs.exists(self.root):
            self.fs.rm(self.root, recursive=True)

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        path = f"{self.root}/file.bin"
        self.fs.pipe(path, data)
        return FsspecSource(f"memory://{path}"), lambda new: self.fs.pipe(path, new)

    async def missing(self) -> ByteSource:
        return FsspecSource(f"memory://{self.root}/absent.bin")


class TestFsspecLocal(TestLocalSource):
    """Local files through fsspec's local filesystem (``local://``; ``file://`` and plain
    paths go to LocalSource): versions told apart by size, mtime and inode."""

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        path = self.folder / "file.bin"
        path.write_bytes(data)
        return FsspecSource(f"local://{path}"), lambda new: rewrite(path, new)

    async def missing(self) -> ByteSource:
        return FsspecSource(f"local://{self.folder / 'absent.bin'}")


class TestFsspecHttp(TestHttpSource):
    """fsspec's HTTP filesystem (reached through chained URLs or a given filesystem; plain
    ``http(s)://`` goes to HttpSource): a strong ETag makes every read ``If-Match``."""

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        _, replace = await super().make(data)
        return FsspecSource(f"{self.server.url}/f/file.bin"), replace

    async def missing(self) -> ByteSource:
        return FsspecSource(f"{self.server.url}/f/absent.bin")

    async def test_what_each_read_asks(self) -> None:
        source, _ = await self.make(DATA)
        await source.open_prefix(100)
        await source.read(500, 600)
        etag = FaultyServer.etag(DATA)
        reads = [e for e in self.server.log.entries if e.range is not None]
        assert [e.headers.get("If-Match") for e in reads] == [etag, etag]
        # No metadata call after the reads: the condition ties them to the version.
        assert len(self.server.log.entries) == 3  # HEAD, window, range
        await source.aclose()


class TestFsspecHttpWithoutValidator(TestFsspecHttp):
    """A server that sends no ETag and no Last-Modified: only the size tells versions apart
    (the documented weaker guarantee); every read is followed by a HEAD that compares it."""

    detects_changes = False

    @pytest.fixture(autouse=True)
    def _no_etags(self, _server: None) -> None:
        self.server.send_etags = False

    async def test_what_each_read_asks(self) -> None:
        source, _ = await self.make(DATA)
        await source.open_prefix(100)
        await source.read(500, 600)
        assert all("If-Match" not in e.headers for e in self.server.log.entries)
        heads = [e.range is None for e in self.server.log.entries]
        assert heads == [True, False, True, False, True]  # HEAD, window, HEAD, range, HEAD
        await source.aclose()


class TestFsspecS3(SourceTests):
    @pytest.fixture(autouse=True)
    def _bucket(self, moto_endpoint: str, request: pytest.FixtureRequest) -> Iterator[None]:
        import s3fs

        self.options = {
            "endpoint_url": moto_endpoint,
            "key": "testing",
            "secret": "testing",
            "skip_instance_cache": True,
        }
        self.fs = s3fs.S3FileSystem(**self.options)
        self.bucket = f"conformance-{abs(hash(request.node.nodeid)) % 10**8}"
        self.fs.mkdir(self.bucket)
        yield
        close_s3(self.fs)

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        path = f"{self.bucket}/file.bin"
        self.fs.pipe(path, data)
        source = FsspecSource(f"s3://{path}", storage_options=self.options)
        return source, lambda new: self.fs.pipe(path, new)

    async def missing(self) -> ByteSource:
        return FsspecSource(f"s3://{self.bucket}/absent.bin", storage_options=self.options)

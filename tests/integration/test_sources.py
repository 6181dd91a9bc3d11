"""Every source passes the same conformance tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from remotetensors.sources.base import ByteSource
from remotetensors.sources.fsspec import FsspecSource
from remotetensors.sources.http.source import HttpSource
from remotetensors.sources.local import LocalSource
from tests.integration.source_conformance import Replace, SourceTests
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


class TestLocalSource(SourceTests):
    @pytest.fixture(autouse=True)
    def _folder(self, tmp_path: Path) -> None:
        self.folder = tmp_path

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        path = self.folder / "file.bin"
        path.write_bytes(data)

        def replace(new: bytes) -> None:
            path.write_bytes(new)

        return LocalSource(path), replace

    async def missing(self) -> ByteSource:
        return LocalSource(self.folder / "absent.bin")


class TestFsspecMemory(SourceTests):
    detects_changes = False

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


class TestFsspecS3(SourceTests):
    @pytest.fixture(autouse=True)
    def _bucket(self, moto_endpoint: str, request: pytest.FixtureRequest) -> None:
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

    async def make(self, data: bytes) -> tuple[ByteSource, Replace]:
        path = f"{self.bucket}/file.bin"
        self.fs.pipe(path, data)
        source = FsspecSource(f"s3://{path}", storage_options=self.options)
        return source, lambda new: self.fs.pipe(path, new)

    async def missing(self) -> ByteSource:
        return FsspecSource(f"s3://{self.bucket}/absent.bin", storage_options=self.options)

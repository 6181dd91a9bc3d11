"""Every source passes the same conformance tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from remotetensors.sources.base import ByteSource
from remotetensors.sources.http import HttpSource
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

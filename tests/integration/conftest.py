from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import FaultyServer, Log, static_server


@pytest.fixture(scope="module")
def static_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("static")


@pytest.fixture(scope="module")
def static(static_root: Path) -> Iterator[tuple[str, Log, Path]]:
    """aiohttp's static handler over ``static_root``: (base URL, log, root)."""
    with static_server(static_root) as (url, log):
        yield url, log, static_root


@pytest.fixture
def faulty() -> Iterator[FaultyServer]:
    server = FaultyServer()
    try:
        yield server
    finally:
        server.stop()

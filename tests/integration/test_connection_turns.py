"""Requests wait for a free connection in our code, never in httpcore's pool.

httpcore 1.0's pool hands each connection that frees up to every queued request; all but one
wake, fail and queue again (encode/httpcore#1035), which made opening a 72-shard model on 64
connections spend half its CPU there. A client made by :meth:`HttpOptions.new_client` lets at
most ``max_connections`` requests into its pool; the rest wait their turn (see
``HttpClient.turns``), and the direct reader's requests take the same turns.
Counted here: requests queued inside the pool, and requests the server holds at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from httpcore import AsyncConnectionPool

import remotetensors as rt
from tests.integration.test_models import check_model, sharded
from tests.servers import serving


@pytest.fixture
def slow_server(tmp_path: Path) -> Iterator[tuple[str, dict[str, int]]]:
    """Static files after 20 ms per request; counts the most requests held at once."""
    counts = {"now": 0, "most": 0}

    @web.middleware
    async def hold(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        counts["now"] += 1
        counts["most"] = max(counts["most"], counts["now"])
        try:
            await asyncio.sleep(0.02)
            return await handler(request)
        finally:
            counts["now"] -= 1

    app = web.Application(middlewares=[hold])
    app.router.add_static("/", tmp_path)
    with serving(app) as url:
        yield url, counts


@pytest.fixture
def queued_in_pool(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of requests left waiting inside httpcore's pool after each of its passes."""
    seen: list[int] = []
    real = AsyncConnectionPool._assign_requests_to_connections

    def counting(self: AsyncConnectionPool) -> Any:
        closing = real(self)
        seen.append(sum(1 for request in self._requests if request.is_queued()))
        return closing

    monkeypatch.setattr(AsyncConnectionPool, "_assign_requests_to_connections", counting)
    return seen


@pytest.mark.parametrize("direct_reads", [False, True], ids=["httpx", "direct"])
def test_a_model_of_more_shards_than_connections_never_queues_in_the_pool(
    slow_server: tuple[str, dict[str, int]],
    queued_in_pool: list[int],
    tmp_path: Path,
    direct_reads: bool,
) -> None:
    url, counts = slow_server
    files, tensors = sharded(shards=12, layers_per_shard=1)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    options = rt.HttpOptions(max_connections=3, direct_reads=direct_reads)
    with rt.open_model(f"{url}/", http_options=options) as model:
        check_model(model, tensors)
    if direct_reads:
        assert not queued_in_pool  # every request went direct, httpx's pool was never asked
    else:
        assert queued_in_pool  # the pool was used ...
        assert max(queued_in_pool) == 0  # ... and no request ever waited inside it
    assert counts["most"] <= 3  # at most max_connections requests at the server at once

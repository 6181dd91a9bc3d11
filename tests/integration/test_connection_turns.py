"""Requests wait for a free connection in our code, never in httpcore's pool.

httpcore 1.0's pool hands each connection that frees up to every queued request; all but one
wake, fail and queue again (encode/httpcore#1035), which made opening a 72-shard model on 64
connections spend half its CPU there. A client made by :meth:`HttpOptions.new_client` lets at
most ``max_connections`` requests into its pool; the rest wait their turn (see
``HttpClient.turns``), and the direct reader's requests take the same turns.

Seen from outside, through public interfaces only: the loopback server counts the requests it
holds at once and the requests each connection carried; httpx's event hooks count the requests
handed to httpx and not yet answered (a request queued in its pool is one of them).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from aiohttp import web

import remotetensors as rt
from tests.integration.test_models import sharded
from tests.servers import serving

MAX_CONNECTIONS = 3


@dataclass
class Held:
    """What the server saw: requests held at once (now, most) and requests per connection."""

    now: int = 0
    most: int = 0
    per_connection: Counter[object] = field(default_factory=Counter)


@pytest.fixture
def slow_server(tmp_path: Path) -> Iterator[tuple[str, Held]]:
    """Static files after 20 ms per request."""
    held = Held()

    @web.middleware
    async def hold(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        assert request.transport is not None
        held.per_connection[request.transport.get_extra_info("peername")] += 1
        held.now += 1
        held.most = max(held.most, held.now)
        try:
            await asyncio.sleep(0.02)
            return await handler(request)
        finally:
            held.now -= 1

    app = web.Application(middlewares=[hold])
    app.router.add_static("/", tmp_path)
    with serving(app) as url:
        yield url, held


@dataclass
class InHttpx:
    """Requests handed to httpx and not answered yet: now, and the most at once."""

    now: int = 0
    most: int = 0
    handed: int = 0

    async def on_request(self, request: httpx.Request) -> None:
        self.handed += 1
        self.now += 1
        self.most = max(self.most, self.now)

    async def on_response(self, response: httpx.Response) -> None:
        self.now -= 1


@pytest.mark.parametrize("direct_reads", [False, True], ids=["httpx", "direct"])
async def test_a_model_of_more_shards_than_connections_never_queues_in_the_pool(
    slow_server: tuple[str, Held], tmp_path: Path, direct_reads: bool
) -> None:
    url, held = slow_server
    files, tensors = sharded(shards=12, layers_per_shard=1)
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    options = rt.HttpOptions(max_connections=MAX_CONNECTIONS, direct_reads=direct_reads)
    client = options.new_client()
    in_httpx = InHttpx()
    client.httpx.event_hooks = {
        "request": [in_httpx.on_request],
        "response": [in_httpx.on_response],
    }
    try:
        async with rt.open_model_async(f"{url}/", http_options=options, client=client) as model:
            assert model.keys() == sorted(tensors)
            arrays = await model.get_tensors(sorted(tensors))
    finally:
        await client.aclose()
    assert {name: a.tobytes() for name, a in arrays.items()} == {
        name: t.tobytes() for name, t in tensors.items()
    }
    requests = sum(held.per_connection.values())
    assert requests > MAX_CONNECTIONS * 4  # 13 files opened at once, then the reads
    # At most max_connections requests at the server at once, on connections used again
    # (a connection the client closes, after a 404, is replaced: their number is not a bound).
    assert held.most <= MAX_CONNECTIONS
    assert max(held.per_connection.values()) > 1
    if direct_reads:
        assert in_httpx.handed == 0  # every request went direct, httpx was never asked
    else:
        # httpx never held more requests than it has connections: none ever waited inside
        # its pool (opening 12 shards at once would hand it 12).
        assert in_httpx.handed == requests
        assert in_httpx.most <= MAX_CONNECTIONS

"""A body read only to keep its connection (an error's, a redirect's) is never taken for data.

The direct reader reads a small unneeded body so that its connection can be used again; when
the connection fails in the middle of such a body, its bytes must not count as bytes of the
range asked (they once did: the resume then started past them, leaving zeros in the array, or
a first request lost its size). Every case runs on the same three data paths as the hostile
network tests.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

import pytest

import remotetensors as rt
from remotetensors.sources.http.source import HttpSource
from tests.rawservers import RawServer, Reply, Request, head, partial

DATA = bytes(range(256)) * 64
FAST = rt.HttpOptions(backoff_initial_seconds=0.01, backoff_max_seconds=0.02, max_attempts=3)


# Every case runs on each data path (see conftest.py).
pytestmark = pytest.mark.usefixtures("data_path")


def cut_body(status: str, fields: list[tuple[str, str]]) -> Callable[[socket.socket], bool]:
    """A head announcing 100 body bytes, 40 of them, then the connection closes."""

    def write(conn: socket.socket) -> bool:
        conn.sendall(head(status, [*fields, ("Content-Length", "100")]) + b"x" * 40)
        return False

    return write


def good(request: Request) -> bytes:
    answer, body = partial(DATA, request, fields=[("ETag", '"v1"')])
    return answer + body


def read(url: str, start: int, length: int) -> tuple[bytes, bytes]:
    async def go() -> tuple[bytes, bytes]:
        source = HttpSource(url, options=FAST)
        try:
            prefix = await source.open_prefix(1000)
            buffer = bytearray(length)
            await source.read_into(start, memoryview(buffer))
            return prefix.data, bytes(buffer)
        finally:
            await source.aclose()

    return asyncio.run(go())


def test_an_error_body_cut_midway_is_retried_from_the_range_start(
    serve: Callable[[Callable[[Request, int], Reply]], RawServer],
) -> None:
    def answer(request: Request, number: int) -> Reply:
        return cut_body("503 Service Unavailable", []) if number == 1 else good(request)

    server = serve(answer)
    prefix, data = read(f"{server.url}/f", 1000, 1000)
    assert prefix == DATA[:1000]
    assert data == DATA[1000:2000]
    assert [r.range for r in server.requests] == [(0, 1000), (1000, 2000), (1000, 2000)]


def test_a_redirect_body_cut_midway_is_asked_for_again(
    serve: Callable[[Callable[[Request, int], Reply]], RawServer],
) -> None:
    def answer(request: Request, number: int) -> Reply:
        if request.target == "/f":
            return cut_body("302 Found", [("Location", "/g")]) if number == 0 else good(request)
        return good(request)

    server = serve(answer)
    prefix, data = read(f"{server.url}/f", 1000, 1000)
    assert prefix == DATA[:1000]
    assert data == DATA[1000:2000]
    assert server.requests[1].range == (0, 1000)  # the first request asked again, in full

"""CPU per ranged GET: httpx against the direct reader, on the benchmark server in another process.

Usage: python benchmarks/request_cost.py [--requests 2000]

Each request asks for bytes 0-999 of a small file; CPU time is the client process's
(``time.process_time``), one request at a time and 64 at once. The httpx client has the settings
remotetensors gives it (``HttpOptions().new_client().httpx``); the direct reader is
``remotetensors.sources.http.direct.RawRangeClient``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from run import serving

from remotetensors.sources.http.client import HttpOptions
from remotetensors.sources.http.direct import RawRangeClient

HEADERS = {"Range": "bytes=0-999", "Accept-Encoding": "identity"}


async def measure(one: Callable[[], Awaitable[None]], count: int) -> tuple[float, float]:
    """CPU milliseconds per request: one at a time, then 64 at once."""
    await one()  # a connection, before the clock
    cpu = time.process_time()
    for _ in range(count):
        await one()
    sequential = (time.process_time() - cpu) / count * 1e3
    turns = asyncio.Semaphore(64)

    async def limited() -> None:
        async with turns:
            await one()

    cpu = time.process_time()
    await asyncio.gather(*(limited() for _ in range(count)))
    return sequential, (time.process_time() - cpu) / count * 1e3


async def with_httpx(url: str, count: int) -> tuple[float, float]:
    client = HttpOptions().new_client()

    async def one() -> None:
        async with client.httpx.stream("GET", url, headers=HEADERS) as response:
            assert response.status_code == 206
            async for _ in response.aiter_raw():
                pass

    try:
        return await measure(one, count)
    finally:
        await client.aclose()


async def with_direct(url: str, count: int) -> tuple[float, float]:
    client = RawRangeClient(connect_timeout_seconds=10, read_timeout_seconds=60)

    async def one() -> None:
        target = memoryview(bytearray(1000))
        answer = await client.get_into(
            url, HEADERS, lambda status, headers: target if status == 206 else None
        )
        assert answer.body_read

    try:
        return await measure(one, count)
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "files").mkdir()
        (root / "files" / "small.bin").write_bytes(bytes(range(256)) * 16)
        with serving(root, 0) as server:
            url = f"{server.url}/files/small.bin"
            for name, way in (("httpx", with_httpx), ("direct reader", with_direct)):
                one, many = asyncio.run(way(url, args.requests))
                print(
                    f"{name:14} CPU per request: {one:.3f} ms one at a time, "
                    f"{many:.3f} ms 64 at once"
                )


if __name__ == "__main__":
    main()

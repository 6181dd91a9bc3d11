"""Throughput of one large 206 body by its framing: the direct reader (in the loop, and in a body
thread) against httpx, over loopback.

Usage: python benchmarks/body_framing.py [--mib 256] [--rounds 3]

The server (``tests/rawservers.py``, in its own process so that it never shares a GIL with the
client) answers every request with the same bytes, pre-encoded: a ``Content-Length`` body,
chunked bodies of 16 KiB and 1 MiB chunks, and a body that ends with the connection's close.
Each cell is the best of ``--rounds`` GETs of the whole body into one preallocated buffer (the
direct reader's own; httpx's pieces copied into it, as the HTTP source does), in GB/s.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

from tests.rawservers import RawServer, Reply, Request, chunked, head

from remotetensors.sources.http import direct
from remotetensors.sources.http.client import HttpOptions

FRAMINGS = ("content-length", "chunked, 16 KiB chunks", "chunked, 1 MiB chunks", "until close")


def answers(size: int) -> dict[str, bytes]:
    """The answer of each framing: a 206 of ``size`` bytes."""
    payload = bytes(range(256)) * (size // 256)
    span = ("Content-Range", f"bytes 0-{size - 1}/{size}")
    coded = [span, ("Transfer-Encoding", "chunked")]
    return {
        "content-length": head("206 Partial Content", [span, ("Content-Length", str(size))])
        + payload,
        "chunked, 16 KiB chunks": head("206 Partial Content", coded) + chunked(payload, (16384,)),
        "chunked, 1 MiB chunks": head("206 Partial Content", coded) + chunked(payload, (1 << 20,)),
        "until close": head("206 Partial Content", [span]) + payload,
    }


def serve(size: int, pipe: Connection) -> None:
    """In the server's process: answer ``/{framing index}`` until the pipe says stop."""
    ready = answers(size)

    def answer(request: Request, number: int) -> Reply:
        framing = FRAMINGS[int(request.target.strip("/"))]
        if framing != "until close":
            return ready[framing]

        def write(conn: socket.socket) -> bool:
            conn.sendall(ready[framing])
            return False

        return write

    server = RawServer(answer)
    pipe.send(server.url)
    pipe.recv()
    server.stop()


async def best(get: Callable[[], Awaitable[None]], rounds: int) -> float:
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        await get()
        seconds.append(time.perf_counter() - start)
    return min(seconds)


async def with_direct(url: str, target: memoryview, rounds: int, *, threads: bool) -> float:
    direct.THREAD_BODY_BYTES = 4 * 1024 * 1024 if threads else 1 << 62
    client = direct.RawRangeClient(connect_timeout_seconds=10, read_timeout_seconds=60)
    headers = {"Range": f"bytes=0-{len(target) - 1}", "Accept-Encoding": "identity"}

    async def get() -> None:
        answer = await client.get_into(url, headers, lambda status, fields: target)
        assert answer.body_read

    try:
        return await best(get, rounds)
    finally:
        await client.aclose()


async def with_httpx(url: str, target: memoryview, rounds: int) -> float:
    client = HttpOptions().new_client()
    headers = {"Range": f"bytes=0-{len(target) - 1}", "Accept-Encoding": "identity"}

    async def get() -> None:
        async with client.httpx.stream("GET", url, headers=headers) as response:
            at = 0
            async for piece in response.aiter_raw():
                target[at : at + len(piece)] = piece
                at += len(piece)
            assert at == len(target)

    try:
        return await best(get, rounds)
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    size = args.mib * 1024 * 1024
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.Process(target=serve, args=(size, theirs), daemon=True)
    process.start()
    base = ours.recv()
    target = memoryview(bytearray(size))
    print(f"{'framing':24} {'direct (loop)':>14} {'direct (thread)':>16} {'httpx':>8}  (GB/s)")
    try:
        for number, framing in enumerate(FRAMINGS):
            url = f"{base}/{number}"
            cells = [
                asyncio.run(with_direct(url, target, args.rounds, threads=False)),
                asyncio.run(with_direct(url, target, args.rounds, threads=True)),
                asyncio.run(with_httpx(url, target, args.rounds)),
            ]
            rates = [size / seconds / 1e9 for seconds in cells]
            print(f"{framing:24} {rates[0]:14.2f} {rates[1]:16.2f} {rates[2]:8.2f}")
    finally:
        ours.send("stop")
        process.join(10)


if __name__ == "__main__":
    main()

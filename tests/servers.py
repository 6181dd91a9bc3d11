"""Loopback HTTP servers for the tests, each on a free port in a thread of its own.

- :func:`static_server`: aiohttp's own static file handler, a range-capable server we did not
  write, with a request log.
- :class:`FaultyServer`: serves in-memory files with correct single ranges, ETags and If-Match,
  and misbehaves on demand (ignores Range, wrong Content-Range, short bodies, dropped
  connections, 429/503, gzip, expiring redirects, files that change).
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import re
import threading
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web


@dataclass
class Entry:
    """One request as the server saw it."""

    path: str
    range: str | None
    status: int
    sent_bytes: int
    headers: dict[str, str] = field(default_factory=dict)
    ended: bool = False  # the handler has returned (a stalled one outlives its client)


class Log:
    """Requests seen by a server (thread-safe enough for the tests: appends only)."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []

    def clear(self) -> None:
        self.entries.clear()

    def for_path(self, fragment: str) -> list[Entry]:
        return [e for e in self.entries if fragment in e.path]

    @property
    def total_bytes(self) -> int:
        return sum(e.sent_bytes for e in self.entries)

    def ranges(self, fragment: str = "") -> list[tuple[int, int]]:
        """(start, end exclusive) of each ranged request whose path holds ``fragment``."""
        result = []
        for entry in self.for_path(fragment):
            match = re.match(r"bytes=(\d+)-(\d+)", entry.range or "")
            if match:
                result.append((int(match.group(1)), int(match.group(2)) + 1))
        return result


class _Running:
    def __init__(self, app: web.Application) -> None:
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self._app = app
        self._runner: web.AppRunner | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        if not self.ready.wait(10):
            raise RuntimeError("test server did not start")

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)

        async def start() -> None:
            self._runner = web.AppRunner(self._app, access_log=None, shutdown_timeout=0.5)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            server = site._server
            assert server is not None
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
            self.ready.set()

        self.loop.run_until_complete(start())
        self.loop.run_forever()

    def stop(self) -> None:
        async def cleanup() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        # close() drops what the loop's last turn scheduled: a connection closed in that turn
        # (a client's close seen as the server stops) closes its socket one turn later, and
        # was left to the collector ("unclosed socket" in a later test). Run the loop once
        # more, as asyncio.run does before it closes its loop.
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        # A connection accepted as the server stopped can outlive aiohttp's shutdown, which
        # closes the connections its handlers know: the transport of one made in the loop's
        # last turns was never closed, and warned "unclosed transport" when collected in a
        # later test (test_torch_load's dropped-connection case, about 1 run in 10). Close
        # whatever the loop still holds (the selector loop's own weak map of its transports),
        # and let it finish closing.
        transports: Mapping[int, asyncio.BaseTransport] = getattr(self.loop, "_transports", {})
        for transport in list(transports.values()):
            if not transport.is_closing():
                transport.close()
        self.loop.run_until_complete(asyncio.sleep(0))
        self.loop.close()


def _range_of(match: re.Match[str], size: int) -> tuple[int, int]:
    """``(first, last)`` byte of a matched ``bytes=a-b``, ``bytes=a-`` or suffix ``bytes=-n``
    (RFC 9110 14.1.2: the last n bytes, the whole file when it is shorter; ``bytes=-0`` cannot
    be satisfied, given here as a first byte past the end)."""
    if not match.group(1):
        count = int(match.group(2))
        return (max(0, size - count), size - 1) if count else (size, size - 1)
    start = int(match.group(1))
    return start, min(int(match.group(2)) if match.group(2) else size - 1, size - 1)


@contextmanager
def static_server(root: Path) -> Iterator[tuple[str, Log]]:
    """aiohttp's static file handler serving ``root``; yields (base URL, log)."""
    log = Log()

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        # Headers are final here; one entry per response, so concurrent requests do not mix.
        length = response.headers.get("Content-Length")
        log.entries.append(
            Entry(
                request.path,
                request.headers.get("Range"),
                response.status,
                int(length) if length else 0,
                dict(request.headers),
            )
        )

    app = web.Application()
    app.on_response_prepare.append(on_prepare)
    app.router.add_static("/", root)
    with serving(app) as url:
        yield url, log


@contextmanager
def serving(app: web.Application) -> Iterator[str]:
    """``app`` on a free loopback port, in a thread of its own; yields its base URL."""
    running = _Running(app)
    try:
        yield f"http://127.0.0.1:{running.port}"
    finally:
        running.stop()


Fault = str
"""One of: an HTTP status ("429", "503", "401", ...), ignore-range, wrong-content-range,
short-body, drop, gzip, no-total, extra-bytes, stale-etag, stall (the answer held back for
``stall_seconds``, or until the client leaves: then 499)."""


class FaultyServer:
    """In-memory files with correct range semantics, and faults queued per path.

    Paths:
        ``/f/NAME``: the file NAME.
        ``/redirect/NAME``: 302 to ``/cdn/NAME?sig=K``; a signature works until :meth:`expire`.
    """

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.faults: dict[str, deque[Fault]] = {}
        self.log = Log()
        self.retry_after = "1"
        self.stall_seconds = 5.0  # how long "stall" holds an answer back while its client stays
        self.honour_if_match = True
        self.send_etags = True  # False: answers carry no ETag (nor Last-Modified, never sent)
        self.gzip_when_offered = False
        self._signature = 0
        self.redirects = 0
        self.hold_seconds = 0.0  # every file answer waits so long: concurrent requests overlap
        self.in_flight = 0
        self.peak_in_flight = 0  # the most file requests handled at once
        app = web.Application()
        app.router.add_get("/f/{name:.+}", self._serve_file)
        app.router.add_get("/redirect/{name:.+}", self._redirect)
        app.router.add_get("/cdn/{name:.+}", self._cdn)
        self._running = _Running(app)
        self.url = f"http://127.0.0.1:{self._running.port}"

    def stop(self) -> None:
        self._running.stop()

    def put(self, name: str, data: bytes) -> str:
        """Serve ``data`` as NAME; returns its URL."""
        self.files[name] = data
        return f"{self.url}/f/{name}"

    def fault(self, name: str, *faults: Fault) -> None:
        """Apply ``faults`` to the next requests of NAME, one per request."""
        self.faults.setdefault(name, deque()).extend(faults)

    def expire(self) -> None:
        """Make every signed CDN URL handed out so far stop working (HTTP 403)."""
        self._signature += 1

    @staticmethod
    def etag(data: bytes) -> str:
        return '"' + hashlib.sha1(data).hexdigest()[:16] + '"'

    async def _redirect(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        self.redirects += 1
        self.log.entries.append(Entry(request.path, request.headers.get("Range"), 302, 0))
        raise web.HTTPFound(f"/cdn/{name}?sig={self._signature}")

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        if request.query.get("sig") != str(self._signature):
            self.log.entries.append(Entry(request.path, request.headers.get("Range"), 403, 0))
            return web.Response(status=403, text="signature expired")
        return await self._serve_file(request)

    async def _serve_file(self, request: web.Request) -> web.StreamResponse:
        rng = request.headers.get("Range")
        entry = Entry(request.path, rng, 0, 0, dict(request.headers))
        self.log.entries.append(entry)
        self.in_flight += 1  # handlers all run on the server's one loop: no lock needed
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            if self.hold_seconds:
                await asyncio.sleep(self.hold_seconds)
            return await self._answer(request, entry, rng)
        finally:
            self.in_flight -= 1
            entry.ended = True

    async def _answer(
        self, request: web.Request, entry: Entry, rng: str | None
    ) -> web.StreamResponse:
        name = request.match_info["name"]
        if name not in self.files:
            entry.status = 404
            return web.Response(status=404, text="no such file")
        data = self.files[name]
        etag = self.etag(data)
        queue = self.faults.get(name)
        fault = queue.popleft() if queue else None
        if fault is not None and fault.isdigit():
            entry.status = int(fault)
            headers = {"Retry-After": self.retry_after} if fault in ("429", "503") else {}
            return web.Response(status=int(fault), headers=headers, text=f"fault {fault}")
        if fault == "stall" and not await self._held_back(request):
            entry.status = 499  # the client left while the answer was held back
            return web.Response(status=499)
        if_match = request.headers.get("If-Match")
        if self.honour_if_match and if_match is not None and if_match != etag:
            entry.status = 412
            return web.Response(status=412)
        match = re.fullmatch(r"bytes=(\d*)-(\d*)", rng or "")
        if fault == "ignore-range" or match is None or match.group(0) == "bytes=-":
            return await self._send(request, entry, 200, data, {"ETag": etag})
        start, last = _range_of(match, len(data))
        if start >= len(data):
            entry.status = 416
            return web.Response(status=416, headers={"Content-Range": f"bytes */{len(data)}"})
        body = data[start : last + 1]
        total: str = str(len(data))
        if fault == "no-total":
            total = "*"
        shown_start, shown_last = start, last
        if fault == "wrong-content-range":
            shown_start, shown_last = start + 1, last + 1
        headers = {"Content-Range": f"bytes {shown_start}-{shown_last}/{total}", "ETag": etag}
        if fault == "stale-etag":
            headers["ETag"] = '"something-else"'
        if fault == "gzip" or (
            self.gzip_when_offered and "gzip" in request.headers.get("Accept-Encoding", "")
        ):
            body = gzip.compress(body)
            headers["Content-Encoding"] = "gzip"
        if fault == "extra-bytes":
            body = body + b"EXTRA"
            headers["Content-Length"] = str(len(body))
            return await self._send(request, entry, 206, body, headers, declared=len(body))
        if fault in ("short-body", "drop"):
            # Announce the full length, send half, then cut the connection.
            return await self._send(request, entry, 206, body, headers, cut_at=len(body) // 2)
        return await self._send(request, entry, 206, body, headers)

    async def _held_back(self, request: web.Request) -> bool:
        """Hold the answer back for ``stall_seconds``; False as soon as the client leaves."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.stall_seconds
        while request.transport is not None and not request.transport.is_closing():
            if loop.time() >= until:
                return True
            await asyncio.sleep(0.02)
        return False

    async def _send(
        self,
        request: web.Request,
        entry: Entry,
        status: int,
        body: bytes,
        headers: dict[str, str],
        *,
        cut_at: int | None = None,
        declared: int | None = None,
    ) -> web.StreamResponse:
        entry.status = status
        if not self.send_etags:
            headers = {k: v for k, v in headers.items() if k != "ETag"}
        response = web.StreamResponse(status=status, headers=headers)
        response.content_length = declared if declared is not None else len(body)
        end = len(body) if cut_at is None else cut_at
        if request.method == "HEAD":
            end = 0  # the head of the GET answer, without its body (fsspec's HTTP info asks)
        chunk = 256 * 1024
        try:
            await response.prepare(request)
            for offset in range(0, end, chunk):
                piece = body[offset : min(end, offset + chunk)]
                # Counted when handed over: the client can hold all of it before write() returns.
                entry.sent_bytes += len(piece)
                await response.write(piece)
        except (ConnectionResetError, ConnectionError, asyncio.CancelledError):
            return response
        if cut_at is not None:
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write_eof()
        return response

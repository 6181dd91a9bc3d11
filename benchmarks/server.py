"""A loopback file server for the benchmarks, in its own process.

Serves FOLDER/files under /files/ as a static file server (byte ranges; ranges up to 1 MiB read
with ``pread``, the rest by aiohttp's static handler with sendfile: see :func:`files`), adds
LATENCY_MS before every answer, and speaks the hub's resolve protocol too:
``/{org}/{name}/resolve/{rev}/{path}`` serves ``FOLDER/{org}/{name}/{path}`` with
``X-Repo-Commit`` and ``ETag`` (no CDN redirect, so the hub's client and ours pay the same), and
the hub's one-call ``/api/models/{org}/{name}/safetensors-metadata/{index path}`` and its
recursive file listing ``/api/models/{org}/{name}/tree/{rev}``; the
revision call ``/api/models/{org}/{name}/revision/{rev}`` (``{"sha": ...}``). Under
``/noapi`` it is a hub without that endpoint: ``/noapi/{org}/{name}/resolve/{rev}/{path}`` serves the same files, and
``/noapi/api/...`` gets aiohttp's plain 404 (no ``X-Error-Code``), as from a server that does not
know the route. ``GET /__stats`` returns and resets the request and byte counts
(``file_bytes``: those of resolve answers alone, the files' bytes).

Usage: python benchmarks/server.py FOLDER LATENCY_MS -> prints the port, serves until stdin closes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import threading
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from aiohttp import web


def build(folder: Path, latency_ms: float) -> web.Application:
    stats = {"requests": 0, "bytes": 0, "file_bytes": 0}

    @web.middleware
    async def delay(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path != "/__stats":
            stats["requests"] += 1
            if latency_ms:
                await asyncio.sleep(latency_ms / 1000)
        return await handler(request)

    async def on_prepare(request: web.Request, response: web.StreamResponse) -> None:
        length = response.headers.get("Content-Length")
        if request.path != "/__stats" and length and request.method == "GET":
            stats["bytes"] += int(length)
            if "/resolve/" in request.path:
                stats["file_bytes"] += int(length)

    async def report(request: web.Request) -> web.Response:
        body = json.dumps(stats)
        stats.update(requests=0, bytes=0, file_bytes=0)
        return web.Response(text=body, content_type="application/json")

    async def resolve(request: web.Request) -> web.StreamResponse:
        info = request.match_info
        path = folder / info["org"] / info["name"] / info["path"]
        if not path.is_file():  # as the hub: the commit that has no such file
            headers = {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": "0" * 40}
            return web.Response(status=404, headers=headers)
        stat = path.stat()
        headers = {"X-Repo-Commit": "0" * 40, "ETag": f'"{stat.st_size}-{stat.st_mtime_ns}"'}
        if request.method == "HEAD":
            headers["Content-Length"] = str(stat.st_size)
            return web.Response(status=200, headers=headers)
        return web.FileResponse(path, headers=headers)

    async def sharded_metadata(request: web.Request) -> web.Response:
        # The hub's one-call endpoint: every shard header of a sharded model in one answer.
        info = request.match_info
        index_path = folder / info["org"] / info["name"] / info["path"]
        if not index_path.is_file():
            headers = {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": "0" * 40}
            return web.Response(status=404, headers=headers)
        index = json.loads(index_path.read_bytes())
        headers = {}
        for shard in dict.fromkeys(index["weight_map"].values()):
            with open(index_path.parent / shard, "rb") as f:
                n = int.from_bytes(f.read(8), "little")
                headers[shard] = json.loads(f.read(n))
        body = {"index": {k: v for k, v in index.items() if k != "weight_map"}, "headers": headers}
        return web.json_response(body, headers={"X-Repo-Commit": "0" * 40})

    async def tree(request: web.Request) -> web.Response:
        # The hub's file listing (``list_repo_tree``, recursive): every file of the repo.
        info = request.match_info
        root = folder / info["org"] / info["name"]
        entries = [
            {
                "type": "file",
                "path": str(p.relative_to(root)),
                "size": p.stat().st_size,
                # A stand-in for the git blob id, which huggingface_hub's listing requires.
                "oid": hashlib.sha1(
                    f"{p.relative_to(root)}:{p.stat().st_size}".encode()
                ).hexdigest(),
            }
            for p in sorted(root.rglob("*"))
            if p.is_file()
        ]
        return web.json_response(entries, headers={"X-Repo-Commit": "0" * 40})

    async def revision(request: web.Request) -> web.Response:
        # The commit a revision names now: one commit for every repo here.
        info = request.match_info
        root = folder / info["org"] / info["name"]
        if not root.is_dir():
            return web.Response(status=404, headers={"X-Error-Code": "RepoNotFound"})
        # The files, as the hub lists them (``snapshot_download`` downloads these).
        siblings = [
            {"rfilename": str(p.relative_to(root))} for p in sorted(root.rglob("*")) if p.is_file()
        ]
        body = {"id": f"{info['org']}/{info['name']}", "sha": "0" * 40, "siblings": siblings}
        return web.json_response(body, headers={"X-Repo-Commit": "0" * 40})

    app = web.Application(middlewares=[delay])
    app.on_response_prepare.append(on_prepare)
    app.router.add_get("/__stats", report)
    app.router.add_route("*", "/{org}/{name}/resolve/{rev}/{path:.+}", resolve)
    # A second endpoint (another base URL, so clients learn "no such route" for it alone) with
    # the same files and no safetensors-metadata route.
    app.router.add_route("*", "/noapi/{org}/{name}/resolve/{rev}/{path:.+}", resolve)
    app.router.add_get("/api/models/{org}/{name}/safetensors-metadata/{path:.+}", sharded_metadata)
    app.router.add_get("/api/models/{org}/{name}/tree/{rev}", tree)
    app.router.add_get("/api/models/{org}/{name}/revision/{rev}", revision)
    app.router.add_route("*", "/files/{path:.+}", partial(files, folder / "files"))
    return app


SMALL_RANGE_BYTES = 1024 * 1024
"""Ranged GETs up to this many bytes are read with ``pread`` into the answer; the rest go to
aiohttp's static handler (``sendfile``)."""


async def files(root: Path, request: web.Request) -> web.StreamResponse:
    """A static file server: what aiohttp's static handler answers, with small ranges served
    the way a cache serves hot objects. The static handler runs ``stat`` and ``open`` in its
    thread pool on every request, about 1 ms of CPU each on the 2-core benchmark machine, so
    for 1,000 small reads the server, not the client under test, was the limit. Small ranges
    here cost a third of that, with the same ``ETag`` and ``Last-Modified`` as the static
    handler and its ``If-Match`` check (a file that changes answers 412)."""
    path = root / request.match_info["path"]
    if not path.resolve().is_relative_to(root.resolve()) or not path.is_file():
        return web.Response(status=404)
    try:
        wanted = request.http_range
    except ValueError:
        wanted = slice(None, None)
    start, stop = wanted.start, wanted.stop
    if (
        request.method != "GET"
        or start is None
        or stop is None
        or not 0 <= start < stop
        or stop - start > SMALL_RANGE_BYTES
    ):
        return web.FileResponse(path)
    fd = os.open(path, os.O_RDONLY)
    try:
        stat = os.fstat(fd)
        if start >= stat.st_size:
            return web.FileResponse(path)  # its 416
        etag = f"{stat.st_mtime_ns:x}-{stat.st_size:x}"
        if request.if_match is not None and not any(
            not tag.is_weak and tag.value in (etag, "*") for tag in request.if_match
        ):
            return web.Response(status=412)
        stop = min(stop, stat.st_size)
        body = os.pread(fd, stop - start, start)
    finally:
        os.close(fd)
    response = web.Response(
        status=206,
        body=body,
        headers={
            "Content-Range": f"bytes {start}-{stop - 1}/{stat.st_size}",
            "Accept-Ranges": "bytes",
        },
    )
    response.etag = etag
    response.last_modified = stat.st_mtime
    return response


def main() -> None:
    folder, latency = Path(sys.argv[1]), float(sys.argv[2])
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(build(folder, latency), access_log=None, shutdown_timeout=0.5)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    assert site._server is not None
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    print(port, flush=True)
    threading.Thread(
        target=lambda: (sys.stdin.read(), loop.call_soon_threadsafe(loop.stop)), daemon=True
    ).start()
    loop.run_forever()
    loop.run_until_complete(runner.cleanup())


if __name__ == "__main__":
    main()

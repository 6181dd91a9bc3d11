"""Requests through the direct reader: first requests too, on connections a model's files share.

With a client remotetensors made (``HttpOptions.new_client``), every request of a file goes
through the direct reader (``sources/http/direct.py``), redirects and errors included, and the files
of a model share its connections; a client the caller passes sees every first request. Counted
here on raw loopback servers: connections opened, requests, and where each request went.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import remotetensors as rt
from remotetensors.sources.http.framing import Body
from remotetensors.sources.http.source import HttpSource
from remotetensors.sources.hub.repo import HubPath, HubRepo
from tests.certificates import ThrowawayCA
from tests.hub_standin import LFS_THRESHOLD, HubStandIn
from tests.integration.test_models import check_model, sharded
from tests.rawservers import RawServer, Reply, Request, head, partial
from tests.reference import write_reference


def files_handler(
    files: dict[str, bytes], *, queries: bool = False
) -> Callable[[Request, int], Reply]:
    """``/files/{name}`` with ranges; ``/moved/{name}`` redirects there with a small body; a
    missing file is a 404 with a small body. Every answer keeps the connection. With
    ``queries``, a query after the name is ignored (a signed URL's)."""

    def answer(request: Request, number: int) -> Reply:
        target = request.target.split("?", 1)[0] if queries else request.target
        folder, _, name = target.lstrip("/").partition("/")
        if folder == "moved":
            return head("302 Found", [("Location", f"/files/{name}"), ("Content-Length", "5")]) + (
                b"moved"
            )
        data = files.get(name)
        if folder != "files" or data is None:
            return head("404 Not Found", [("Content-Length", "9")]) + b"not found"
        answer, body = partial(data, request, fields=[("ETag", f'"{len(data)}"')])
        return answer + body

    return answer


def test_a_models_files_share_the_direct_readers_connections(
    serve: Callable[..., RawServer],
) -> None:
    files, tensors = sharded(shards=6, layers_per_shard=1)
    server = serve(files_handler(files))
    options = rt.HttpOptions(max_connections=2)
    with rt.open_model(f"{server.url}/files/", http_options=options) as model:
        check_model(model, tensors)
    # Discovery's misses (404), the index, six headers and the data reads: all on the two
    # connections the options allow, none opened per file.
    assert len(server.requests) > 10
    assert server.connections <= 2


def test_a_redirect_and_an_error_keep_their_connection(serve: Callable[..., RawServer]) -> None:
    data = rt_file()
    server = serve(files_handler({"m.safetensors": data}))

    async def go() -> bytes:
        client = rt.HttpOptions().new_client()
        try:
            missing = HttpSource(f"{server.url}/files/none.safetensors", client=client)
            with pytest.raises(rt.NotFoundError, match="HTTP 404"):
                await missing.open_prefix(64)
            moved = HttpSource(f"{server.url}/moved/m.safetensors", client=client)
            prefix = await moved.open_prefix(16)
            buffer = bytearray(len(data) - 16)
            await moved.read_into(16, memoryview(buffer))
            return prefix.data + bytes(buffer)
        finally:
            await client.aclose()

    assert asyncio.run(go()) == data
    assert [r.target for r in server.requests] == [
        "/files/none.safetensors",
        "/moved/m.safetensors",
        "/files/m.safetensors",
        "/files/m.safetensors",  # the later read goes straight to where the redirect led
    ]
    assert server.connections == 1  # the 404's and the 302's bodies were read, not abandoned


def test_a_callers_own_client_sees_every_first_request(serve: Callable[..., RawServer]) -> None:
    data = rt_file()
    server = serve(files_handler({"m.safetensors": data}))
    seen: list[str] = []

    async def record(request: httpx.Request) -> None:
        seen.append(str(request.url))

    async def go() -> bytes:
        async with httpx.AsyncClient(event_hooks={"request": [record]}) as client:
            source = HttpSource(f"{server.url}/moved/m.safetensors", client=client)
            prefix = await source.open_prefix(16)
            buffer = bytearray(len(data) - 16)
            await source.read_into(16, memoryview(buffer))
            await source.aclose()
            return prefix.data + bytes(buffer)

    assert asyncio.run(go()) == data
    # The first request and its redirect went through the caller's client (its hooks, its
    # auth); the data read, to the URL the redirect led to, went direct.
    assert seen == [f"{server.url}/moved/m.safetensors", f"{server.url}/files/m.safetensors"]
    assert len(server.requests) == 3


@pytest.fixture(params=["direct", "httpx"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "httpx":
        # A configured proxy turns the direct reader off; pretend there is one.
        monkeypatch.setattr("remotetensors.sources.http.client.proxy_in_environment", lambda: True)
    return str(request.param)


def test_the_hub_commit_is_pinned_from_the_redirect_to_the_cdn(
    hub: HubStandIn, engine: str
) -> None:
    commit = hub.add("org/big", {"model.safetensors": rt_file(LFS_THRESHOLD)})

    async def go() -> str:
        repo = HubRepo(HubPath.parse("hf://org/big"), endpoint=hub.endpoint)
        source = repo.source("model.safetensors")
        try:
            await source.open_prefix(64)
        finally:
            await source.aclose()
        return repo.revision

    # The CDN's answer carries no X-Repo-Commit; the hub's 302 before it does.
    assert asyncio.run(go()) == commit
    assert [e.status for e in hub.log.entries] == [302, 206]


def rt_file(at_least: int = 4096) -> bytes:
    """A small safetensors file of at least ``at_least`` bytes."""
    return write_reference({"w": np.arange(max(at_least // 4, 16), dtype=np.float32)})


def test_a_plain_http_model_never_builds_an_httpx_client(serve: Callable[..., RawServer]) -> None:
    # Making httpx's first client imports httpcore and builds the TLS context, about 75 ms:
    # nothing of a model over plain HTTP needs either when every request goes direct.
    files, _ = sharded(shards=2, layers_per_shard=1)
    server = serve(files_handler(files))
    code = (
        "import sys, remotetensors as rt\n"
        f"with rt.open_model({server.url + '/files/'!r}) as m:\n"
        "    assert m.num_parameters > 0\n"
        "    m.get_tensor(next(iter(m.keys())))\n"
        "print(sorted(n for n in ('httpcore', 'h11', 'certifi') if n in sys.modules))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


def test_a_hub_model_with_the_one_call_endpoint_never_builds_an_httpx_client(
    hub: HubStandIn, tmp_path: Path
) -> None:
    # The hub's JSON answer (the one-call metadata) goes through the direct reader too.
    files, _ = sharded(shards=3, layers_per_shard=1)
    hub.add("org/a", files)
    code = (
        "import os, sys, remotetensors as rt\n"
        "with rt.open_model('hf://org/a', token=False) as m:\n"
        "    assert m.num_parameters > 0\n"
        "with rt.open_model('hf://org/a', token=False) as m:\n"
        "    m.get_tensor(next(iter(m.keys())))\n"
        "print(sorted(n for n in ('httpcore', 'h11') if n in sys.modules))\n"
    )
    env = {**os.environ, "HF_ENDPOINT": hub.endpoint, "HF_HOME": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"
    assert any("/safetensors-metadata/" in e.path for e in hub.log.entries)


def test_a_metadata_answer_the_direct_reader_leaves_goes_through_httpx(
    hub: HubStandIn, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from remotetensors.sources.http import whole

    monkeypatch.setattr(whole, "MAX_DIRECT_BODY_BYTES", 10)  # every answer is "too large"
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    files, tensors = sharded(shards=3, layers_per_shard=1)
    hub.add("org/b", files)
    with rt.open_model("hf://org/b", token=False) as model:
        check_model(model, tensors)
    api = [e for e in hub.log.entries if "/safetensors-metadata/" in e.path]
    # Asked directly, answer left unread; asked again through httpx, which read it.
    assert [e.status for e in api] == [200, 200]


def test_a_large_body_is_received_in_a_worker_thread_and_its_connection_kept(
    serve: Callable[..., RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    from remotetensors.sources.http import direct as rawhttp

    seen: list[tuple[str, int]] = []  # (thread name, body bytes left when handed over)
    real = rawhttp._receive

    def spy(sock: Any, body: Body, *rest: Any, **named: Any) -> None:
        seen.append((threading.current_thread().name, len(body.target) - body.received))
        real(sock, body, *rest, **named)

    monkeypatch.setattr(rawhttp, "_receive", spy)
    rng = np.random.default_rng(5)
    big = rng.standard_normal(3 * 1024 * 1024).astype(np.float32)  # 12 MiB: one 12 MiB part
    small = rng.standard_normal(1024).astype(np.float32)
    data = write_reference({"big": big, "small": small})
    server = serve(files_handler({"m.safetensors": data}))
    # One connection, so reuse shows; parts of 16 MiB pinned, so the big tensor is one request.
    options = rt.ReadOptions(max_concurrency=1, part_size_bytes=16 << 20)
    with rt.safe_open(f"{server.url}/files/m.safetensors", options=options) as f:
        assert f.get_tensor("big").tobytes() == big.tobytes()
        assert f.get_tensor("small").tobytes() == small.tobytes()
        assert f.get_tensor("big").tobytes() == big.tobytes()
    # The big body (twice) in a body thread, the header window and the small tensor in the loop;
    # every request on the one connection the thread handed back.
    assert len(seen) == 2, seen
    for name, left in seen:
        assert name.startswith("remotetensors-body"), name
        assert left >= rawhttp.THREAD_BODY_BYTES
    assert len(server.requests) == 4
    assert server.connections == 1


def test_a_large_https_body_is_decrypted_in_a_worker_thread_and_its_connection_kept(
    serve: Callable[..., RawServer], tls: ThrowawayCA, monkeypatch: pytest.MonkeyPatch
) -> None:
    from remotetensors.sources.http import direct as rawhttp

    seen: list[tuple[str, str, int, int]] = []  # (thread, socket type, body bytes, received)
    real = rawhttp._receive

    def spy(sock: Any, body: Body, *rest: Any, **named: Any) -> None:
        name, kind = threading.current_thread().name, type(sock).__name__
        seen.append((name, kind, len(body.target), body.received))
        real(sock, body, *rest, **named)

    monkeypatch.setattr(rawhttp, "_receive", spy)
    rng = np.random.default_rng(6)
    big = rng.standard_normal(3 * 1024 * 1024).astype(np.float32)  # 12 MiB: one 16 MiB part
    small = rng.standard_normal(1024).astype(np.float32)
    data = write_reference({"big": big, "small": small})
    server = serve(files_handler({"m.safetensors": data}), tls=tls.server)
    assert server.url.startswith("https://")
    options = rt.ReadOptions(max_concurrency=1, part_size_bytes=16 << 20)
    with rt.safe_open(f"{server.url}/files/m.safetensors", options=options) as f:
        assert f.get_tensor("big").tobytes() == big.tobytes()
        assert f.get_tensor("small").tobytes() == small.tobytes()
        assert f.get_tensor("big").tobytes() == big.tobytes()
    # Each big body decrypted in a body thread, from the TLS stream it borrowed, all but the
    # bytes that came with its head; the loop read the heads, the window and the small one.
    assert len(seen) == 2, seen
    for name, kind, length, received in seen:
        assert name.startswith("remotetensors-body"), name
        assert kind == "TlsStream"
        assert length >= big.nbytes - options.header_window_bytes
        assert received < 64 * 1024  # one receive of the head's
    # Every request on the one connection (one handshake), handed back after each body.
    assert len(server.requests) == 4
    assert server.connections == 1


def test_https_bodies_in_threads_decrypt_one_fewer_at_once_than_the_machine_has_cores(
    serve: Callable[..., RawServer], tls: ThrowawayCA, monkeypatch: pytest.MonkeyPatch
) -> None:
    from remotetensors.sources.http import tlsconn

    class Counting:
        """The decrypting slots, counted: how many body threads held one at once."""

        def __init__(self, slots: int) -> None:
            self._slots = threading.BoundedSemaphore(slots)
            self._lock = threading.Lock()
            self.holding = self.peak = self.entries = 0

        def __enter__(self) -> None:
            self._slots.acquire()
            with self._lock:
                self.holding += 1
                self.entries += 1
                self.peak = max(self.peak, self.holding)

        def __exit__(self, *_: object) -> None:
            with self._lock:
                self.holding -= 1
            self._slots.release()

    slots = max(1, (os.cpu_count() or 1) - 1)
    assert tlsconn._DECRYPTING._value == slots
    counting = Counting(slots)
    monkeypatch.setattr(tlsconn, "_DECRYPTING", counting)
    w = np.random.default_rng(7).standard_normal(8 * 1024 * 1024).astype(np.float32)  # 32 MiB
    server = serve(files_handler({"m.safetensors": write_reference({"w": w})}), tls=tls.server)
    options = rt.ReadOptions(max_concurrency=8, part_size_bytes=1 << 20)
    with rt.safe_open(f"{server.url}/files/m.safetensors", options=options) as f:
        assert f.get_tensor("w").tobytes() == w.tobytes()
    # Eight bodies in eight threads at once, decrypting no more than the slots allow at a time.
    assert counting.entries >= 32  # every part's records went through a slot
    assert 1 <= counting.peak <= slots

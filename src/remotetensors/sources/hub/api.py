"""The hub's one-call sharded metadata endpoint: bytes and the commit they describe, no parsing.

``GET {endpoint}/api/models/{repo}/safetensors-metadata/{index path}`` answers every shard header
of a sharded model on ``main`` in one request. Whether an endpoint (a hub, a mirror) has it is
learnt once per process: an answer of the hub's API (200, or an error carrying
``X-Error-Code``) says yes; a plain 404 from a server that does not know the route says no, and
later models of that endpoint do not ask again.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

import httpx

from ..http.client import Client, HttpClient, httpx_of
from ..http.direct import RawConnectionError, RawTimeoutError
from ..http.head import ResponseHeaders
from ..ratelimit import limiter_for

if TYPE_CHECKING:
    from .repo import HubRepo

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 4
MAX_DIRECT_BODY_BYTES = 256 * 1024 * 1024
"""A larger answer (or one without ``Content-Length``) is read by httpx instead."""
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})

_support: dict[str, bool] = {}  # endpoint -> whether it has the route (learnt per process)


@dataclass(frozen=True, slots=True)
class MetadataAnswer:
    """The endpoint's answer: ``body`` on a 200, else ``None`` with the status and reason.

    Attributes:
        status: the HTTP status (0 when no answer came).
        body: the JSON bytes of a 200.
        commit: ``X-Repo-Commit`` of the answer, when the hub sent it.
        reason: why there is no body, for the debug log.
    """

    status: int
    body: bytes | None
    commit: str | None
    reason: str = ""


def endpoint_support(endpoint: str) -> bool | None:
    """Whether ``endpoint`` is known to have the route: True, False, or None (not asked yet)."""
    return _support.get(endpoint)


async def fetch_sharded_metadata(repo: HubRepo, index_path: str) -> MetadataAnswer:
    """Ask the endpoint for the headers of the sharded model whose index is ``index_path``.

    Goes through the host's rate limiter; 429 and 5xx are retried (up to :data:`MAX_ATTEMPTS`,
    honouring ``Retry-After`` through the limiter). Never raises for HTTP or network failures:
    the caller falls back to reading the files.
    """
    url = (
        f"{repo.endpoint}/api/{repo.repo.repo_type}/{repo.repo.repo_id}/safetensors-metadata/"
        f"{quote(index_path)}"
    )
    limiter = limiter_for(url)
    shared = repo.client
    client: httpx.AsyncClient | None = None  # made only if the direct reader cannot ask
    headers = dict(repo.request_headers)
    try:
        for attempt in range(1, MAX_ATTEMPTS + 1):
            await limiter.acquire()
            try:
                answer = await _direct_get(shared, url, headers)
                if answer is None:
                    if client is None:
                        client = (
                            httpx.AsyncClient(follow_redirects=True)
                            if shared is None
                            else httpx_of(shared)
                        )
                    response = await client.get(url, headers=headers)
                    answer = (response.status_code, response.headers, response.content)
            except (httpx.HTTPError, RawConnectionError, RawTimeoutError) as exc:
                reason = f"{type(exc).__name__}: {exc}"
                if attempt == MAX_ATTEMPTS:
                    return MetadataAnswer(0, None, None, reason)
                await asyncio.sleep(random.uniform(0, 0.25 * 2**attempt))
                continue
            status, response_headers, content = answer
            limiter.observe(status, response_headers)
            code = response_headers.get("X-Error-Code")
            commit = response_headers.get("X-Repo-Commit")
            if status == 200:
                _support[repo.endpoint] = True
                return MetadataAnswer(200, content, commit)
            if status in _RETRY_STATUSES and attempt < MAX_ATTEMPTS:
                if status != 429:  # a 429's wait is the limiter's (Retry-After)
                    await asyncio.sleep(random.uniform(0, 0.25 * 2**attempt))
                continue
            if code:
                _support[repo.endpoint] = True
            elif status == 404:
                _support[repo.endpoint] = False
            return MetadataAnswer(status, None, commit, f"HTTP {status} {code or ''}".strip())
        return MetadataAnswer(0, None, None, "no answer")  # pragma: no cover (loop returns)
    finally:
        if client is not None and shared is None:
            await client.aclose()


async def _direct_get(
    shared: Client | None, url: str, headers: dict[str, str]
) -> tuple[int, ResponseHeaders, bytes] | None:
    """GET ``url`` through the shared client's direct reader, the whole body in memory; None
    when httpx must ask instead: no client of ours, direct reads off or a proxy, a redirect, a
    body without ``Content-Length``, over :data:`MAX_DIRECT_BODY_BYTES` or encoded.

    Raises:
        RawConnectionError, RawTimeoutError: the network failed (the caller retries).
    """
    if not isinstance(shared, HttpClient) or not shared.goes_direct:
        return None
    bodies: list[bytearray] = []

    def accept(status: int, answer: ResponseHeaders) -> memoryview | None:
        length = answer.get("Content-Length", "")
        if not length.isdigit() or int(length) > MAX_DIRECT_BODY_BYTES:
            return None
        bodies.append(bytearray(int(length)))
        return memoryview(bodies[-1])

    try:
        async with shared.turns:
            answer = await shared.direct.get_into(
                url, {**headers, "Accept-Encoding": "identity"}, accept
            )
    except ValueError:  # a header that cannot be sent as it is: let httpx say so
        return None
    encoding = answer.headers.get("Content-Encoding", "identity").strip().lower()
    if not answer.body_read or 300 <= answer.status < 400 or encoding not in ("", "identity"):
        return None
    return answer.status, answer.headers, bytes(bodies[-1])

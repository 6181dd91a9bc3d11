"""The hub's one-call sharded metadata endpoint: bytes and the commit they describe, no parsing.

``GET {endpoint}/api/models/{repo}/safetensors-metadata/{index path}`` answers every shard header
of a sharded model on ``main`` in one request. Whether an endpoint (a hub, a mirror) has it is
learnt once per process: an answer of the hub's API (200, or an error carrying
``X-Error-Code``) says yes; a plain 404 from a server that does not know the route says no, and
later models of that endpoint do not ask again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote

from ...errors import RemoteTensorsError
from ..http.whole import get_whole

if TYPE_CHECKING:
    from ..http.head import ResponseHeaders
    from .repo import HubRepo

_support: dict[str, bool] = {}  # endpoint -> whether it has the route (learnt per process)


@dataclass(frozen=True, slots=True)
class MetadataAnswer:
    """The endpoint's answer: ``body`` on a 200, else ``None`` with the status and reason.

    Attributes:
        status: the HTTP status (0 when no answer came: the retries ran out).
        body: the JSON bytes of a 200.
        commit: ``X-Repo-Commit`` of the answer, when the hub sent it.
        reason: why there is no body, for the debug log.
        headers: the answer's headers (empty when none came), for its error's words
            (:func:`.repo.hub_status_error`).
        url: the URL asked.
    """

    status: int
    body: bytes | None
    commit: str | None
    reason: str = ""
    headers: ResponseHeaders = field(default_factory=dict)
    url: str = ""


def endpoint_support(endpoint: str) -> bool | None:
    """Whether ``endpoint`` is known to have the route: True, False, or None (not asked yet)."""
    return _support.get(endpoint)


async def fetch_sharded_metadata(repo: HubRepo, index_path: str) -> MetadataAnswer:
    """Ask the endpoint for the headers of the sharded model whose index is ``index_path``.

    Retried as file reads are, by the user's options (:func:`..http.whole.get_whole`: the
    host's rate limiter, 408, 429 and 5xx, ``Retry-After``). Never raises for HTTP or network
    failures: the caller falls back to reading the files.
    """
    url = (
        f"{repo.endpoint}/api/{repo.repo.repo_type}/{repo.repo.repo_id}/safetensors-metadata/"
        f"{quote(index_path)}"
    )
    shown = f"{repo.repo.child(index_path)} (the hub's metadata endpoint)"
    try:
        answer = await get_whole(
            url, repo.options.headers, client=repo.client, options=repo.options, shown=shown
        )
    except RemoteTensorsError as exc:
        return MetadataAnswer(0, None, None, str(exc), url=url)
    status, headers = answer.status, answer.headers
    code = headers.get("X-Error-Code")
    commit = headers.get("X-Repo-Commit")
    if status == 200:
        _support[repo.endpoint] = True
        return MetadataAnswer(200, answer.body, commit, headers=headers, url=answer.url)
    if code:
        _support[repo.endpoint] = True
    elif status == 404:
        _support[repo.endpoint] = False
    reason = f"HTTP {status} {code or ''}".strip()
    return MetadataAnswer(status, None, commit, reason, headers=headers, url=answer.url)

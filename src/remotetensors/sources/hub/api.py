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
from ..cache import keys
from ..cache.offline import offline
from ..http.whole import get_whole

if TYPE_CHECKING:
    from ..cache.store import CacheStore
    from ..http.head import ResponseHeaders
    from .repo import HubRepo

_support: dict[str, bool] = {}  # endpoint -> whether it has the route (learnt per process)
_names_commits: dict[str, bool] = {}  # endpoint -> whether its answers carry X-Repo-Commit


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


def endpoint_support(endpoint: str, store: CacheStore | None = None) -> bool | None:
    """Whether ``endpoint`` is known to have the route: True, False, or None (not asked yet).

    What this process has not learnt, a persistent cache (``store``) may have kept from an
    earlier one, so that a later process asks what the earlier asked (and finds it kept)."""
    known = _support.get(endpoint)
    if known is None and store is not None:
        entry = store.get(keys.hub_support(endpoint))
        has = entry.meta.get("has") if entry is not None else None
        if isinstance(has, bool):
            known = _support[endpoint] = has
    return known


def names_commits(endpoint: str, store: CacheStore | None = None) -> bool | None:
    """Whether the route's answers on ``endpoint`` name their commit (``X-Repo-Commit``, as
    the hub's API did before 2026): True, False, or None (not seen yet). Only an answer that
    names its commit can describe a revision other than ``main`` (the route answers for main)."""
    known = _names_commits.get(endpoint)
    if known is None and store is not None:
        entry = store.get(keys.hub_support(endpoint))
        said = entry.meta.get("commits") if entry is not None else None
        if isinstance(said, bool):
            known = _names_commits[endpoint] = said
    return known


def _learn(repo: HubRepo, has: bool, commits: bool | None = None) -> None:
    """Whether the endpoint has the route, for this process and the cache (written when the
    cache does not say so already: a later process must find it)."""
    _support[repo.endpoint] = has
    if commits is not None:
        _names_commits[repo.endpoint] = commits
    store = repo.store
    if store is None:
        return
    key = keys.hub_support(repo.endpoint)
    entry = store.get(key)
    said = entry.meta.get("commits") if entry is not None else None
    if (
        entry is None
        or entry.meta.get("has") is not has
        or (commits is not None and said is not commits)
    ):
        meta = {"kind": "route", "shown": f"{repo.endpoint} (one-call metadata)", "has": has}
        meta["commits"] = commits if commits is not None else said
        store.put(key, meta)


async def fetch_sharded_metadata(repo: HubRepo, index_path: str) -> MetadataAnswer:
    """Ask the endpoint for the headers of the sharded model whose index is ``index_path``.

    Retried as file reads are, by the user's options (:func:`..http.whole.get_whole`: the
    host's rate limiter, 408, 429 and 5xx, ``Retry-After``). Never raises for HTTP or network
    failures: the caller falls back to reading the files.

    With a persistent cache (``repo.store``), an answer that names its commit (the headers, or
    "no such index" at that commit) is kept under it, and a visit pinned to that commit finds
    it without a request; offline, an answer not kept is no answer (status 0). The hub's API
    answers name no commit today (only its resolve answers carry ``X-Repo-Commit``): such an
    answer is kept only once its caller tied it to a commit (:func:`keep_answer`).
    """
    url = (
        f"{repo.endpoint}/api/{repo.repo.repo_type}/{repo.repo.repo_id}/safetensors-metadata/"
        f"{quote(index_path)}"
    )
    shown = f"{repo.repo.child(index_path)} (the hub's metadata endpoint)"
    try:
        await repo.settle()
    except RemoteTensorsError as exc:  # the files' reads will say why
        return MetadataAnswer(0, None, None, str(exc), url=url)
    kept = _kept(repo, index_path, url)
    if kept is not None:
        return kept
    if offline():
        return MetadataAnswer(0, None, None, "offline, and the answer is not kept", url=url)
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
        _learn(repo, True, commits=commit is not None)
        _keep(repo, index_path, commit, status, code, answer.body)
        return MetadataAnswer(200, answer.body, commit, headers=headers, url=answer.url)
    if code:
        _learn(repo, True)
        if status == 404 and code == "EntryNotFound":
            _keep(repo, index_path, commit, status, code, b"")
    elif status == 404:
        _learn(repo, False)
    reason = f"HTTP {status} {code or ''}".strip()
    return MetadataAnswer(status, None, commit, reason, headers=headers, url=answer.url)


def is_kept(repo: HubRepo, index_path: str) -> bool:
    """Whether the cache holds the endpoint's answer for ``index_path`` at the pinned commit
    (no IO)."""
    return _kept(repo, index_path, "") is not None


def _kept(repo: HubRepo, index_path: str, url: str) -> MetadataAnswer | None:
    """The answer the cache keeps for the pinned commit, or None."""
    if repo.store is None or not repo.pinned:
        return None
    entry = repo.store.get(
        keys.hub_onecall(repo.endpoint, repo.repo.repo_id, repo.revision, index_path)
    )
    if entry is None:
        return None
    status, code = entry.meta.get("status"), entry.meta.get("code")
    headers: dict[str, str] = {"X-Repo-Commit": repo.revision}
    if isinstance(code, str):
        headers["X-Error-Code"] = code
    if status == 200:
        return MetadataAnswer(200, entry.payload, repo.revision, headers=headers, url=url)
    if status == 404:
        return MetadataAnswer(404, None, repo.revision, f"HTTP 404 {code} (kept)", headers, url)
    return None


def keep_answer(repo: HubRepo, index_path: str, commit: str, answer: MetadataAnswer) -> None:
    """Keep a 200 ``answer`` that named no commit under ``commit``, the commit its caller tied
    it to (:func:`..reading.hub_onecall.accept`: the index file read at that commit in the same
    round says what the answer says). Nothing without a cache or a body."""
    if answer.body is not None and answer.status == 200:
        _keep(repo, index_path, commit, 200, None, answer.body)


def _keep(
    repo: HubRepo, index_path: str, commit: str | None, status: int, code: str | None, body: bytes
) -> None:
    """Keep an answer that names its commit (it cannot change at that commit)."""
    if repo.store is None or not commit:
        return
    meta = {
        "kind": "onecall",
        "shown": f"{repo.repo.child(index_path)} at {commit} (one-call metadata)",
        "status": status,
        "code": code,
    }
    repo.store.put(
        keys.hub_onecall(repo.endpoint, repo.repo.repo_id, commit, index_path), meta, body
    )

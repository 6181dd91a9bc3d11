"""``hf://`` locations: Hugging Face Hub repos read through their resolve URLs.

``hf://[datasets/|spaces/]org/name[@revision][/path]`` names a repo, a revision (a branch, tag
or commit; ``refs/pr/1`` is written URL-encoded) and a path inside it. Files are read from
``{endpoint}/{repo}/resolve/{revision}/{path}`` with the native HTTP source, so a redirect to the
CDN is paid once per file. The endpoint is ``HF_ENDPOINT`` (default: the public hub); the token is
``token=``, else ``HF_TOKEN``, else the one ``huggingface_hub`` stored (``token=False``: none).

A :class:`HubRepo` pins its revision to the commit that the first answer reports
(``X-Repo-Commit``): every file opened later is asked for at that commit, a file already asked
for at the branch moves to it once its first answer came, and every answer that names another
commit is refused with :class:`RemoteFileChangedError` (the repo was pushed while the model was
being opened), so the files of one model never come from two commits.

Requests to the hub's API (:meth:`HubRepo.list_files`, and :mod:`.api`) follow the retry policy
of file reads and the user's :class:`HttpOptions` (:mod:`..http.whole`), and their errors are
worded as a file's are (:func:`hub_status_error`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import posixpath
import re
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote, urljoin

from ...errors import (
    BadResponseError,
    LocationError,
    NotFoundError,
    PermissionDeniedError,
    RemoteFileChangedError,
)
from ..base import Prefix, Suffix
from ..cache import keys
from ..cache.offline import offline, offline_error
from ..http.answer import status_error
from ..http.client import HttpOptions
from ..http.policy import headers_for
from ..http.source import HttpSource
from ..http.whole import get_whole
from ..names import names_file
from ..ratelimit import limiter_for
from ..recipe import SourceRecipe
from .listing import ListedFile, dump_listing, load_listing, page_files

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from ..cache.store import CacheStore
    from ..http.client import Client
    from ..http.head import ResponseHeaders
    from ..http.transport import Head

DEFAULT_ENDPOINT = "https://huggingface.co"
MAX_LISTING_PAGES = 10_000
"""Pages of a listing followed at most (1000 entries each), so that a loop of links ends."""

_NEXT_LINK = re.compile(r'<([^>]*)>\s*;[^,]*?\brel\s*=\s*"?next"?', re.IGNORECASE)
COMMIT = re.compile(r"^[0-9a-f]{40}$")
"""A commit sha: a revision that names itself, never asked for."""
COMMIT_PROBE = "config.json"
"""The file whose resolve answer tells a revision's commit through the ``resolvers`` bucket
(see :meth:`HubRepo._ask_commit`): small, and read anyway when a model is counted."""

_SHARED: ContextVar[dict[str, asyncio.Future[str | None]] | None] = ContextVar(
    "remotetensors_shared_revisions", default=None
)


@contextlib.contextmanager
def shared_revisions() -> Iterator[None]:
    """Within, the repos opened (by tasks created within, and theirs) are one visit: each
    revision a persistent cache knows is asked for once, and every :class:`HubRepo` of that
    repo and revision takes the one answer (a scan does this, and asks ahead of its models; an
    answer is let go once a second repo has taken it). Asyncio tasks keep the setting they were
    created with, so it may be left once they are."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def in_shared_visit() -> bool:
    """Whether this task runs within :func:`shared_revisions` (a scan of many repos, where
    requests and the hub's rate limits, not one model's rounds, bound the time)."""
    return _SHARED.get() is not None


def is_hub_location(location: str) -> bool:
    """Whether ``location`` is an ``hf://`` URL (the scheme in any case, as URL schemes are)."""
    return location[:5].lower() == "hf://"


_TYPE_PREFIXES = {"datasets": "datasets/", "spaces": "spaces/", "models": ""}


@dataclass(frozen=True, slots=True)
class HubPath:
    """A parsed ``hf://`` location.

    Attributes:
        repo_type: ``"models"``, ``"datasets"`` or ``"spaces"``.
        repo_id: ``"org/name"``.
        revision: a branch, tag or commit; ``None`` for the default branch.
        path: a path inside the repo; ``""`` for its root.
    """

    repo_type: str
    repo_id: str
    revision: str | None
    path: str

    @classmethod
    def parse(cls, location: str) -> HubPath:
        """Parse ``hf://...``.

        Raises:
            LocationError (a ValueError): not an ``hf://`` location, no repo name in it, or an
                empty revision after ``@``.
        """
        if not is_hub_location(location):
            raise LocationError(f"{location}: not an hf:// location")
        parts = [p for p in location[5:].split("/") if p]
        repo_type = "models"
        if parts and parts[0] in _TYPE_PREFIXES:
            repo_type = parts.pop(0)
        if not parts:
            raise LocationError(
                f"{location}: expected hf://[datasets/|spaces/]org/name[@rev][/path]"
            )
        # Legacy repos have one-word names (``gpt2``, ``bert-base-uncased``) and the hub still
        # serves them: a lone name, or one followed by a file name, is such a repo.
        legacy = len(parts) == 1 or names_file(parts[1])
        repo_parts, rest = (parts[:1], parts[1:]) if legacy else (parts[:2], parts[2:])
        revision = None
        if "@" in repo_parts[-1]:
            repo_parts[-1], revision = repo_parts[-1].split("@", 1)
            revision = unquote(revision)
            if not revision:
                raise LocationError(
                    f"{location}: nothing after '@'; name a branch, tag or commit, or drop the '@'"
                )
        return cls(repo_type, "/".join(repo_parts), revision, "/".join(rest))

    def child(self, name: str) -> HubPath:
        """The location of ``name`` inside this path."""
        # The constructor, not dataclasses.replace: every file a model opens asks for one.
        path = f"{self.path}/{name}" if self.path else name
        return HubPath(self.repo_type, self.repo_id, self.revision, path)

    def __str__(self) -> str:
        prefix = _TYPE_PREFIXES[self.repo_type]
        rev = f"@{quote(self.revision, safe='')}" if self.revision else ""
        tail = f"/{self.path}" if self.path else ""
        return f"hf://{prefix}{self.repo_id}{rev}{tail}"


def resolve_token(token: str | bool | None) -> str | None:
    """The token to send: ``token`` itself, ``HF_TOKEN``, or huggingface_hub's stored one."""
    if token is False:
        return None
    if isinstance(token, str):
        return token
    env = os.environ.get("HF_TOKEN")
    if env:
        return env
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    stored: str | None = get_token()
    return stored


class HubRepo:
    """One repo of a hub, shared by the files of a model: endpoint, token, pinned revision.

    One :class:`HubRepo` is one visit of the repo (a model opened, a file read). With a
    persistent cache (``store``), :meth:`settle` fixes the commit the visit reads before any
    file is asked for: a commit sha is taken as it is, a revision name seen on an earlier visit
    is asked for once (one small request; offline, the cache's answer), and a name never seen
    is left to the first file's answer (no extra request on a first visit).

    Args:
        repo: the repo, revision and (ignored here) path.
        token: see :func:`resolve_token`.
        endpoint: the hub's base URL; ``HF_ENDPOINT`` or the public hub when None.
        http_options: timeouts and retries; the token is added as an Authorization header.
        client: the client shared by the files (see :mod:`..http.client`).
        store: the persistent cache, or None (then nothing is kept, and :meth:`settle` does
            nothing).
    """

    def __init__(
        self,
        repo: HubPath,
        *,
        token: str | bool | None = None,
        endpoint: str | None = None,
        http_options: HttpOptions | None = None,
        client: Client | None = None,
        store: CacheStore | None = None,
    ) -> None:
        self.repo = repo
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self.revision = repo.revision or "main"
        self.asked = self.revision
        """The revision as the user named it (``revision`` becomes the commit once pinned)."""
        self.pinned = False
        self.store = store
        self.warm = False
        """Whether the cache held this revision's commit from an earlier visit: a file it does
        not hold at the commit is then looked up by content in the commit's listing."""
        self.moved = False
        """Whether the revision named another commit than the cache knew (pushed to since)."""
        options = http_options or HttpOptions()
        secret = resolve_token(token)
        if secret:
            options = replace(
                options, headers={**options.headers, "Authorization": f"Bearer {secret}"}
            )
        self._options = options
        self._client = client
        self._settling: asyncio.Future[None] | None = None
        self._listings: dict[tuple[str, bool], asyncio.Future[list[ListedFile]]] = {}

    @property
    def options(self) -> HttpOptions:
        """The options of every request to the hub: the user's, the token in ``headers``."""
        return self._options

    @property
    def client(self) -> Client | None:
        """The client shared by the repo's files, if any."""
        return self._client

    def url(self, path: str) -> str:
        """The resolve URL of ``path`` at the (pinned) revision."""
        prefix = _TYPE_PREFIXES[self.repo.repo_type]
        revision = quote(self.revision, safe="")
        return f"{self.endpoint}/{prefix}{self.repo.repo_id}/resolve/{revision}/{quote(path)}"

    def key(self, make: Callable[..., str], *parts: str) -> str:
        """A cache key of this repo: ``make(endpoint, type, repo, *parts)``."""
        return make(self.endpoint, self.repo.repo_type, self.repo.repo_id, *parts)

    @functools.cached_property
    def shown(self) -> str:
        """The repo at the revision asked for, as messages name it."""
        return str(replace(self.repo, path=""))

    # --- the commit of this visit ---------------------------------------------------------

    async def settle(self) -> None:
        """Fix the commit this visit reads, once (see the class); concurrent callers share it.

        Raises:
            OfflineError: offline, and the cache does not know the revision's commit.
            NotFoundError, PermissionDeniedError: the hub says the repo or revision is
                missing, or refuses it (worded as for a file).
            TransportError, BadResponseError: the revision could not be asked for.
        """
        if self.pinned or self.store is None:
            return
        if self._settling is None:
            self._settling = asyncio.ensure_future(self._settle())
        await asyncio.shield(self._settling)

    async def _settle(self) -> None:
        if COMMIT.match(self.asked):
            self.pin(self.asked, self.shown)
            return
        shared = _SHARED.get()
        if shared is None:
            commit = await self._resolve()
        else:  # one visit of many repos (a scan): each revision asked once for all of them
            key = self.key(keys.hub_ref, self.asked)
            future = shared.get(key)
            if future is None:
                future = shared[key] = asyncio.ensure_future(self._resolve())
            else:  # the second taker (the scan asks ahead, its model then takes the answer)
                del shared[key]  # so that the scan holds nothing per location it finished
            commit = await asyncio.shield(future)
        if commit is not None:
            self.warm = True
            self.pin(commit, self.shown, remember=False)

    async def _resolve(self) -> str | None:
        """The revision's commit for this visit: the cache's offline; asked once online when
        the cache knows the repo (and the cache's answer updated when it moved); None for a
        repo the cache does not know (the first file's answer will name the commit)."""
        assert self.store is not None
        key = self.key(keys.hub_ref, self.asked)
        entry = self.store.get(key)
        known = entry.meta.get("commit") if entry is not None else None
        if not isinstance(known, str) or not COMMIT.match(known):
            known = None
        if offline():
            if known is None:
                raise offline_error(self.shown, f"the commit of revision {self.asked!r}")
            return known
        if known is None:
            return None
        commit = await self._ask_commit()
        if commit != known:
            self.moved = True
            self.store.put(key, {"kind": "ref", "shown": self.shown, "commit": commit})
        return commit

    async def _ask_commit(self) -> str:
        """The commit the revision names now, asked through the rate-limit bucket with room
        left: the revision API (the hub's ``api`` bucket, :meth:`_ask_revision`) while it has
        as large a share of its quota left as ``resolvers``, else the ``X-Repo-Commit`` of a
        one-byte read of :data:`COMMIT_PROBE` at the revision (``resolvers``,
        :meth:`_ask_by_resolve`). Before any answer said (nothing is known), the API."""
        api = limiter_for(self._revision_url()).room()
        resolvers = limiter_for(self.url(COMMIT_PROBE)).room()
        if api is not None and resolvers is not None and resolvers > api:
            commit = await self._ask_by_resolve()
            if commit is not None:
                return commit
        return await self._ask_revision()

    async def _ask_by_resolve(self) -> str | None:
        """The ``X-Repo-Commit`` of ``GET resolve/{revision}/config.json`` with ``Range:
        bytes=0-0``, its redirect not followed (the hub names the commit on its 206, its 302
        and its 404 ``EntryNotFound`` alike); None when the answer names none (then the API is
        asked).

        Raises:
            NotFoundError, PermissionDeniedError: the hub refuses the repo or revision.
            TransportError, BadResponseError: as :func:`..http.whole.get_whole`.
        """
        url = f"{self.endpoint}/{_TYPE_PREFIXES[self.repo.repo_type]}{self.repo.repo_id}/resolve/"
        url += f"{quote(self.asked, safe='')}/{COMMIT_PROBE}"
        headers = {**self._options.headers, "Range": "bytes=0-0"}
        answer = await get_whole(
            url,
            headers,
            client=self._client,
            options=self._options,
            shown=self.shown,
            follow_redirects=False,
        )
        code = answer.headers.get("X-Error-Code")
        if answer.status >= 400 and code in ("RepoNotFound", "RevisionNotFound", "GatedRepo"):
            raise hub_status_error(
                self, answer.status, answer.url, answer.headers, shown=self.shown, path=""
            )
        commit = answer.headers.get("X-Repo-Commit")
        return commit.strip() if commit and COMMIT.match(commit.strip()) else None

    def _revision_url(self) -> str:
        return (
            f"{self.endpoint}/api/{self.repo.repo_type}/{self.repo.repo_id}/revision/"
            f"{quote(self.asked, safe='')}?expand=sha"
        )

    async def _ask_revision(self) -> str:
        """The commit the revision names now: one ``GET {endpoint}/api/{type}/{repo}/revision/
        {revision}?expand=sha`` (``sha`` of its JSON, else its ``X-Repo-Commit``)."""
        url = self._revision_url()
        shown = self.shown
        answer = await get_whole(
            url, self._options.headers, client=self._client, options=self._options, shown=shown
        )
        if answer.status != 200:
            raise hub_status_error(
                self, answer.status, answer.url, answer.headers, shown=shown, path="", what="repo"
            )
        try:
            commit = json.loads(answer.body).get("sha")
        except (ValueError, AttributeError):
            commit = None
        commit = commit or answer.headers.get("X-Repo-Commit")
        if not isinstance(commit, str) or not COMMIT.match(commit):
            raise BadResponseError(
                f"{shown}: the hub's answer for revision {self.asked!r} names no commit "
                f"(expected a 40-digit sha in its 'sha' field, got {commit!r})"
            )
        return commit

    # --- listings --------------------------------------------------------------------------

    async def listing(self, folder: str = "", *, recursive: bool = True) -> list[ListedFile]:
        """Every file under ``folder`` (in it alone unless ``recursive``) at the revision, with
        its size and content id; asked for once per visit, and kept in the cache by commit
        (see :meth:`_list`).

        Raises:
            as :meth:`_list`; OfflineError offline when the cache does not hold it.
        """
        await self.settle()
        key = (folder, recursive)
        future = self._listings.get(key)
        if future is None or (future.done() and future.exception() is not None):
            future = self._listings[key] = asyncio.ensure_future(self._listing(*key))
        return await asyncio.shield(future)

    def listed(self, folder: str) -> list[ListedFile]:
        """What this visit's listings of ``folder`` (and of the folders above it, recursive)
        hold already, no IO: the files of ``folder`` among them."""
        files: list[ListedFile] = []
        for (where, recursive), future in self._listings.items():
            if not future.done() or future.exception() is not None:
                continue
            if where == folder or (recursive and (not where or folder.startswith(where + "/"))):
                files.extend(future.result())
        return files

    async def _listing(self, folder: str, recursive: bool) -> list[ListedFile]:
        shown = str(self.repo.child(folder) if folder else replace(self.repo, path=""))
        if not self.pinned and not offline():
            # The hub's listing names no commit (no API answer carries X-Repo-Commit): list at
            # the commit the revision names now, so that the listing and the files read after
            # it describe one commit (and the listing can be kept under it).
            commit = self.asked if COMMIT.match(self.asked) else await self._ask_revision()
            self.pin(commit, self.shown)
        key = self.key(keys.hub_listing, self.revision, folder, str(recursive))
        if self.store is not None and self.pinned:
            entry = self.store.get(key)
            files = load_listing(entry.payload) if entry is not None else None
            if files is not None:
                return files
        if offline():
            raise offline_error(shown, "its file listing")
        files = await self._list(folder, recursive=recursive)
        if self.store is not None and self.pinned:
            key = self.key(keys.hub_listing, self.revision, folder, str(recursive))
            meta = {"kind": "listing", "shown": f"{shown} at {self.revision}"}
            self.store.put(key, meta, dump_listing(files))
        return files

    async def list_files(self, folder: str = "") -> list[str]:
        """Every file under ``folder`` of the repo at the revision, as paths relative to it
        (see :meth:`listing`).

        Raises:
            as :meth:`_list`.
        """
        cut = len(folder) + 1 if folder else 0
        return [f.path[cut:] for f in await self.listing(folder)]

    async def _list(self, folder: str, *, recursive: bool) -> list[ListedFile]:
        """Every file under ``folder`` of the repo at the revision, over the network.

        One ``GET {endpoint}/api/{type}/{repo}/tree/{revision}[/{folder}]?recursive=...``
        (the call behind ``huggingface_hub.list_repo_files``), following ``Link: rel="next"``
        pages; each page is retried as file reads are, and its commit pins the repo's (or must
        match it). A page linked on another origin than the endpoint's is asked for without
        the token and the caller's other credentials (:func:`..http.policy.headers_for`).

        Raises:
            NotFoundError, PermissionDeniedError: as a file's read words them
                (:func:`hub_status_error`).
            RemoteFileChangedError: a page came from another commit than the one pinned.
            TransportError: the retries ran out.
            BadResponseError: another status, or a page that is not a JSON list of entries.
        """
        revision = quote(self.revision, safe="")
        tail = f"/{quote(folder)}" if folder else ""
        url: str | None = (
            f"{self.endpoint}/api/{self.repo.repo_type}/{self.repo.repo_id}/tree/{revision}{tail}"
            f"?recursive={str(recursive).lower()}&expand=false"
        )
        shown = str(self.repo.child(folder) if folder else replace(self.repo, path=""))
        files: list[ListedFile] = []
        for _ in range(MAX_LISTING_PAGES):
            if url is None:
                break
            headers = headers_for(self._options.headers, named=self.endpoint, url=url)
            answer = await get_whole(
                url, headers, client=self._client, options=self._options, shown=shown
            )
            if answer.status != 200:
                raise hub_status_error(
                    self,
                    answer.status,
                    answer.url,
                    answer.headers,
                    shown=shown,
                    path=folder,
                    what="folder",
                )
            self.pin(answer.headers.get("X-Repo-Commit"), shown)
            files.extend(page_files(answer.body, shown))
            url = _next_page(answer.headers, answer.url)
        return files

    async def listed_file(self, path: str) -> ListedFile | None:
        """``path`` as its folder's listing at the pinned commit has it (that folder alone, not
        the ones below it), or None when the listing does not hold it (no such file at that
        commit).

        Raises:
            as :meth:`listing`.
        """
        folder = posixpath.dirname(path)
        files = await self.listing(folder, recursive=False)
        return next((f for f in files if f.path == path), None)

    def kept_kind(self, path: str) -> str | None:
        """What the persistent cache says of file ``path`` at the pinned commit, no IO:
        ``"file"`` (its bytes, or a pointer to them, are kept: the file exists there),
        ``"absent"`` (the hub said there is no such file at that commit), or None (nothing
        kept, no cache, or no commit pinned yet)."""
        if self.store is None or not self.pinned:
            return None
        entry = self.store.get(self.key(keys.hub_file, self.revision, path))
        kind = entry.meta.get("kind") if entry is not None else None
        if kind in ("file", "alias"):
            return "file"
        return "absent" if kind == "absent" else None

    def source(self, path: str) -> HubSource:
        """A source for the file ``path`` of the repo."""
        return HubSource(self, path, client=self._client, options=self._options)

    def agrees(self, commit: str | None) -> bool:
        """Whether an answer from ``commit`` may be used with the files read so far: nothing
        is pinned yet, the answer names no commit, or it names the pinned one."""
        return not (self.pinned and commit and commit != self.revision)

    def pin(self, commit: str | None, shown: str, *, remember: bool = True) -> None:
        """Pin the repo to ``commit``, the commit an answer about ``shown`` came from: the
        first one reported is used for every later file; any later one must be the same. With
        a cache, the revision name's commit is kept (unless ``remember`` is False: the cache
        said it), and the next visit asks whether it moved.

        Raises:
            RemoteFileChangedError: ``commit`` differs from the pinned commit: the repo was
                pushed to while the model's files were read, and they would mix two commits.
        """
        if not commit:
            return
        if not self.agrees(commit):
            raise RemoteFileChangedError(
                f"{shown}: came from commit {commit}, but the files read before it came from "
                f"commit {self.revision}; {self.repo.repo_id} was pushed to while the model "
                "was being opened. Open it again, or name a commit with @revision"
            )
        if not self.pinned:
            self.revision = commit
            self.pinned = True
            if remember and self.store is not None and not COMMIT.match(self.asked):
                meta = {"kind": "ref", "shown": self.shown, "commit": commit}
                self.store.put(self.key(keys.hub_ref, self.asked), meta)


def hub_status_error(
    repo: HubRepo,
    status: int,
    url: str,
    headers: ResponseHeaders | None,
    *,
    shown: str,
    path: str,
    what: str = "file",
) -> Exception:
    """The error for an answer ``status`` of the hub about ``path`` of ``repo`` (a ``what``:
    a file, or a folder listed), named as ``shown``.

    The hub says in ``X-Error-Code`` what is missing, and a user needs to know which of the
    repo, the revision or the file it is, and whether a token might help; any other answer is
    worded by :func:`..http.answer.status_error`, as for every other server."""
    code = headers.get("X-Error-Code") if headers is not None else None
    repo_id = repo.repo.repo_id
    error: NotFoundError | PermissionDeniedError
    if code == "RepoNotFound":
        error = NotFoundError(
            f"{shown}: no repo {repo_id} on {repo.endpoint} (HTTP {status} RepoNotFound); "
            "check the name, or pass a token if it is private (--token or HF_TOKEN)"
        )
    elif code == "RevisionNotFound":
        error = NotFoundError(
            f"{shown}: repo {repo_id} has no revision {repo.revision!r} "
            f"(HTTP {status} RevisionNotFound); name an existing branch, tag or commit"
        )
    elif code == "EntryNotFound":
        error = NotFoundError(
            f"{shown}: repo {repo_id} has no {what} {path!r} at revision "
            f"{repo.revision!r} (HTTP {status} EntryNotFound)"
        )
    elif code == "GatedRepo":
        error = PermissionDeniedError(
            f"{shown}: {repo_id} is a gated repo (HTTP {status} GatedRepo); "
            "accept its terms on the hub and pass a token (--token or HF_TOKEN)"
        )
    else:
        return status_error(status, url, headers, shown)
    if isinstance(error, NotFoundError):
        error.code = code
    return error


def _next_page(headers: ResponseHeaders, url: str) -> str | None:
    """The URL of the next page from a ``Link: <...>; rel="next"`` header (resolved against
    ``url``, the page's own), or None on the last page."""
    link = headers.get("Link")
    match = _NEXT_LINK.search(link) if link else None
    return urljoin(url, match.group(1)) if match else None


class HubSource(HttpSource):
    """A file of a hub repo; reports the commit it came from to its :class:`HubRepo`."""

    def __init__(
        self,
        repo: HubRepo,
        path: str,
        *,
        client: Client | None,
        options: HttpOptions,
    ) -> None:
        super().__init__(repo.url(path), client=client, options=options)
        self._repo = repo
        self._path = path
        self._hub_location = str(repo.repo.child(path) if path else repo.repo)

    @property
    def location(self) -> str:
        return self._hub_location

    @property
    def repo(self) -> HubRepo:
        """The repo (and visit) this file belongs to."""
        return self._repo

    @property
    def path(self) -> str:
        """The file's path in the repo."""
        return self._path

    def assume_version(self, size: int, etag: str | None, last_modified: str | None) -> None:
        super().assume_version(size, etag, last_modified)
        self.follow_pin()

    def follow_pin(self) -> None:
        """Ask for the file at the repo's pinned commit from now on (pinned before this file
        was asked for: by the visit's :meth:`HubRepo.settle`), as after its first answer (see
        :meth:`open_prefix`)."""
        if self._repo.pinned:
            self._rename(self._repo.url(self._path))

    def _status_error(
        self, status: int, url: str, headers: ResponseHeaders | None = None
    ) -> Exception:
        return hub_status_error(
            self._repo, status, url, headers, shown=self.location, path=self._path
        )

    def _check_answer(self, head: Head) -> None:
        # Every answer that names a commit (the hub's; a redirect to the CDN carries it, the
        # CDN's answer does not) pins the repo or must name the pinned commit.
        self._repo.pin(head.headers.get("X-Repo-Commit"), self.location)

    def recipe(self) -> SourceRecipe:
        # The resolve URL at the pinned commit: a worker reads the same revision, and the
        # token travels in the options' headers (sent to the hub only, never to the CDN).
        return self._recipe_for(self._repo.url(self._path))

    async def open_prefix(self, length: int) -> Prefix:
        prefix = await super().open_prefix(length)
        # Asked for at a branch before the repo was pinned: ask at the commit from now on, so
        # that a later read (a small file is served by the hub itself, not the CDN) or a
        # re-resolution of an expired redirect cannot land on a newer commit.
        self._rename(self._repo.url(self._path))
        self._check_listed_size(prefix.size)
        return prefix

    async def open_suffix(self, length: int) -> Suffix:
        suffix = await super().open_suffix(length)
        self._rename(self._repo.url(self._path))  # as open_prefix does, for the same reason
        return suffix

    def _check_listed_size(self, size: int) -> None:
        """The size served must be the size the hub lists for the file: its redirect's
        ``X-Linked-Size`` (an LFS file's), and the listing of its folder when this visit has
        it. The header's own rule (8 + header length + end of the data = the size served) is
        the parser's; together they tie the header to the hub's record of the file.

        Raises:
            BadResponseError: naming both sizes.
        """
        listed: list[tuple[str, str]] = []
        for headers in self.first_responses:
            linked = headers.get("X-Linked-Size")
            if linked is not None:
                listed.append((linked.strip(), "its X-Linked-Size"))
        entries = self._repo.listed(posixpath.dirname(self._path))
        entry = next((f for f in entries if f.path == self._path), None)
        if entry is not None and entry.size is not None:
            listed.append((str(entry.size), "the repo's file listing"))
        for value, said in listed:
            if value != str(size):
                raise BadResponseError(
                    f"{self.location}: the hub lists {value} bytes for the file ({said}), but "
                    f"the file served has {size} bytes (Content-Range); its bytes cannot be "
                    "trusted to be the file the hub records"
                )

"""``hf://`` locations: Hugging Face Hub repos read through their resolve URLs.

``hf://[datasets/|spaces/]org/name[@revision][/path]`` names a repo, a revision (a branch, tag
or commit; ``refs/pr/1`` is written URL-encoded) and a path inside it. Files are read from
``{endpoint}/{repo}/resolve/{revision}/{path}`` with the native HTTP source, so a redirect to the
CDN is paid once per file. The endpoint is ``HF_ENDPOINT`` (default: the public hub); the token is
``token=``, else ``HF_TOKEN``, else the one ``huggingface_hub`` stored (``token=False``: none).

A :class:`HubRepo` pins its revision to the commit that the first response reports
(``X-Repo-Commit``), so every later file of the same model comes from that commit even if the
branch moves in between.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from ...errors import LocationError, NotFoundError, PermissionDeniedError
from ..base import Prefix
from ..http.client import HttpOptions
from ..http.source import HttpSource
from ..names import names_file
from ..recipe import SourceRecipe

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..http.client import Client
    from ..http.head import ResponseHeaders

DEFAULT_ENDPOINT = "https://huggingface.co"


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
        return replace(self, path=f"{self.path}/{name}" if self.path else name)

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

    Args:
        repo: the repo, revision and (ignored here) path.
        token: see :func:`resolve_token`.
        endpoint: the hub's base URL; ``HF_ENDPOINT`` or the public hub when None.
        http_options: timeouts and retries; the token is added as an Authorization header.
        client: the client shared by the files (see :mod:`..http.client`).
    """

    def __init__(
        self,
        repo: HubPath,
        *,
        token: str | bool | None = None,
        endpoint: str | None = None,
        http_options: HttpOptions | None = None,
        client: Client | None = None,
    ) -> None:
        self.repo = repo
        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        self.revision = repo.revision or "main"
        self.pinned = False
        options = http_options or HttpOptions()
        secret = resolve_token(token)
        if secret:
            options = replace(
                options, headers={**options.headers, "Authorization": f"Bearer {secret}"}
            )
        self._options = options
        self._client = client

    @property
    def request_headers(self) -> Mapping[str, str]:
        """Headers for requests to the hub itself (the token, when there is one)."""
        return self._options.headers

    @property
    def client(self) -> Client | None:
        """The client shared by the repo's files, if any."""
        return self._client

    def url(self, path: str) -> str:
        """The resolve URL of ``path`` at the (pinned) revision."""
        prefix = _TYPE_PREFIXES[self.repo.repo_type]
        revision = quote(self.revision, safe="")
        return f"{self.endpoint}/{prefix}{self.repo.repo_id}/resolve/{revision}/{quote(path)}"

    async def list_files(self, folder: str = "") -> list[str]:
        """Every file under ``folder`` of the repo at the revision, as paths relative to it.

        One ``GET {endpoint}/api/{type}/{repo}/tree/{revision}[/{folder}]?recursive=true``
        (the call behind ``huggingface_hub.list_repo_files``), following ``Link: rel="next"``
        pages.

        Raises:
            NotFoundError, PermissionDeniedError, TransportError.
        """
        import httpx

        from ...errors import NotFoundError, PermissionDeniedError, TransportError
        from ..http.client import httpx_of

        revision = quote(self.revision, safe="")
        tail = f"/{quote(folder)}" if folder else ""
        url: str | None = (
            f"{self.endpoint}/api/{self.repo.repo_type}/{self.repo.repo_id}/tree/{revision}{tail}"
            "?recursive=true&expand=false"
        )
        client = self._client or self._options.new_client()
        names: list[str] = []
        try:
            for _ in range(10_000):  # pages of 1000 entries; bounded so a loop cannot hang
                if url is None:
                    break
                try:
                    response = await httpx_of(client).get(url, headers=dict(self._options.headers))
                except httpx.HTTPError as exc:
                    raise TransportError(f"{self.repo}: listing files failed: {exc}") from exc
                if response.status_code in (404, 410):
                    raise NotFoundError(f"{self.repo}: not found (HTTP {response.status_code})")
                if response.status_code in (401, 403):
                    raise PermissionDeniedError(
                        f"{self.repo}: access denied listing files (HTTP "
                        f"{response.status_code}); a private or gated repo needs a token"
                    )
                if response.status_code != 200:
                    raise TransportError(
                        f"{self.repo}: listing files answered HTTP {response.status_code}"
                    )
                for entry in response.json():
                    if entry.get("type") == "file":
                        path = str(entry["path"])
                        names.append(path[len(folder) + 1 :] if folder else path)
                url = response.links.get("next", {}).get("url")
        finally:
            if client is not self._client:
                await client.aclose()
        return names

    def source(self, path: str) -> HubSource:
        """A source for the file ``path`` of the repo."""
        return HubSource(self, path, client=self._client, options=self._options)

    def pin(self, commit: str | None) -> None:
        """Use ``commit`` for every later file (the first one reported wins)."""
        if commit and not self.pinned:
            self.revision = commit
            self.pinned = True


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

    def _status_error(
        self, status: int, url: str, headers: ResponseHeaders | None = None
    ) -> Exception:
        # The hub says in X-Error-Code what is missing; a user needs to know which of the repo,
        # the revision or the file it is, and whether a token might help.
        code = headers.get("X-Error-Code") if headers is not None else None
        repo = self._repo.repo
        where = f"on {self._repo.endpoint}"
        error: NotFoundError | PermissionDeniedError
        if code == "RepoNotFound":
            error = NotFoundError(
                f"{self.location}: no repo {repo.repo_id} {where} (HTTP {status} RepoNotFound); "
                "check the name, or pass a token if it is private (--token or HF_TOKEN)"
            )
        elif code == "RevisionNotFound":
            error = NotFoundError(
                f"{self.location}: repo {repo.repo_id} has no revision {self._repo.revision!r} "
                f"(HTTP {status} RevisionNotFound); name an existing branch, tag or commit"
            )
        elif code == "EntryNotFound":
            error = NotFoundError(
                f"{self.location}: repo {repo.repo_id} has no file {self._path!r} at revision "
                f"{self._repo.revision!r} (HTTP {status} EntryNotFound)"
            )
        elif code == "GatedRepo":
            error = PermissionDeniedError(
                f"{self.location}: {repo.repo_id} is a gated repo (HTTP {status} GatedRepo); "
                "accept its terms on the hub and pass a token (--token or HF_TOKEN)"
            )
        else:
            return super()._status_error(status, url, headers)
        if isinstance(error, NotFoundError):
            error.code = code
        return error

    def recipe(self) -> SourceRecipe:
        # The resolve URL at the pinned commit: a worker reads the same revision, and the
        # token travels in the options' headers (sent to the hub only, never to the CDN).
        return self._recipe_for(self._repo.url(self._path))

    async def open_prefix(self, length: int) -> Prefix:
        prefix = await super().open_prefix(length)
        # The hub's own answer carries the commit; for a large file that answer is the
        # redirect to the CDN, not the final one.
        for headers in self.first_responses:
            self._repo.pin(headers.get("X-Repo-Commit"))
        return prefix

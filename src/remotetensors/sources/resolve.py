"""From a location string to the sources that read it.

A :class:`Place` is a folder-like location that names and opens the files of a model: one class
per kind (a local folder, a URL prefix, an fsspec prefix such as S3's, a hub repo or a folder in
it), each holding only what it needs. :func:`open_source` opens one file.
"""

from __future__ import annotations

import os
import posixpath
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from ..errors import LocationError, RemoteTensorsError
from ..redact import redact_url
from .base import CountingSource, Traffic
from .cache.offline import offline, offline_error
from .cache.store import default_store
from .http.cached import HttpCachedSource
from .http.client import HttpOptions
from .http.source import HttpSource
from .hub.cached import HubCachedSource
from .hub.repo import HubPath, HubRepo, HubSource, is_hub_location
from .local import LocalSource
from .names import names_file, scheme_of

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .base import ByteSource
    from .cache.store import CacheStore
    from .http.client import Client


class Place(ABC):
    """Where a model's files are, and how to open them: a local folder (:class:`LocalPlace`), a
    URL prefix (:class:`HttpPlace`), an fsspec prefix (:class:`FsspecPlace`) or a hub repo or a
    folder in it (:class:`HubPlace`).

    Attributes:
        traffic: file name -> what crossed the network for it, for every file this place
            opened (headers, index, configs, tensors; failed probes too).
    """

    traffic: dict[str, Traffic]

    @abstractmethod
    def location(self, name: str) -> str:
        """The location of file ``name`` (a relative path) in this place, as messages name it
        (its secrets redacted: a password or signature in the place's URL is ``***``)."""

    @abstractmethod
    def _source(self, name: str) -> ByteSource:
        """A source for file ``name``, not counted."""

    def open(self, name: str) -> CountingSource:
        """A source for file ``name`` of this place, its reads counted in ``traffic[name]``
        (and, where the place has a persistent cache, that cache in front of it)."""
        return self._counted(self._source(name), self.traffic.setdefault(name, Traffic()))

    def _counted(self, source: ByteSource, traffic: Traffic) -> CountingSource:
        """``source`` counted in ``traffic``; a place with a cache puts it in front."""
        return CountingSource(source, traffic)

    @abstractmethod
    def child(self, folder: str) -> Place:
        """The place of ``folder`` (a relative path, no ``..``) inside this one, with its own
        ``traffic`` (names relative to it); a hub folder shares this repo and its pinned commit,
        so a model read from several folders comes from one commit."""

    async def list_files(self) -> list[str] | None:
        """The names of the files in this place (relative paths; recursive for a hub repo), or
        None where a place cannot be listed (a plain HTTP server).

        Raises:
            NotFoundError, PermissionDeniedError, TransportError.
        """
        return None

    async def known_absent(self, name: str) -> bool:
        """Whether file ``name`` is known not to exist, with no request and no source built: a
        hub repo whose persistent cache says so at the visit's commit. False where nothing is
        known (the file's own read then tells); never raises for the place's own failures,
        which that read meets and reports."""
        return False


@dataclass
class LocalPlace(Place):
    """A local folder.

    Attributes:
        folder: the folder's path as the user gave it (no trailing slash).
    """

    folder: str
    traffic: dict[str, Traffic] = field(default_factory=dict)

    def location(self, name: str) -> str:
        return os.path.join(self.folder, name)

    def child(self, folder: str) -> LocalPlace:
        return LocalPlace(self.location(folder))

    def _source(self, name: str) -> ByteSource:
        return open_source(self.location(name))

    async def list_files(self) -> list[str] | None:
        try:
            return sorted(os.listdir(self.folder))
        except FileNotFoundError:
            return []


@dataclass
class HttpPlace(Place):
    """A URL prefix on a plain HTTP server (which cannot be listed).

    Attributes:
        base: the prefix as the user gave it (no trailing slash).
    """

    base: str
    http_options: HttpOptions | None = None
    client: Client | None = None
    traffic: dict[str, Traffic] = field(default_factory=dict)
    queries: Mapping[str, str] = field(default_factory=dict)
    """File name -> the query of its URL (``"?X-Amz-Signature=..."``), for the file the user
    named with one: its name (in the model's files, tables and traffic) carries no secret."""
    store: CacheStore | None = None
    """The persistent cache in front of the files, or None."""

    def location(self, name: str) -> str:
        return redact_url(self._url(name))

    def _url(self, name: str) -> str:
        return f"{self.base}/{name}{self.queries.get(name, '')}"

    def _source(self, name: str) -> ByteSource:
        return HttpSource(self._url(name), client=self.client, options=self.http_options)

    def _counted(self, source: ByteSource, traffic: Traffic) -> CountingSource:
        if self.store is not None and isinstance(source, HttpSource):
            return HttpCachedSource(source, traffic, self.store)
        return CountingSource(source, traffic)

    def __repr__(self) -> str:
        # Not the dataclass's: the base may hold a password, the queries signatures.
        return f"HttpPlace({redact_url(self.base)!r})"

    def child(self, folder: str) -> HttpPlace:
        return HttpPlace(f"{self.base}/{folder}", self.http_options, self.client)


@dataclass
class FsspecPlace(Place):
    """A prefix of any fsspec URL (``s3://bucket/prefix``, ``memory://``, chained URLs).

    Attributes:
        base: the prefix as the user gave it (no trailing slash).
        storage_options: passed to fsspec untouched.
    """

    base: str
    storage_options: Mapping[str, Any] | None = None
    traffic: dict[str, Traffic] = field(default_factory=dict)
    queries: Mapping[str, str] = field(default_factory=dict)
    """File name -> the query of its URL, as for :class:`HttpPlace`."""
    store: CacheStore | None = None
    """The persistent cache in front of the files (S3 and GCS objects, Azure blobs), or None."""

    def location(self, name: str) -> str:
        return redact_url(self._url(name))

    def _url(self, name: str) -> str:
        return f"{self.base}/{name}{self.queries.get(name, '')}"

    def _source(self, name: str) -> ByteSource:
        return open_source(self._url(name), storage_options=self.storage_options, cache=False)

    def _counted(self, source: ByteSource, traffic: Traffic) -> CountingSource:
        return _s3_cached(source, traffic, self.store) or CountingSource(source, traffic)

    def __repr__(self) -> str:
        # Not the dataclass's: the storage options hold credentials, the queries signatures.
        return f"FsspecPlace({redact_url(self.base)!r})"

    def child(self, folder: str) -> FsspecPlace:
        return FsspecPlace(f"{self.base}/{folder}", self.storage_options)

    async def list_files(self) -> list[str] | None:
        import asyncio

        import fsspec

        from .fsspec import local_protocol

        def listing() -> list[str]:
            fs, path = fsspec.core.url_to_fs(self.base, **dict(self.storage_options or {}))
            if offline() and not local_protocol(fs):
                raise offline_error(self.location(""), "its listing")
            try:
                entries = fs.ls(path, detail=False)
            except FileNotFoundError:
                return []
            return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)

        return await asyncio.to_thread(listing)


@dataclass
class HubPlace(Place):
    """A hub repo, or a folder in it.

    Attributes:
        repo: the repo (its client, token and pinned commit).
        path: the repo, revision and folder.
    """

    repo: HubRepo
    path: HubPath
    traffic: dict[str, Traffic] = field(default_factory=dict)

    def location(self, name: str) -> str:
        return str(self.path.child(name))

    def _source(self, name: str) -> ByteSource:
        return self.repo.source(self.path.child(name).path)

    def child(self, folder: str) -> HubPlace:
        return HubPlace(self.repo, self.path.child(folder))

    def _counted(self, source: ByteSource, traffic: Traffic) -> CountingSource:
        store = self.repo.store
        if store is not None and isinstance(source, HubSource):
            return HubCachedSource(source, traffic, store)
        return CountingSource(source, traffic)

    async def list_files(self) -> list[str] | None:
        return await self.repo.list_files(self.path.path)

    async def known_absent(self, name: str) -> bool:
        repo = self.repo
        if repo.store is None:
            return False
        try:
            await repo.settle()  # what the file's read would do first: shared, asked once
        except RemoteTensorsError:
            return False  # the file's own read meets it again and reports it
        return repo.kept_kind(self.path.child(name).path) == "absent"


def split_location(
    location: str | os.PathLike[str],
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    http_options: HttpOptions | None = None,
    client: Client | None = None,
    storage_options: Mapping[str, Any] | None = None,
    cache: bool = True,
) -> tuple[Place, str | None]:
    """The place of a model location, and the file name when it names one file.

    No IO happens here, except asking a local path whether it is a folder: whether remote
    files exist is found out by opening them. ``cache``: put the persistent cache
    (:func:`.cache.store.default_store`) in front of the place's files where it keeps them
    (hub repos, HTTP servers).
    """
    text = os.fspath(location)
    scheme = scheme_of(text)
    if is_hub_location(text):
        parsed = HubPath.parse(text)
        if revision is not None:
            parsed = HubPath(parsed.repo_type, parsed.repo_id, revision, parsed.path)
        name = None
        if names_file(parsed.path):
            folder, name = posixpath.split(parsed.path)
            parsed = HubPath(parsed.repo_type, parsed.repo_id, parsed.revision, folder)
        store = _store(cache)
        repo = HubRepo(parsed, token=token, http_options=http_options, client=client, store=store)
        return HubPlace(repo, parsed), name
    if scheme in ("", "file"):
        path = unquote(urlsplit(text).path) if scheme == "file" else text
        if os.path.isdir(path):
            return LocalPlace(path.rstrip("/") or "/"), None
        folder, name = os.path.split(path)
        return LocalPlace(folder or "."), name
    stripped = text.rstrip("/")
    head, _, last = stripped.rpartition("/")
    base, name, queries = stripped, None, {}
    # A version in an fsspec location's fragment (gs://bucket/key#<generation>) is not part of
    # the file's name either.
    named, hashed, fragment = last, "", ""
    if scheme not in ("http", "https"):
        named, hashed, fragment = last.partition("#")
    if names_file(named) and not text.endswith("/"):
        # A signed URL's query stays with its file, out of the file's name.
        name, mark, query = named.partition("?")
        tail = mark + query + hashed + fragment
        base, queries = head, ({name: tail} if tail else {})
    if scheme in ("http", "https"):
        return HttpPlace(base, http_options, client, queries=queries, store=_store(cache)), name
    return FsspecPlace(base, storage_options, queries=queries, store=_store(cache)), name


def open_local_source(location: str | os.PathLike[str]) -> LocalSource | None:
    """The source for a local path (a Windows drive path too) or ``file://`` URL; ``None``
    for any other location."""
    text = os.fspath(location)
    scheme = scheme_of(text)
    if scheme == "file":
        return LocalSource(unquote(urlsplit(text).path), location=text)
    if scheme == "":
        return LocalSource(text)
    return None


def open_source(
    location: str | os.PathLike[str],
    *,
    http_options: HttpOptions | None = None,
    client: Client | None = None,
    storage_options: Mapping[str, Any] | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
    cache: bool = True,
) -> ByteSource:
    """The source for one file: ``http(s)://``, ``hf://``, ``file://``, a local path, or any
    other fsspec URL (``s3://``, ``gs://``, ``memory://``, ``simplecache::s3://``, ...);
    ``cache``: with the persistent cache in front where it keeps files (see
    :func:`split_location`)."""
    text = os.fspath(location)
    if is_hub_location(text):
        place, name = split_location(
            text,
            revision=revision,
            token=token,
            http_options=http_options,
            client=client,
            cache=cache,
        )
        if name is None:
            raise LocationError(f"{text}: names a repo or folder, not a file; use open_model")
        return place.open(name)
    local = open_local_source(text)
    if local is not None:
        return local
    if scheme_of(text) in ("http", "https"):
        http = HttpSource(text, client=client, options=http_options)
        store = _store(cache)
        return http if store is None else HttpCachedSource(http, None, store)
    # Imported here: fsspec costs ~100 ms to import, and only fsspec URLs need it.
    from .fsspec import FsspecSource

    source = FsspecSource(text, storage_options=storage_options)
    return _s3_cached(source, None, _store(cache)) or source


def _s3_cached(
    source: ByteSource, traffic: Traffic | None, store: CacheStore | None
) -> CountingSource | None:
    """``source`` (an fsspec location's) with the cache in front, when it is an S3 object, a
    GCS object or an Azure blob and there is a cache."""
    if store is None:
        return None
    from .fsspec import FsspecSource
    from .object_cached import ObjectCachedSource
    from .s3_cached import S3CachedSource

    if not isinstance(source, FsspecSource):
        return None
    if source.s3_object() is not None:
        return S3CachedSource(source, traffic, store)
    if source.stored_object() is not None:
        return ObjectCachedSource(source, traffic, store)
    return None


def _store(cache: bool) -> CacheStore | None:
    """The persistent cache when ``cache`` asks for it (see :func:`.cache.store.default_store`)."""
    return default_store() if cache else None

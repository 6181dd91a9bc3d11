"""From a location string to the sources that read it.

A :class:`Place` is a folder-like location (a local folder, a URL prefix, an S3 prefix, a hub
repo or a folder in it) that names and opens the files of a model. :func:`open_source` opens
one file.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from .base import CountingSource, Traffic
from .http.client import HttpOptions
from .http.source import HttpSource
from .hub.repo import HubPath, HubRepo, is_hub_location
from .local import LocalSource

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .base import ByteSource
    from .http.client import Client

FILE_SUFFIXES = (".safetensors", ".bt", ".json", ".gguf")
"""Locations ending in these name a file; any other names a folder, prefix or repo."""


@dataclass
class Place:
    """Where a model's files are, and how to open them.

    Attributes:
        kind: ``"local"``, ``"http"``, ``"hub"`` or ``"fsspec"``.
        base: the folder's location as the user gave it (no trailing slash).
        traffic: file name -> what crossed the network for it, for every file this place
            opened (headers, index, configs, tensors; failed probes too).
    """

    kind: str
    base: str
    http_options: HttpOptions | None = None
    client: Client | None = None
    storage_options: Mapping[str, Any] | None = None
    hub: HubRepo | None = None
    hub_path: HubPath | None = None
    traffic: dict[str, Traffic] = field(default_factory=dict)

    def location(self, name: str) -> str:
        """The location of file ``name`` (a relative path) in this place."""
        if self.kind == "local":
            return os.path.join(self.base, name)
        if self.kind == "hub":
            assert self.hub_path is not None
            return str(self.hub_path.child(name))
        return f"{self.base}/{name}"

    def open(self, name: str) -> ByteSource:
        """A source for file ``name`` of this place, its reads counted in ``traffic[name]``."""
        source: ByteSource
        if self.kind == "hub":
            assert self.hub is not None
            assert self.hub_path is not None
            source = self.hub.source(self.hub_path.child(name).path)
        else:
            source = open_source(
                self.location(name),
                http_options=self.http_options,
                client=self.client,
                storage_options=self.storage_options,
            )
        return CountingSource(source, self.traffic.setdefault(name, Traffic()))

    async def list_files(self) -> list[str] | None:
        """The names of the files in this place (relative paths; recursive for a hub repo), or
        None where a place cannot be listed (a plain HTTP server).

        Raises:
            NotFoundError, PermissionDeniedError, TransportError.
        """
        if self.kind == "hub":
            assert self.hub is not None
            assert self.hub_path is not None
            return await self.hub.list_files(self.hub_path.path)
        if self.kind == "local":
            try:
                return sorted(os.listdir(self.base))
            except FileNotFoundError:
                return []
        if self.kind == "fsspec":
            import asyncio

            import fsspec

            def listing() -> list[str]:
                fs, path = fsspec.core.url_to_fs(self.base, **dict(self.storage_options or {}))
                try:
                    entries = fs.ls(path, detail=False)
                except FileNotFoundError:
                    return []
                return sorted(str(e).rstrip("/").rsplit("/", 1)[-1] for e in entries)

            return await asyncio.to_thread(listing)
        return None


def split_location(
    location: str | os.PathLike[str],
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    http_options: HttpOptions | None = None,
    client: Client | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> tuple[Place, str | None]:
    """The place of a model location, and the file name when it names one file.

    No IO happens here, except asking a local path whether it is a folder: whether remote
    files exist is found out by opening them.
    """
    text = os.fspath(location)
    scheme = urlsplit(text).scheme.lower() if "://" in text else ""
    if is_hub_location(text):
        parsed = HubPath.parse(text)
        if revision is not None:
            parsed = HubPath(parsed.repo_type, parsed.repo_id, revision, parsed.path)
        name = None
        if parsed.path.endswith(FILE_SUFFIXES):
            folder, name = posixpath.split(parsed.path)
            parsed = HubPath(parsed.repo_type, parsed.repo_id, parsed.revision, folder)
        repo = HubRepo(parsed, token=token, http_options=http_options, client=client)
        return Place("hub", str(parsed), http_options, client, hub=repo, hub_path=parsed), name
    if scheme in ("", "file") and not _is_windows_drive(scheme):
        path = unquote(urlsplit(text).path) if scheme == "file" else text
        if os.path.isdir(path):
            return Place("local", path.rstrip("/") or "/"), None
        folder, name = os.path.split(path)
        return Place("local", folder or "."), name
    kind = "http" if scheme in ("http", "https") else "fsspec"
    stripped = text.rstrip("/")
    head, _, last = stripped.rpartition("/")
    place = Place(kind, stripped, http_options, client, storage_options)
    if last.split("?", 1)[0].endswith(FILE_SUFFIXES) and not text.endswith("/"):
        place.base = head
        return place, last
    return place, None


def _is_windows_drive(scheme: str) -> bool:
    return len(scheme) == 1 and os.name == "nt"


def open_local_source(location: str | os.PathLike[str]) -> LocalSource | None:
    """The source for a local path or ``file://`` URL; ``None`` for any other location."""
    text = os.fspath(location)
    if text.startswith("hf://"):
        return None
    scheme = urlsplit(text).scheme.lower() if "://" in text else ""
    if scheme == "file":
        return LocalSource(unquote(urlsplit(text).path), location=text)
    if scheme == "" or _is_windows_drive(scheme):
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
) -> ByteSource:
    """The source for one file: ``http(s)://``, ``hf://``, ``file://``, a local path, or any
    other fsspec URL (``s3://``, ``gs://``, ``memory://``, ``simplecache::s3://``, ...)."""
    text = os.fspath(location)
    if is_hub_location(text):
        place, name = split_location(
            text, revision=revision, token=token, http_options=http_options, client=client
        )
        if name is None:
            raise ValueError(f"{text}: names a repo or folder, not a file; use open_model")
        return place.open(name)
    local = open_local_source(text)
    if local is not None:
        return local
    scheme = urlsplit(text).scheme.lower() if "://" in text else ""
    if scheme in ("http", "https"):
        return HttpSource(text, client=client, options=http_options)
    # Imported here: fsspec costs ~100 ms to import, and only fsspec URLs need it.
    from .fsspec import FsspecSource

    return FsspecSource(text, storage_options=storage_options)

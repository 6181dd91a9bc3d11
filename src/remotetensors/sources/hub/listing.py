"""A hub repo's file listing at a commit: each file's path, size and content id; no IO.

The hub's tree API (``/api/{type}/{repo}/tree/{revision}[/{folder}]?recursive=true``) lists
``{"type": "file", "path", "size", "oid", "lfs": {"oid", "size"}}`` per file: ``oid`` is the git
blob id, and a file kept in LFS (the weights) also has ``lfs.oid``, its SHA-256. The content id
of a file (what the cache keeps its bytes under, see :mod:`..cache.keys`) is the LFS sha256 when
there is one, else the blob id: the same values the hub sends for the file as ``X-Linked-Etag``
or ``ETag`` (:func:`content_id_of_answer`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import BadResponseError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..http.head import ResponseHeaders

__all__ = ["ListedFile", "content_id_of_answer", "dump_listing", "load_listing", "page_files"]


@dataclass(frozen=True, slots=True)
class ListedFile:
    """One file of a listing.

    Attributes:
        path: its path in the repo.
        size: its size in bytes, as the hub lists it (None when it does not).
        oid: its git blob id (``""`` when the listing gives none).
        sha256: its LFS SHA-256, or None for a file not in LFS.
    """

    path: str
    size: int | None
    oid: str = ""
    sha256: str | None = None

    @property
    def content_id(self) -> str | None:
        """The LFS sha256, else the git blob id; None when the listing gives neither."""
        return self.sha256 or self.oid or None


def page_files(body: bytes, shown: str) -> list[ListedFile]:
    """The files in one page of a tree listing (its folders left out).

    Raises:
        BadResponseError: the page is not a JSON list of entries, each with a path.
    """
    try:
        entries = json.loads(body)
        return [_file(e) for e in entries if e.get("type") == "file"]
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise BadResponseError(
            f"{shown}: the hub's file listing is not a JSON list of entries ({exc})"
        ) from None


def _file(entry: dict[str, Any]) -> ListedFile:
    lfs = entry.get("lfs")
    sha256 = str(lfs["oid"]) if isinstance(lfs, dict) and lfs.get("oid") else None
    oid, size = entry.get("oid"), entry.get("size")
    return ListedFile(
        str(entry["path"]), None if size is None else int(size), str(oid or ""), sha256
    )


def dump_listing(files: Iterable[ListedFile]) -> bytes:
    """A listing as the cache keeps it (JSON)."""
    return json.dumps(
        [[f.path, f.size, f.oid, f.sha256] for f in files], separators=(",", ":")
    ).encode()


def load_listing(data: bytes) -> list[ListedFile] | None:
    """A listing the cache kept, or None when it does not read as one."""
    try:
        rows = json.loads(data)
        return [
            ListedFile(str(p), None if s is None else int(s), str(o), None if h is None else str(h))
            for p, s, o, h in rows
        ]
    except (ValueError, TypeError):
        return None


def content_id_of_answer(answers: Iterable[ResponseHeaders]) -> str | None:
    """The content id the hub gave for a file in the answers to its first request: the LFS
    sha256 of a redirect (``X-Linked-Etag``), else the ``ETag`` of the hub's own answer (the one
    carrying ``X-Repo-Commit``; a CDN's ETag is the CDN's business). None when neither came."""
    for headers in answers:
        if headers.get("X-Repo-Commit") is None:
            continue
        tag = headers.get("X-Linked-Etag") or headers.get("ETag")
        if tag:
            tag = tag.strip()
            tag = tag[2:] if tag.startswith("W/") else tag
            return tag.strip('"') or None
    return None

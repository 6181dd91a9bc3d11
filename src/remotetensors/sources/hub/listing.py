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
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import BadResponseError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..http.head import ResponseHeaders

__all__ = [
    "ListedFile",
    "content_id",
    "content_id_of_answer",
    "dump_listing",
    "load_listing",
    "page_files",
]


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
        """The LFS sha256, else the git blob id; None when the listing gives neither (or
        neither has the form of one, see :func:`content_id`)."""
        return content_id(self.sha256 or self.oid or None)


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


_CONTENT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


def content_id(value: str | None) -> str | None:
    """``value`` when it has the form of a hub content id, a git blob id (40 hex digits) or
    an LFS sha256 (64), else None. A server that answers for a hub (a mirror, a proxy) may use
    ETags that are no content hash (a size and a date): those must never name bytes."""
    return value if value is not None and _CONTENT_ID.match(value) else None


def content_id_of_answer(answers: Iterable[ResponseHeaders]) -> str | None:
    """The content id the hub gave for a file in the answers to its first request: the LFS
    sha256 of a redirect (``X-Linked-Etag``), else the ``ETag`` of the hub's own answer (the one
    carrying ``X-Repo-Commit``; a CDN's ETag is the CDN's business), as huggingface_hub's own
    cache reads them. None when neither came, or when it is not of a content id's form."""
    for headers in answers:
        if headers.get("X-Repo-Commit") is None:
            continue
        tag = headers.get("X-Linked-Etag") or headers.get("ETag")
        if tag:
            tag = tag.strip()
            tag = tag[2:] if tag.startswith("W/") else tag
            return content_id(tag.strip('"'))
    return None

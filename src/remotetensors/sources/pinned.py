"""Objects read at the version they were opened at: what :mod:`.gcs` (a GCS generation) and
:mod:`.azure` (an Azure blob's ETag, or its version id) share.

The first answer about an object (a ranged GET, or where it cannot be, its properties) names
the version it came from; every later read asks the service for that version only, so a rewrite
is refused by the read itself (GCS: 404 at the old generation; Azure: 412 to ``If-Match``) and no
metadata request is needed to check it. Each module raises the backend's own errors where it
does not translate them: :class:`~.fsspec.FsspecSource` puts those in the user's terms.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass

from ..errors import BadResponseError

__all__ = ["Answer", "PinnedObject", "StoredObject", "content_range"]

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(-?\d+)/(\d+)")


@dataclass(frozen=True, slots=True)
class Answer:
    """The first answer about an object.

    Attributes:
        data: the bytes asked for (from the start, or the last ones for a suffix).
        size: the object's size in bytes.
        version: what names the version the bytes are of (a GCS generation, an Azure ETag).
    """

    data: bytes
    size: int
    version: str


@dataclass(frozen=True, slots=True)
class StoredObject:
    """Where an object lives, as a persistent cache keys it.

    Attributes:
        service: ``"gs"`` or ``"az"``.
        endpoint: the service's endpoint (an emulator's URL, an account URL, ``"gs"``).
        container: the bucket or container.
        key: the object's name in it.
        named: the version the location names (``gs://b/k#<generation>``,
            ``az://c/k?versionid=<id>``), which cannot change; None for the latest.
    """

    service: str
    endpoint: str
    container: str
    key: str
    named: str | None


class PinnedObject(abc.ABC):
    """One object, read at the version its first answer showed (see the module).

    Attributes:
        shown: the location as messages name it (secrets redacted).
        size: the object's size in bytes, once opened.
        version: the version opened, once opened.
    """

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.size = 0
        self.version: str | None = None

    @property
    @abc.abstractmethod
    def stored(self) -> StoredObject:
        """Where the object lives (no IO)."""

    @abc.abstractmethod
    async def first(self, length: int, *, suffix: bool = False) -> Answer:
        """The object's first ``length`` bytes (its last with ``suffix``), its size and
        version: one request (two for an empty object, or an Azure suffix); the version is
        taken as opened.

        Raises:
            RemoteFileChangedError: the version named in the location is gone.
            BadResponseError: an answer that does not add up; and the backend's errors.
        """

    @abc.abstractmethod
    async def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` (``end`` exclusive, within the size) of the version opened, in
        one request that the service refuses for any other version.

        Raises:
            RemoteFileChangedError: the object is no longer that version (rewritten, deleted).
            BadResponseError: the answer is of other bytes than asked for.
        """

    @abc.abstractmethod
    async def current(self) -> tuple[int, str]:
        """``(size, version)`` of the object as the service has it now: one metadata request,
        no bytes of the object (a persistent cache revalidates with it).

        Raises:
            the backend's errors (a missing object: its not-found error).
        """

    def assume(self, size: int, version: str) -> None:
        """Take the version ``version`` of ``size`` bytes as opened, without a request (a
        persistent cache holds its header): later reads ask for that version."""
        self.size = size
        self.version = version

    def opened(self, answer: Answer) -> Answer:
        """Take ``answer``'s version as opened; returns it."""
        self.assume(answer.size, answer.version)
        return answer

    def check_range(self, header: str | None, start: int | None) -> int:
        """The total size a ``Content-Range`` header gives, after checking that its range starts
        at ``start`` (None: any start, for a suffix).

        Raises:
            BadResponseError: no such header, or a range from elsewhere.
        """
        parsed = content_range(header)
        if parsed is None:
            raise BadResponseError(
                f"{self.shown}: a ranged read came back without a usable Content-Range ({header!r})"
            )
        if start is not None and parsed[0] != start:
            raise BadResponseError(
                f"{self.shown}: asked for bytes from {start}, got Content-Range {header!r}"
            )
        return parsed[2]


def content_range(header: str | None) -> tuple[int, int, int] | None:
    """``(first, last, total)`` of a ``Content-Range`` header (``last`` inclusive), or None."""
    match = _CONTENT_RANGE.fullmatch(header or "")
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3))

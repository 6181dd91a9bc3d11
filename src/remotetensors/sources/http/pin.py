"""The version of a file that its first answer showed, and the check of every later answer.

A file read in many requests must come from one version: its first answer's size and
validators (a strong or weak ``ETag``, ``Last-Modified``) are kept here, later requests send
them as conditions (``If-Match`` for a strong ETag, else ``If-Unmodified-Since``), and every
later answer must carry the same size and validators. No IO.
"""

from __future__ import annotations

from ...errors import RemoteFileChangedError
from .head import ResponseHeaders


class VersionPin:
    """The size and validators of the version opened; all ``None`` until the first answer.

    Attributes:
        size: the file's size in bytes.
        etag: its ``ETag`` (``W/``-prefixed when weak), stripped of surrounding space.
        last_modified: its ``Last-Modified``, stripped of surrounding space.
    """

    __slots__ = ("etag", "last_modified", "size")

    def __init__(self) -> None:
        self.size: int | None = None
        self.etag: str | None = None
        self.last_modified: str | None = None

    def adopt(self, size: int, headers: ResponseHeaders) -> None:
        """Pin the version a first answer showed: its size, and the validators it carries."""
        self.size = size
        etag = headers.get("ETag")
        self.etag = etag.strip() if etag else None
        modified = headers.get("Last-Modified")
        self.last_modified = modified.strip() if modified else None

    def restore(self, size: int, etag: str | None, last_modified: str | None) -> None:
        """Pin a version known without an answer (kept by the persistent cache)."""
        self.size = size
        self.etag = etag
        self.last_modified = last_modified

    @property
    def validator(self) -> str | None:
        """What identifies the version opened: the ETag, else ``Last-Modified``."""
        return self.etag if self.etag is not None else self.last_modified

    def add_conditions(self, headers: dict[str, str]) -> None:
        """Add the conditions on the version opened to a later request's ``headers``: a
        server that honours them answers 412 when the file changed. A weak ETag cannot be
        used for ``If-Match`` (RFC 9110 13.1.1)."""
        if self.etag is not None and not self.etag.startswith("W/"):
            headers["If-Match"] = self.etag
        elif self.last_modified is not None:
            headers["If-Unmodified-Since"] = self.last_modified

    @property
    def condition(self) -> str:
        """The condition a 412 refused, for its message."""
        if self.etag is not None and not self.etag.startswith("W/"):
            return f"If-Match {self.etag}"
        return f"If-Unmodified-Since {self.last_modified}"

    def check(self, headers: ResponseHeaders, total: int, shown: str) -> None:
        """A later answer must be tied to the version opened: same size and validators.

        An answer that lacks a validator the first answer had cannot be tied to that version
        (a CDN may have stripped it while the file changed), so it is refused, never used.

        Raises:
            RemoteFileChangedError: naming the file as ``shown`` and what differs.
        """
        if self.size is not None and total != self.size:
            raise RemoteFileChangedError(
                f"{shown}: the file changed since it was opened (size {self.size} bytes, "
                f"now {total}); open it again to read the new version"
            )
        for name, opened in (("ETag", self.etag), ("Last-Modified", self.last_modified)):
            if opened is None:
                continue
            now = headers.get(name)
            now = now.strip() if now is not None else None
            if now is None:
                raise RemoteFileChangedError(
                    f"{shown}: the file was opened with {name} {opened}, but a later "
                    f"answer carries no {name}, so its bytes cannot be tied to that version; "
                    "open the file again (a proxy or CDN that strips validators cannot be "
                    "read safely)"
                )
            if name == "ETag" and now.startswith("W/") != opened.startswith("W/"):
                raise RemoteFileChangedError(
                    f"{shown}: the file was opened with ETag {opened}, but a later answer "
                    f"carries ETag {now}; a weak and a strong ETag do not identify the same "
                    "bytes; open the file again"
                )
            if now != opened:
                raise RemoteFileChangedError(
                    f"{shown}: the file changed since it was opened ({name} {opened}, "
                    f"now {now}); open it again to read the new version"
                )

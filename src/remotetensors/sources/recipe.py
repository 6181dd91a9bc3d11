"""How to open the same version of a file again, in another process.

A Dask worker reads chunks of a tensor that the client opened: what crosses to the worker is a
:class:`SourceRecipe` (plain, picklable values), not the source with its connections. The
recipe carries the version the client saw (size and validator); the worker's first answer must
match it, so every worker reads the same bytes or fails with :class:`RemoteFileChangedError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..errors import RemoteFileChangedError
from ..redact import redact_url

if TYPE_CHECKING:
    from .base import ByteSource
    from .http import HttpOptions
    from .httpclient import Client

RecipeKind = Literal["http", "fsspec", "local"]

PIN_CHECK_BYTES = 8
"""What a reopened source asks for first: the length prefix, to learn size and validator."""


@dataclass(frozen=True)
class SourceRecipe:
    """One file at one version, as values another process can open.

    Attributes:
        kind: which source opens it: ``"http"`` (the hub too, through its resolve URL at the
            pinned commit), ``"fsspec"`` or ``"local"``.
        target: the URL or path to open.
        location: the location named in errors (as the user gave it).
        size: the file's size in bytes when it was first opened.
        validator: the ETag, S3 ETag or version, or local size/mtime/inode first seen; ``None``
            when the backend offers none (then only the size is checked).
        http_options: for ``"http"``: timeouts, retries and headers (credentials travel here,
            inside the pickled task, never in its name or repr).
        storage_options: for ``"fsspec"``: passed to fsspec untouched (credentials likewise).
    """

    kind: RecipeKind
    target: str
    location: str
    size: int
    validator: str | None
    http_options: HttpOptions | None = field(default=None, repr=False)
    storage_options: Mapping[str, Any] | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        return (
            f"SourceRecipe({self.kind}, {redact_url(self.location)}, size={self.size}, "
            f"validator={self.validator})"
        )

    def source(self, *, client: Client | None = None) -> ByteSource:
        """A new, unopened source for the file (``client`` is shared by ``"http"`` sources)."""
        if self.kind == "http":
            from .http import HttpSource

            return HttpSource(self.target, client=client, options=self.http_options)
        if self.kind == "fsspec":
            from .fsspec import FsspecSource

            return FsspecSource(self.target, storage_options=self.storage_options)
        from .local import LocalSource

        return LocalSource(self.target, location=self.location)

    async def open(self, *, client: Client | None = None) -> ByteSource:
        """Open the file and check it is still the version of the recipe.

        Costs one small request (the first :data:`PIN_CHECK_BYTES` bytes).

        Raises:
            RemoteFileChangedError: the size or validator differs from the recipe's.
            and whatever the source raises when opening.
        """
        source = self.source(client=client)
        try:
            prefix = await source.open_prefix(PIN_CHECK_BYTES)
            changed = prefix.size != self.size or (
                self.validator is not None and prefix.validator != self.validator
            )
            if changed:
                raise RemoteFileChangedError(
                    f"{redact_url(self.location)}: the file changed since it was opened "
                    f"(expected size {self.size}, validator {self.validator}; "
                    f"found size {prefix.size}, validator {prefix.validator})"
                )
        except BaseException:
            await source.aclose()
            raise
        return source

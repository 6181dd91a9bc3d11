"""How to open the same version of a file again, in another process.

A Dask worker reads chunks of a tensor that the client opened: what crosses to the worker is a
:class:`SourceRecipe` (plain, picklable values), not the source with its connections. The
recipe carries the version the client saw (size and validator); the worker's first answer must
match it, so every worker reads the same bytes or fails with :class:`RemoteFileChangedError`.

This module holds the value only; :mod:`.reopen` opens it (it imports every source, and every
source makes recipes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..redact import redact_url

if TYPE_CHECKING:
    from .http.client import HttpOptions

RecipeKind = Literal["http", "fsspec", "local"]


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

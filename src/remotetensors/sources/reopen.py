"""Opening a :class:`~.recipe.SourceRecipe` again, in another process, at its version."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import RemoteFileChangedError
from ..redact import redact_url

if TYPE_CHECKING:
    from .base import ByteSource
    from .http.client import Client
    from .recipe import SourceRecipe

__all__ = ["PIN_CHECK_BYTES", "recipe_source", "reopen"]

PIN_CHECK_BYTES = 8
"""What a reopened source asks for first: the length prefix, to learn size and validator."""


def recipe_source(recipe: SourceRecipe, *, client: Client | None = None) -> ByteSource:
    """A new, unopened source for the file (``client`` is shared by ``"http"`` sources).

    Each source is imported when its kind is asked for (fsspec is heavy to import)."""
    if recipe.kind == "http":
        from .http.source import HttpSource

        return HttpSource(recipe.target, client=client, options=recipe.http_options)
    if recipe.kind == "fsspec":
        from .fsspec import FsspecSource

        return FsspecSource(recipe.target, storage_options=recipe.storage_options)
    from .local import LocalSource

    return LocalSource(recipe.target, location=recipe.location)


async def reopen(recipe: SourceRecipe, *, client: Client | None = None) -> ByteSource:
    """Open the file and check it is still the version of the recipe.

    Costs one small request (the first :data:`PIN_CHECK_BYTES` bytes).

    Raises:
        RemoteFileChangedError: the size or validator differs from the recipe's.
        and whatever the source raises when opening.
    """
    source = recipe_source(recipe, client=client)
    try:
        prefix = await source.open_prefix(PIN_CHECK_BYTES)
        changed = prefix.size != recipe.size or (
            recipe.validator is not None and prefix.validator != recipe.validator
        )
        if changed:
            raise RemoteFileChangedError(
                f"{redact_url(recipe.location)}: the file changed since it was opened "
                f"(expected size {recipe.size}, validator {recipe.validator}; "
                f"found size {prefix.size}, validator {prefix.validator})"
            )
    except BaseException:
        await source.aclose()
        raise
    return source

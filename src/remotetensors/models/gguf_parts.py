"""Discovery of GGUF models: which GGUF files a folder or repo holds, and split files
(``name-00001-of-00003.gguf``) joined into one model (:mod:`.discovery` opens them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import AmbiguousModelError, HeaderError, HeaderErrorKind
from ..formats.gguf_files import gguf_models
from ..index import ROW_FILE, ModelIndex, Row, TensorTable, placed

if TYPE_CHECKING:
    from ..reading.file import AsyncTensorFile
    from ..sources.resolve import Place

__all__ = ["find_gguf", "join_parts"]


def join_parts(files: dict[str, AsyncTensorFile]) -> ModelIndex:
    """One model index over split parts; the metadata is the first part's (it holds the
    tokenizer and the model's keys; later parts hold only ``split.*``)."""
    first = next(iter(files.values()))
    declared = (first.index.metadata or {}).get("split.count")
    if isinstance(declared, int) and declared != len(files):
        raise HeaderError(
            HeaderErrorKind.INVALID_METADATA,
            f"split.count says {declared} parts but {len(files)} were named: {', '.join(files)}",
            location=first.location,
        )
    rows: dict[str, Row] = {}
    for name, file in files.items():
        for tensor, row in file.index.tensors.rows().items():
            if tensor in rows:
                raise HeaderError(
                    HeaderErrorKind.DUPLICATE_NAME,
                    f"tensor {tensor!r} is in both {rows[tensor][ROW_FILE]} and {name}",
                    location=file.location,
                )
            rows[tensor] = placed(row, name)
    return ModelIndex(
        {n: f.index for n, f in files.items()}, TensorTable(rows), first.index.metadata
    )


def find_gguf(location: str, place: Place, names: list[str] | None) -> list[str] | None:
    """The GGUF files to open at a folder or repo without a safetensors model, from its
    listing ``names`` (None: the place cannot be listed). No IO.

    Returns:
        The files of the one GGUF model there (a file, or every part of a split set), or None
        when the place cannot be listed or holds no GGUF file.

    Raises:
        AmbiguousModelError: several GGUF models; the message names them all.
    """
    if not names:
        return None
    models = gguf_models(names)
    if not models:
        return None
    if len(models) == 1:
        return next(iter(models.values()))
    listed = "\n  ".join(
        f"{first} ({len(parts)} parts)" if len(parts) > 1 else first
        for first, parts in models.items()
    )
    raise AmbiguousModelError(
        f"{location} holds {len(models)} GGUF models; name one, e.g. "
        f"{place.location(next(iter(models)))} (or --file NAME on the command line):\n  {listed}",
        choices=list(models),
    )

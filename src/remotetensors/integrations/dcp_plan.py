"""Planning for the ``torch.distributed.checkpoint`` reader (:mod:`.dcp`): pure, no IO.

Two jobs, both plain functions of headers and integers, tested without a process group:

- :func:`checkpoint_metadata`: a checkpoint's headers as DCP's ``Metadata``. Each tensor of a
  file is one stored chunk; a file that DCP wrote itself (``HuggingFaceStorageWriter`` with
  ``save_distributed=True``) says in its ``__metadata__`` (``DCP_SHARDING_INFO``, a JSON map of
  name -> ``{"saved_offsets": [...]}``) where its chunk sits in the whole tensor, and the whole
  tensor's size is the largest end of its chunks, as torch's ``HuggingFaceStorageReader`` reads
  them. What a reader needs to read a chunk travels in ``Metadata.storage_data`` as a
  :class:`CheckpointStorage`: each file's :class:`~remotetensors.sources.recipe.SourceRecipe`
  and each chunk's header entry, so that no rank parses a header again.
- :func:`plan_pieces` and :func:`batches`: a rank's ``ReadItem`` boxes (``storage_offsets`` and
  ``lengths`` of a stored chunk) as pieces of at most a given number of bytes, each a slice of
  one tensor that :func:`~remotetensors.reading.slicing.plan_slice` turns into byte runs (a box
  contiguous in the file is one run), grouped into batches read one after the other, so that at
  most the bound is asked for and not yet in place.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointMismatchError, HeaderError, HeaderErrorKind, TensorNotFoundError
from ..reading.frameworks import torch_dtype
from ..reading.slicing import SlicePlan, plan_slice
from ..redact import redact_url

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from torch.distributed.checkpoint.metadata import Metadata

    from ..index import FileIndex, TensorInfo
    from ..sources.recipe import SourceRecipe

__all__ = [
    "DCP_SHARDING_INFO_KEY",
    "SAVED_OFFSETS_KEY",
    "CheckpointStorage",
    "ChunkKey",
    "Piece",
    "StoredChunk",
    "WantedBox",
    "batches",
    "checkpoint_metadata",
    "order_boxes",
    "plan_pieces",
    "saved_offsets",
    "split_box",
]

DCP_SHARDING_INFO_KEY = "DCP_SHARDING_INFO"
"""The ``__metadata__`` key under which DCP's safetensors writer records each tensor's place."""

SAVED_OFFSETS_KEY = "saved_offsets"
"""Where a stored chunk starts in the whole tensor, one offset per dimension."""

ChunkKey = tuple[str, tuple[int, ...]]
"""A stored chunk: the tensor's name and where the chunk starts in it (DCP's
``MetadataIndex(fqn, offset)`` as plain values)."""


@dataclass(frozen=True, slots=True)
class StoredChunk:
    """One stored chunk of a checkpoint tensor: a tensor of one file.

    Attributes:
        file: the file's name in the checkpoint (a key of :attr:`CheckpointStorage.recipes`).
        info: the file's header entry for it (dtype, shape, absolute byte range).
        offsets: where the chunk starts in the whole tensor, one per dimension.
    """

    file: str
    info: TensorInfo
    offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CheckpointStorage:
    """What every rank needs to read a checkpoint without parsing a header: DCP's
    ``Metadata.storage_data`` of :class:`remotetensors.dcp.StorageReader`. Plain values; it
    pickles (the coordinator broadcasts it), credentials inside the recipes, never in a repr.

    Attributes:
        location: the checkpoint, as given (named in errors, redacted).
        recipes: file name -> how to open that file again at the version read.
        chunks: chunk -> where it is stored.
    """

    location: str
    recipes: Mapping[str, SourceRecipe]
    chunks: Mapping[ChunkKey, StoredChunk]

    def __repr__(self) -> str:
        return (
            f"CheckpointStorage({redact_url(self.location)}, {len(self.recipes)} files, "
            f"{len(self.chunks)} chunks)"
        )

    def chunk(self, key: ChunkKey) -> StoredChunk:
        """The stored chunk ``key`` names.

        Raises:
            TensorNotFoundError: the checkpoint holds no such chunk.
        """
        found = self.chunks.get(key)
        if found is None:
            name, offsets = key
            held = sorted(o for n, o in self.chunks if n == name)
            said = (
                f"its chunks start at {[list(o) for o in held]}"
                if held
                else "it holds no tensor of that name"
            )
            raise TensorNotFoundError(
                f"{redact_url(self.location)}: no stored chunk of tensor {name} starts at "
                f"{list(offsets)}; {said} (was the plan made from another checkpoint's "
                "metadata?)",
                name=name,
            )
        return found


def saved_offsets(
    metadata: Mapping[str, Any] | None, name: str, ndim: int, *, location: str
) -> tuple[int, ...]:
    """Where tensor ``name`` of a file starts in the whole tensor: the file's
    ``DCP_SHARDING_INFO`` entry when DCP wrote the file, else zeros (the file holds it whole).

    Raises:
        HeaderError: ``DCP_SHARDING_INFO`` is not JSON, or its entry for ``name`` is not
            ``ndim`` non-negative integers.
    """
    text = (metadata or {}).get(DCP_SHARDING_INFO_KEY)
    if text is None:
        return (0,) * ndim
    try:
        info = json.loads(text)
        entry = info.get(name) if isinstance(info, dict) else None
    except (TypeError, ValueError) as exc:
        raise HeaderError(
            HeaderErrorKind.INVALID_JSON,
            f"its __metadata__ {DCP_SHARDING_INFO_KEY} is not a JSON map: {exc}",
            location=location,
        ) from None
    if entry is None:
        return (0,) * ndim  # a tensor the writer did not shard (as torch reads it: whole)
    offsets = entry.get(SAVED_OFFSETS_KEY) if isinstance(entry, dict) else None
    if (
        not isinstance(offsets, list)
        or len(offsets) != ndim
        or not all(isinstance(o, int) and not isinstance(o, bool) and o >= 0 for o in offsets)
    ):
        raise HeaderError(
            HeaderErrorKind.INVALID_TENSOR_INFO,
            f"its __metadata__ {DCP_SHARDING_INFO_KEY} gives tensor `{name}` (of {ndim} "
            f"dimensions) {SAVED_OFFSETS_KEY} {offsets!r}; expected {ndim} integers >= 0",
            location=location,
        )
    return tuple(offsets)


def checkpoint_metadata(
    location: str,
    files: Mapping[str, FileIndex],
    recipes: Mapping[str, SourceRecipe],
    *,
    routing: Mapping[str, str] | None = None,
    file_locations: Mapping[str, str] | None = None,
) -> Metadata:
    """DCP's ``Metadata`` of a checkpoint, from its files' headers.

    Args:
        location: the checkpoint (named in errors).
        files: file name -> its header, in the checkpoint's order.
        recipes: file name -> how to open it again (carried in ``storage_data``).
        routing: tensor name -> the file that holds it, for a sharded checkpoint whose index
            names one file per tensor (a tensor some other file also holds is read from the
            one named); ``None``: every tensor of every file is a stored chunk (DCP's own
            sharded files, which hold chunks of the same tensors).
        file_locations: file name -> its location, for errors (default: ``location``).

    Raises:
        HeaderError: a ``DCP_SHARDING_INFO`` entry is malformed; the chunks of one tensor
            differ in dtype or number of dimensions, or two start at the same offsets.
        UnsupportedDtypeError: a tensor whose dtype has no torch dtype (F4, F6).
        LayoutError: a tensor whose bytes are not one row-major range (a strided ``.bin``
            view).
    """
    import torch
    from torch.distributed.checkpoint.metadata import (
        ChunkStorageMetadata,
        Metadata,
        TensorProperties,
        TensorStorageMetadata,
    )

    from ..errors import LayoutError

    where = file_locations or {}
    chunks: dict[ChunkKey, StoredChunk] = {}
    kinds: dict[str, tuple[str, int]] = {}  # name -> dtype and dimensions of its first chunk
    for file, index in files.items():
        shown = where.get(file, location)
        for name, info in index.tensors.items():
            if routing is not None and routing.get(name) != file:
                continue
            if not info.row_major:
                raise LayoutError(
                    f"{redact_url(shown)}: tensor {name} is not one row-major range of its "
                    "file; a distributed checkpoint reads boxes of row-major tensors only"
                )
            offsets = saved_offsets(index.metadata, name, len(info.shape), location=shown)
            kind = kinds.setdefault(name, (info.dtype, len(info.shape)))
            if kind != (info.dtype, len(info.shape)):
                raise HeaderError(
                    HeaderErrorKind.INVALID_TENSOR_INFO,
                    f"the chunks of tensor `{name}` differ: {info.dtype}{list(info.shape)} "
                    f"in {file}, {kind[0]} of {kind[1]} dimensions elsewhere",
                    location=shown,
                )
            if (name, offsets) in chunks:
                raise HeaderError(
                    HeaderErrorKind.INVALID_TENSOR_INFO,
                    f"two files hold the chunk of tensor `{name}` at {list(offsets)}: "
                    f"{chunks[name, offsets].file} and {file}",
                    location=shown,
                )
            chunks[name, offsets] = StoredChunk(file, info, offsets)
    state: dict[str, TensorStorageMetadata] = {}
    for (name, offsets), chunk in chunks.items():
        sizes = chunk.info.shape
        md = state.get(name)
        stored = ChunkStorageMetadata(offsets=torch.Size(offsets), sizes=torch.Size(sizes))
        ends = [o + s for o, s in zip(offsets, sizes, strict=True)]
        if md is None:
            properties = TensorProperties(dtype=torch_dtype(chunk.info.dtype))
            state[name] = TensorStorageMetadata(properties, torch.Size(ends), [stored])
        else:
            md.chunks.append(stored)
            md.size = torch.Size(max(a, b) for a, b in zip(md.size, ends, strict=True))
    storage = CheckpointStorage(location, dict(recipes), chunks)
    return Metadata(state_dict_metadata=dict(sorted(state.items())), storage_data=storage)


@dataclass(frozen=True, slots=True)
class WantedBox:
    """One ``ReadItem`` as plain values: the box ``[offsets, offsets + lengths)`` of stored
    chunk ``key``, for request number ``request`` of the plan."""

    request: int
    key: ChunkKey
    offsets: tuple[int, ...]
    lengths: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Piece:
    """A part of one request's box, read as one slice of its stored tensor.

    Attributes:
        request: the request (``ReadItem``) it belongs to.
        chunk: where the box is stored.
        offsets: where the piece starts in the stored tensor (per dimension).
        lengths: its extent per dimension.
        dest_offsets: where the piece starts in the request's box (zeros: the box is not
            cut).
        plan: its bytes as runs of the file (see :class:`~remotetensors.reading.slicing.
            SlicePlan`).
    """

    request: int
    chunk: StoredChunk
    offsets: tuple[int, ...]
    lengths: tuple[int, ...]
    dest_offsets: tuple[int, ...]
    plan: SlicePlan

    @property
    def nbytes(self) -> int:
        """Bytes of the piece (its result, in the file's dtype)."""
        return self.plan.nbytes

    @property
    def cost(self) -> int:
        """What reading it may hold at once: the bytes that cover it in the file, and as many
        again for a staging buffer (when its tensor cannot take the bytes in place)."""
        return self.plan.covering.length + self.plan.nbytes


def order_boxes(boxes: Iterable[WantedBox], storage: CheckpointStorage) -> list[WantedBox]:
    """``boxes`` in the order their bytes lie: by file, then by where the box starts.

    Raises:
        TensorNotFoundError: a box of a chunk the checkpoint does not hold.
    """
    files = {name: i for i, name in enumerate(storage.recipes)}

    def where(box: WantedBox) -> tuple[int, int, tuple[int, ...]]:
        chunk = storage.chunk(box.key)
        return files.get(chunk.file, len(files)), chunk.info.start, box.offsets

    return sorted(boxes, key=where)


def split_box(
    offsets: Sequence[int],
    lengths: Sequence[int],
    shape: Sequence[int],
    *,
    itemsize: int,
    max_bytes: int,
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Cut a box of a row-major tensor of ``shape`` (elements of ``itemsize`` bytes) into
    boxes whose bytes in the file, from first to last, span at most ``max_bytes`` (or one
    element, where an element is larger). Cuts go along the outermost dimension longer than 1,
    so each box is a contiguous part of a contiguous destination. Each result is
    ``(offsets, lengths)``, in order.

    Raises:
        ValueError: ``max_bytes`` < 1.
    """
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
    offsets, lengths = tuple(offsets), tuple(lengths)
    if _span(offsets, lengths, shape, itemsize) <= max_bytes or not lengths:
        return [(offsets, lengths)]
    dim = next((d for d, n in enumerate(lengths) if n > 1), None)
    if dim is None:
        return [(offsets, lengths)]  # one element
    step_bytes = math.prod(shape[dim + 1 :]) * itemsize
    per = max(1, max_bytes // step_bytes)
    result: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    for first in range(0, lengths[dim], per):
        taken = min(per, lengths[dim] - first)
        sub_offsets = (*offsets[:dim], offsets[dim] + first, *offsets[dim + 1 :])
        sub_lengths = (*lengths[:dim], taken, *lengths[dim + 1 :])
        if taken == 1 and step_bytes > max_bytes:  # one step is too long: cut deeper
            result += split_box(
                sub_offsets, sub_lengths, shape, itemsize=itemsize, max_bytes=max_bytes
            )
        else:
            result.append((sub_offsets, sub_lengths))
    return result


def _span(
    offsets: tuple[int, ...], lengths: tuple[int, ...], shape: Sequence[int], itemsize: int
) -> int:
    """Bytes from the first element of a box of a row-major tensor to one past its last."""
    if not lengths:
        return itemsize
    if any(n == 0 for n in lengths):
        return 0
    strides = [math.prod(shape[d + 1 :]) * itemsize for d in range(len(shape))]
    first = sum(o * s for o, s in zip(offsets, strides, strict=True))
    last = sum((o + n - 1) * s for o, n, s in zip(offsets, lengths, strides, strict=True))
    return last - first + itemsize


def plan_pieces(
    boxes: Sequence[WantedBox], storage: CheckpointStorage, *, max_piece_bytes: int
) -> list[Piece]:
    """The pieces that read ``boxes``, in order: each box whole when its bytes in the file
    span at most ``max_piece_bytes``, else cut (see :func:`split_box`).

    Raises:
        TensorNotFoundError: a box of a chunk the checkpoint does not hold.
        CheckpointMismatchError: a box reaching outside its stored chunk, or of another
            number of dimensions.
    """
    pieces: list[Piece] = []
    for box in boxes:
        chunk = storage.chunk(box.key)
        info = chunk.info
        shape = info.shape
        fits = len(box.offsets) == len(shape) == len(box.lengths) and all(
            o >= 0 and n >= 0 and o + n <= s
            for o, n, s in zip(box.offsets, box.lengths, shape, strict=True)
        )
        if not fits:
            name = box.key[0]
            raise CheckpointMismatchError(
                f"{redact_url(storage.location)}: the plan asks for elements "
                f"{list(box.offsets)} + {list(box.lengths)} of tensor {name}'s chunk at "
                f"{list(chunk.offsets)}, which holds {list(shape)} ({info.dtype}, in "
                f"{chunk.file}); the state dict does not fit the checkpoint",
                location=redact_url(storage.location),
                mismatched={name: (tuple(box.lengths), shape)},
            )
        itemsize = max(1, info.dtype_info.bits // 8)
        for offsets, lengths in split_box(
            box.offsets, box.lengths, shape, itemsize=itemsize, max_bytes=max_piece_bytes
        ):
            index = tuple(slice(o, o + n) for o, n in zip(offsets, lengths, strict=True))
            dest = tuple(o - b for o, b in zip(offsets, box.offsets, strict=True))
            pieces.append(
                Piece(box.request, chunk, offsets, lengths, dest, plan_slice(info, index))
            )
    return pieces


def batches(pieces: Sequence[Piece], *, max_bytes: int) -> list[list[Piece]]:
    """``pieces`` in consecutive groups whose :attr:`Piece.cost` sums to at most ``max_bytes``
    (a piece costlier than that alone), in order: read one group after the other, a read holds
    at most ``max_bytes`` at once."""
    groups: list[list[Piece]] = []
    total = 0
    for piece in pieces:
        if groups and total + piece.cost <= max_bytes:
            groups[-1].append(piece)
            total += piece.cost
        else:
            groups.append([piece])
            total = piece.cost
    return groups

"""A PyTorch ``.bin`` (``torch.save``'s zip) as an index, from the bytes held so far. Sans-IO.

:func:`read_bin` joins the archive (:mod:`.torch_zip`) and its pickle (:mod:`.torch_pickle`):
each tensor becomes a row whose bytes are a range of the file, its storage's bytes from its
storage offset; a tensor that is not contiguous in its storage (a transposed view, an expanded
one) spans from its first element to its last. Every tensor's
:class:`~remotetensors.index.TensorLayout` says its strides and that where its bytes start is
predicted (a storage's local header confirms it when first read). Tensors that share a storage
share its bytes. What must be read, in order: the zip's end and central
directory (usually one suffix request holds both), then ``data.pkl`` (near the start; one
request, which also takes the small ``byteorder`` record after it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from ..errors import HeaderError, HeaderErrorKind
from ..index import FileIndex, Row, TensorLayout, TensorTable
from .magic import looks_like_legacy
from .torch_globals import TensorRef, item_bytes
from .torch_pickle import read_pickle
from .torch_zip import (
    Archive,
    HeldBytes,
    Member,
    NeedBytes,
    check_local_header,
    legacy_error,
    local_data_start,
    read_archive,
)

__all__ = ["FORMAT", "StoragePlace", "TorchIndex", "read_bin"]

FORMAT = "pytorch"
""":attr:`~remotetensors.index.FileIndex.format` of a ``torch.save`` file."""

BYTEORDER_REACH_BYTES = 4096
"""The ``byteorder`` record is read with ``data.pkl`` when it ends at most this far after it
(torch writes it right after, a few hundred bytes on)."""


@dataclass(frozen=True, slots=True)
class StoragePlace:
    """Where a storage's bytes are.

    Attributes:
        member: its zip member (``<root>/data/<key>``).
        start: absolute offset of its first byte, as predicted from the directory (see
            :mod:`.torch_zip`); confirmed by :meth:`check` before its bytes are trusted.
        nbytes: its size in bytes.
    """

    member: Member
    start: int
    nbytes: int

    @property
    def header_start(self) -> int:
        """Absolute offset of its local header: bytes ``[header_start, start)`` hold it."""
        return self.member.local_offset

    def check(self, header: bytes, *, location: str) -> None:
        """Confirm :attr:`start` from the local header's bytes ``[header_start, start)``.

        Raises:
            HeaderError: INVALID_ZIP when the local header puts the bytes elsewhere.
        """
        check_local_header(header, self.member, self.start, location=location)


@dataclass(frozen=True, slots=True)
class TorchIndex:
    """What a ``torch.save`` file holds.

    Attributes:
        index: the tensors as rows of byte ranges (format ``"pytorch"``, no metadata).
        strided: the tensors that are not contiguous in their storage: name -> the view (its
            row spans its first to last element).
        places: the storage of each tensor: tensor name -> where its storage's bytes are.
    """

    index: FileIndex
    strided: Mapping[str, TensorRef]
    places: Mapping[str, StoragePlace]


def read_bin(held: HeldBytes, *, location: str = "<bytes>") -> TorchIndex | NeedBytes:
    """The index of a ``torch.save`` file, or the bytes to read first.

    Args:
        held: the file's bytes fetched so far (with its size).
        location: the file, named in errors.

    Returns:
        The index; or which bytes to fetch before calling again.

    Raises:
        HeaderError: LEGACY_TORCH_FORMAT, INVALID_ZIP, INVALID_PICKLE, FORBIDDEN_GLOBAL (see
            :mod:`.torch_zip` and :mod:`.torch_pickle`); INVALID_TENSOR_INFO when a storage
            record is missing or its size differs from the pickle's, or the storages are
            big-endian.
    """
    try:
        if looks_like_legacy(held.prefix()):
            raise legacy_error(location)  # before asking for the end, which it lacks
        archive = read_archive(held, location=location)
        return _index(archive, held, location)
    except NeedBytes as need:
        return need


def _index(archive: Archive, held: HeldBytes, location: str) -> TorchIndex:
    root = archive.root
    pickle_member = archive.stored(f"{root}/data.pkl", location=location)
    order = archive.members.get(f"{root}/byteorder")
    begin = pickle_member.local_offset
    end = archive.record_end(pickle_member)
    if order is not None and begin <= order.local_offset:
        order_end = archive.record_end(order)
        if order_end - end <= BYTEORDER_REACH_BYTES:
            end = max(end, order_end)
    held.get(begin, end)  # one request for both (NeedBytes when not held)
    pickle = _member_bytes(archive, pickle_member, held, location)
    if order is not None:
        _check_byteorder(_member_bytes(archive, order, held, location), location)
    pickled = read_pickle(pickle, location=location)
    places: dict[str, StoragePlace] = {}
    for key, storage in pickled.storages.items():
        member = archive.stored(f"{root}/data/{key}", location=location)
        if member.size != storage.nbytes:
            raise HeaderError(
                HeaderErrorKind.INVALID_TENSOR_INFO,
                f"storage {key} is {member.size} bytes in the archive, but the pickle says "
                f"{storage.nbytes}",
                location=location,
            )
        places[key] = StoragePlace(
            member, archive.data_start(member, location=location), member.size
        )
    rows: list[tuple[str, Row]] = []
    strided: dict[str, TensorRef] = {}
    by_name: dict[str, StoragePlace] = {}
    layouts: dict[str, TensorLayout] = {}
    for name, tensor in pickled.tensors.items():
        place = by_name[name] = places[tensor.storage.key]
        size = item_bytes(tensor.dtype)
        start = place.start + tensor.offset * size if tensor.span else place.start
        rows.append((name, (tensor.dtype, tensor.shape, start, start + tensor.span * size, None)))
        layouts[name] = TensorLayout(tensor.stride, predicted=True)
        if not tensor.contiguous:
            strided[name] = tensor
    rows.sort(key=lambda item: (item[1][2], item[1][3]))  # data order, as FileIndex keeps it
    index = FileIndex(
        TensorTable(dict(rows), layouts=layouts),
        None,
        header_length=len(pickle) + archive.directory_bytes,
        file_size=held.size,
        format=FORMAT,
        prefix_bytes=0,
    )
    return TorchIndex(index, MappingProxyType(strided), MappingProxyType(by_name))


def _member_bytes(archive: Archive, member: Member, held: HeldBytes, location: str) -> bytes:
    """The bytes of a small member held whole (its local header read for where they start)."""
    member = archive.stored(member.name, location=location)
    end = archive.record_end(member)
    header = held.get(member.local_offset, end)
    start = local_data_start(header, member, location=location)
    if start + member.size > end:
        raise HeaderError(
            HeaderErrorKind.INVALID_ZIP,
            f"member {member.name} ({member.size} bytes from {start}) runs past its record's "
            f"end at {end}",
            location=location,
        )
    return header[start - member.local_offset : start - member.local_offset + member.size]


def _check_byteorder(text: bytes, location: str) -> None:
    if text != b"little":
        raise HeaderError(
            HeaderErrorKind.INVALID_TENSOR_INFO,
            f"the storages are stored {text.decode('latin-1')!r}-endian; only little-endian "
            "files are read",
            location=location,
        )

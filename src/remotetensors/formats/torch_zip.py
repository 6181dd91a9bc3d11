"""The zip archive of ``torch.save`` (PyTorch 1.6 and later), read from the bytes held so far.

Sans-IO. A zip ends with its end of central directory record (EOCD, 22 bytes plus a comment of
up to 65,535), preceded for zip64 archives by a zip64 locator (20 bytes) pointing at the zip64
EOCD (56 bytes or more); the EOCD gives the central directory's offset and size, and the
directory lists every member with its local header's offset and its size. ``torch.save``
stores every member uncompressed (``STORED``): ``<root>/data.pkl``, ``<root>/byteorder``,
``<root>/data/<key>`` per storage, ``<root>/version``, ...

Where a member's bytes start is only in its local header, whose extra field (torch pads it so
that data is 64-byte aligned) the directory does not repeat. Reading every storage's local
header would cost a request each, so the start is predicted from the end instead: a member's
record ends where the next one starts (or the directory), its bytes end there less its data
descriptor (16 bytes, 24 for zip64; present when flag bit 3 is set, as torch sets it), and
start its size earlier; of the two descriptor sizes, the one that puts the bytes on torch's
64-byte alignment wins. A reader checks each prediction against the local header when it first
reads the member (:func:`check_local_header`), so a writer that lays members out otherwise gets
an error, never wrong bytes.

:class:`HeldBytes` is what has been fetched; a function that needs bytes not held raises
:class:`NeedBytes` naming the range, which the reader fetches before asking again.
"""

from __future__ import annotations

import bisect
import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import HeaderError, HeaderErrorKind
from .magic import TORCH_LEGACY_MAGIC, ZIP_LOCAL_MAGIC, looks_like_legacy
from .torch_pickle import MAX_PICKLE_BYTES

__all__ = [
    "EOCD_SEARCH_BYTES",
    "MAX_DIRECTORY_BYTES",
    "MAX_FILE_FORMAT_VERSION",
    "MAX_LOCAL_HEADER_BYTES",
    "VERSION_REACH_BYTES",
    "Archive",
    "HeldBytes",
    "Member",
    "NeedBytes",
    "check_local_header",
    "legacy_error",
    "local_data_start",
    "read_archive",
]

_EOCD = b"PK\x05\x06"
_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_CENTRAL = b"PK\x01\x02"
_EOCD_BYTES = 22
_LOCATOR_BYTES = 20
_EOCD64_BYTES = 56
_CENTRAL_BYTES = 46
LOCAL_HEADER_BYTES = 30
"""The fixed part of a local header; its name and extra field follow."""
MAX_LOCAL_HEADER_BYTES = LOCAL_HEADER_BYTES + 2 * 0xFFFF
"""The longest a local header can be: its name and its extra field have 16-bit lengths."""
MAX_DIRECTORY_BYTES = 100_000_000
"""Largest central directory read (decimal bytes; one of exactly this size passes), as
safetensors caps its header: ``torch.save`` writes about 100 bytes per storage, a few MB for
the largest checkpoints. Checked before its bytes are asked for."""
_DESCRIPTOR_BYTES = 24
"""The longest data descriptor (zip64's), which may follow a member's bytes."""
EOCD_SEARCH_BYTES = _EOCD_BYTES + 0xFFFF
"""The EOCD lies in the last this many bytes of a zip (its comment is at most 65,535 bytes)."""
STORAGE_ALIGNMENT = 64
"""torch.save aligns every member's bytes to this many bytes (``.storage_alignment``)."""
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF


class NeedBytes(Exception):
    """Bytes ``[start, end)`` of the file are needed and not held; fetch them and ask again."""

    def __init__(self, start: int, end: int) -> None:
        super().__init__(start, end)
        self.start = start
        self.end = end


class HeldBytes:
    """Bytes of one file fetched so far: disjoint regions, merged where they touch. A value:
    :meth:`with_bytes` returns a new one."""

    __slots__ = ("_regions", "size")

    def __init__(self, size: int, regions: Iterable[tuple[int, bytes]] = ()) -> None:
        """``size``: the file's size in bytes; ``regions``: ``(start, data)`` pieces."""
        self.size = size
        merged: list[tuple[int, bytes]] = []
        for start, data in sorted(regions, key=lambda r: r[0]):
            if merged and start <= merged[-1][0] + len(merged[-1][1]):
                first, held = merged[-1]
                overlap = first + len(held) - start
                merged[-1] = (first, held + data[overlap:]) if len(data) > overlap else merged[-1]
            elif data:
                merged.append((start, data))
        self._regions = tuple(merged)

    def with_bytes(self, start: int, data: bytes) -> HeldBytes:
        """These bytes and ``data``, bytes ``[start, start + len(data))`` of the file."""
        return HeldBytes(self.size, (*self._regions, (start, data)))

    @property
    def regions(self) -> tuple[tuple[int, bytes], ...]:
        """The ``(start, data)`` pieces held, in file order."""
        return self._regions

    def prefix(self) -> bytes:
        """Bytes ``[0, k)`` held from the file's start (empty when byte 0 is not held)."""
        if self._regions and self._regions[0][0] == 0:
            return self._regions[0][1]
        return b""

    def get(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``.

        Raises:
            NeedBytes: some of them are not held (the first missing stretch).
        """
        if start >= end:
            return b""
        starts = [s for s, _ in self._regions]
        i = bisect.bisect_right(starts, start) - 1
        if i >= 0:
            first, data = self._regions[i]
            if end <= first + len(data):
                return data[start - first : end - first]
            if start < first + len(data):
                start = first + len(data)
        following = starts[i + 1] if i + 1 < len(starts) else end
        raise NeedBytes(start, min(end, following))


@dataclass(frozen=True, slots=True)
class Member:
    """One entry of the central directory.

    Attributes:
        name: its path in the archive.
        local_offset: absolute offset of its local header.
        size: its bytes in the archive (compressed size; the same as uncompressed when stored).
        uncompressed_size: its bytes once extracted.
        method: 0 when stored, 8 when deflated, ...
        flags: the general purpose flags (bit 0 encrypted, bit 3 data descriptor follows).
        zip64: the entry carries a zip64 extra field.
        raw_name: the name as the directory holds it (the local header must hold the same).
    """

    name: str
    local_offset: int
    size: int
    uncompressed_size: int
    method: int
    flags: int
    zip64: bool
    raw_name: bytes


@dataclass(frozen=True, slots=True)
class Archive:
    """A zip's directory: its members, and where the directory starts.

    Attributes:
        members: name -> member, in the directory's order.
        directory_start: absolute offset of the central directory.
        directory_bytes: its size in bytes.
        record_starts: the members' local header offsets, ascending (where records end).
    """

    members: Mapping[str, Member]
    directory_start: int
    directory_bytes: int
    record_starts: tuple[int, ...] = ()

    @classmethod
    def of(cls, members: Mapping[str, Member], start: int, size: int) -> Archive:
        """The archive of ``members``, its directory at ``start`` (``size`` bytes)."""
        offsets = tuple(sorted(m.local_offset for m in members.values()))
        return cls(members, start, size, offsets)

    @property
    def root(self) -> str:
        """The folder every record sits in (the first member's, as torch reads it)."""
        first = next(iter(self.members), "")
        return first.split("/", 1)[0] if "/" in first else ""

    def record_end(self, member: Member) -> int:
        """Where ``member``'s record (local header, bytes, descriptor) ends: the next local
        header, or the central directory after the last one."""
        offsets = self.record_starts
        i = bisect.bisect_right(offsets, member.local_offset)
        return offsets[i] if i < len(offsets) else self.directory_start

    def data_start(self, member: Member, *, location: str) -> int:
        """Where ``member``'s bytes start, predicted from where its record ends (see the
        module; :func:`check_local_header` confirms it).

        Raises:
            HeaderError: INVALID_ZIP when the prediction leaves no room for a local header, or
                more room than one can take (its extra field has a 16-bit length): the local
                header read to confirm it is at most :data:`MAX_LOCAL_HEADER_BYTES`.
        """
        end = self.record_end(member)
        if member.flags & 0x08:
            starts = [end - descriptor - member.size for descriptor in (16, 24)]
            aligned = [s for s in starts if s % STORAGE_ALIGNMENT == 0]
            start = aligned[0] if len(aligned) == 1 else starts[1 if member.zip64 else 0]
        else:
            start = end - member.size
        lowest = member.local_offset + LOCAL_HEADER_BYTES + len(member.raw_name)
        if start < lowest:
            raise _invalid(
                f"member {member.name} ({member.size} bytes at local header "
                f"{member.local_offset}) does not fit before byte {end}",
                location,
            )
        if start > lowest + 0xFFFF:
            raise _invalid(
                f"member {member.name}'s record ends at byte {end}, which puts its bytes at "
                f"{start}, {start - member.local_offset} bytes after its local header at "
                f"{member.local_offset}: more than a local header can take "
                f"({LOCAL_HEADER_BYTES + len(member.raw_name) + 0xFFFF} with its name); this zip "
                "was not laid out as torch.save lays it out",
                location,
            )
        return start

    def stored(self, name: str, *, location: str) -> Member:
        """Member ``name``, which must be stored uncompressed and unencrypted.

        Raises:
            HeaderError: INVALID_ZIP when it is missing, compressed or encrypted.
        """
        member = self.members.get(name)
        if member is None:
            raise _invalid(f"the archive has no member {name}", location)
        if member.method != 0 or member.flags & 0x41 or member.size != member.uncompressed_size:
            raise _invalid(
                f"member {name} is compressed or encrypted (method {member.method}, flags "
                f"{member.flags:#x}); torch.save stores every member as is",
                location,
            )
        return member


def _invalid(detail: str, location: str) -> HeaderError:
    return HeaderError(HeaderErrorKind.INVALID_ZIP, detail, location=location)


def read_archive(held: HeldBytes, *, location: str = "<bytes>") -> Archive:
    """The archive's directory, from the bytes held.

    Raises:
        NeedBytes: more of the file's end (or of the directory) must be read first; or, where
            no EOCD is in the last :data:`EOCD_SEARCH_BYTES`, its first bytes (to tell a
            legacy file).
        HeaderError: LEGACY_TORCH_FORMAT for a file of the legacy format; INVALID_ZIP for any
            other file that is not a well-formed zip, or one with a member whose local header or
            bytes do not lie before the central directory (checked for every member, so no
            later request runs past the file); TOO_LARGE for a central directory over
            :data:`MAX_DIRECTORY_BYTES` or a ``data.pkl`` over
            :data:`.torch_pickle.MAX_PICKLE_BYTES`, before their bytes are asked for;
            INVALID_ZIP for a version record missing or saying a version torch does not read.
    """
    eocd = _find_eocd(held, location)
    record = held.get(eocd, eocd + _EOCD_BYTES)
    disk, directory_disk, here, entries, size, start, _ = struct.unpack("<HHHHIIH", record[4:])
    end_of_directory = eocd
    # What lies before the EOCD in one read: a zip64 locator, if any, and (unless the EOCD
    # defers to zip64 records, or says what cannot be) the directory.
    first_needed = max(0, eocd - _LOCATOR_BYTES)
    plausible = start <= eocd and eocd - start <= MAX_DIRECTORY_BYTES + _LOCATOR_BYTES
    lowest = min(start, first_needed) if plausible else first_needed
    try:
        held.get(lowest, eocd)
    except NeedBytes:
        # A read is needed: it takes the version record too (see VERSION_REACH_BYTES). When
        # the directory is held already, only the record itself is asked for, if at all: a
        # wider read would take tensor bytes that a cache of the metadata does not keep.
        before = max(0, start - VERSION_REACH_BYTES)
        held.get(min(before, first_needed) if plausible else first_needed, eocd)
    if eocd >= _LOCATOR_BYTES and held.get(eocd - _LOCATOR_BYTES, eocd).startswith(_LOCATOR):
        zip64 = _zip64_end(held, eocd, location)
    else:
        zip64 = None
    if zip64 is not None:  # the EOCD's own fields do not count then, as miniz reads them
        entries, size, start, end_of_directory = zip64
    elif not _one_disk(disk, directory_disk, here, entries):
        raise _invalid("the archive spans several disks", location)
    if start + size > end_of_directory:
        raise _invalid(
            f"the central directory [{start}, {start + size}) runs past the end records at "
            f"{end_of_directory}",
            location,
        )
    if size > MAX_DIRECTORY_BYTES:
        raise HeaderError(
            HeaderErrorKind.TOO_LARGE,
            f"the end records say the central directory has {size} bytes, more than the limit "
            f"of {MAX_DIRECTORY_BYTES}",
            location=location,
        )
    members = _directory(held.get(start, start + size), start, entries, location)
    archive = Archive.of(members, start, size)
    _check_names(archive, location)
    for member in members.values():
        _check_bounds(archive, member, location)
    for name in ("data.pkl", "byteorder"):  # read whole by .torch_bin
        if f"{archive.root}/{name}" in members:
            _check_record(archive, members[f"{archive.root}/{name}"], location)
    _check_pickle_record(archive, location)
    _check_version(archive, held, location)
    _check_serialization_id(archive, held, location)
    return archive


VERSION_REACH_BYTES = 1024
"""The central directory is read with this many bytes before it, which hold the version record
in ``torch.save``'s files (it writes ``version`` and ``.data/serialization_id``, some 250
bytes, last), so that checking the version takes no request of its own."""

MAX_FILE_FORMAT_VERSION = 10
"""The newest file format version torch reads (``kMaxSupportedFileFormatVersion``); the oldest
is 1. ``torch.save`` writes 3."""

MAX_VERSION_BYTES = 64
"""The longest version record (and serialization id) read (torch reads any length: a number
and whatever follows; 40 characters)."""

_VERSION = re.compile(rb"[ \t\n\v\f\r]*\+?([0-9]+)")
"""What ``std::stoull`` reads of the version record: blanks, a sign, digits; the rest
ignored (a minus sign wraps the number past the newest version, so it is refused here)."""


def _small_record(archive: Archive, held: HeldBytes, member: Member, location: str) -> bytes:
    """The bytes of a small member near the directory (its record read whole).

    Raises:
        NeedBytes: its record is not held.
        HeaderError: INVALID_ZIP when its record is longer than a local header, its bytes
            and a data descriptor, or its local header disagrees.
    """
    _check_record(archive, member, location)
    end = archive.record_end(member)
    if end - member.local_offset > MAX_LOCAL_HEADER_BYTES + member.size + _DESCRIPTOR_BYTES:
        raise _invalid(
            f"member {member.name} ({member.size} bytes at local header {member.local_offset}) "
            f"has a record of {end - member.local_offset} bytes, more than a local header, "
            "its bytes and a data descriptor can take",
            location,
        )
    header = held.get(member.local_offset, end)
    start = local_data_start(header, member, location=location) - member.local_offset
    if start + member.size > len(header):
        raise _invalid(
            f"member {member.name} ({member.size} bytes from {member.local_offset + start}) "
            f"runs past its record's end at {end}",
            location,
        )
    return header[start : start + member.size]


def _version_record(
    archive: Archive, held: HeldBytes, member: Member, location: str, *, written: int
) -> bytes:
    """The bytes of ``member``, a record that names the file's version (torch.save writes
    ``written`` bytes), stored and at most :data:`MAX_VERSION_BYTES` long.

    Raises:
        NeedBytes: its record is not held.
        HeaderError: INVALID_ZIP when it is compressed or longer.
    """
    member = archive.stored(member.name, location=location)
    if member.size > MAX_VERSION_BYTES:
        raise _invalid(
            f"{member.name} has {member.size} bytes, more than a version record needs "
            f"({MAX_VERSION_BYTES}; torch.save writes {written})",
            location,
        )
    return _small_record(archive, held, member, location)


def _check_serialization_id(archive: Archive, held: HeldBytes, location: str) -> None:
    """``<root>/.data/serialization_id``, where there is one, is UTF-8 text, which torch.load
    requires (it decodes it); it lies with the version record, before the directory."""
    member = archive.members.get(f"{archive.root}/.data/serialization_id")
    if member is None:
        return
    text = _version_record(archive, held, member, location, written=40)
    try:
        text.decode("utf-8")
    except UnicodeDecodeError:
        raise _invalid(f"{member.name} is not UTF-8: {text!r}", location) from None


def _check_version(archive: Archive, held: HeldBytes, location: str) -> None:
    """The archive's version record (``<root>/.data/version``, else ``<root>/version``) holds
    a version torch reads, as torch checks before it reads anything else (a small record
    before the directory, which the directory's read usually holds).

    Raises:
        NeedBytes: its record is not held.
        HeaderError: INVALID_ZIP when it is missing or says another version.
    """
    root = archive.root
    member = archive.members.get(f"{root}/.data/version") or archive.members.get(f"{root}/version")
    if member is None:
        raise _invalid(f"the archive has no version record ({root}/version)", location)
    text = _version_record(archive, held, member, location, written=2)
    found = _VERSION.match(text)
    digits = found.group(1).lstrip(b"0") if found else b""
    if not 1 <= len(digits) <= 2 or not 1 <= int(digits) <= MAX_FILE_FORMAT_VERSION:
        raise _invalid(
            f"{member.name} says version {text[:20]!r}; torch reads versions 1 to "
            f"{MAX_FILE_FORMAT_VERSION}",
            location,
        )


def _check_names(archive: Archive, location: str) -> None:
    """Every member lies in the folder of the first one, as torch requires of its archives."""
    if not archive.members:
        raise _invalid("the archive has no members", location)
    folder = archive.root + "/"
    for name in archive.members:
        if folder == "/" or not name.startswith(folder):
            raise _invalid(
                f"member {name} is not in a folder{'' if folder == '/' else ' ' + folder}, "
                "as torch.save puts every member in one (the first member's)",
                location,
            )


def _check_bounds(archive: Archive, member: Member, location: str) -> None:
    """``member``'s local header and bytes lie before the central directory (which lies in
    the file): nowhere a read could run past."""
    end = member.local_offset + LOCAL_HEADER_BYTES + len(member.raw_name) + member.size
    if end > archive.directory_start:
        raise _invalid(
            f"member {member.name} (local header at byte {member.local_offset}, {member.size} "
            f"bytes) runs to byte {end}, past the central directory's start at "
            f"{archive.directory_start}",
            location,
        )


def _check_record(archive: Archive, member: Member, location: str) -> None:
    """``member``, one this reader reads whole with its local header, fits in its record,
    before the next member's local header (torch does not look: a member it never reads may
    overlap the next)."""
    end = member.local_offset + LOCAL_HEADER_BYTES + len(member.raw_name) + member.size
    record_end = archive.record_end(member)
    if end > record_end:
        raise _invalid(
            f"member {member.name} (local header at byte {member.local_offset}, {member.size} "
            f"bytes) runs to byte {end}, past the next member's local header at {record_end}",
            location,
        )


def _check_pickle_record(archive: Archive, location: str) -> None:
    """``data.pkl``, which is read whole before anything else, is no larger than
    :data:`.torch_pickle.MAX_PICKLE_BYTES`, and its record (read whole: the local header, the
    bytes, the descriptor) holds nothing more."""
    member = archive.members.get(f"{archive.root}/data.pkl")
    if member is None:
        return  # Archive.stored names it missing
    if member.size > MAX_PICKLE_BYTES:
        raise HeaderError(
            HeaderErrorKind.TOO_LARGE,
            f"the central directory says {member.name} has {member.size} bytes, more than the "
            f"limit of {MAX_PICKLE_BYTES}",
            location=location,
        )
    record = archive.record_end(member) - member.local_offset
    if record > MAX_LOCAL_HEADER_BYTES + member.size + _DESCRIPTOR_BYTES:
        raise _invalid(
            f"member {member.name} ({member.size} bytes at local header {member.local_offset}) "
            f"has a record of {record} bytes, more than a local header, its bytes and a data "
            "descriptor can take",
            location,
        )


def _find_eocd(held: HeldBytes, location: str) -> int:
    """The offset of the EOCD: the last signature with a whole record after it, as miniz
    (torch's reader) finds it, whatever the comment's length says."""
    size = held.size
    if size < _EOCD_BYTES:
        raise _invalid(f"a file of {size} bytes is no zip archive", location)
    lowest = max(0, size - EOCD_SEARCH_BYTES)
    tail = b""
    tail_start = size
    for start, data in reversed(held.regions):
        if start + len(data) == tail_start:
            tail, tail_start = data + tail, start
    pos = tail.rfind(_EOCD, 0, max(0, len(tail) - _EOCD_BYTES + len(_EOCD)))
    if pos >= 0:
        return tail_start + pos
    if tail_start > lowest:
        raise NeedBytes(lowest, tail_start)
    if looks_like_legacy(held.get(0, min(size, len(TORCH_LEGACY_MAGIC)))):
        raise legacy_error(location)
    raise _invalid(
        f"no end of central directory record in the last {min(size, EOCD_SEARCH_BYTES)} "
        "bytes: not a zip archive (a PyTorch file since 1.6 is one)",
        location,
    )


def legacy_error(location: str) -> HeaderError:
    """The error for a file of the legacy format (see :data:`.magic.TORCH_LEGACY_MAGIC`)."""
    return HeaderError(
        HeaderErrorKind.LEGACY_TORCH_FORMAT,
        "a bare pickle with its storages after it, which cannot be read without running it; "
        "load it once with torch and save it again (torch.save of PyTorch 1.6 or later, or "
        "safetensors)",
        location=location,
    )


def _zip64_end(held: HeldBytes, eocd: int, location: str) -> tuple[int, int, int, int] | None:
    """``(entries, directory size, directory start, zip64 EOCD offset)`` of a zip64 archive,
    whose locator sits just before the EOCD; None when the locator points at no zip64 EOCD
    (miniz, torch's reader, then takes the EOCD's own values, and so does this reader)."""
    locator = held.get(eocd - _LOCATOR_BYTES, eocd)
    _, at, disks = struct.unpack_from("<IQI", locator, 4)
    if at + _EOCD64_BYTES > eocd - _LOCATOR_BYTES:
        raise _invalid(f"the zip64 locator points at byte {at}, outside the archive", location)
    record = held.get(at, at + _EOCD64_BYTES)
    if not record.startswith(_EOCD64):
        return None
    _, _, _, disk64, directory_disk, here, entries, size, start = struct.unpack_from(
        "<QHHIIQQQQ", record, 4
    )
    if disks != 1:  # only once a zip64 record is found, as miniz checks it
        raise _invalid(f"the zip64 locator says the archive has {disks} disks", location)
    if not _one_disk(disk64, directory_disk, here, entries):
        raise _invalid("the archive spans several disks", location)
    return entries, size, start, at


def _one_disk(disk: int, directory_disk: int, here: int, entries: int) -> bool:
    """Whether end records say the archive is on one disk, as torch reads them: this disk and
    the directory's both 0, all entries on it."""
    return disk == directory_disk == 0 and here == entries


def _directory(data: bytes, start: int, entries: int, location: str) -> dict[str, Member]:
    """The members that the central directory ``data`` (at ``start``) lists."""
    members: dict[str, Member] = {}
    pos = 0
    for _ in range(entries):
        if pos + _CENTRAL_BYTES > len(data) or data[pos : pos + 4] != _CENTRAL:
            raise _invalid(f"no central directory entry at byte {start + pos}", location)
        flags, method = struct.unpack_from("<HH", data, pos + 8)
        size, uncompressed, name_len, extra_len, comment_len = struct.unpack_from(
            "<IIHHH", data, pos + 20
        )
        if flags & 0x2000:  # a masked local header (encrypted directory): miniz refuses it
            raise _invalid(f"the entry at byte {start + pos} is encrypted", location)
        (disk,) = struct.unpack_from("<H", data, pos + 34)
        if disk not in (0, 1):  # as miniz, torch's reader, takes them
            raise _invalid(f"the entry at byte {start + pos} is on disk {disk}", location)
        (offset,) = struct.unpack_from("<I", data, pos + 42)
        name_end = pos + _CENTRAL_BYTES + name_len
        extra_end = name_end + extra_len
        if extra_end + comment_len > len(data):
            raise _invalid(f"the central directory entry at {start + pos} runs past it", location)
        raw = data[pos + _CENTRAL_BYTES : name_end]
        # Names are compared, never shown raw: one that is not UTF-8 keeps its bytes as
        # surrogates (torch reads such a file, decoding only the names it looks up).
        name = raw.decode("utf-8", "surrogateescape") if flags & 0x800 else raw.decode("cp437")
        wide = _zip64_fields(data[name_end:extra_end], (uncompressed, size, offset))
        uncompressed, size, offset = wide or (uncompressed, size, offset)
        if name in members:
            raise _invalid(f"two members are named {name}", location)
        members[name] = Member(name, offset, size, uncompressed, method, flags, bool(wide), raw)
        pos = extra_end + comment_len
    return members


def _zip64_fields(extra: bytes, narrow: tuple[int, int, int]) -> tuple[int, int, int] | None:
    """The (uncompressed size, size, local offset) with the zip64 extra field's values in place
    of the 32-bit ones that say 0xFFFFFFFF; None when ``extra`` has no zip64 field."""
    pos = 0
    while pos + 4 <= len(extra):
        tag, length = struct.unpack_from("<HH", extra, pos)
        if tag == 0x0001:
            values = list(narrow)
            field = pos + 4
            for i, value in enumerate(narrow):
                if value == _U32 and field + 8 <= pos + 4 + length <= len(extra):
                    (values[i],) = struct.unpack_from("<Q", extra, field)
                    field += 8
            return values[0], values[1], values[2]
        pos += 4 + length
    return None


def local_data_start(header: bytes, member: Member, *, location: str) -> int:
    """Where ``member``'s bytes start, from its local header (``header``: the file's bytes
    from its ``local_offset``, at least the header's).

    Raises:
        NeedBytes: ``header`` is shorter than the local header.
        HeaderError: INVALID_ZIP when it is not the local header of that member.
    """
    at = member.local_offset
    if len(header) < LOCAL_HEADER_BYTES:
        raise NeedBytes(at, at + LOCAL_HEADER_BYTES)
    if not header.startswith(ZIP_LOCAL_MAGIC):
        raise _invalid(f"no local header of {member.name} at byte {at}", location)
    (method,) = struct.unpack_from("<H", header, 8)
    name_len, extra_len = struct.unpack_from("<HH", header, 26)
    name = header[LOCAL_HEADER_BYTES : LOCAL_HEADER_BYTES + name_len]
    if len(header) >= LOCAL_HEADER_BYTES + name_len and name != member.raw_name:
        raise _invalid(f"the local header at byte {at} names {name!r}, not {member.name}", location)
    if method != member.method:
        raise _invalid(f"the local header of {member.name} says method {method}", location)
    return at + LOCAL_HEADER_BYTES + int(name_len) + int(extra_len)


def check_local_header(header: bytes, member: Member, data_start: int, *, location: str) -> None:
    """Confirm that ``member``'s bytes start at ``data_start`` as predicted
    (:meth:`Archive.data_start`); ``header`` is the file's bytes ``[member.local_offset,
    data_start)``.

    Raises:
        HeaderError: INVALID_ZIP when the local header says otherwise.
    """
    found = local_data_start(header, member, location=location)
    if found != data_start:
        raise _invalid(
            f"the local header of {member.name} puts its bytes at {found}, not at "
            f"{data_start} where its record's end put them; this zip was not laid out as "
            "torch.save lays it out",
            location,
        )

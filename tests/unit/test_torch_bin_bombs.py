"""Hostile ``.bin`` files: small inputs that asked the sans-IO reader (``formats/torch_zip``,
``torch_pickle``, ``torch_globals``) for gigabytes, hangs, or bytes outside the file. Each is
our ``HeaderError`` now, found before the bytes are asked for; ``torch.load(weights_only=True)``
is the oracle where torch has a verdict of its own."""

from __future__ import annotations

import io
import pickle
import struct
import time
import tracemalloc
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest

import remotetensors as rt
from remotetensors.formats import torch_pickle, torch_zip
from remotetensors.formats.torch_bin import TorchIndex, read_bin
from remotetensors.formats.torch_pickle import read_pickle
from remotetensors.formats.torch_zip import HeldBytes, NeedBytes
from tests.torch_bin_files import assert_same, index_of, loaded, rezipped, saved, torch

# --- pickles written by hand -------------------------------------------------------------------


class _Storage:
    """Pickled as the persistent id of a float storage of ``numel`` elements (key ``0``)."""

    def __init__(self, numel: int) -> None:
        self.numel = numel


class _View:
    """Pickled as ``_rebuild_tensor_v2(storage, offset, size, stride, False, {})``."""

    def __init__(self, storage: _Storage, offset: int, size: Any, stride: Any) -> None:
        self.args: tuple[Any, ...] = (storage, offset, size, stride, False, OrderedDict())

    def __reduce__(self) -> tuple[Any, ...]:
        return (torch._utils._rebuild_tensor_v2, self.args)


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _Storage):
            return ("storage", torch.FloatStorage, "0", "cpu", obj.numel)
        return None


def pickled(value: Any) -> bytes:
    """``value`` pickled as torch.save pickles (protocol 2), with the stand-ins above."""
    out = io.BytesIO()
    _Pickler(out, protocol=2).dump(value)
    return out.getvalue()


def with_pickle(data: bytes, numel: int = 1) -> bytes:
    """A ``.bin`` of one float storage of ``numel`` elements (key ``0``) and ``data`` as its
    ``data.pkl``."""
    base = saved({"w": torch.ones(numel)})
    return rezipped(base, lambda name, member: data if name.endswith("/data.pkl") else member)


def refusal(data: bytes) -> rt.HeaderError:
    with pytest.raises(rt.HeaderError) as caught:
        read_pickle(data, location="x.bin")
    return caught.value


def held_refusal(held: HeldBytes) -> rt.HeaderError:
    """The error of reading the bytes ``held``: it must come without asking for more."""
    try:
        step = read_bin(held, location="x.bin")
    except rt.HeaderError as exc:
        return exc
    raise AssertionError(f"no error; the reader gave {step}")


def bin_refusal(data: bytes) -> rt.HeaderError:
    """The error of reading ``data``, held whole."""
    return held_refusal(HeldBytes(len(data), [(0, data)]))


# --- 4: names built from one tensor referred to many times ---------------------------------------


def test_names_are_bounded_in_bytes_not_only_in_number() -> None:
    key = "k" * 32768
    tensor = _View(_Storage(1), 0, (1,), (1,))
    data = pickled({key: [tensor] * 2000})  # 2000 names of 32 KiB: 64 MiB from 37 kB
    assert len(data) < 40_000
    tracemalloc.start()
    try:
        error = refusal(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.kind is rt.HeaderErrorKind.INVALID_PICKLE
    assert "bytes of tensor names" in str(error)
    assert peak < 8 * 2**20


def test_long_names_of_a_real_state_dict_are_read() -> None:
    state = {"m" * 200: {f"layer{i}": torch.ones(1) for i in range(300)}}
    data = saved(state)
    found, _ = index_of(data)
    assert_same(data, found)


# --- 5: an OrderedDict's pairs with keys that take forever to hash --------------------------------


def test_ordered_dict_pairs_with_nested_tuple_keys_are_refused_at_once() -> None:
    key = b")" + b"q\x00h\x00\x86" * 64  # ((k, k), (k, k)) ..., 64 levels: 2**64 hashes
    data = (
        b"\x80\x02ccollections\nOrderedDict\n]" + key + b"N\x86a\x85R."
    )  # OrderedDict([(key, None)])
    assert len(data) < 400
    started = time.monotonic()
    error = refusal(data)
    assert time.monotonic() - started < 1
    assert error.kind is rt.HeaderErrorKind.INVALID_PICKLE
    assert "a dict key at byte" in str(error)
    assert "is a tuple" in str(error)


# --- 6: element counts torch refuses --------------------------------------------------------------

_VIEWS = [
    (0, (2**70,), (0,)),
    (0, (2**63,), (0,)),
    (0, (2**63 - 1,), (0,)),
    (0, (2**62, 2), (0, 0)),
    (0, (2**63 - 1, 2), (0, 0)),
    (0, (2**31, 2**31, 2), (0, 0, 0)),
    (0, (2**62, 2**62, 0), (0, 0, 0)),
    (0, (0, 2**62, 4), (0, 0, 0)),
    (0, (0, 2**63), (0, 0)),
    (0, (1,), (2**63,)),
    (0, (1,), (2**63 - 1,)),
    (0, (0,), (2**63,)),
    (0, (2,), (2**62,)),
    (2**63, (0,), (1,)),
    (2**62, (0,), (1,)),
    (2**62, (1,), (0,)),
]


@pytest.mark.parametrize(("offset", "size", "stride"), _VIEWS)
def test_views_torch_refuses_for_their_element_count_are_refused(
    offset: int, size: tuple[int, ...], stride: tuple[int, ...]
) -> None:
    file = with_pickle(pickled({"w": _View(_Storage(1), offset, size, stride)}))
    try:
        expected = loaded(file)
    except Exception:  # torch's refusals: TypeError, ValueError, RuntimeError
        expected = None
    if expected is None:
        assert bin_refusal(file).kind is rt.HeaderErrorKind.INVALID_PICKLE
    else:
        found, _ = index_of(file)
        assert found.index.tensors["w"].shape == tuple(expected["w"].shape)


def test_an_expanded_view_of_2_to_the_70_elements_is_refused() -> None:
    file = with_pickle(pickled({"w": _View(_Storage(1), 0, (2**70,), (0,))}))
    error = bin_refusal(file)
    assert "does not fit in a 64-bit integer" in str(error)


# --- 12, 13: zip offsets outside the file or past the central directory ---------------------------


def _entries(data: bytes) -> tuple[int, int, list[tuple[str, int, int]]]:
    """The directory's start and size (from the EOCD, the file's last 22 bytes), and (name,
    entry position, local header offset) per entry."""
    size, start = struct.unpack_from("<II", data, len(data) - 22 + 12)
    entries, pos = [], start
    while data[pos : pos + 4] == b"PK\x01\x02":
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, pos + 28)
        name = data[pos + 46 : pos + 46 + name_len].decode()
        entries.append((name, pos, int(struct.unpack_from("<I", data, pos + 42)[0])))
        pos += 46 + name_len + extra_len + comment_len
    return int(start), int(size), entries


def _patched(data: bytes, name: str, field: int, value: int) -> bytes:
    """``data`` with the 32-bit field at ``field`` of member ``name``'s directory entry set."""
    out = bytearray(data)
    _, _, entries = _entries(data)
    pos = next(p for n, p, _ in entries if n == name)
    struct.pack_into("<I", out, pos + field, value)
    return bytes(out)


def _relaid(data: bytes, after_directory: tuple[str, ...] = (), gap_after: str = "") -> bytes:
    """``data`` (a zip without a comment; its zip64 end records, which torch.save writes,
    left out) with the records of ``after_directory`` moved between the central directory
    and its end record, and 200 kB of zeros after the record of ``gap_after``; offsets in the
    directory follow."""
    start, size, entries = _entries(data)
    order = sorted(entries, key=lambda e: e[2])
    ends = [e[2] for e in order[1:]] + [start]
    records = {n: data[off:end] for (n, _, off), end in zip(order, ends, strict=True)}
    body, offsets = bytearray(), {}
    for name, _, _ in order:
        if name not in after_directory:
            offsets[name] = len(body)
            body += records[name] + (bytes(200_000) if name == gap_after else b"")
    directory_start = len(body)
    directory = bytearray(data[start : start + size])
    tail = bytearray()
    for name in after_directory:
        offsets[name] = directory_start + len(directory) + len(tail)
        tail += records[name]
    for name, pos, _ in entries:
        struct.pack_into("<I", directory, pos - start + 42, offsets[name])
    eocd = bytearray(data[len(data) - 22 :])
    struct.pack_into("<I", eocd, 16, directory_start)
    return bytes(body + directory + tail + eocd)


TWO = saved({"a": torch.ones(4), "b": torch.arange(4.0)})


def test_the_helpers_relay_a_file_torch_still_reads() -> None:
    for file in (_relaid(TWO), _relaid(rezipped(TWO))):
        assert_same(file, index_of(file)[0])


@pytest.mark.parametrize("name", ["archive/data/0", "archive/data.pkl", "archive/byteorder"])
def test_a_local_header_offset_past_the_file_is_refused_at_open(name: str) -> None:
    file = _patched(TWO, name, 42, 2**31)
    error = bin_refusal(file)
    assert error.kind is rt.HeaderErrorKind.INVALID_ZIP
    assert name in str(error)
    assert str(2**31) in str(error)


def test_a_size_past_the_file_is_refused_at_open() -> None:
    file = _patched(TWO, "archive/data/0", 20, 2**31)
    file = _patched(file, "archive/data/0", 24, 2**31)
    error = bin_refusal(file)
    assert error.kind is rt.HeaderErrorKind.INVALID_ZIP
    assert "archive/data/0" in str(error)


def test_records_after_the_central_directory_are_refused_at_open() -> None:
    # torch reads this one (torch.save never writes it); with the records' offsets far past
    # the file, it refuses too. Either way no request may run past the directory.
    file = _relaid(TWO, after_directory=("archive/data/0", "archive/data/1"))
    error = bin_refusal(file)
    assert error.kind is rt.HeaderErrorKind.INVALID_ZIP
    assert "archive/data/0" in str(error)
    assert "central directory" in str(error)


def test_a_local_header_cannot_be_predicted_longer_than_a_local_header_can_be() -> None:
    file = _relaid(TWO, gap_after="archive/data/0")
    error = bin_refusal(file)  # torch reads it; we would need 200 kB for its local header
    assert error.kind is rt.HeaderErrorKind.INVALID_ZIP
    assert "archive/data/0" in str(error)
    assert "local header" in str(error)


def _field_mutations(data: bytes) -> list[bytes]:
    """``data`` with each 32-bit field of the directory entries and the EOCD (sizes, offsets;
    those of the EOCD matter where no zip64 records follow it) set to values around the
    file's size and far past it."""
    start, _, entries = _entries(data)
    values = (0, 1, start - 1, start, len(data) - 1, len(data), len(data) + 1, 2**31, 2**32 - 1)
    files = []
    for _, pos, _ in entries:
        for field in (20, 24, 42):
            for value in values:
                out = bytearray(data)
                struct.pack_into("<I", out, pos + field, value)
                files.append(bytes(out))
    for field in (12, 16):
        for value in values:
            out = bytearray(data)
            struct.pack_into("<I", out, len(data) - 22 + field, value)
            files.append(bytes(out))
    return files


@pytest.mark.parametrize("window", [None, 200, 700])
def test_no_request_outside_the_file_and_no_long_local_header(window: int | None) -> None:
    for file in _field_mutations(TWO) + _field_mutations(_relaid(TWO)):
        size = len(file)
        start = 0 if window is None else size - window
        held = HeldBytes(size, [(start, file[start:])])
        found: TorchIndex | None = None
        try:
            for _ in range(10):
                step = read_bin(held, location="x.bin")
                if not isinstance(step, NeedBytes):
                    found = step
                    break
                assert 0 <= step.start < step.end <= size, (step.start, step.end, size)
                held = held.with_bytes(step.start, file[step.start : step.end])
        except rt.HeaderError:
            continue
        assert found is not None
        for place in found.places.values():
            assert 0 <= place.header_start < place.start <= place.start + place.nbytes <= size
            assert place.start - place.header_start <= 30 + 2 * 0xFFFF


# --- caps on the directory and on data.pkl, before their bytes are asked for ---------------------


def _central(name: bytes, offset: int, size: int) -> bytes:
    return (
        struct.pack(
            "<4sHHHHHHIIIHHHHHII",
            b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, size, size, len(name), 0, 0, 0, 0, 0, offset,
        )
        + name
    )  # fmt: skip


def _eocd(entries: int, size: int, start: int) -> bytes:
    return struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, entries, entries, size, start, 0)


def test_a_central_directory_over_the_cap_is_refused_before_it_is_asked_for() -> None:
    file_size = 300_000_000
    tail = bytes(20) + _eocd(1, 250_000_000, 1000)  # no zip64 locator before the EOCD
    held = HeldBytes(file_size, [(file_size - len(tail), tail)])
    error = held_refusal(held)
    assert error.kind is rt.HeaderErrorKind.TOO_LARGE
    assert f"limit of {torch_zip.MAX_DIRECTORY_BYTES}" in str(error)


def test_a_data_pkl_over_the_cap_is_refused_before_it_is_asked_for() -> None:
    size = 150_000_000
    directory = _central(b"archive/data.pkl", 0, size)
    start = 30 + len(b"archive/data.pkl") + size
    tail = directory + _eocd(1, len(directory), start)
    before = torch_zip.VERSION_REACH_BYTES  # read with the directory
    held = HeldBytes(start + len(tail), [(start - before, bytes(before) + tail)])
    error = held_refusal(held)
    assert error.kind is rt.HeaderErrorKind.TOO_LARGE
    assert f"limit of {torch_pickle.MAX_PICKLE_BYTES}" in str(error)


def test_read_pickle_refuses_a_pickle_over_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    data = zipfile.ZipFile(io.BytesIO(TWO)).read("archive/data.pkl")
    monkeypatch.setattr(torch_pickle, "MAX_PICKLE_BYTES", len(data) - 1)
    assert refusal(data).kind is rt.HeaderErrorKind.TOO_LARGE


# --- found by fuzzing (tests/fuzz/torch_bin.py) ---------------------------------------------------


def _version_set(data: bytes, text: bytes) -> bytes:
    return rezipped(data, lambda name, member: text if name.endswith("/version") else member)


@pytest.mark.parametrize(
    ("text", "read"),
    [
        (b"3\n", True),
        (b" +10abc", True),
        (b"0", False),
        (b"11", False),
        (b"-3", False),
        (b"", False),
        (b"x3", False),
        (b"00000000000000000003", True),
        (b"18446744073709551617", False),
    ],
)
def test_the_version_record_is_read_as_torch_reads_it(text: bytes, read: bool) -> None:
    file = _version_set(TWO, text)
    try:
        loaded(file)
    except (RuntimeError, IndexError):  # IndexError: stoull's out of range
        assert not read
    else:
        assert read
    if read:
        assert_same(file, index_of(file)[0])
    else:
        assert "version" in str(bin_refusal(file))


def test_a_file_without_a_version_record_is_refused_as_torch_refuses_it() -> None:
    source = zipfile.ZipFile(io.BytesIO(TWO))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            if not info.filename.endswith("/version"):
                target.writestr(info.filename, source.read(info.filename))
    file = out.getvalue()
    with pytest.raises(RuntimeError, match="version"):
        loaded(file)
    assert "no version record" in str(bin_refusal(file))


def test_a_zip64_locator_pointing_at_no_zip64_record_falls_back_to_the_eocd() -> None:
    # torch.save writes zip64 end records to every file, and the EOCD's own values beside them.
    file = bytearray(TWO)
    at = len(file) - 22 - 20 - 56
    assert file[at : at + 4] == b"PK\x06\x06"
    file[at] = ord("X")
    assert_same(bytes(file), index_of(bytes(file))[0])


@pytest.mark.parametrize("name", ["elsewhere/x", "x", "archivex/y"])
def test_every_member_must_lie_in_the_first_ones_folder_as_torch_requires(name: str) -> None:
    source = zipfile.ZipFile(io.BytesIO(TWO))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info.filename))
        target.writestr(name, b"1")
    file = out.getvalue()
    with pytest.raises(RuntimeError, match="not in a subdirectory"):
        loaded(file)
    assert f"member {name} is not in a folder archive/" in str(bin_refusal(file))


def test_a_serialization_id_that_is_not_utf8_is_refused_as_torch_refuses_it() -> None:
    file = rezipped(
        TWO, lambda name, member: b"\xcf\xce" if name.endswith("/serialization_id") else member
    )
    with pytest.raises(UnicodeDecodeError):
        loaded(file)
    assert "serialization_id is not UTF-8" in str(bin_refusal(file))


@pytest.mark.parametrize(("disk", "read"), [(0, True), (1, True), (2, False), (0xFFFF, False)])
def test_a_directory_entry_on_another_disk_is_refused_as_torch_refuses_it(
    disk: int, read: bool
) -> None:
    _, _, entries = _entries(_relaid(TWO))
    file = bytearray(_relaid(TWO))
    struct.pack_into("<H", file, entries[3][1] + 34, disk)
    if read:
        assert_same(bytes(file), index_of(bytes(file))[0])
    else:
        with pytest.raises(RuntimeError, match="multidisk"):
            loaded(bytes(file))
        assert f"is on disk {disk}" in str(bin_refusal(bytes(file)))


def test_an_entry_with_a_masked_local_header_is_refused_as_torch_refuses_it() -> None:
    _, _, entries = _entries(_relaid(TWO))
    file = bytearray(_relaid(TWO))
    struct.pack_into("<H", file, entries[3][1] + 8, 0x2000)
    with pytest.raises(RuntimeError, match="encryption"):
        loaded(bytes(file))
    assert "is encrypted" in str(bin_refusal(bytes(file)))


@pytest.mark.parametrize("tail", [b"junk after the end record", b""])
def test_the_end_record_is_found_as_torch_finds_it(tail: bytes) -> None:
    file = bytearray(TWO + tail)
    struct.pack_into("<H", file, len(TWO) - 2, 7)  # a comment length that does not add up
    loaded(bytes(file))
    assert_same(bytes(file), index_of(bytes(file))[0])
    assert_same(bytes(file), index_of(bytes(file), window=100)[0])


@pytest.mark.parametrize(
    ("zip64", "disks", "read"),
    [
        (False, (0, 0), True),
        (False, (1, 1), False),
        (False, (0, 1), False),
        (True, (1, 1), True),  # the EOCD's fields do not count beside zip64 records
        (True, (2, 0), True),
    ],
)
def test_the_end_records_disks_are_read_as_torch_reads_them(
    zip64: bool, disks: tuple[int, int], read: bool
) -> None:
    file = bytearray(TWO if zip64 else _relaid(TWO))
    struct.pack_into("<HH", file, len(file) - 22 + 4, *disks)
    if read:
        assert_same(bytes(file), index_of(bytes(file))[0])
    else:
        with pytest.raises(RuntimeError, match="multidisk"):
            loaded(bytes(file))
        assert "several disks" in str(bin_refusal(bytes(file)))


@pytest.mark.parametrize(("record", "disks", "read"), [(True, 0, False), (False, 0, True)])
def test_the_zip64_locators_disks_count_only_with_a_zip64_record(
    record: bool, disks: int, read: bool
) -> None:
    file = bytearray(TWO)
    struct.pack_into("<I", file, len(file) - 22 - 20 + 16, disks)
    if not record:
        file[len(file) - 22 - 20 - 56] = ord("X")
    if read:
        assert_same(bytes(file), index_of(bytes(file))[0])
    else:
        with pytest.raises(RuntimeError, match="multidisk"):
            loaded(bytes(file))
        assert "disks" in str(bin_refusal(bytes(file)))


def test_a_member_never_read_may_overlap_the_next_as_torch_allows() -> None:
    found = Path(__file__).parent.parent / "fuzz" / "findings" / "torch_bin"
    file = (found / "unread-member-overlaps-the-next").read_bytes()
    loaded(file)  # its .storage_alignment runs into the next local header
    assert_same(file, index_of(file)[0])
    overlapping = _patched(
        _patched(TWO, "archive/byteorder", 20, 200), "archive/byteorder", 24, 200
    )
    assert "past the next member's local header" in str(bin_refusal(overlapping))

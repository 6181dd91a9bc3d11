"""Fuzz target: the PyTorch ``.bin`` reader (``formats/torch_bin.py`` joining ``torch_zip``,
``torch_pickle`` and ``torch_globals``) against ``torch.load(..., weights_only=True)``.

An input is a whole file. Our reader holds it whole (it must then ask for no byte: every byte
of the file is held), and again from its last bytes onwards, fetching what it asks for (every
request inside the file; the same verdict). Findings: any exception but
:class:`~remotetensors.errors.HeaderError`; a read over :data:`MAX_SECONDS` or whose memory
peaks over :data:`MAX_PEAK_BYTES` (tracemalloc); a file torch refuses that we read; a file
both read with other tensors (names, dtypes, shapes, the bytes of every value, strided views
laid out); with ``REMOTETENSORS_FUZZ_STRICT=1``, a file torch reads that we refuse, unless
for a reason we refuse on purpose (:func:`deliberate`: the legacy format, globals outside our
allow-list, big-endian storages, opcodes and keys no state dict has, our caps, zips not laid
out as ``torch.save`` lays them).
torch checks no CRC on reading (2.13), and neither do we; torch reads records we never ask for
(``.format_version``, ``.storage_alignment``), so their damaged local headers (its "failed
reading file ...") are no finding.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import time
import tracemalloc
import zipfile
import zlib
from typing import Any

import numpy as np

from remotetensors.errors import HeaderError, HeaderErrorKind
from remotetensors.formats.torch_bin import TorchIndex, read_bin
from remotetensors.formats.torch_zip import HeldBytes, NeedBytes
from tests.torch_bin_files import (
    DTYPE_NAMES,
    as_zip64,
    flat,
    legacy_bin,
    loaded,
    rezipped,
    saved,
    tensors_of,
    torch,
)

DICTIONARY = (
    b"PK\x03\x04",
    b"PK\x01\x02",
    b"PK\x05\x06",
    b"PK\x06\x06",
    b"PK\x06\x07",
    b"\xff\xff\xff\xff",
    b"\xff\xff",
    b"\x00\x00\x00\x80",
    b"archive/data.pkl",
    b"archive/data/0",
    b"archive/byteorder",
    b"little",
    b"big",
    b"\x80\x02",
    b"ctorch._utils\n_rebuild_tensor_v2\n",
    b"ctorch._utils\n_rebuild_tensor_v3\n",
    b"ctorch._utils\n_rebuild_parameter\n",
    b"ccollections\nOrderedDict\n",
    b"ctorch\nFloatStorage\n",
    b"ctorch\nBFloat16Storage\n",
    b"ctorch.storage\nUntypedStorage\n",
    b"ctorch\nSize\n",
    b"ctorch\nbfloat16\n",
    b"c_codecs\nencode\n",
    b"cposix\nsystem\n",
    b"X\x07\x00\x00\x00storage",
    b"X\x03\x00\x00\x00cpu",
    b"\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01",
    b"\x8a\x08\xff\xff\xff\xff\xff\xff\xff\x7f",
    b"J\xff\xff\xff\x7f",
    b"q\x00",
    b"h\x00",
    b"\x86",
    b"\x87",
    b")",
    b"(",
    b"t",
    b"R",
    b"u",
    b"s",
)
"""Tokens libFuzzer splices into inputs: zip signatures and edge numbers, member names, the
globals and opcodes of a state dict's pickle."""

MAX_SECONDS = 1.0
"""A read of one input may take this long (both reads together)."""

MAX_PEAK_BYTES = 64 * 2**20
"""Memory (tracemalloc's peak) one read of an input may take, beyond the input itself."""

_PURPOSES = {
    HeaderErrorKind.INVALID_PICKLE: (
        "is not one a state dict uses",  # an opcode of a later protocol, or not torch.save's
        "a dict key at byte",  # keys that are no plain values
        "containers nest deeper",
        "refer to each other more than",
        "bytes of tensor names",
        "a bare tensor",
        "two tensors are named",
    ),
    HeaderErrorKind.INVALID_ZIP: (
        "was not laid out as torch.save lays it out",
        "is compressed or encrypted",  # torch inflates a member; we read bytes by range
        "more than a version record needs",
        # a local header that disagrees with the directory (torch reads past it): where a
        # member's bytes start is confirmed by its local header, so it must agree
        "the local header at byte",
        "says method",
        "no local header of",
        # every member inside the file, before the directory, even one torch never reads
        "past the central directory's start",
    ),
    HeaderErrorKind.INVALID_TENSOR_INFO: ("-endian; only little-endian files are read",),
}
"""Refusals of files torch reads, on purpose: kind -> words of the message."""


STRICT_REFUSALS = os.environ.get("REMOTETENSORS_FUZZ_STRICT") == "1"
"""Whether a refusal of a file torch reads is a finding unless :func:`deliberate`. The rule
the reader keeps is "our ``HeaderError`` or torch's own tensors", so by default any refusal
passes; ``REMOTETENSORS_FUZZ_STRICT=1`` hunts for refusals we did not mean (a pickle torch
reads by duck typing, a persistent id whose type is a tensor: they are endless, and each
stops libFuzzer)."""


def deliberate(error: HeaderError) -> bool:
    """Whether ``error`` refuses a file on purpose, where torch reads it (see the module)."""
    if error.kind in (
        HeaderErrorKind.LEGACY_TORCH_FORMAT,
        HeaderErrorKind.FORBIDDEN_GLOBAL,
        HeaderErrorKind.TOO_LARGE,
    ):
        return True
    return any(words in str(error) for words in _PURPOSES.get(error.kind, ()))


def ours(data: bytes) -> TorchIndex | HeaderError:
    """Our verdict on a whole file, held whole and then read from its end as a remote reader
    reads it; the two must agree, and neither may ask for bytes outside the file."""
    try:
        step = read_bin(HeldBytes(len(data), [(0, data)]), location="x.bin")
    except HeaderError as exc:
        whole: TorchIndex | HeaderError = exc
    else:
        assert not isinstance(step, NeedBytes), f"asked for held bytes {step.start, step.end}"
        whole = step
    start = max(0, len(data) - 256)
    held = HeldBytes(len(data), [(start, data[start:])])
    try:
        for _ in range(10):
            step = read_bin(held, location="x.bin")
            if not isinstance(step, NeedBytes):
                break
            assert 0 <= step.start < step.end <= len(data), (step.start, step.end, len(data))
            held = held.with_bytes(step.start, data[step.start : step.end])
        else:
            raise AssertionError("no index after 10 reads")
    except HeaderError as exc:
        if not isinstance(whole, HeaderError):
            raise AssertionError(f"read whole: an index; read by parts: {exc}") from None
        return whole
    assert isinstance(whole, TorchIndex), f"read whole: {whole}; read by parts: an index"
    assert step.index.tensors == whole.index.tensors
    return whole


def measured(data: bytes) -> TorchIndex | HeaderError:
    """:func:`ours`, within :data:`MAX_SECONDS` and :data:`MAX_PEAK_BYTES`."""
    tracemalloc.start()
    started = time.monotonic()
    try:
        got = ours(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    elapsed = time.monotonic() - started
    assert elapsed < MAX_SECONDS, f"the read took {elapsed:.2f} s"
    assert peak < MAX_PEAK_BYTES, f"the read's memory peaked at {peak} bytes"
    return got


def reference(data: bytes) -> dict[str, Any] | Exception:
    """torch's tensors by name (as our names go), or its refusal."""
    try:
        return flat(loaded(data))
    except Exception as exc:  # torch refuses with any of many types
        return exc


def check(data: bytes) -> None:
    """Judge one input (see the module).

    Raises:
        AssertionError: we disagree with torch, or a read was too slow or too large.
        Exception: any other error of the reader is a finding too.
    """
    got = measured(data)
    if isinstance(got, TorchIndex):
        try:
            values = tensors_of(data, got)  # each storage's local header checked, as reads do
        except HeaderError as exc:
            got = exc
    expected = reference(data)
    if isinstance(got, HeaderError):
        if STRICT_REFUSALS and not isinstance(expected, Exception):
            assert deliberate(got), f"torch reads it, we refuse: {got}"
        return
    if isinstance(expected, Exception):
        assert _unread(expected, got), f"torch refuses ({expected!r}), we read it"
        return
    _same(data, got, values, expected)


_FAILED_READING = re.compile(
    r"PytorchStreamReader failed (?:reading file|retrieving file meta-data for) ([^:]+):"
)
_READ = ("data.pkl", "byteorder", "version", ".data/version")
"""The records our reader reads besides the storages: the rest (``.format_version``,
``.storage_alignment``, ``.data/serialization_id``) it never asks for."""


_MINIZ_AT_OPEN = "failed reading zip archive: invalid header or archive is corrupted"
"""miniz refusing an archive at open for a reason not found yet (README: left open): a file
whose local header's extra field and the bytes before the directory were both changed, each
change read alone (findings/torch_bin/miniz-refuses-at-open)."""


def _unread(refusal: Exception, found: TorchIndex) -> bool:
    """Whether torch refused for a damaged record (its local header) that our reader never
    reads, where reading by ranges cannot see the damage."""
    if _MINIZ_AT_OPEN in str(refusal):
        return True  # left open: see _MINIZ_AT_OPEN
    if isinstance(refusal, ValueError) and "invalid literal for int()" in str(refusal):
        return True  # left open: torch reads .storage_alignment / .format_version as numbers
    read = {name.encode() for name in _READ} | {
        place.member.raw_name.split(b"/", 1)[-1] for place in found.places.values()
    }
    if isinstance(refusal, UnicodeDecodeError):
        # torch decodes the names of some records (without the archive's folder) as UTF-8,
        # not every one in every file; a record we never read is a name only to us
        return refusal.object not in read
    named = _FAILED_READING.search(str(refusal))
    if named is None:
        return False
    used = {place.member.name.split("/", 1)[-1] for place in found.places.values()}
    return named.group(1) not in (*_READ, *used)


def _the_zip_holds(data: bytes, found: TorchIndex, name: str, ours: bytes) -> bool:
    """Whether ``ours``, a contiguous tensor's bytes, are those of its storage's record, whose
    CRC-32 (in the data descriptor that follows it, as torch.save writes one, else in its
    directory entry as Python's zipfile reads it) holds: the oracle where torch hands out bytes
    it never read. (A ``.format_version`` of "0" beside good storages made torch give
    uninitialised bytes for the first one, other ones on every load, zeros as often as not:
    findings/torch_bin/torch-reads-uninitialised-bytes, -2.)"""
    if name in found.strided:
        return False
    place = found.places[name]
    record = data[place.start : place.start + place.nbytes]
    after = data[place.start + place.nbytes :]
    crcs = {after[4:8] if after.startswith(b"PK\x07\x08") else after[:4]}
    unreadable = (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError)
    with contextlib.suppress(*unreadable):
        entry = zipfile.ZipFile(io.BytesIO(data)).getinfo(place.member.name)
        crcs.add(entry.CRC.to_bytes(4, "little"))
    if zlib.crc32(record).to_bytes(4, "little") not in crcs:
        return False
    offset = found.index.tensors[name].start - place.start
    return record[offset : offset + len(ours)] == ours


def _same(data: bytes, found: TorchIndex, values: dict[str, Any], expected: dict[str, Any]) -> None:
    assert sorted(values) == sorted(expected)
    for name, tensor in expected.items():
        tensor = tensor.detach()
        info = found.index.tensors[name]
        assert (info.dtype, info.shape) == (DTYPE_NAMES.get(tensor.dtype), tuple(tensor.shape))
        reference_bytes = (
            # a fresh copy: contiguous() keeps a size-1 dimension's stride, which view refuses
            tensor.clone(memory_format=torch.contiguous_format)
            .reshape(-1)
            .view(torch.uint8)
            .numpy()
            .tobytes()
            if tensor.numel()
            else b""
        )
        ours_bytes = np.ascontiguousarray(values[name]).reshape(-1).view(np.uint8).tobytes()
        if ours_bytes != reference_bytes:
            assert _the_zip_holds(data, found, name, ours_bytes), name


def seeds() -> list[bytes]:
    """Files torch.save wrote (contiguous, transposed, expanded, sliced and shared storages,
    parameters, nested containers, several dtypes, empty, scalar, an OrderedDict with its
    ``_metadata``), the same as zip64 and as Python's zipfile writes them, and a legacy file."""
    base = torch.arange(8.0)
    linear = torch.nn.Linear(2, 2)
    states: list[Any] = [
        {"w": torch.arange(6.0).reshape(2, 3)},
        {"t": torch.arange(6.0).reshape(2, 3).t()},
        {"e": torch.ones(3, 1).expand(3, 4)},
        {"a": base[:4], "b": base[4:], "c": base, "s": base[1::3]},
        {"h": torch.ones(2, 2, dtype=torch.bfloat16), "i": torch.arange(3)},
        {"z": torch.zeros(0, 3), "s": torch.tensor(3.0), "b": torch.tensor([True, False])},
        {"f8": torch.ones(2).to(torch.float8_e4m3fn), "u16": torch.ones(2, dtype=torch.uint16)},
        {},
        {"m": {"w": torch.ones(2)}, "l": [torch.zeros(1)], "epoch": 3, "lr": 0.5},
        {"p": torch.nn.Parameter(torch.ones(2))},
        linear.state_dict(),
    ]
    files = [saved(state) for state in states]
    files += [as_zip64(files[0]), as_zip64(files[3]), rezipped(files[1]), legacy_bin()]
    return files

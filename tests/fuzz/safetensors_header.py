"""Fuzz target: the safetensors header parser (``formats/safetensors.py``) against the
reference reader.

An input's first byte picks the JSON decoder of the parser's fast path (``json``, or ``orjson``
where it is installed); the rest is a whole file. Findings: any exception but
:class:`~remotetensors.errors.HeaderError`; a file the reference reads that we refuse, or the
reverse; another view of an accepted file (names, dtypes, shapes, data bytes); a rule named
for a refused one that the reference never names for it (tied tensors let its verdict vary
from call to call, as ``tests/unit/test_safetensors_format.py`` explains).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from remotetensors.dtypes import DTYPES
from remotetensors.errors import HeaderError, HeaderErrorKind
from remotetensors.formats import safetensors as fmt
from remotetensors.index import FileIndex
from tests.reference import ReferenceView, raw_file, reference_read, write_reference

DICTIONARY = (
    b'"dtype"',
    b'"shape"',
    b'"data_offsets"',
    b'"__metadata__"',
    *(f'"{name}"'.encode() for name in DTYPES),
    b"18446744073709551615",
    b"18446744073709551616",
    b"-0",
    b"1e3",
    b"0.0",
    b"null",
    b"true",
    b"\\u0000",
    b"\\ud83d",
    b"\\ude00",
    b'"\\"',
)
"""Tokens libFuzzer splices into inputs: the header's keys, every dtype name, edge numbers."""


def _decoders() -> tuple[Callable[[str], Any], ...]:
    try:
        import orjson
    except ImportError:  # pragma: no cover - depends on the installation
        return (json.loads,)
    return (json.loads, orjson.loads)


DECODERS = _decoders()


def ours(data: bytes) -> FileIndex | HeaderErrorKind:
    """Our verdict on a whole file: its index, or the rule that refused it."""
    try:
        return fmt.parse_file(data)
    except HeaderError as exc:
        return exc.kind


def check(data: bytes) -> None:
    """Judge one input (see the module).

    Raises:
        AssertionError: we disagree with the reference.
        Exception: any other error of the parser is a finding too.
    """
    if not data:
        return
    decoder, file = DECODERS[data[0] % len(DECODERS)], data[1:]
    real = fmt._loads
    fmt._loads = decoder
    try:
        got = ours(file)
    finally:
        fmt._loads = real
    expected = reference_read(file)
    if isinstance(expected, ReferenceView):
        assert isinstance(got, FileIndex), f"reference accepts, we refuse with {got}"
        _same_view(got, expected, file)
    elif got != expected:
        assert not isinstance(got, FileIndex), f"reference refuses with {expected}, we accept"
        # Tensors that share offsets are checked in an order the reference draws anew on each
        # call (a hash map's), we in the header's: our verdict must be one of its verdicts.
        # Asked again until it gives ours; an order with ours comes in one call of a few.
        # A list: a view (the reference accepting) does not hash.
        seen: list[ReferenceView | HeaderErrorKind] = [expected]
        for _ in range(_REFERENCE_RETRIES):
            seen.append(reference_read(file))
            if got in seen:
                return
        raise AssertionError(f"reference says one of {sorted(set(map(str, seen)))}, we say {got}")


_REFERENCE_RETRIES = 64
"""Calls of the reference that must all give another verdict than ours before it counts: with
two orders of tied tensors drawn at random, 64 calls miss ours with odds of 2**-64."""


def _same_view(index: FileIndex, view: ReferenceView, data: bytes) -> None:
    assert set(index.tensors) == set(view.tensors)
    for name, (dtype, shape, payload) in view.tensors.items():
        info = index.tensors[name]
        assert (info.dtype, info.shape) == (dtype, shape), name
        assert data[info.start : info.end] == payload, name


def seeds() -> list[bytes]:
    """Files written by the reference (every numpy-writable dtype, metadata, zero-size and
    empty tensors) and a few written by hand; each behind a decoder byte of 0 and of 1."""
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "f32": np.arange(6, dtype=np.float32).reshape(2, 3),
        "i8": np.arange(5, dtype=np.int8),
        "f16": np.ones(3, dtype=np.float16),
        "i64": np.array([1, -1], dtype=np.int64),
        "b": np.array([True, False]),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "scalar": np.array(3.0, dtype=np.float64),
    }
    files = [
        write_reference(arrays, metadata={"format": "pt", "k": "v"}),
        write_reference({"w": np.zeros(4, dtype=np.uint8)}),
        write_reference({}, metadata={"only": "metadata"}),
        raw_file('{"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}', b"\x00\x00", pad=True),
        raw_file('{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', b"abcd"),
        raw_file(
            '{"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},'
            '"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}',
            b"abcd",
        ),
    ]
    return [bytes([choice]) + file for file in files for choice in (0, 1)]

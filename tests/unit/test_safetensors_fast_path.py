"""The header parser's fast path (plain ``json.loads`` plus proofs) against the strict reader.

The fast path may only ever accept what the strict reader accepts, with the same result; when it
cannot prove that, it must step aside (return ``None``) so the strict reader gives the verdict.
The reference package judges the headers built here, too.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given

from remotetensors.errors import HeaderError
from remotetensors.formats import safetensors as fmt
from remotetensors.formats.strict_json import StrictJSONError
from remotetensors.index import FileIndex
from tests.reference import raw_file, write_reference
from tests.unit.test_safetensors_format import assert_agrees, mutated_files, valid_files


def header_text(data: bytes) -> str | None:
    if len(data) < 8:
        return None
    n = struct.unpack_from("<Q", data)[0]
    try:
        return data[8 : 8 + n].decode("utf-8")
    except UnicodeDecodeError:
        return None


try:
    import orjson

    DECODERS: tuple[Any, ...] = (json.loads, orjson.loads)
except ImportError:  # the fast extra is not installed: the stdlib path alone
    DECODERS = (json.loads,)


@contextmanager
def decoder(loads: Any) -> Iterator[None]:
    """The fast path with ``loads`` as its JSON decoder (json, or orjson when installed)."""
    real = fmt._loads
    fmt._loads = loads
    try:
        yield
    finally:
        fmt._loads = real


def assert_fast_path_sound(text: str) -> bool:
    """The fast path's answer, if any, is the strict reader's, with every decoder; returns
    whether it answered (the same with each)."""
    answers = set()
    for loads in DECODERS:
        with decoder(loads):
            answers.add(_fast_path_sound(text))
    assert len(answers) == 1, "the decoders disagree on taking the fast path"
    return answers.pop()


def _fast_path_sound(text: str) -> bool:
    columns = fmt._read_json_fast(text)
    if columns is None:
        return False
    try:
        strict = fmt._read_json(text)
    except StrictJSONError as exc:
        raise AssertionError(f"fast path accepts what the strict reader rejects: {exc}") from None
    fast = fmt._entries(columns)
    assert fast == strict
    assert list(fast[1]) == list(strict[1])  # same order: it decides ties in data order
    assert_rows_sound(columns)
    return True


def assert_rows_sound(columns: Any, data_offset: int = 100) -> bool:
    """The column-wise offset and size check accepts only what the rule-by-rule check accepts,
    with the same order and offsets; returns whether it answered."""
    fast = fmt._rows_fast(columns, data_offset)
    _, entries = fmt._entries(columns)
    try:
        ordered = fmt._check_offsets_and_sizes(entries, "x")
    except HeaderError as exc:
        rejected: HeaderError | None = exc
    else:
        rejected = None
    if rejected is not None:
        assert fast is None, f"the fast check accepts what the rules reject: {rejected}"
        return False
    if fast is None:
        return False
    rows, data_end = fast
    assert list(rows.items()) == [
        (name, (dtype, shape, data_offset + begin, data_offset + stop, None))
        for name, (dtype, shape, begin, stop) in ordered
    ]
    assert data_end == (ordered[-1][1][3] if ordered else 0)
    return True


@given(valid_files())
def test_files_of_the_reference_take_the_fast_path(data: bytes) -> None:
    text = header_text(data)
    assert text is not None
    # serde_json writes control characters as \u escapes; those headers go the strict way.
    assert assert_fast_path_sound(text) or "\\u" in text


@given(mutated_files())
def test_mutations_never_slip_through_the_fast_path(data: bytes) -> None:
    text = header_text(data)
    if text is not None:
        assert_fast_path_sound(text)


def test_names_and_metadata_with_colons_and_dashes_stay_fast() -> None:
    data = write_reference(
        {"a:b-c": np.zeros(2, np.float32), "-0:": np.zeros((1, 2), np.int8)},
        metadata={"url": "https://x-y:8080/-0", "k:-": "-"},
    )
    text = header_text(data)
    assert text is not None
    assert assert_fast_path_sound(text)
    assert isinstance(assert_agrees(data), FileIndex)


E = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
F = '{"dtype":"F32","shape":[1],"data_offsets":[4,8]}'


@pytest.mark.parametrize(
    "header",
    [
        # Duplicates that json.loads would drop silently.
        f'{{"a":5,"a":{E}}}',
        f'{{"a":{E},"a":{E}}}',
        f'{{"__metadata__":{{}},"__metadata__":{{"x":"y"}},"a":{E}}}',
        f'{{"__metadata__":{{"x":1,"x":"y"}},"a":{E}}}',
        '{"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
        '{"a":{"dtype":"F32","shape":[1],"shape":[1],"data_offsets":[0,4]}}',
        # Numbers serde_json reads as floats, and constants it does not know.
        '{"a":{"dtype":"F32","shape":[-0],"data_offsets":[0,4]}}',
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[-0,4]}}',
        '{"a":{"dtype":"F32","shape":[1e0],"data_offsets":[0,4]}}',
        '{"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}}',
        '{"a":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}}',
        '{"a":{"dtype":"F32","shape":[Infinity],"data_offsets":[0,4]}}',
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551616]}}',
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,' + "9" * 5000 + "]}}",
        '{"a":{"dtype":"F32","shape":[true],"data_offsets":[0,4]}}',
        # Escapes: a lone surrogate, and a colon the text does not show.
        '{"\\ud800":' + E + "}",
        '{"\\u003a":' + E + "}",
        # Shapes serde accepts that the fast path leaves to the strict reader.
        '{"a":["F32",[1],[0,4]]}',
        '{"a":{"dtype":{"F32":null},"shape":[1],"data_offsets":[0,4]}}',
        '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"extra":[[[]]]}}',
        # Not an object, trailing data, a byte order mark.
        "[]",
        f'{{"a":{E}}} x',
        f'\ufeff{{"a":{E}}}',
    ],
)
def test_special_cases_go_to_the_strict_reader(header: str) -> None:
    for loads in DECODERS:
        with decoder(loads):
            assert fmt._read_json_fast(header) is None
    assert_agrees(raw_file(header, b"\0" * 8, pad=True))


def test_both_paths_give_the_same_index_for_a_big_header() -> None:
    tensors: dict[str, Any] = {f"layer.{i}.w": np.zeros((2, i % 3), np.float16) for i in range(500)}
    data = write_reference(tensors, metadata={"format": "pt"})
    text = header_text(data)
    assert text is not None
    assert assert_fast_path_sound(text)
    index = fmt.parse_file(data)
    assert list(index.tensors) == sorted(tensors, key=lambda k: json.loads(text)[k]["data_offsets"])


def entry(dtype: str, shape: list[int], begin: int, stop: int) -> str:
    return json.dumps({"dtype": dtype, "shape": shape, "data_offsets": [begin, stop]})


@pytest.mark.parametrize(
    ("tensors", "fast"),
    [
        # In order, out of order, one tensor: proven at C speed.
        ([("a", "F32", [2], 0, 8), ("b", "F16", [3], 8, 14)], True),
        ([("b", "F16", [3], 8, 14), ("a", "F32", [2], 0, 8)], True),
        ([("a", "U8", [], 0, 1)], True),
        # Tensors with no elements (ties in start): left to the rules, which accept them.
        ([("a", "F32", [0], 0, 0), ("b", "F32", [1], 0, 4), ("c", "F32", [0, 5], 4, 4)], False),
        ([("a", "F32", [2**40, 0, 2**40], 0, 0)], False),
        # A hole, an overlap, a start past its end, a wrong size, half a byte, an overflow.
        ([("a", "F32", [1], 0, 4), ("b", "F32", [1], 5, 9)], False),
        ([("a", "F32", [2], 0, 8), ("b", "F32", [1], 4, 8)], False),
        ([("a", "F32", [1], 4, 0)], False),
        ([("a", "F32", [2], 0, 4)], False),
        ([("a", "F4", [3], 0, 1)], False),
        ([("a", "F32", [2**62, 2], 0, 2**64 - 1)], False),
        ([("a", "F64", [2**61], 0, 2**64 - 1)], False),
    ],
)
def test_offsets_and_sizes_checked_by_columns(
    tensors: list[tuple[str, str, list[int], int, int]], fast: bool
) -> None:
    text = "{" + ",".join(f"{json.dumps(t[0])}:{entry(*t[1:])}" for t in tensors) + "}"
    columns = fmt._read_json_fast(text)
    assert columns is not None
    assert assert_rows_sound(columns) is fast
    data_end = max(stop for *_, stop in tensors)
    assert_agrees(raw_file(text, b"\0" * min(data_end, 64)))  # huge ones fail before size


@pytest.mark.parametrize("enabled", [True, False], ids=["gc on", "gc off"])
@pytest.mark.parametrize("valid", [True, False], ids=["valid", "rejected"])
def test_the_collector_is_paused_while_parsing_and_left_as_it_was(
    enabled: bool, valid: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    seen: list[bool] = []
    read = fmt._read_json_fast

    def spying(text: str) -> Any:
        seen.append(gc.isenabled())
        return read(text)

    monkeypatch.setattr(fmt, "_read_json_fast", spying)
    header = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        if valid:
            fmt.parse_header(header, file_size=8 + len(header) + 8)
        else:
            with pytest.raises(HeaderError):
                fmt.parse_header(header, file_size=8 + len(header) + 7)
        assert gc.isenabled() is enabled  # a raise on the way out leaves it as it was too
    finally:
        (gc.enable if was else gc.disable)()
    assert seen == [False]

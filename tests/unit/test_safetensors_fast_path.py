"""The header parser's fast path (plain ``json.loads`` plus proofs) against the strict reader.

The fast path may only ever accept what the strict reader accepts, with the same result; when it
cannot prove that, it must step aside (return ``None``) so the strict reader gives the verdict.
The reference package judges the headers built here, too.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given

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


def assert_fast_path_sound(text: str) -> bool:
    """The fast path's answer, if any, is the strict reader's; returns whether it answered."""
    fast = fmt._read_json_fast(text)
    if fast is None:
        return False
    try:
        strict = fmt._read_json(text)
    except StrictJSONError as exc:
        raise AssertionError(f"fast path accepts what the strict reader rejects: {exc}") from None
    assert fast == strict
    assert list(fast[1]) == list(strict[1])  # same order: it decides ties in data order
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

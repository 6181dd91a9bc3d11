"""The sans-IO GGUF parser against gguf.GGUFReader, fed whole or piece by piece, and a corpus of
malformed headers each rejected with its kind (no crash, no giant allocation)."""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from remotetensors.errors import HeaderError, HeaderErrorKind
from remotetensors.formats.gguf import (
    FILE_TYPES,
    GGML_TYPES,
    GGUFHeader,
    GGUFLimits,
    HeaderParser,
    NeedMore,
    next_read_end,
    parse_header,
)
from remotetensors.formats.gguf_files import describe, gguf_models, split_names
from tests.gguf_files import gguf, reference_view, vocabulary, write_gguf

K = HeaderErrorKind


def check_against_reference(header: GGUFHeader, path: Path) -> None:
    ref = reference_view(path)
    assert dict(header.metadata) == ref.metadata
    assert dict(header.value_types) == ref.types
    assert header.data_start == ref.data_start
    assert header.alignment == ref.alignment
    index = header.to_index(file_size=path.stat().st_size)
    assert index.format == "gguf"
    assert index.data_offset == ref.data_start
    assert list(index.tensors) == list(ref.tensors)  # data order = the writer's order
    for name, t in ref.tensors.items():
        info = index.tensors[name]
        assert (info.dtype, info.shape, info.start, info.nbytes) == (
            t.type_name,
            t.shape,
            t.start,
            t.nbytes,
        ), name
        assert info.num_elements == t.values.size


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"alignment": 64},
        {"alignment": 1},
        {"vocab_size": 0, "every_value": False},
        {"vocab_size": 5000, "merges": 3000},
    ],
    ids=["default", "align64", "align1", "bare", "vocab"],
)
def test_parse_matches_the_reference_reader(tmp_path: Path, options: dict[str, Any]) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, **options)
    data = path.read_bytes()
    header = parse_header(data)
    assert header.version == 3
    check_against_reference(header, path)


def test_version_2_reads_like_version_3(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path)
    data = bytearray(path.read_bytes())
    data[4:8] = (2).to_bytes(4, "little")
    path.write_bytes(data)
    header = parse_header(data)
    assert header.version == 2
    check_against_reference(header, path)


def test_big_endian_files_from_the_writer_are_rejected_clearly(tmp_path: Path) -> None:
    path = tmp_path / "be.gguf"
    writer = gguf.GGUFWriter(path, "llama", endianess=gguf.GGUFEndian.BIG)
    writer.add_tensor("w", np.ones(32, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(HeaderError) as err:
        parse_header(path.read_bytes(), location=str(path))
    assert err.value.kind is K.UNSUPPORTED_VERSION
    assert "big-endian" in str(err.value)
    assert str(path) in str(err.value)


def test_split_parts_match_the_reference(tmp_path: Path) -> None:
    parts = write_gguf(tmp_path / "m.gguf", split_max_tensors=5)
    assert len(parts) == 3
    for part in parts:
        check_against_reference(parse_header(part.read_bytes()), part)


@pytest.mark.parametrize("chunk", [1, 7, 64, 1000])
def test_fed_piece_by_piece_gives_the_same_header(tmp_path: Path, chunk: int) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path)
    data = path.read_bytes()
    whole = parse_header(data)
    parser = HeaderParser(file_size=len(data))
    fed = 0
    needs = []
    while isinstance(step := parser.advance(), NeedMore):
        assert step.end > fed
        assert step.estimate >= step.end
        needs.append(step.end)
        parser.feed(data[fed : fed + chunk])
        fed += chunk
    assert step == whole
    assert needs == sorted(needs)
    assert fed < whole.header_end + chunk  # nothing past the header was needed


def test_read_plan_for_a_10_mb_header_takes_three_reads(tmp_path: Path) -> None:
    path = tmp_path / "big.gguf"
    write_gguf(path, vocab_size=120_000, merges=130_000, every_value=False)
    data = path.read_bytes()
    parser = HeaderParser(file_size=len(data))
    parser.feed(data[: 64 * 1024])
    reads = 1
    while isinstance(step := parser.advance(), NeedMore):
        have = parser.buffered
        end = next_read_end(step, have, len(data))
        assert end >= step.end
        parser.feed(data[have:end])
        reads += 1
    assert step.header_end > 9_500_000
    assert reads <= 3
    assert parser.buffered <= step.header_end * 1.3  # a bounded overshoot into tensor data
    assert step.metadata["tokenizer.ggml.tokens"] == tuple(vocabulary(120_000))


def test_ggml_types_and_file_types_match_the_package() -> None:
    for qtype, (block, size) in gguf.GGML_QUANT_SIZES.items():
        ours = GGML_TYPES[int(qtype)]
        assert (ours.name, ours.block_size, ours.type_size) == (qtype.name, block, size)
    assert len(GGML_TYPES) == len(gguf.GGML_QUANT_SIZES)
    for ftype in gguf.LlamaFileType:
        if ftype.name != "GUESSED":
            assert FILE_TYPES[int(ftype)] == ftype.name.removeprefix("MOSTLY_").replace("ALL_", "")


def test_describe_summarises_without_the_vocabulary(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, vocab_size=2000)
    header = parse_header(path.read_bytes())
    summary = describe(header.metadata, header.to_index(file_size=path.stat().st_size).tensors)
    assert summary["architecture"] == "llama"
    assert summary["context_length"] == 4096
    assert summary["quantization"] == "Q4_K_M"
    assert summary["tokenizer_size"] == 2000
    assert "tokenizer.ggml.tokens" not in summary["metadata"]
    assert summary["metadata"]["tokenizer.ggml.scores"] == "[2000 items]"
    assert len(repr(summary)) < 4000


def test_split_names_and_model_grouping() -> None:
    assert split_names("a/m-00002-of-00003.gguf") == [
        "a/m-00001-of-00003.gguf",
        "a/m-00002-of-00003.gguf",
        "a/m-00003-of-00003.gguf",
    ]
    assert split_names("m.gguf") is None
    assert split_names("m-00004-of-00003.gguf") is None
    files = [
        "README.md",
        "m-Q4_K_M.gguf",
        "big/m-00001-of-00002.gguf",
        "big/m-00002-of-00002.gguf",
        "broken-00001-of-00002.gguf",  # its second part is missing: not a model
    ]
    assert gguf_models(files) == {
        "big/m-00001-of-00002.gguf": ["big/m-00001-of-00002.gguf", "big/m-00002-of-00002.gguf"],
        "m-Q4_K_M.gguf": ["m-Q4_K_M.gguf"],
    }


# --- malformed headers -------------------------------------------------------------------------


def s(text: bytes) -> bytes:
    return struct.pack("<Q", len(text)) + text


def kv(key: bytes, vtype: int, value: bytes) -> bytes:
    return s(key) + struct.pack("<I", vtype) + value


def info(name: bytes, dims: list[int], ggml_type: int, offset: int) -> bytes:
    return (
        s(name)
        + struct.pack("<I", len(dims))
        + b"".join(struct.pack("<Q", d) for d in dims)
        + struct.pack("<IQ", ggml_type, offset)
    )


def build(
    kvs: list[bytes],
    infos: list[bytes],
    *,
    version: int = 3,
    data: int = 256,
    counts: tuple[int, int] | None = None,
    alignment: int = 32,
) -> bytes:
    n_tensors, n_kv = counts if counts is not None else (len(infos), len(kvs))
    head = b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + b"".join(kvs) + b"".join(infos)
    pad = -len(head) % alignment
    return head + b"\0" * (pad + data)


GOOD_KV = kv(b"general.architecture", 8, s(b"llama"))
GOOD_INFO = info(b"w", [32, 2], 8, 0)  # Q8_0, 2 rows of one block: 68 bytes

CORPUS: dict[str, tuple[bytes, HeaderErrorKind]] = {
    "empty": (b"", K.TRUNCATED),
    "three bytes": (b"GGU", K.TRUNCATED),
    "bad magic": (b"GGML" + bytes(60), K.INVALID_MAGIC),
    "safetensors": (b"\x10\0\0\0\0\0\0\0{}" + bytes(60), K.INVALID_MAGIC),
    "version 1": (build([GOOD_KV], [GOOD_INFO], version=1), K.UNSUPPORTED_VERSION),
    "version 4": (build([GOOD_KV], [GOOD_INFO], version=4), K.UNSUPPORTED_VERSION),
    "big-endian": (
        b"GGUF" + struct.pack(">IQQ", 3, 1, 1) + bytes(200),
        K.UNSUPPORTED_VERSION,
    ),
    "huge kv count": (build([GOOD_KV], [], counts=(0, 2**62)), K.TOO_LARGE),
    "huge tensor count": (build([], [], counts=(2**61, 0)), K.TOO_LARGE),
    "kv count past the file": (build([GOOD_KV], [], counts=(0, 1000)), K.TRUNCATED),
    "bad value type": (build([kv(b"k", 13, b"\0" * 8)], []), K.INVALID_VALUE_TYPE),
    "bad value type 2**32-1": (build([kv(b"k", 2**32 - 1, b"")], []), K.INVALID_VALUE_TYPE),
    "bad array element type": (
        build([kv(b"k", 9, struct.pack("<IQ", 77, 1) + b"\0")], []),
        K.INVALID_VALUE_TYPE,
    ),
    "nested arrays too deep": (
        build(
            [kv(b"k", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 9, 1) + bytes(12))],
            [],
        ),
        K.INVALID_VALUE_TYPE,
    ),
    "huge string": (
        build([kv(b"k", 8, struct.pack("<Q", 2**40))], []),
        K.STRING_TOO_LONG,
    ),
    "huge key": (b"GGUF" + struct.pack("<IQQQ", 3, 0, 1, 2**63) + bytes(64), K.STRING_TOO_LONG),
    "huge array": (
        build([kv(b"k", 9, struct.pack("<IQ", 4, 2**50))], []),
        K.ARRAY_TOO_LONG,
    ),
    "array past the file": (
        build([kv(b"k", 9, struct.pack("<IQ", 12, 10_000))], []),
        K.TRUNCATED,
    ),
    "string array past the file": (
        build([kv(b"k", 9, struct.pack("<IQ", 8, 1_000_000))], []),
        K.TRUNCATED,
    ),
    "string in array too long": (
        build([kv(b"k", 9, struct.pack("<IQ", 8, 2) + s(b"a") + struct.pack("<Q", 2**33))], []),
        K.STRING_TOO_LONG,
    ),
    "invalid UTF-8 key": (build([kv(b"\xff\xfe", 4, b"\0" * 4)], []), K.INVALID_UTF8),
    "invalid UTF-8 tensor name": (build([], [info(b"\xc3", [32], 8, 0)]), K.INVALID_UTF8),
    "duplicate key": (build([GOOD_KV, GOOD_KV], []), K.DUPLICATE_NAME),
    "duplicate tensor": (
        build([], [info(b"w", [32], 8, 0), info(b"w", [32], 8, 64)]),
        K.DUPLICATE_NAME,
    ),
    "five dims": (build([], [info(b"w", [1, 1, 1, 1, 1], 0, 0)]), K.TOO_MANY_DIMS),
    "2**32-1 dims": (
        b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + s(b"w") + struct.pack("<I", 2**32 - 1) + bytes(64),
        K.TOO_MANY_DIMS,
    ),
    "unknown ggml type": (build([], [info(b"w", [32], 99, 0)]), K.INVALID_TENSOR_INFO),
    "removed ggml type 4": (build([], [info(b"w", [32], 4, 0)]), K.INVALID_TENSOR_INFO),
    "row not whole blocks": (build([], [info(b"w", [33], 8, 0)]), K.INVALID_TENSOR_INFO),
    "quantized scalar": (build([], [info(b"w", [], 8, 0)]), K.INVALID_TENSOR_INFO),
    "element count overflow": (
        build([], [info(b"w", [2**40, 2**40], 0, 0)]),
        K.OVERFLOW,
    ),
    "misaligned offset": (build([], [info(b"w", [8], 0, 4)]), K.MISALIGNED_TENSOR),
    "overlapping tensors": (
        build([], [info(b"a", [32, 2], 8, 0), info(b"b", [32], 8, 64)]),
        K.INVALID_OFFSET,
    ),
    "tensor past the end": (build([], [info(b"w", [32, 100], 8, 0)]), K.INVALID_OFFSET),
    "offset far past the end": (build([], [info(b"w", [8], 0, 2**63)]), K.INVALID_OFFSET),
    "alignment not a power of two": (
        build([kv(b"general.alignment", 4, struct.pack("<I", 24))], []),
        K.INVALID_METADATA,
    ),
    "alignment zero": (
        build([kv(b"general.alignment", 4, struct.pack("<I", 0))], []),
        K.INVALID_METADATA,
    ),
    "alignment of the wrong type": (
        build([kv(b"general.alignment", 10, struct.pack("<Q", 32))], []),
        K.INVALID_METADATA,
    ),
}


def test_the_corpus_builder_makes_valid_files() -> None:
    header = parse_header(build([GOOD_KV], [GOOD_INFO]))
    assert header.metadata == {"general.architecture": "llama"}
    assert header.tensors[0].shape == (2, 32)


@pytest.mark.parametrize("name", list(CORPUS))
def test_malformed_headers_are_rejected_with_their_kind(name: str) -> None:
    data, kind = CORPUS[name]
    with pytest.raises(HeaderError) as err:
        parse_header(data, location="mem://bad.gguf")
    assert err.value.kind is kind, str(err.value)
    assert "mem://bad.gguf" in str(err.value)
    if name == "big-endian":
        assert "big-endian" in str(err.value)


def test_every_truncation_of_a_real_file_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_gguf(path, vocab_size=50)
    data = path.read_bytes()
    header = parse_header(data)
    data_end = header.to_index(file_size=len(data)).nbytes and max(
        i.end for i in header.to_index(file_size=len(data)).tensors.values()
    )
    for cut in range(0, len(data), 7):
        if cut >= data_end:  # only the padding after the last tensor is missing
            assert parse_header(data[:cut]) == header
            continue
        if cut >= header.header_end:
            # The header is whole; the tensor data is not.
            with pytest.raises(HeaderError) as err:
                parse_header(data[:cut])
            assert err.value.kind is K.INVALID_OFFSET
            continue
        with pytest.raises(HeaderError) as err:
            parse_header(data[:cut])
        assert err.value.kind is K.TRUNCATED, cut


def test_limits_are_configurable() -> None:
    data = build([kv(b"k", 8, s(b"x" * 100))], [])
    with pytest.raises(HeaderError) as err:
        parse_header(data, limits=GGUFLimits(max_string_bytes=99))
    assert err.value.kind is K.STRING_TOO_LONG
    with pytest.raises(HeaderError) as err:
        parse_header(data, limits=GGUFLimits(max_header_bytes=64))
    assert err.value.kind is K.TOO_LARGE
    array = build([kv(b"k", 9, struct.pack("<IQ", 0, 10) + bytes(10))], [])
    with pytest.raises(HeaderError) as err:
        parse_header(array, limits=GGUFLimits(max_array_length=9))
    assert err.value.kind is K.ARRAY_TOO_LONG
    assert parse_header(array).metadata["k"] == (0,) * 10


@pytest.fixture(scope="module")
def small_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    path = tmp_path_factory.mktemp("gguf") / "m.gguf"
    write_gguf(path, vocab_size=20)
    return path.read_bytes()


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    edits=st.lists(
        st.tuples(
            st.integers(0, 2**16),
            st.sampled_from([b"\xff" * 8, b"\0" * 8, b"\x7f", b"\x09", b"\x08", b"\x80" * 4]),
        ),
        min_size=1,
        max_size=4,
    ),
    cut=st.one_of(st.none(), st.integers(0, 2**16)),
)
def test_mutated_files_parse_or_fail_cleanly(
    small_file: bytes, edits: list[tuple[int, bytes]], cut: int | None
) -> None:
    data = bytearray(small_file)
    for at, patch in edits:
        at %= len(data)
        data[at : at + len(patch)] = patch
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    tracemalloc.start()
    kind = None
    try:
        parse_header(bytes(data))
    except HeaderError as exc:
        kind = exc.kind
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert kind is None or isinstance(kind, HeaderErrorKind)
    assert peak < 20 * len(small_file) + 1_000_000  # nothing sized by a hostile count


def test_strings_in_values_keep_invalid_bytes() -> None:
    data = build(
        [kv(b"k", 8, s(b"ok\xff")), kv(b"a", 9, struct.pack("<IQ", 8, 1) + s(b"\xfe"))], []
    )
    header = parse_header(data)
    assert header.metadata["k"].encode("utf-8", "surrogateescape") == b"ok\xff"
    assert header.metadata["a"][0].encode("utf-8", "surrogateescape") == b"\xfe"


def test_nested_arrays_parse() -> None:
    inner = struct.pack("<IQ", 4, 2) + struct.pack("<II", 1, 2)
    data = build([kv(b"k", 9, struct.pack("<IQ", 9, 2) + inner + inner)], [])
    header = parse_header(data)
    assert header.metadata["k"] == ((1, 2), (1, 2))
    assert header.value_types["k"] == (9, 9, 4)
    assert np.array(header.metadata["k"]).shape == (2, 2)

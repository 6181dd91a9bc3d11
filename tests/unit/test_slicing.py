"""get_slice semantics against the reference: bytes, shape and error for random index expressions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from safetensors import safe_open

from remotetensors.errors import SliceError
from remotetensors.formats.safetensors import parse_file
from remotetensors.index import FileIndex
from remotetensors.reading.assemble import OutputArray, fill_from_file_bytes
from remotetensors.reading.slicing import plan_slice
from tests.reference import raw_file, write_reference

SHAPES = {
    "t3": (3, 4, 5),
    "t1": (7,),
    "t2": (6, 2),
    "t4": (2, 3, 1, 4),
    "scalar": (),
    "e0": (0, 3),
    "e1": (3, 0),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, FileIndex, Any]:
    tensors = {
        name: np.asarray(np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape) + 1)
        for name, shape in SHAPES.items()
    }
    data = write_reference(tensors)
    path: Path = tmp_path_factory.mktemp("slicing") / "t.safetensors"
    path.write_bytes(data)
    handle = safe_open(str(path), framework="numpy")
    return data, parse_file(data), handle


def ours(data: bytes, index: FileIndex, name: str, idx: Any) -> tuple[str, Any]:
    info = index.tensors[name]
    try:
        plan = plan_slice(info, idx)
    except SliceError as exc:
        return "error", str(exc)
    out = OutputArray(info.dtype_info, plan.shape)
    fill_from_file_bytes(out, plan.runs, data)
    result = out.result()
    assert result.flags.c_contiguous
    assert result.flags.writeable
    return "ok", (result.shape, result.tobytes())


def reference(handle: Any, name: str, idx: Any) -> tuple[str, Any]:
    try:
        result = handle.get_slice(name)[idx]
    except (OverflowError, SystemError):
        return "crash", None  # negative bounds and stop < start: the reference has no answer
    except Exception as exc:
        return "error", str(exc)
    return "ok", (result.shape, result.tobytes())


bounds = st.none() | st.integers(0, 8)
items = st.one_of(
    st.integers(-9, 9),
    st.builds(slice, bounds, bounds, st.none() | st.integers(1, 4)),
    st.just(Ellipsis),
    st.builds(slice, bounds, bounds, st.integers(-2, 0)),
    st.builds(slice, st.integers(-3, -1), bounds),
    st.just(None),
    st.just(1.0),
    st.just([]),
    st.just([0, 1]),
    st.booleans(),
)
expressions = st.one_of(items, st.lists(items, max_size=5).map(tuple))


@given(name=st.sampled_from(sorted(SHAPES)), idx=expressions)
def test_random_expressions_match_reference(
    files: tuple[bytes, FileIndex, Any], name: str, idx: Any
) -> None:
    data, index, handle = files
    expected = reference(handle, name, idx)
    got = ours(data, index, name, idx)
    backwards = any(
        isinstance(i, slice) and None not in (i.start, i.stop) and i.stop < i.start
        for i in (idx if isinstance(idx, tuple) else (idx,))
    )
    if expected[0] == "crash" or (backwards and "out of bounds" not in str(expected[1])):
        # The reference has no defined answer here (OverflowError, SystemError, nonsense).
        assert got[0] == "error"
    else:
        assert got == expected


@given(name=st.sampled_from(["t3", "t2", "t4", "t1"]), data=st.data())
def test_in_bounds_slices_equal_numpy(
    files: tuple[bytes, FileIndex, Any], name: str, data: Any
) -> None:
    raw, index, _ = files
    shape = SHAPES[name]
    idx = []
    for dim in shape:
        start = data.draw(st.integers(0, dim - 1))
        stop = data.draw(st.integers(start, dim))
        step = data.draw(st.integers(1, 3))
        idx.append(data.draw(st.sampled_from([slice(start, stop, step), start])))
    full = np.arange(int(np.prod(shape)), dtype=np.int16).reshape(shape) + 1
    status, (got_shape, got_bytes) = ours(raw, index, name, tuple(idx))
    assert status == "ok"
    assert got_shape == full[tuple(idx)].shape
    assert got_bytes == full[tuple(idx)].tobytes()


def test_runs_are_merged_and_minimal(files: tuple[bytes, FileIndex, Any]) -> None:
    _, index, _ = files
    info = index.tensors["t3"]  # (3, 4, 5) int16
    rows = plan_slice(info, slice(1, 3))
    assert len(rows.runs) == 1
    assert rows.runs[0].start == info.start + 1 * 4 * 5 * 2
    assert rows.nbytes == 2 * 4 * 5 * 2
    columns = plan_slice(info, (slice(None), slice(None), 0))
    assert len(columns.runs) == 12
    assert all(r.length == 2 for r in columns.runs)
    assert plan_slice(info, ()).runs[0].length == info.nbytes
    assert plan_slice(info, slice(1, 1)).runs == ()


def test_error_texts_are_the_references(files: tuple[bytes, FileIndex, Any]) -> None:
    _, index, _ = files
    with pytest.raises(
        SliceError,
        match=r"^Error during slicing \[2:, 20\] with shape \[3, 4, 5\]: "
        r"index 20 out of bounds for tensor dimension #1 of size 4$",
    ):
        plan_slice(index.tensors["t3"], (slice(2, None), 20))
    with pytest.raises(IndexError, match="stops before it starts"):
        plan_slice(index.tensors["t3"], slice(2, 1))


def sub_byte_file() -> bytes:
    header = (
        '{"f4":{"dtype":"F4","shape":[4,4],"data_offsets":[0,8]},'
        '"f6":{"dtype":"F6_E2M3","shape":[2,4],"data_offsets":[8,14]}}'
    )
    return raw_file(header, bytes(range(14)), pad=True)


def test_sub_byte_slices_on_byte_boundaries() -> None:
    data = sub_byte_file()
    index = parse_file(data)
    plan = plan_slice(index.tensors["f4"], slice(1, 3))
    assert plan.runs[0].length == 4
    plan = plan_slice(index.tensors["f6"], 1)
    assert plan.runs[0].length == 3
    with pytest.raises(SliceError, match="byte boundary"):
        plan_slice(index.tensors["f4"], (slice(None), 0))
    with pytest.raises(SliceError, match="byte boundary"):
        plan_slice(index.tensors["f6"], (slice(None), slice(0, 2)))

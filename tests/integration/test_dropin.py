"""``rt.safe_open`` as a drop-in for ``safetensors.safe_open`` and ``bintensors.safe_open``.

Every test opens the same file with the reference (from disk) and with ours (from disk and over
loopback HTTP) and compares what each returns or raises: the ``backend=`` argument, the exception
classes and messages code written for the reference catches, torch dtypes for F4/F8/BF16, and a
missing file's message.
"""

from __future__ import annotations

import json
import pickle
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bintensors
import bintensors.numpy
import numpy as np
import pytest
import safetensors
import safetensors.numpy

import remotetensors as rt
from tests.reference import category
from tests.servers import Log

WHERE = ("local", "http")


@pytest.fixture(params=WHERE)
def place(
    request: pytest.FixtureRequest, static: tuple[str, Log, Path]
) -> Callable[[str, bytes], tuple[str, str]]:
    """Write a file under the static root: (path the reference opens, location ours opens)."""
    url, _, root = static
    where: str = request.param

    def put(name: str, data: bytes) -> tuple[str, str]:
        path = root / name
        path.write_bytes(data)
        return str(path), (str(path) if where == "local" else f"{url}/{name}")

    return put


def small_file() -> bytes:
    return safetensors.numpy.save(
        {"a": np.arange(50, dtype=np.float32).reshape(10, 5), "b": np.ones(3, np.int64)},
        metadata={"format": "np"},
    )


def raw_file(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    """A safetensors file with tensors of any dtype (the reference's writers lack F4)."""
    header: dict[str, Any] = {}
    data = b""
    for name, (dtype, shape, payload) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [len(data), len(data) + len(payload)],
        }
        data += payload
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def raised(call: Callable[[], object]) -> BaseException:
    """What ``call`` raises (reference or ours); the caller compares the two."""
    try:
        call()
    except Exception as exc:
        return exc
    pytest.fail(f"{call} raised nothing")


# --- backend= ----------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_backend_values_read_the_same_as_the_reference(
    place: Callable[[str, bytes], tuple[str, str]], backend: str
) -> None:
    path, location = place(f"backend-{backend}.safetensors", small_file())
    with safetensors.safe_open(path, framework="np", backend=backend) as ref:
        expected = ref.get_tensors()
        expected_meta = ref.metadata()
    with rt.safe_open(location, framework="np", backend=backend) as ours:
        assert ours.metadata() == expected_meta
        got = ours.get_tensors()
    assert list(got) == list(expected)
    for name, array in expected.items():
        np.testing.assert_array_equal(got[name], array)
        assert got[name].dtype == array.dtype


@pytest.mark.parametrize(
    ("backend", "builtin"), [("not_a_backend", ValueError), (None, TypeError), (3, TypeError)]
)
def test_a_bad_backend_is_rejected_as_the_reference_rejects_it(
    place: Callable[[str, bytes], tuple[str, str]], backend: Any, builtin: type[Exception]
) -> None:
    path, location = place("backend-bad.safetensors", small_file())
    ref = raised(lambda: safetensors.safe_open(path, framework="np", backend=backend))
    ours = raised(lambda: rt.safe_open(location, framework="np", backend=backend))
    assert str(ours) == str(ref)
    assert isinstance(ours, type(ref))
    assert isinstance(ours, builtin)
    if isinstance(ref, safetensors.SafetensorError):
        assert isinstance(ours, rt.BackendError)
        assert isinstance(ours, rt.RemoteTensorsError)


# --- errors: same class for the caller, same message where the reference's names no location ---

SLICES: list[Any] = [
    np.s_[2:, -6],
    np.s_[[0, 1]],
    np.s_[2:, 20],
    np.s_[:20],
    np.s_[:, :20],
    np.s_[5:, 1, 2],
    np.s_[..., ...],
    np.s_[::-1],
    np.s_["x"],
]


@pytest.mark.parametrize("index", SLICES, ids=repr)
def test_slice_errors_match_the_reference(
    place: Callable[[str, bytes], tuple[str, str]], index: Any
) -> None:
    path, location = place("slices.safetensors", small_file())
    with safetensors.safe_open(path, framework="np") as ref_file:
        ref = raised(lambda: ref_file.get_slice("a")[index])
    with rt.safe_open(location, framework="np") as ours_file:
        ours = raised(lambda: ours_file.get_slice("a")[index])
    assert isinstance(ref, safetensors.SafetensorError)
    assert isinstance(ours, safetensors.SafetensorError)
    assert isinstance(ours, rt.SliceError)
    assert isinstance(ours, IndexError)
    assert str(ours) == str(ref)


def closed_calls(f: Any) -> list[Callable[[], object]]:
    return [
        f.keys,
        f.offset_keys,
        f.metadata,
        lambda: f.get_tensor("a"),
        lambda: f.get_slice("a"),
    ]


def test_a_closed_file_raises_what_the_reference_raises(
    place: Callable[[str, bytes], tuple[str, str]],
) -> None:
    path, location = place("closed.safetensors", small_file())
    with safetensors.safe_open(path, framework="np") as ref_file:
        pass
    with rt.safe_open(location, framework="np") as ours_file:
        pass
    for ref_call, ours_call in zip(closed_calls(ref_file), closed_calls(ours_file), strict=True):
        ref = raised(ref_call)
        ours = raised(ours_call)
        assert isinstance(ref, safetensors.SafetensorError)
        assert isinstance(ours, safetensors.SafetensorError)
        assert isinstance(ours, rt.FileClosedError)
        assert str(ours).startswith(str(ref))  # ours adds the location


def test_unknown_tensor_framework_and_device_raise_what_the_reference_raises(
    place: Callable[[str, bytes], tuple[str, str]],
) -> None:
    path, location = place("names.safetensors", small_file())
    with safetensors.safe_open(path, framework="np") as ref_file:
        ref = raised(lambda: ref_file.get_tensor("zz"))
    with rt.safe_open(location, framework="np") as ours_file:
        ours = raised(lambda: ours_file.get_tensor("zz"))
    assert isinstance(ours, safetensors.SafetensorError)
    assert isinstance(ours, KeyError)
    assert str(ours).startswith(str(ref))

    ref = raised(lambda: safetensors.safe_open(path, framework="xx"))
    ours = raised(lambda: rt.safe_open(location, framework="xx"))
    assert isinstance(ref, safetensors.SafetensorError)
    assert isinstance(ours, safetensors.SafetensorError)
    assert isinstance(ours, rt.FrameworkError)
    assert str(ours).startswith(str(ref))

    ref = raised(lambda: safetensors.safe_open(path, framework="numpy", device="cuda"))
    ours = raised(lambda: rt.safe_open(location, framework="numpy", device="cuda"))
    assert isinstance(ref, safetensors.SafetensorError)
    assert isinstance(ours, safetensors.SafetensorError)
    assert isinstance(ours, rt.FrameworkError)
    # The reference names the device it normalised ("cuda:0"); ours names it as given.
    assert str(ref).startswith("Device cuda")
    assert str(ours).startswith("Device cuda is not supported for framework numpy")
    with rt.safe_open(location, framework="np", device="cpu") as f:
        assert f.keys() == ["a", "b"]


@pytest.mark.parametrize(
    "data",
    [
        b"\x05\0\0\0\0\0\0\0{abcd",
        struct.pack("<Q", 1 << 40) + b"{}",
        raw_file({"w": ("F32", [4], b"\0" * 8)}),
    ],
    ids=["json", "too-large", "incomplete"],
)
def test_a_malformed_header_raises_what_the_reference_raises(
    place: Callable[[str, bytes], tuple[str, str]], data: bytes
) -> None:
    path, location = place("bad.safetensors", data)
    ref = raised(lambda: safetensors.safe_open(path, framework="np"))
    ours = raised(lambda: rt.safe_open(location, framework="np"))
    assert isinstance(ref, safetensors.SafetensorError)
    assert isinstance(ours, safetensors.SafetensorError)
    assert isinstance(ours, rt.HeaderError)
    assert isinstance(ours, ValueError)
    assert ours.kind is category(str(ref))


@pytest.mark.parametrize("framework", ["numpy", "pt"])
def test_a_missing_local_file_says_what_the_reference_says(
    framework: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if framework == "pt":
        # Without torch, ours refuses the framework before looking for the file (no IO for a
        # call that cannot succeed); the reference looks for the file first.
        pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    ref = raised(lambda: safetensors.safe_open("notafile", framework=framework))
    ours = raised(lambda: rt.safe_open("notafile", framework=framework))
    assert type(ref) is FileNotFoundError
    assert isinstance(ours, FileNotFoundError)
    assert isinstance(ours, rt.NotFoundError)
    assert str(ours) == str(ref) == "No such file or directory: notafile"
    # bintensors quotes the name; ours cannot know the format of a file that is not there.
    bt = raised(lambda: bintensors.safe_open("notafile", framework="np"))
    assert isinstance(bt, FileNotFoundError)
    assert str(bt) == 'No such file or directory: "notafile"'


# --- bintensors' safe_open and BintensorError ----------------------------------------------------


def small_bt_file() -> bytes:
    data: bytes = bintensors.numpy.save(
        {"a": np.arange(50, dtype=np.float32).reshape(10, 5), "b": np.ones(3, np.int64)}
    )
    return data


@pytest.mark.parametrize("index", [np.s_[2:, -6], np.s_[[0, 1]], np.s_[2:, 20], np.s_[:20]])
def test_bintensors_slice_errors_are_bintensor_errors(
    place: Callable[[str, bytes], tuple[str, str]], index: Any
) -> None:
    path, location = place("slices.bt", small_bt_file())
    with bintensors.safe_open(path, framework="np") as ref_file:
        ref = raised(lambda: ref_file.get_slice("a")[index])
    with rt.safe_open(location, framework="np") as ours_file:
        ours = raised(lambda: ours_file.get_slice("a")[index])
    assert isinstance(ref, bintensors.BintensorError)
    assert isinstance(ours, bintensors.BintensorError)
    assert isinstance(ours, rt.SliceError)
    if "out of bounds" in str(ours):
        # bintensors prints the Rust enum ("SliceOutOfRange { … }"); ours the safetensors text.
        assert str(ref).startswith(str(ours).split(":")[0])
    else:
        assert str(ours) == str(ref)


def test_bintensors_closed_unknown_and_bad_header_are_bintensor_errors(
    place: Callable[[str, bytes], tuple[str, str]],
) -> None:
    path, location = place("errors.bt", small_bt_file())
    with bintensors.safe_open(path, framework="np") as ref_file:
        ref_missing = raised(lambda: ref_file.get_tensor("zz"))
    with rt.safe_open(location, framework="np") as ours_file:
        ours_missing = raised(lambda: ours_file.get_tensor("zz"))
    assert isinstance(ours_missing, bintensors.BintensorError)
    assert str(ours_missing).startswith(str(ref_missing))
    for ref_call, ours_call in zip(closed_calls(ref_file), closed_calls(ours_file), strict=True):
        ref = raised(ref_call)
        ours = raised(ours_call)
        assert isinstance(ref, bintensors.BintensorError)
        assert isinstance(ours, bintensors.BintensorError)
        assert str(ours).startswith(str(ref))

    data = small_bt_file()
    broken = data[:8] + b"\xff" * 8 + data[16:]  # a bincode header that does not decode
    bad_path, bad_location = place("bad.bt", broken)
    ref = raised(lambda: bintensors.safe_open(bad_path, framework="np"))
    ours = raised(lambda: rt.safe_open(bad_location, framework="np"))
    assert isinstance(ref, bintensors.BintensorError)
    assert isinstance(ours, bintensors.BintensorError)
    assert isinstance(ours, rt.HeaderError)


# --- framework="pt": torch dtypes for F4, F8 and BF16 ------------------------------------------

TORCH_CASES = [
    ("F4", 4),
    ("F8_E5M2", 8),
    ("F8_E4M3", 8),
    ("F8_E8M0", 8),
    ("F8_E4M3FNUZ", 8),
    ("F8_E5M2FNUZ", 8),
    ("BF16", 16),
]


@pytest.mark.parametrize(("dtype", "bits"), TORCH_CASES)
def test_torch_tensors_match_the_reference(
    place: Callable[[str, bytes], tuple[str, str]], dtype: str, bits: int
) -> None:
    torch = pytest.importorskip("torch")
    shape = [3, 8]
    nbytes = 3 * 8 * bits // 8
    payload = bytes((i * 37 + 11) % 256 for i in range(nbytes))
    path, location = place(f"torch-{dtype}.safetensors", raw_file({"t": (dtype, shape, payload)}))
    with safetensors.safe_open(path, framework="pt") as ref_file:
        expected = ref_file.get_tensor("t")
    with rt.safe_open(location, framework="pt") as ours_file:
        got = ours_file.get_tensor("t")
        rows = ours_file.get_slice("t")[1:3]
        cols = ours_file.get_slice("t")[:, 2:6]
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    assert got.view(torch.uint8).numpy().tobytes() == payload
    # The reference cannot slice F4 (it reshapes to the logical shape); ours packs the slice.
    for part, index in (
        (rows, np.s_[1:3]),
        (cols, np.s_[:, 1:3] if dtype == "F4" else np.s_[:, 2:6]),
    ):
        want = expected[index]
        assert part.dtype == want.dtype
        assert part.shape == want.shape
        assert (
            part.view(torch.uint8).numpy().tobytes()
            == want.contiguous().view(torch.uint8).numpy().tobytes()
        )


def test_f4_with_an_odd_last_dimension_is_refused_for_torch(
    place: Callable[[str, bytes], tuple[str, str]],
) -> None:
    pytest.importorskip("torch")
    _, location = place("odd-f4.safetensors", raw_file({"t": ("F4", [2, 3], b"\x12\x34\x56")}))
    with rt.safe_open(location, framework="pt") as f:
        error = raised(lambda: f.get_tensor("t"))
    assert isinstance(error, rt.UnsupportedDtypeError)
    assert "even last dimension" in str(error)
    with rt.safe_open(location, framework="np") as f:
        assert f.get_tensor("t").shape == (2, 3)


# --- errors survive pickling (safetensors #684: they cross process boundaries) --------------------


def test_every_drop_in_error_survives_pickling(
    place: Callable[[str, bytes], tuple[str, str]],
) -> None:
    _, good = place("pickle.safetensors", small_file())
    _, bad = place("pickle-bad.safetensors", b"\x05\0\0\0\0\0\0\0{abcd")
    with rt.safe_open(good, framework="np") as f:
        errors = [raised(lambda: f.get_tensor("zz")), raised(lambda: f.get_slice("a")[20])]
    errors.append(raised(f.keys))
    errors.append(raised(lambda: rt.safe_open(bad, framework="np")))
    errors.append(raised(lambda: rt.safe_open(good, framework="np", backend="x")))
    reference = safetensors.SafetensorError("Error while deserializing header")
    assert str(pickle.loads(pickle.dumps(reference))) == str(reference)
    for error in errors:
        restored = pickle.loads(pickle.dumps(error))
        assert type(restored) is type(error)
        assert isinstance(restored, safetensors.SafetensorError)
        assert str(restored) == str(error)
        assert restored.args == error.args
        assert vars(restored) == vars(error)

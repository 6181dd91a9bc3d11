"""The pickle reader of ``.bin`` files (``formats/torch_pickle``): it runs nothing, names what
it refuses, and on any bytes gives our error or the answer ``torch.load(weights_only=True)``
gives. Pickles are written by ``torch.save`` and ``pickle.dumps`` (writers only); torch is the
oracle."""

from __future__ import annotations

import io
import os
import pickle
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import remotetensors as rt
from remotetensors.formats.torch_pickle import read_pickle
from tests.torch_bin_files import (
    DTYPE_NAMES,
    assert_same,
    index_of,
    loaded,
    payload_bin,
    rezipped,
    saved,
    torch,
)


def pickle_of(data: bytes) -> bytes:
    """The ``data.pkl`` of a ``torch.save`` file."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    return archive.read(next(n for n in archive.namelist() if n.endswith("/data.pkl")))


def refusal(data: bytes) -> rt.HeaderError:
    with pytest.raises(rt.HeaderError) as caught:
        read_pickle(data, location="x.bin")
    return caught.value


def test_a_payload_is_refused_by_its_name_and_never_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    error = refusal(pickle_of(payload_bin(str(marker))))
    assert error.kind is rt.HeaderErrorKind.FORBIDDEN_GLOBAL
    assert f"names {os.system.__module__}.system at byte " in str(error)
    assert "nothing is imported or called" in str(error)
    assert not marker.exists()


class _Calls:
    def __init__(self, target: Any, *args: Any) -> None:
        self.reduced = (target, args)

    def __reduce__(self) -> tuple[Any, ...]:
        return self.reduced


@pytest.mark.parametrize(
    ("target", "args", "named"),
    [
        (eval, ("1",), "builtins.eval"),
        (exec, ("x = 1",), "builtins.exec"),
        (subprocess.check_call, (["true"],), "subprocess.check_call"),
        (getattr, (dict, "fromkeys"), "builtins.getattr"),
        (torch.device, ("cpu",), "torch.device"),  # torch allows it; a state dict needs it not
    ],
)
def test_any_other_callable_is_refused_by_name(target: Any, args: Any, named: str) -> None:
    data = pickle.dumps({"w": _Calls(target, *args)}, protocol=2, fix_imports=False)
    error = refusal(data)
    assert error.kind is rt.HeaderErrorKind.FORBIDDEN_GLOBAL
    assert f"names {named} at byte" in str(error)


def test_state_dicts_nested_dicts_and_lists_are_named_by_their_path() -> None:
    data = pickle_of(
        saved({"model": {"w": torch.ones(2)}, "layers": [torch.zeros(3)], "epoch": 4, "lr": 0.1})
    )
    found = read_pickle(data)
    assert list(found.tensors) == ["model.w", "layers.0"]
    assert found.tensors["layers.0"].shape == (3,)


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (torch.ones(2), "a bare tensor"),
        ({"a.b": torch.ones(1), "a": {"b": torch.ones(1)}}, "two tensors are named 'a.b'"),
    ],
)
def test_what_cannot_be_named_is_refused(state: Any, words: str) -> None:
    error = refusal(pickle_of(saved(state)))
    assert error.kind is rt.HeaderErrorKind.INVALID_PICKLE
    assert words in str(error)


def test_integer_tensors_that_require_grad_are_refused_as_torch_refuses_them() -> None:
    data = pickle_of(saved({"w": torch.ones(2, dtype=torch.int64)}))
    # NEWFALSE (requires_grad) -> NEWTRUE: torch.load refuses the file too.
    flipped = data.replace(b"\x89", b"\x88", 1)
    assert "requires grad" in str(refusal(flipped))


# --- fuzzing: any bytes give our error or torch's answer ---------------------------------------

FUZZ = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)


@FUZZ
@given(st.binary(max_size=400))
def test_any_bytes_give_our_error_or_an_answer(data: bytes) -> None:
    _our_error_or_an_answer(data)


def _our_error_or_an_answer(data: bytes) -> None:
    """Reading ``data`` gives tensors, or a HeaderError of the pickle's kinds: nothing else."""
    kind = None
    try:
        read_pickle(data)
    except rt.HeaderError as exc:
        kind = exc.kind
    assert kind in (None, rt.HeaderErrorKind.INVALID_PICKLE, rt.HeaderErrorKind.FORBIDDEN_GLOBAL)


# Opcodes with arguments that fit them, so that generated programs get past the first byte.
_PIECES = [
    b"(", b")", b"]", b"}", b"N", b"\x88", b"\x89", b"t", b"\x85", b"\x86", b"\x87", b"R",
    b"b", b"a", b"e", b"s", b"u", b"Q", b".", b"K\x03", b"K\x00", b"J\xff\xff\xff\xff",
    b"M\x00\x01", b"\x8a\x01\x05", b"G" + bytes(8), b"X\x01\x00\x00\x00a", b"U\x03cpu",
    b"q\x00", b"q\x01", b"h\x00", b"h\x01", b"r\x00\x00\x00\x00", b"j\x00\x00\x00\x00",
    b"ccollections\nOrderedDict\n", b"ctorch._utils\n_rebuild_tensor_v2\n",
    b"ctorch._utils\n_rebuild_parameter\n", b"ctorch\nFloatStorage\n", b"ctorch\nSize\n",
    b"X\x07\x00\x00\x00storage", b"X\x01\x00\x00\x000", b"cposix\nsystem\n",
]  # fmt: skip


@FUZZ
@given(st.lists(st.sampled_from(_PIECES), max_size=60))
def test_generated_programs_give_our_error_or_an_answer(pieces: list[bytes]) -> None:
    _our_error_or_an_answer(b"\x80\x02" + b"".join(pieces))


SEED = saved(
    {
        "w": torch.arange(12, dtype=torch.float32).reshape(3, 4),
        "b": torch.arange(4, dtype=torch.int64),
        "h": torch.ones(2, 2, dtype=torch.bfloat16),
    }
)
SEED_PICKLE = pickle_of(SEED)


@st.composite
def mutated_pickles(draw: st.DrawFn) -> bytes:
    """``SEED``'s pickle with a few bytes changed, inserted or removed."""
    data = bytearray(SEED_PICKLE)
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["set", "insert", "delete"]))
        if kind == "set":
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=4))
        elif len(data) > 1:
            del data[at]
    return bytes(data)


@FUZZ
@given(mutated_pickles())
def test_mutated_state_dicts_give_our_error_or_torchs_answer(data: bytes) -> None:
    """Whatever we accept, torch.load reads the same way: names, dtypes, shapes, values."""
    file = rezipped(SEED, lambda name, member: data if name.endswith("/data.pkl") else member)
    try:
        found, _ = index_of(file)
    except rt.HeaderError:
        return
    assert_same(file, found)  # torch.load raising here fails the test: we accepted too much


@FUZZ
@given(
    st.dictionaries(
        st.text(alphabet="abc._", min_size=1, max_size=6),
        st.tuples(
            st.sampled_from(sorted(DTYPE_NAMES, key=str)),
            st.lists(st.integers(0, 4), max_size=3),
            st.sampled_from(["plain", "transposed", "sliced", "expanded"]),
        ),
        max_size=5,
    )
)
def test_generated_state_dicts_read_as_torch_reads_them(
    spec: dict[str, tuple[Any, list[int], str]],
) -> None:
    state = {}
    for name, (dtype, shape, view) in spec.items():
        tensor = (torch.arange(max(1, int(torch.tensor(shape).prod()))) % 7).to(dtype)
        tensor = tensor[: int(torch.tensor(shape).prod())].reshape(shape)
        if view == "transposed" and tensor.dim() >= 2:
            tensor = tensor.transpose(0, 1)
        elif view == "sliced" and tensor.dim() >= 1 and tensor.shape[0] > 1:
            tensor = tensor[1:]
        elif view == "expanded" and tensor.dim() >= 1 and tensor.shape[-1] == 1:
            tensor = tensor.expand(*tensor.shape[:-1], 3)
        state[name] = tensor
    data = saved(state)
    found, _ = index_of(data, window=128)
    assert_same(data, found)
    assert loaded(data).keys() == state.keys()

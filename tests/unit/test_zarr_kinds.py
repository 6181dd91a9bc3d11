"""The ml_dtypes kinds registered with zarr-python: written and read back exactly, fill values
in the forms the Zarr v3 spec allows, and a name someone else registered left alone."""

from __future__ import annotations

import json
from typing import Any

import ml_dtypes
import numpy as np
import pytest

zarr = pytest.importorskip("zarr", reason="the zarr extra is not installed")

from zarr.core.dtype import data_type_registry  # noqa: E402
from zarr.core.dtype.npy.float import Float16  # noqa: E402

from remotetensors.dtypes import DTYPES  # noqa: E402
from remotetensors.integrations.zarr.dtypes import ZARR_DTYPES  # noqa: E402
from remotetensors.integrations.zarr.kinds import KINDS, usable  # noqa: E402


@pytest.mark.parametrize("name", sorted(KINDS))
def test_each_kind_writes_and_reads_back_bit_exact(name: str) -> None:
    native = np.dtype(getattr(ml_dtypes, name))
    rng = np.random.default_rng(len(name))
    codes = rng.integers(0, 256, (9, 5), dtype=np.uint8)
    if native.itemsize == 2:
        codes = rng.integers(0, 2**16, (9, 5), dtype=np.uint16)
    values = codes.view(native) if codes.dtype.itemsize == native.itemsize else codes
    if name.startswith(("float4", "float6")):  # one value a byte: the low bits only
        values = (codes & (0x0F if name.startswith("float4") else 0x3F)).view(native)
    store = zarr.storage.MemoryStore()
    array = zarr.create_array(store, shape=values.shape, chunks=(4, 5), dtype=native)
    array[...] = values
    assert json.loads(store._store_dict["zarr.json"].to_bytes())["data_type"] == name
    back = zarr.open_array(store, mode="r")[...]
    assert back.dtype == native
    assert back.tobytes() == values.tobytes()


@pytest.mark.parametrize(
    ("fill", "bits"),
    [
        (1.5, "3fc0"),
        ("NaN", "7fc0"),
        ("Infinity", "7f80"),
        ("-Infinity", "ff80"),
        ("0x3f80", "3f80"),
    ],
)
def test_fill_values_as_the_spec_writes_them(fill: Any, bits: str) -> None:
    bf16 = KINDS["bfloat16"]()
    value = bf16.from_json_scalar(fill, zarr_format=3)
    assert np.array(value, dtype=ml_dtypes.bfloat16).tobytes()[::-1].hex() == bits
    back = bf16.to_json_scalar(value, zarr_format=3)
    assert back == (fill if not str(fill).startswith("0x") else 1.0)
    with pytest.raises(TypeError):
        bf16.cast_scalar("a word")


def test_every_checkpoint_dtype_has_a_kind_or_a_core_type() -> None:
    for name, dtype in ZARR_DTYPES.items():
        if dtype.registered:
            assert KINDS[dtype.v3].native() == DTYPES[name].numpy
        else:
            assert np.dtype(dtype.v2) == DTYPES[name].numpy
        assert usable(dtype)


def test_a_name_registered_by_another_library_for_another_type_is_not_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(data_type_registry.contents, "bfloat16", Float16)
    assert not usable(ZARR_DTYPES["BF16"])
    monkeypatch.delitem(data_type_registry.contents, "bfloat16")
    assert not usable(ZARR_DTYPES["BF16"])

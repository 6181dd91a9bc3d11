"""The dtype table and sub-byte packing, checked against known bytes, the reference and torch."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from remotetensors.dtypes import DTYPES, dtype, pack, unpack
from remotetensors.errors import UnsupportedDtypeError
from tests.reference import ReferenceView, reference_read, write_reference


def test_all_22_dtypes_with_bits() -> None:
    assert len(DTYPES) == 22
    assert {n: d.bits for n, d in DTYPES.items() if d.bits not in (8, 16, 32, 64)} == {
        "F4": 4,
        "F6_E2M3": 6,
        "F6_E3M2": 6,
    }
    assert DTYPES["C64"].bits == 64
    assert DTYPES["F8_E4M3"].numpy == np.dtype(ml_dtypes.float8_e4m3fn)
    assert DTYPES["F8_E8M0"].numpy == np.dtype(ml_dtypes.float8_e8m0fnu)


def test_unknown_names_are_rejected_case_sensitively() -> None:
    with pytest.raises(UnsupportedDtypeError, match="unknown dtype 'f32'"):
        dtype("f32")
    with pytest.raises(TypeError):
        dtype("C128")


def test_f8_known_byte_patterns() -> None:
    raw = np.array([0x78, 0x7E, 0x7F, 0x38], dtype=np.uint8)
    e4m3 = raw.view(DTYPES["F8_E4M3"].numpy).astype(np.float32)
    assert e4m3[0] == 256.0  # inf in float8_e4m3, 256 in the fn variant that safetensors means
    assert e4m3[1] == 448.0
    assert np.isnan(e4m3[2])
    assert e4m3[3] == 1.0
    assert raw[3:].view(DTYPES["F8_E5M2"].numpy).astype(np.float32)[0] == 0.5
    assert np.uint8(127).reshape(1).view(DTYPES["F8_E8M0"].numpy).astype(np.float32)[0] == 1.0


@pytest.mark.parametrize("name", [n for n, d in DTYPES.items() if not d.packed])
def test_decoded_values_equal_the_reference_writer(name: str) -> None:
    rng = np.random.default_rng(1)
    dt = DTYPES[name]
    values = (rng.standard_normal(16) * 4).astype(np.float32)
    if name == "BOOL":
        array = values > 0
    elif name == "C64":
        array = (values + 1j).astype(np.complex64)
    elif name == "F8_E8M0":
        array = np.abs(values).astype(dt.numpy)
    else:
        array = values.astype(dt.numpy)
    data = write_reference({"x": array})
    view = reference_read(data)
    assert isinstance(view, ReferenceView)
    stored_dtype, _, payload = view.tensors["x"]
    assert stored_dtype == name
    decoded = np.frombuffer(payload, dtype=dt.numpy)
    assert decoded.tobytes() == array.tobytes()


def test_f4_bit_order_low_nibble_first() -> None:
    values = np.array([0.5, 6.0, -1.0, 0.0], dtype=ml_dtypes.float4_e2m1fn)
    packed = pack(values, DTYPES["F4"])
    # 0.5 is code 0x1 and 6.0 is 0x7: element 0 in the low nibble.
    assert packed.tolist() == [0x71, 0x0A]
    assert unpack(packed, DTYPES["F4"], 4).tolist() == values.tolist()


def test_f6_bit_order() -> None:
    dt = DTYPES["F6_E2M3"]
    codes = np.array([0x01, 0x3F, 0x20, 0x15], dtype=np.uint8)
    packed = pack(codes.view(dt.numpy), dt)
    word = 0x01 | (0x3F << 6) | (0x20 << 12) | (0x15 << 18)
    assert packed.tolist() == [word & 0xFF, (word >> 8) & 0xFF, word >> 16]
    assert unpack(packed, dt, 4).view(np.uint8).tolist() == codes.tolist()


@given(st.sampled_from(["F4", "F6_E2M3", "F6_E3M2"]), st.data())
def test_pack_unpack_round_trip(name: str, data: st.DataObject) -> None:
    dt = DTYPES[name]
    per_group = 2 if dt.bits == 4 else 4
    count = per_group * data.draw(st.integers(0, 20))
    mask = (1 << dt.bits) - 1
    codes = np.array(
        data.draw(st.lists(st.integers(0, mask), min_size=count, max_size=count)), dtype=np.uint8
    )
    values = codes.view(dt.numpy)
    packed = pack(values, dt)
    assert packed.size == count * dt.bits // 8
    assert unpack(packed, dt, count).view(np.uint8).tolist() == codes.tolist()


def test_f4_bit_order_matches_torch() -> None:
    """torch's own float4_e2m1fn_x2 packing of the same values gives the same bytes."""
    torch = pytest.importorskip("torch")
    helpers = pytest.importorskip("torch.testing._internal.common_quantized")
    values = np.array([0.5, 6.0, -1.0, 0.0, 1.5, -4.0, 3.0, -0.5], dtype=np.float32)
    codes = helpers._f32_to_floatx_unpacked(torch.from_numpy(values), 2, 1)
    torch_bytes = helpers.pack_uint4(codes).view(torch.float4_e2m1fn_x2)
    ours = pack(values.astype(ml_dtypes.float4_e2m1fn), DTYPES["F4"])
    assert torch_bytes.view(torch.uint8).numpy().tolist() == ours.tolist()
    assert unpack(ours, DTYPES["F4"], 8).astype(np.float32).tolist() == values.tolist()


def test_packed_dtypes_report_byte_sizes() -> None:
    assert DTYPES["F4"].nbytes(10) == 5
    assert DTYPES["F6_E3M2"].nbytes(8) == 6
    assert DTYPES["F4"].packed
    assert not DTYPES["F32"].packed
    with pytest.raises(UnsupportedDtypeError):
        unpack(np.zeros(4, np.uint8), DTYPES["F32"], 1)

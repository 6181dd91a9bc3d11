"""bintensors files through safe_open, over HTTP and locally, against bintensors.safe_open."""

from __future__ import annotations

import hashlib
import itertools
from pathlib import Path

import numpy as np
import pytest
from bintensors import safe_open as bt_open
from bintensors.numpy import save_with_checksum

import remotetensors as rt
from tests.reference import ReferenceView, bintensors_read
from tests.servers import Log
from tests.unit.test_bintensors_format import every_dtype, written


@pytest.fixture
def bt_file(static: tuple[str, Log, Path], tmp_path: Path) -> tuple[str, Path, bytes]:
    base, _, root = static
    tensors = every_dtype()
    tensors["long"] = np.arange(70000, dtype=np.int32)  # varint widths in the offsets
    tensors["x" * 300] = np.ones((2, 251), np.int16)
    digest, data = save_with_checksum(tensors, metadata={"origin": "test"})
    (root / "model.bt").write_bytes(data)
    local = tmp_path / "model.bt"
    local.write_bytes(data)
    return f"{base}/model.bt", local, digest


@pytest.mark.parametrize("where", ["http", "local", "file-url"])
def test_bintensors_equal_the_reference(bt_file: tuple[str, Path, bytes], where: str) -> None:
    url, local, _ = bt_file
    location = {"http": url, "local": str(local), "file-url": local.as_uri()}[where]
    view = bintensors_read(local.read_bytes())
    assert isinstance(view, ReferenceView)
    with rt.safe_open(location) as f, bt_open(str(local), framework="numpy") as ref:
        assert f.index.format == "bintensors"
        assert f.keys() == sorted(ref.keys())
        assert f.offset_keys() == ref.offset_keys()
        assert f.metadata() == ref.metadata()
        for name in ref.keys():  # noqa: SIM118 (safe_open is not iterable)
            got = f.get_tensor(name)
            dtype_name, shape, payload = view.tensors[name]
            assert got.dtype == rt.DTYPES[dtype_name].numpy, name
            assert got.shape == shape, name
            assert got.tobytes() == payload, name
            if not dtype_name.startswith("F8"):  # the reference's numpy reader fails on F8
                expected = ref.get_tensor(name)
                assert got.dtype == expected.dtype, name
                assert got.tobytes() == expected.tobytes(), name
        rows = f.get_slice("long")[100:200]
        assert rows.tobytes() == ref.get_slice("long")[100:200].tobytes()


def test_checksum_verifies_over_http_and_locally(bt_file: tuple[str, Path, bytes]) -> None:
    url, local, digest = bt_file
    assert rt.verify_checksum(url, digest) == digest
    assert rt.verify_checksum(str(local), digest.hex()) == digest
    sha256 = hashlib.sha256(local.read_bytes()).digest()
    assert rt.verify_checksum(url, sha256, hasher="sha256") == sha256
    with pytest.raises(rt.ChecksumMismatchError, match="checksum mismatch") as err:
        rt.verify_checksum(url, b"\x00" * 20)
    assert url in str(err.value)
    assert digest.hex() in str(err.value)


def test_checksum_streams_the_file_once(static: tuple[str, Log, Path]) -> None:
    base, log, root = static
    data = written({"big": np.zeros(20 * 1024 * 1024, np.uint8)})
    (root / "big.bt").write_bytes(data)
    log.clear()
    rt.verify_checksum(f"{base}/big.bt", hashlib.sha1(data).digest())
    assert log.total_bytes == len(data)
    covered = sorted(log.ranges("big.bt"))
    assert covered[0][0] == 0
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))

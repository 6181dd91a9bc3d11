"""Kerchunk references and the VirtualiZarr parser, read back by fsspec, zarr and VirtualiZarr
without our reader: tensors equal to the reference, hub URLs pinned to the commit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import remotetensors as rt
from remotetensors.cli import main
from tests import minilm
from tests.hub_standin import HubStandIn
from tests.reference import write_reference
from tests.servers import FaultyServer

zarr = pytest.importorskip("zarr", reason="the zarr extra is not installed")
fsspec = pytest.importorskip("fsspec")


def read_references(refs: dict[str, Any]) -> Any:
    """The root group of ``refs``, read by fsspec's reference filesystem and zarr alone."""
    fs = fsspec.filesystem(
        "reference",
        fo=refs,
        remote_protocol="http",
        # aiohttp asks for gzip by default, and the hub's CDN (CloudFront) answers a ranged
        # request that accepts gzip with the whole file (huggingface_hub#3778): as the docs
        # tell kerchunk users, ask for identity.
        remote_options={"asynchronous": True, "headers": {"Accept-Encoding": "identity"}},
        asynchronous=True,
    )
    store = zarr.storage.FsspecStore(fs, read_only=True, path="")
    return zarr.open_group(store, mode="r", zarr_format=2)


def same(got: np.ndarray[Any, Any], want: np.ndarray[Any, Any]) -> bool:
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


@pytest.fixture
def minilm_hub(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> str:
    """The MiniLM repo on the hub stand-in; returns its commit."""
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    return hub.add(minilm.REPO, minilm.files())


def test_kerchunk_references_of_minilm_read_by_fsspec_and_zarr_equal_the_reference(
    hub: HubStandIn, minilm_hub: str
) -> None:
    with rt.open_model(f"hf://{minilm.REPO}") as m:
        hub.log.clear()
        refs = m.to_kerchunk()
        assert hub.log.entries == []  # from the headers alone
    assert refs["version"] == 1
    pinned = f"{hub.endpoint}/{minilm.REPO}/resolve/{minilm_hub}/model.safetensors"
    chunks = [v for v in refs["refs"].values() if isinstance(v, list)]
    assert chunks
    assert {url for url, _, _ in chunks} == {pinned}
    # Every tensor byte is named once (chunks may reach past a tensor into the next bytes).
    root = read_references(json.loads(json.dumps(refs)))  # as written to disk
    assert json.loads(refs["refs"][".zattrs"])["metadata"] == {"format": "pt"}
    assert sorted(root.array_keys()) == sorted(minilm.tensors())
    for name, want in minilm.tensors().items():
        assert same(root[name][...], want), name
    emb = root[minilm.EMBEDDINGS]
    assert emb.chunks[0] * emb.shape[1] * 4 <= rt.options.DEFAULT_ZARR_CHUNK_BYTES
    # xarray reads the same references (v2: zeros are values, not missing).
    xr = pytest.importorskip("xarray")
    ds = xr.open_dataset(
        "reference://",
        engine="zarr",
        backend_kwargs={
            "consolidated": False,
            "zarr_format": 2,
            "storage_options": {
                "fo": refs,
                "remote_protocol": "http",
                "remote_options": {
                    "asynchronous": True,
                    "headers": {"Accept-Encoding": "identity"},  # as read_references says
                },
            },
        },
        chunks=None,
    )
    ids = ds["embeddings.position_ids"]
    assert ids.dims == ("embeddings.position_ids.dim_0", "embeddings.position_ids.dim_1")
    assert same(ids.values, minilm.tensors()["embeddings.position_ids"])  # 0 stays 0


def test_kerchunk_of_bf16_and_float8_reads_once_the_dtypes_are_registered(
    faulty: FaultyServer,
) -> None:
    rng = np.random.default_rng(6)
    tensors = {
        "bf16": rng.standard_normal((70, 9)).astype(ml_dtypes.bfloat16),
        "e4m3": (rng.standard_normal((33, 4)) * 100).astype(ml_dtypes.float8_e4m3fn),
        "e5m2": rng.standard_normal((12,)).astype(ml_dtypes.float8_e5m2),
        "f32": rng.standard_normal((101, 3)).astype(np.float32),  # the file's last tensor
    }
    tensors["e4m3"][0, 0] = 256  # byte 0x78: 256 in e4m3fn, inf in the registry's e4m3
    url = faulty.put("m.safetensors", write_reference(tensors))
    with rt.open_model(url) as m:
        refs = m.to_kerchunk(chunk_bytes=100)
    zarray = json.loads(refs["refs"]["e4m3/.zarray"])
    assert zarray["dtype"] == "float8_e4m3fn"  # 0x78 is 256 here: not the registry's e4m3
    from remotetensors.integrations.zarr import register_dtypes

    register_dtypes()
    root = read_references(refs)
    for name, want in tensors.items():
        assert same(root[name][...], want), name
    assert float(root["e4m3"][0, 0]) == 256.0
    # kerchunk's own way from references to a zarr store reads them the same.
    kerchunk_utils = pytest.importorskip("kerchunk.utils", reason="kerchunk is not installed")
    store = kerchunk_utils.refs_as_store(refs, read_only=True, remote_protocol="http")
    via_kerchunk = zarr.open_group(store, mode="r", zarr_format=2)
    for name, want in tensors.items():
        assert same(via_kerchunk[name][...], want), name


def test_packed_and_quantized_tensors_are_left_out_with_a_warning_naming_them(
    faulty: FaultyServer, tmp_path: Path
) -> None:
    from remotetensors.dtypes import DTYPES, pack
    from tests.reference import raw_file

    values = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).reshape(4, 4)
    packed = pack(values, DTYPES["F4"]).tobytes()
    header = {
        "f4": {"dtype": "F4", "shape": [4, 4], "data_offsets": [0, 8]},
        "w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]},
    }
    data = raw_file(json.dumps(header), packed + np.ones(2, np.float32).tobytes(), pad=True)
    with rt.open_model(faulty.put("q.safetensors", data)) as m:
        with pytest.warns(
            rt.LeftOutWarning, match=r"tensor f4 is left out: its F4 values are packed"
        ):
            refs = m.to_kerchunk()
        # The store unpacks them: every tensor is there.
        group = zarr.open_group(m.as_zarr_store(), mode="r")
        assert same(group["f4"][...], values)
    assert "f4/.zarray" not in refs["refs"]
    assert "w/.zarray" in refs["refs"]

    gguf_files = pytest.importorskip("tests.gguf_files")
    path = tmp_path / "m.gguf"
    rng = np.random.default_rng(7)
    q8 = gguf_files.quantized(rng, gguf_files.Q.Q8_0, (4, 64))
    gguf_files.write_gguf(
        path, {"q8": (q8, gguf_files.Q.Q8_0), "f": (np.ones((3, 2), np.float32), None)}
    )
    with rt.open_model(path) as m:
        with pytest.warns(rt.LeftOutWarning, match="tensor q8 is left out: its dtype Q8_0"):
            group = zarr.open_group(m.as_zarr_store(), mode="r")
        assert list(group.array_keys()) == ["f"]
        assert same(group["f"][...], m.get_tensor("f"))


def test_the_cli_writes_kerchunk_references_with_info(
    faulty: FaultyServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tensors = {"w": np.arange(60, dtype=np.float32).reshape(20, 3)}
    url = faulty.put("m.safetensors", write_reference(tensors))
    out = tmp_path / "refs.json"
    assert main(["info", url, "--kerchunk", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"kerchunk:   {out}" in printed
    refs = json.loads(out.read_text())
    with rt.open_model(url) as m:
        assert refs == m.to_kerchunk()
    assert same(read_references(refs)["w"][...], tensors["w"])
    # kerchunk's tooling takes them: its inlining of small chunks reads every reference.
    kerchunk_utils = pytest.importorskip("kerchunk.utils", reason="kerchunk is not installed")
    inlined = kerchunk_utils.do_inline(refs, 10_000, remote_protocol="http")
    assert not any(isinstance(v, list) for v in inlined.values())
    assert same(read_references({"version": 1, "refs": inlined})["w"][...], tensors["w"])
    assert main(["info", url, "--json", "--kerchunk", str(out)]) == 0
    assert json.loads(capsys.readouterr().out)["kerchunk"] == str(out)


def test_the_virtualizarr_parser_opens_a_checkpoint(faulty: FaultyServer, tmp_path: Path) -> None:
    virtualizarr = pytest.importorskip("virtualizarr", reason="VirtualiZarr is not installed")
    from obspec_utils.registry import ObjectStoreRegistry
    from obstore.store import HTTPStore, LocalStore

    from remotetensors.integrations.zarr import SafetensorsParser

    rng = np.random.default_rng(8)
    tensors = {
        "emb": rng.standard_normal((300, 8)).astype(np.float32),
        "bf": rng.standard_normal((50, 4)).astype(ml_dtypes.bfloat16),
        "scale": np.array(0.5, dtype=np.float32),
    }
    data = write_reference(tensors)
    (tmp_path / "m.safetensors").write_bytes(data)
    url = faulty.put("m.safetensors", data)
    registry = ObjectStoreRegistry(
        {
            "file://": LocalStore(),
            faulty.url: HTTPStore.from_url(faulty.url, client_options={"allow_http": True}),
        }
    )
    parser = SafetensorsParser(chunk_bytes=256)
    for location in ((tmp_path / "m.safetensors").as_uri(), url):
        vds = virtualizarr.open_virtual_dataset(location, registry=registry, parser=parser)
        assert set(vds.data_vars) == set(tensors)
        assert vds["emb"].shape == (300, 8)
        assert vds["emb"].dtype == np.float32
        assert vds["bf"].dtype == ml_dtypes.bfloat16
        loaded = virtualizarr.open_virtual_dataset(
            location, registry=registry, parser=parser, loadable_variables=list(tensors)
        )
        for name, want in tensors.items():
            assert same(loaded[name].values, want), (location, name)


def test_kerchunk_references_of_a_local_file_name_its_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tensors = {"w": np.arange(24, dtype=np.int16).reshape(8, 3)}
    (tmp_path / "m.safetensors").write_bytes(write_reference(tensors))
    monkeypatch.chdir(tmp_path)
    with rt.open_model("m.safetensors") as m:
        refs = m.to_kerchunk(chunk_bytes=12)
    assert refs["refs"]["w/0.0"][0] == str(tmp_path / "m.safetensors")
    fs = fsspec.filesystem("reference", fo=refs, asynchronous=True)
    root = zarr.open_group(zarr.storage.FsspecStore(fs, read_only=True), mode="r", zarr_format=2)
    assert root["w"].chunks == (2, 3)
    assert same(root["w"][...], tensors["w"])

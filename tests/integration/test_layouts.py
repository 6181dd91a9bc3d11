"""Tensors that are not one plain row-major range of their file, walked through every consumer.

A PyTorch ``.bin`` holds views of storages: a transposed weight, an expanded one (stride 0), a
permuted one, a view at a storage offset, two names of one tied tensor. The index says each
tensor's layout (:class:`remotetensors.TensorLayout`), and every path that reads bytes either
gives the values ``torch.load(weights_only=True)`` gives or refuses with an error that names
the tensor: ``get_tensor``, slices, ``read_into``, ``load_into``, ``iter_tensors``, the Zarr
store, kerchunk references, ``to_dask``, and the counts. Each check here failed on 54875e0
(review findings 1, 2, 3, 6, 10 and 11 of round four).
"""

from __future__ import annotations

import io
import json
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.reading.file import TensorPiece
from tests.servers import Log
from tests.torch_bin_files import loaded, saved, torch

BASE = torch.arange(48, dtype=torch.float32).reshape(6, 8)
TIED = torch.arange(20, dtype=torch.float32).reshape(5, 4) / 7


def views() -> dict[str, Any]:
    """A state dict of views: each name below is one layout a ``.bin`` can hold."""
    cube = torch.arange(2 * 3 * 4, dtype=torch.float32).reshape(2, 3, 4)
    return {
        "plain.weight": BASE,
        "transposed.weight": BASE.t(),
        "expanded.weight": torch.arange(8, dtype=torch.float32).expand(5, 8),
        "permuted.weight": cube.permute(2, 0, 1),
        "offset.weight": BASE[2],  # storage offset 16, contiguous
        "embed.weight": TIED,
        "head.weight": TIED,  # tied: the same tensor under a second name
    }


STRIDED = ["transposed.weight", "expanded.weight", "permuted.weight"]
ROW_MAJOR = ["plain.weight", "offset.weight", "embed.weight", "head.weight"]


class Net(torch.nn.Module):  # type: ignore[misc]
    """A module whose state has the names of :func:`views`, ties included."""

    def __init__(self) -> None:
        super().__init__()
        for name, tensor in views().items():
            owner = torch.nn.Module()
            owner.weight = torch.nn.Parameter(torch.zeros(tensor.shape))
            self.add_module(name.split(".")[0], owner)
        self.head.weight = self.embed.weight  # tied, as an LM head to its embedding


@pytest.fixture(scope="module")
def data() -> bytes:
    return saved(views())


@pytest.fixture(params=["local", "http"])
def location(
    request: pytest.FixtureRequest, data: bytes, tmp_path: Path, static: tuple[str, Log, Path]
) -> str:
    """The ``.bin`` on disk and behind a static HTTP server."""
    if request.param == "local":
        path = tmp_path / "pytorch_model.bin"
        path.write_bytes(data)
        return str(path)
    base, _, root = static
    (root / "views.bin").write_bytes(data)
    return f"{base}/views.bin"


def reference(data: bytes) -> dict[str, np.ndarray[Any, Any]]:
    return {name: tensor.numpy() for name, tensor in loaded(data).items()}


def test_the_index_says_each_layout(data: bytes, tmp_path: Path) -> None:
    with rt.open_model(_local(data, tmp_path)) as m:
        infos = {name: m.tensors[name] for name in views()}
    for name, tensor in views().items():
        layout = infos[name].layout
        assert layout is not None
        assert layout.predicted
        assert layout.strides == tuple(tensor.stride())
        assert infos[name].row_major is tensor.is_contiguous()
    assert rt.TensorInfo("x", "F32", (2, 3), 0, 24).row_major


def test_get_tensor_and_slices_give_torchs_values(location: str, data: bytes) -> None:
    want = reference(data)
    with rt.open_model(location) as m:
        for name in views():
            np.testing.assert_array_equal(m.get_tensor(name), want[name])
        got = m.get_tensors(list(views()))
        for name in views():
            np.testing.assert_array_equal(got[name], want[name])
        np.testing.assert_array_equal(
            m.get_slice("transposed.weight")[1:5, 2:4], want["transposed.weight"][1:5, 2:4]
        )
        np.testing.assert_array_equal(
            m.get_slice("permuted.weight")[:, 1], want["permuted.weight"][:, 1]
        )


def test_read_into_refuses_a_strided_view_and_reads_the_others(location: str, data: bytes) -> None:
    want = reference(data)

    async def run() -> None:
        async with await rt.open_model_async(location) as m:
            out = np.empty(48, np.float32)
            with pytest.raises(rt.LayoutError, match=r"transposed.weight.*strides \[1, 8\]"):
                await m.read_into([TensorPiece("transposed.weight", 0, out.data.cast("B"))])
            row = np.empty(8, np.float32)
            await m.read_into([TensorPiece("offset.weight", 0, row.data.cast("B"))])
            np.testing.assert_array_equal(row, want["offset.weight"])

    rt.models.sync.run_sync(run())


@pytest.mark.parametrize("bound", [None, 64 * 1024])
@pytest.mark.parametrize("dtype", [None, "bfloat16"])
def test_load_into_fills_every_view_in_order(
    location: str, data: bytes, bound: int | None, dtype: str | None
) -> None:
    net = Net()
    if dtype is not None:
        net = net.to(getattr(torch, dtype))
    if bound is None:
        report = rt.load_into(net, location)
    else:
        report = rt.load_into(net, location, max_in_flight_bytes=bound)
    assert not report.missing
    assert not report.unexpected
    want = loaded(data)
    state = net.state_dict()
    for name, tensor in want.items():
        assert torch.equal(state[name], tensor.to(state[name].dtype)), name
    assert net.head.weight is net.embed.weight  # still tied


def test_iter_tensors_gives_every_view_in_order(location: str, data: bytes) -> None:
    want = loaded(data)
    got = dict(rt.iter_tensors(location))
    assert set(got) == set(want)
    for name, tensor in want.items():
        assert torch.equal(got[name], tensor), name
        assert got[name].is_contiguous()


def test_zarr_store_leaves_strided_views_out_and_reads_the_rest(location: str, data: bytes) -> None:
    zarr = pytest.importorskip("zarr", reason="the zarr extra is not installed")
    want = reference(data)
    with rt.open_model(location) as m, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        group = zarr.open_group(m.as_zarr_store(chunk_bytes=64), mode="r")
        left_out = [str(w.message) for w in caught if issubclass(w.category, rt.LeftOutWarning)]
        for name in STRIDED:
            assert any(f"tensor {name} is left out" in text for text in left_out), name
            assert name not in group
        for name in ROW_MAJOR:
            np.testing.assert_array_equal(group[name][...], want[name])


def test_kerchunk_leaves_strided_views_out_and_points_at_the_confirmed_bytes(
    static: tuple[str, Log, Path], data: bytes
) -> None:
    pytest.importorskip("zarr", reason="the zarr extra is not installed")
    base, _, root = static
    (root / "refs.bin").write_bytes(data)
    want = reference(data)
    with rt.open_model(f"{base}/refs.bin") as m, pytest.warns(rt.LeftOutWarning) as caught:
        refs = m.to_kerchunk(chunk_bytes=64)
    left_out = " ".join(str(w.message) for w in caught)
    for name in STRIDED:
        assert f"tensor {name} is left out" in left_out
        assert f"{name}/.zarray" not in refs["refs"]
    from tests.integration.test_zarr_references import read_references

    group = read_references(refs)
    for name in ROW_MAJOR:
        np.testing.assert_array_equal(group[name][...], want[name])


def test_to_dask_reads_row_major_tensors_and_refuses_views(location: str, data: bytes) -> None:
    pytest.importorskip("dask")
    want = reference(data)
    with rt.open_model(location) as m:
        for name in ROW_MAJOR:  # the sync Model confirms the storages' offsets first
            np.testing.assert_array_equal(np.asarray(m.to_dask(name)), want[name])
        for name in STRIDED:
            with pytest.raises(rt.LayoutError, match=name):
                m.to_dask(name)
    with rt.safe_open(location) as f:
        np.testing.assert_array_equal(np.asarray(f.to_dask("offset.weight")), want["offset.weight"])


def test_counts_take_a_tie_once_and_each_byte_once(data: bytes, tmp_path: Path) -> None:
    net = Net()
    storages = {
        t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in views().values()
    }
    with rt.open_model(_local(data, tmp_path)) as m:
        assert m.num_parameters == sum(p.numel() for p in net.parameters())  # ties once
        assert m.nbytes == sum(storages.values())  # each storage's bytes once
        assert m.memory().weights_bytes == m.nbytes
        assert m.true_count.total == m.num_parameters
        assert sum(m.true_count.by_dtype(m.tensors).values()) == m.num_parameters
        assert len(data) > m.nbytes


def test_the_cli_counts_a_tie_once(
    data: bytes, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from remotetensors.cli.app import main

    assert main(["params", _local(data, tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    net = Net()
    assert report["parameters"] == report["total"] == sum(p.numel() for p in net.parameters())
    assert report["bytes"] < len(data)


def test_an_expanded_view_is_not_laid_out_past_its_bound(tmp_path: Path) -> None:
    # 4 bytes of the file, 512 MiB laid out: refused, naming the tensor (finding 6).
    path = tmp_path / "expanded.bin"
    path.write_bytes(saved({"e": torch.ones(1).expand(2**27)}))
    with rt.open_model(path) as m:
        assert m.tensors["e"].nbytes == 4
        with pytest.raises(rt.LayoutError, match="tensor e is an expanded view"):
            m.get_tensor("e")
        with pytest.raises(rt.LayoutError, match="tensor e"):
            m.get_slice("e")[:4]
    small = tmp_path / "small.bin"  # an expanded view within the bound reads as torch does
    small.write_bytes(saved({"e": torch.arange(3.0).expand(1000, 3)}))
    with rt.open_model(small) as m:
        np.testing.assert_array_equal(m.get_tensor("e"), np.tile(np.arange(3.0), (1000, 1)))


def padded_after_storage(data: bytes) -> bytes:
    """``data``'s members written again, with 8 bytes of padding after the first storage's
    data: a valid zip (its directory names every member where it is; ``torch.load`` reads
    it), whose storage bytes are not where the record's end predicts them."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            target.writestr(info.filename, source.read(info.filename))
            if info.filename.endswith("/data/0"):
                out.write(b"\0" * 8)
                target.start_dir = out.tell()  # the next record starts after the padding
    return out.getvalue()


def test_a_storage_not_where_predicted_fails_every_path_never_shifts(tmp_path: Path) -> None:
    data = padded_after_storage(saved({"a": torch.arange(16.0), "b": torch.arange(4.0)}))
    assert torch.equal(loaded(data)["a"], torch.arange(16.0))  # torch reads it
    path = tmp_path / "padded.bin"
    path.write_bytes(data)

    class Two(torch.nn.Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("a", torch.zeros(16))
            self.register_buffer("b", torch.zeros(4))

    module = Two()
    with pytest.raises(rt.IncompleteLoadError, match="puts its bytes at") as caught:
        rt.load_into(module, path)
    assert isinstance(caught.value.__cause__, rt.HeaderError)
    assert not module.a.any()  # checked before a byte was read into it
    with rt.open_model(path) as m:
        with pytest.raises(rt.HeaderError):
            m.get_tensor("a")
        with pytest.raises(rt.HeaderError):
            m.to_kerchunk()


def _local(data: bytes, folder: Path) -> str:
    path = folder / "pytorch_model.bin"
    path.write_bytes(data)
    return str(path)

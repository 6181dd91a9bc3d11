"""iter_tensors and the drop-in for safetensors.torch (load_file, load_model), against the
reference safetensors.torch on the same files, local and over HTTP."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import remotetensors as rt
import remotetensors.torch as rt_torch
from tests.servers import FaultyServer
from tests.torch_checkpoints import (
    accelerate,
    bert_checkpoint,
    bert_config,
    safetensors_torch,
    torch,
    transformers,
)

_Module: Any = torch.nn.Module  # a base class mypy accepts from an optional import


def mixed() -> dict[str, Any]:
    """Tensors of several dtypes, BF16 and F8 among them, whose file order is not name order."""
    torch.manual_seed(8)
    return {
        "a.bias": torch.randn(7, dtype=torch.float64),
        "b.weight": torch.randn(5, 3).to(torch.bfloat16),
        "c.scale": torch.linspace(-3, 3, 6).to(torch.float8_e4m3fn),
        "d.ids": torch.arange(9, dtype=torch.int32),
        "e.mask": torch.tensor([True, False, True]),
        "f.half": torch.randn(2, 2, dtype=torch.float16),
    }


def same(ours: Any, theirs: Any) -> bool:
    return bool(
        ours.dtype == theirs.dtype
        and ours.shape == theirs.shape
        and torch.equal(ours.view(torch.uint8), theirs.view(torch.uint8))
    )


def test_iter_tensors_yields_file_order_with_torch_dtypes(
    faulty: FaultyServer, tmp_path: Path
) -> None:
    path = tmp_path / "mixed.safetensors"
    safetensors_torch.save_file(mixed(), path)
    url = faulty.put("mixed.safetensors", path.read_bytes())
    reference = safetensors_torch.load_file(path)
    got = list(rt.iter_tensors(url))
    with rt.safe_open(url) as f:
        assert [name for name, _ in got] == f.offset_keys()
    assert [name for name, _ in got] == list(reference)  # the reference's order too
    for name, tensor in got:
        assert same(tensor, reference[name]), name


def test_iter_tensors_names_and_globs_come_in_file_order(faulty: FaultyServer) -> None:
    url = faulty.put("mixed.safetensors", safetensors_torch.save(mixed()))
    with rt.safe_open(url) as f:
        order = f.offset_keys()
    picked = ["f.half", "a.bias", "d.ids"]
    assert [n for n, _ in rt.iter_tensors(url, picked)] == [n for n in order if n in picked]
    assert [n for n, _ in rt.iter_tensors(url, "*.weight")] == ["b.weight"]
    arrays = dict(rt.iter_tensors(url, ["a.bias"], framework="numpy"))
    assert arrays["a.bias"].tobytes() == mixed()["a.bias"].numpy().tobytes()
    with pytest.raises(rt.TensorNotFoundError):
        list(rt.iter_tensors(url, ["nope"]))


def test_iter_tensors_fetches_ahead_within_the_bound(faulty: FaultyServer) -> None:
    tensors = {f"t{i:02d}": torch.full((64 * 1024,), float(i)) for i in range(16)}  # 256 KiB each
    data = safetensors_torch.save(tensors)
    url = faulty.put("many.safetensors", data)
    bound = 1024 * 1024
    window = 4096
    items = rt.iter_tensors(
        url, max_in_flight_bytes=bound, options=rt.ReadOptions(header_window_bytes=window)
    )
    name, first = next(items)
    assert name == "t00"
    assert torch.equal(first, tensors["t00"])
    time.sleep(0.5)  # time for the fetching ahead to go as far as the bound lets it
    held = faulty.log.total_bytes - window
    assert 0 < held <= bound + first.numel() * 4  # the one handed out counts until the next
    rest = dict(items)
    assert list(rest) == [f"t{i:02d}" for i in range(1, 16)]
    assert all(torch.equal(rest[n], tensors[n]) for n in rest)
    assert faulty.log.total_bytes <= len(data)  # each byte once


def test_closing_the_iterator_early_stops_fetching(faulty: FaultyServer) -> None:
    tensors = {f"t{i:02d}": torch.zeros(64 * 1024) for i in range(32)}  # 8 MiB in all
    data = safetensors_torch.save(tensors)
    url = faulty.put("many.safetensors", data)
    items = rt.iter_tensors(url, max_in_flight_bytes=512 * 1024)
    next(items)
    items.close()
    time.sleep(0.3)  # requests sent before the close reach the server's log
    asked = len(faulty.log.entries)
    time.sleep(0.3)
    assert len(faulty.log.entries) == asked  # and none after them
    assert faulty.log.total_bytes < len(data) // 2


async def test_iter_tensors_async(tmp_path: Path) -> None:
    path = tmp_path / "mixed.safetensors"
    safetensors_torch.save_file(mixed(), path)
    reference = safetensors_torch.load_file(path)
    got = [(name, tensor) async for name, tensor in rt.iter_tensors_async(path)]
    assert [n for n, _ in got] == list(reference)
    assert all(same(t, reference[n]) for n, t in got)


# --- the drop-in -------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["local", "http"])
def test_load_file_returns_what_the_reference_returns(
    where: str, faulty: FaultyServer, tmp_path: Path
) -> None:
    path = tmp_path / "mixed.safetensors"
    safetensors_torch.save_file(mixed(), path)
    location = str(path) if where == "local" else faulty.put("m.safetensors", path.read_bytes())
    ours = rt_torch.load_file(location)
    theirs = safetensors_torch.load_file(path)
    assert list(ours) == list(theirs)
    assert all(same(ours[n], theirs[n]) for n in theirs)
    assert all(t.device == torch.device("cpu") for t in ours.values())


def test_load_file_refuses_what_the_reference_refuses(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    safetensors_torch.save_file({"w": torch.zeros(2)}, path)
    with pytest.raises(rt.BackendError):
        rt_torch.load_file(path, backend="nope")
    if not torch.cuda.is_available():
        with pytest.raises(rt.FrameworkError, match="sees no CUDA device"):
            rt_torch.load_file(path, device=0)


def _model_and_files(tmp_path: Path) -> tuple[Any, Path, Path]:
    """A small BERT, its plain state dict as a file, and one with a name dropped and one
    added (what strict=False reports)."""
    config = bert_config(num_hidden_layers=1, vocab_size=64)
    model, _ = bert_checkpoint(config)
    plain = tmp_path / "plain.safetensors"
    safetensors_torch.save_file(model.state_dict(), plain)
    odd = dict(model.state_dict())
    del odd["pooler.dense.bias"]
    odd["extra.weight"] = torch.zeros(3)
    changed = tmp_path / "changed.safetensors"
    safetensors_torch.save_file(odd, changed)
    return config, plain, changed


@pytest.mark.parametrize("strict", [True, False])
def test_load_model_returns_what_the_reference_returns(strict: bool, tmp_path: Path) -> None:
    config, plain, changed = _model_and_files(tmp_path)
    for path in (plain, changed):
        ours_model, theirs_model = transformers.BertModel(config), transformers.BertModel(config)
        if path == changed and strict:
            with pytest.raises(RuntimeError) as theirs_error:
                safetensors_torch.load_model(theirs_model, path)
            with pytest.raises(RuntimeError) as ours_error:
                rt_torch.load_model(ours_model, path)
            for name in ("pooler.dense.bias", "extra.weight"):
                assert name in str(theirs_error.value)
                assert name in str(ours_error.value)
            continue
        theirs = safetensors_torch.load_model(theirs_model, path, strict=strict)
        ours = rt_torch.load_model(ours_model, path, strict=strict)
        assert ours == theirs
        assert type(ours[0]) is type(theirs[0])
        assert type(ours[1]) is type(theirs[1])
        assert ours_model.state_dict().keys() == theirs_model.state_dict().keys()
        for name, tensor in theirs_model.state_dict().items():
            assert torch.equal(ours_model.state_dict()[name], tensor), name


def test_load_model_fills_a_meta_model_where_the_reference_leaves_it_on_meta(
    tmp_path: Path,
) -> None:
    config, plain, _ = _model_and_files(tmp_path)
    reference = safetensors_torch.load_file(plain)
    with accelerate.init_empty_weights():
        theirs, ours = transformers.BertModel(config), transformers.BertModel(config)
    with pytest.warns(UserWarning, match="copying from a non-meta parameter"):
        safetensors_torch.load_model(theirs, plain)
    assert theirs.pooler.dense.weight.is_meta
    assert rt_torch.load_model(ours, plain) == (set(), [])
    assert not any(p.is_meta for p in ours.parameters())
    assert torch.equal(ours.pooler.dense.weight, reference["pooler.dense.weight"])


def test_load_model_strict_raises_before_any_data_request(faulty: FaultyServer) -> None:
    linear = torch.nn.Linear(512, 512)  # 1 MiB: the data lies beyond the first window
    url = faulty.put("m.safetensors", safetensors_torch.save(linear.state_dict()))
    with pytest.raises(RuntimeError, match="missing from the checkpoint"):
        rt_torch.load_model(torch.nn.Sequential(torch.nn.Linear(512, 512)), url)
    assert [e.range for e in faulty.log.entries] == ["bytes=0-65535"]

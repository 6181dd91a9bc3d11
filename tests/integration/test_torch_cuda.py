"""load_into with ``device="cuda"``: tensors staged through bounded pinned host buffers. These
tests skip on machines without a CUDA device."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import remotetensors as rt
import remotetensors.torch as rt_torch
from tests.servers import FaultyServer
from tests.torch_checkpoints import (
    bert_checkpoint,
    bert_config,
    empty_bert,
    fixed_input,
    safetensors_torch,
    torch,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

MiB = 1024 * 1024
_Module: Any = torch.nn.Module  # a base class mypy accepts from an optional import


def _small_bert(tmp_path: Path) -> tuple[Any, Any, Path]:
    config = bert_config(num_hidden_layers=2, vocab_size=256)
    model, data = bert_checkpoint(config, seed=9)
    path = tmp_path / "model.safetensors"
    path.write_bytes(data)
    return config, model, path


def test_a_meta_model_lands_on_the_gpu(tmp_path: Path, faulty: FaultyServer) -> None:
    config, model, path = _small_bert(tmp_path)
    for location in (path, faulty.put("model.safetensors", path.read_bytes())):
        module = empty_bert(config)
        report = rt.load_into(module, location, device="cuda", max_in_flight_bytes=MiB)
        assert report.missing == ()
        assert all(t.device.type == "cuda" for t in module.state_dict().values())
        assert module.embeddings.position_ids.device.type == "cuda"  # the module's own, moved
        for name, tensor in model.state_dict().items():
            assert torch.equal(module.state_dict()[name].cpu(), tensor), name
        tokens = fixed_input(config)
        with torch.no_grad():
            ours = module(tokens.cuda()).last_hidden_state.cpu()
            theirs = model.cuda()(tokens.cuda()).last_hidden_state.cpu()
        model.cpu()
        # The same weights through the same kernels; allclose, as GPU kernels may pick their
        # algorithms per run.
        assert torch.allclose(ours, theirs, rtol=0, atol=1e-5)


def test_real_gpu_parameters_are_filled_in_place(tmp_path: Path) -> None:
    source = torch.nn.Linear(64, 32)
    path = tmp_path / "linear.safetensors"
    safetensors_torch.save_file(source.state_dict(), path)
    module = torch.nn.Linear(64, 32).cuda()
    weight = module.weight
    pointer = weight.data_ptr()
    rt.load_into(module, path)
    assert module.weight is weight
    assert weight.data_ptr() == pointer
    assert torch.equal(weight.cpu(), source.weight)


def test_conversion_on_the_way_to_the_gpu_stays_within_the_bound(tmp_path: Path) -> None:
    elements = 64 * MiB  # F32: 256 MiB in the file, 128 MiB on the device as BF16
    torch.manual_seed(0)
    big = torch.randn(elements)
    path = tmp_path / "big.safetensors"
    safetensors_torch.save_file({"big": big}, path)

    class Big(_Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.big = torch.nn.Parameter(torch.empty(elements, device="meta"))

    module = Big()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    report = rt.load_into(
        module, path, device="cuda", dtype=torch.bfloat16, max_in_flight_bytes=32 * MiB
    )
    torch.cuda.synchronize()
    growth = torch.cuda.max_memory_allocated() - before
    assert report.converted == ("big",)
    assert module.big.dtype == torch.bfloat16
    assert module.big.device.type == "cuda"
    assert torch.equal(module.big.cpu(), big.to(torch.bfloat16))
    assert growth <= 128 * MiB + 32 * MiB + 16 * MiB


def test_the_drop_in_puts_tensors_on_the_device(tmp_path: Path) -> None:
    config, model, path = _small_bert(tmp_path)
    tensors = rt_torch.load_file(path, device=0)
    assert all(t.device == torch.device("cuda", 0) for t in tensors.values())
    module = empty_bert(config)
    assert rt_torch.load_model(module, path, device="cuda:0") == (set(), [])
    assert module.pooler.dense.weight.device == torch.device("cuda", 0)
    assert torch.equal(module.pooler.dense.weight.cpu(), model.pooler.dense.weight)

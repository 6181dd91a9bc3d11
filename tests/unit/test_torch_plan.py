"""Planning a load from headers alone (no IO), cutting tensors into bounded pieces, and the byte
budget of iter_tensors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU wheel in CI)")

from remotetensors.errors import CheckpointMismatchError, UnsupportedDtypeError  # noqa: E402
from remotetensors.index import TensorInfo  # noqa: E402
from remotetensors.integrations.torch_iter import _BytesHeld  # noqa: E402
from remotetensors.integrations.torch_plan import plan_load  # noqa: E402
from remotetensors.integrations.torch_stream import (  # noqa: E402
    ALIGN,
    MIN_IN_FLIGHT_BYTES,
    Filling,
    StagingLanes,
    batches,
)

_Module: Any = torch.nn.Module  # a base class mypy accepts from an optional import

_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64", torch.float16: "F16"}


def headers(state: dict[str, Any], file: str = "model.safetensors") -> dict[str, TensorInfo]:
    """Header entries for ``state`` laid out one after another, as a writer would."""
    out: dict[str, TensorInfo] = {}
    offset = 100
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        dtype = _DTYPES[tensor.dtype]
        out[name] = TensorInfo(name, dtype, tuple(tensor.shape), offset, offset + nbytes, file)
        offset += nbytes
    return out


class Tied(_Module):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.register_buffer("cache", torch.zeros(3), persistent=False)


def test_every_shape_mismatch_is_listed_with_both_shapes() -> None:
    tensors = headers({"weight": torch.zeros(5, 4), "bias": torch.zeros(5)})
    with pytest.raises(CheckpointMismatchError) as caught:
        plan_load(torch.nn.Linear(4, 3), tensors, location="hf://o/m", strict=False)
    err = caught.value
    assert err.mismatched == {"weight": ((3, 4), (5, 4)), "bias": ((3,), (5,))}
    assert "hf://o/m: the checkpoint does not fit Linear:" in str(err)
    assert "weight: shape [3, 4] in the module, [5, 4] in the checkpoint" in str(err)
    assert err.location == "hf://o/m"


def test_strict_raises_for_missing_and_unexpected_names_and_lax_reports_them() -> None:
    tensors = headers({"weight": torch.zeros(3, 4), "other": torch.zeros(2)})
    with pytest.raises(CheckpointMismatchError) as caught:
        plan_load(torch.nn.Linear(4, 3), tensors, location="x")
    assert caught.value.missing == ("bias",)
    assert caught.value.unexpected == ("other",)
    assert "missing from the checkpoint (1): bias" in str(caught.value)
    assert "not in the module (1): other" in str(caught.value)
    plan = plan_load(torch.nn.Linear(4, 3), tensors, location="x", strict=False)
    assert plan.missing == ("bias",)
    assert plan.unexpected == ("other",)
    assert [r.checkpoint_name for r in plan.reads] == ["weight"]


def test_long_lists_are_cut_in_the_message_and_whole_in_the_error() -> None:
    tensors = headers({f"extra.{i}": torch.zeros(1) for i in range(25)})
    with pytest.raises(CheckpointMismatchError) as caught:
        plan_load(torch.nn.Module(), tensors, location="x")
    assert len(caught.value.unexpected) == 25
    assert "(25 in all)" in str(caught.value)
    assert "extra.20" not in str(caught.value)


def test_a_tied_pair_is_one_read_whichever_name_the_checkpoint_holds() -> None:
    module = Tied()
    for kept in ("embed.weight", "head.weight"):
        tensors = headers({kept: torch.zeros(10, 4), "steps": torch.zeros((), dtype=torch.int64)})
        plan = plan_load(module, tensors, location="x")
        assert plan.missing == ()
        assert plan.unexpected == ()
        (tied,) = [r for r in plan.reads if r.checkpoint_name == kept]
        assert {s.name for s in tied.slots} == {"embed.weight", "head.weight"}
    both = headers(
        {
            "embed.weight": torch.zeros(10, 4),
            "head.weight": torch.zeros(10, 4),
            "steps": torch.zeros((), dtype=torch.int64),
        }
    )
    plan = plan_load(module, both, location="x")
    assert [r.checkpoint_name for r in plan.reads] == ["embed.weight", "steps"]
    assert plan.unexpected == ()


def test_non_persistent_buffers_are_never_missing_or_unexpected() -> None:
    module = Tied()
    state = {"embed.weight": torch.zeros(10, 4), "steps": torch.zeros((), dtype=torch.int64)}
    assert plan_load(module, headers(state), location="x").missing == ()
    with_cache = headers({**state, "cache": torch.zeros(3)})
    plan = plan_load(module, with_cache, location="x")
    assert plan.unexpected == ()
    assert "cache" not in {r.checkpoint_name for r in plan.reads}  # real: the module's own
    with torch.device("meta"):
        empty = Tied()
    plan = plan_load(empty, with_cache, location="x")
    assert "cache" in {r.checkpoint_name for r in plan.reads}  # on meta: filled from the file


def test_a_prefix_maps_names_and_bounds_what_is_unexpected() -> None:
    tensors = headers(
        {
            "layers.0.weight": torch.zeros(3, 4),
            "layers.0.bias": torch.zeros(3),
            "layers.1.weight": torch.zeros(3, 4),
            "layers.1.bias": torch.zeros(3),
        }
    )
    plan = plan_load(torch.nn.Linear(4, 3), tensors, location="x", prefix="layers.1.")
    assert plan.unexpected == ()
    assert sorted(r.checkpoint_name for r in plan.reads) == ["layers.1.bias", "layers.1.weight"]


def test_dtypes_devices_and_in_place() -> None:
    module = Tied()
    module.embed.weight.data = module.embed.weight.data.to(torch.float16)
    tensors = headers(
        {"embed.weight": torch.zeros(10, 4), "steps": torch.zeros((), dtype=torch.int64)}
    )
    plan = plan_load(module, tensors, location="x")
    reads = {r.checkpoint_name: r for r in plan.reads}
    embed = reads["embed.weight"]
    assert (embed.file_dtype, embed.dtype, embed.in_place) == (torch.float32, torch.float16, True)
    assert set(plan.converted) == {"embed.weight", "head.weight"}
    plan = plan_load(module, tensors, location="x", dtype=torch.bfloat16)
    reads = {r.checkpoint_name: r for r in plan.reads}
    assert reads["embed.weight"].dtype == torch.bfloat16
    assert not reads["embed.weight"].in_place  # another dtype: a new tensor replaces it
    assert reads["steps"].dtype == torch.int64  # dtype= leaves integers alone
    with torch.device("meta"):
        empty = Tied()
    plan = plan_load(empty, tensors, location="x", meta_device=torch.device("cpu"))
    assert all(r.device == torch.device("cpu") and not r.in_place for r in plan.reads)


def test_reads_come_in_file_order_shard_by_shard() -> None:
    first = headers({"b": torch.zeros(2), "a": torch.zeros(2)}, file="s1")
    second = headers({"d": torch.zeros(2), "c": torch.zeros(2)}, file="s2")

    class Four(_Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            for name in "dcba":
                self.register_parameter(name, torch.nn.Parameter(torch.zeros(2)))

    plan = plan_load(Four(), {**second, **first}, location="x")
    assert [r.checkpoint_name for r in plan.reads] == ["b", "a", "d", "c"]


def test_packed_dtypes_are_refused_by_name() -> None:
    tensors = {
        "weight": TensorInfo("weight", "F4", (3, 4), 0, 6),
        "bias": headers({"bias": torch.zeros(3)})["bias"],
    }
    with pytest.raises(UnsupportedDtypeError, match=r"x: tensor weight: F4"):
        plan_load(torch.nn.Linear(4, 3), tensors, location="x")


# --- pieces and the bound ------------------------------------------------------------------------


def test_the_bound_is_split_into_lanes_of_aligned_batches() -> None:
    budget = StagingLanes.of(64 * 1024 * 1024)
    assert budget.batch_bytes * budget.lanes <= 64 * 1024 * 1024
    assert budget.batch_bytes % ALIGN == 0
    odd = StagingLanes.of(MIN_IN_FLIGHT_BYTES + 1)
    assert odd.batch_bytes * odd.lanes <= MIN_IN_FLIGHT_BYTES + 1
    with pytest.raises(ValueError, match="max_in_flight_bytes must be at least"):
        StagingLanes.of(MIN_IN_FLIGHT_BYTES - 1)


def test_batches_cover_each_tensor_once_in_whole_elements_within_the_bound() -> None:
    state = {
        "big": torch.zeros(1000, 3),  # 12,000 bytes: several pieces
        "small": torch.zeros(5, dtype=torch.float16),
        "odd": torch.zeros(7, dtype=torch.int64),
        "none": torch.zeros(0),
    }

    class Holder(_Module):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            for name, tensor in state.items():
                self.register_buffer(name, tensor.clone())

    plan = plan_load(Holder(), headers(state), location="x")
    fillings = [Filling(read) for read in plan.reads]
    cut = batches(fillings, 1024)
    for batch in cut:
        assert sum(-(-p.length // ALIGN) * ALIGN for p in batch) <= 1024
    covered: dict[str, list[tuple[int, int]]] = {}
    for batch in cut:
        for piece in batch:
            read = piece.filling.read
            assert piece.offset % read.file_dtype.itemsize == 0
            assert piece.length % read.file_dtype.itemsize == 0
            covered.setdefault(read.checkpoint_name, []).append(
                (piece.offset, piece.offset + piece.length)
            )
    for filling in fillings:
        name = filling.read.checkpoint_name
        spans = sorted(covered.get(name, []))
        assert filling.pieces_left == len(spans)
        end = 0
        for start, stop in spans:
            assert start == end
            end = stop
        assert end == filling.read.info.nbytes, name


async def test_the_byte_budget_serves_in_order_and_lets_a_large_request_go_alone() -> None:
    budget = _BytesHeld(100)
    assert await budget.acquire(60) == 60
    order: list[str] = []

    async def take(label: str, nbytes: int) -> int:
        held = await budget.acquire(nbytes)
        order.append(label)
        return held

    large = asyncio.ensure_future(take("large", 500))
    small = asyncio.ensure_future(take("small", 10))  # fits, but waits its turn
    await asyncio.sleep(0)
    assert order == []
    budget.release(60)
    assert await large == 100  # all of the budget, not more
    await asyncio.sleep(0)
    assert order == ["large"]
    budget.release(100)
    assert await small == 10
    assert order == ["large", "small"]


def test_the_load_errors_are_the_builtins_torch_users_catch_and_pickle_whole() -> None:
    import pickle

    import remotetensors as rt

    mismatch = CheckpointMismatchError(
        "m: the checkpoint does not fit Linear",
        location="m",
        missing=("bias",),
        mismatched={"weight": ((3, 4), (5, 4))},
    )
    assert isinstance(mismatch, RuntimeError)
    assert isinstance(mismatch, rt.RemoteTensorsError)
    back = pickle.loads(pickle.dumps(mismatch))
    assert (back.location, back.missing, back.mismatched) == ("m", ("bias",), mismatch.mismatched)
    incomplete = rt.IncompleteLoadError(
        "m: reading stopped", location="m", loaded=("a",), not_loaded=("b",)
    )
    assert isinstance(incomplete, OSError)
    assert str(incomplete) == "m: reading stopped"
    back = pickle.loads(pickle.dumps(incomplete))
    assert (back.loaded, back.not_loaded, str(back)) == (("a",), ("b",), "m: reading stopped")

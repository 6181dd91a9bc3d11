"""The lanes of load_into: what one lane holds at once (its staging buffer and the buffers its
requests pass through) stays within its share of the bound, small pieces stay coalesced, and
the bytes land right whatever the layout (gaps between tensors, mixed element sizes, pieces
read in place beside staged ones)."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest

import remotetensors as rt
from remotetensors.integrations.torch_stream import ALIGN, _Lane
from tests.servers import FaultyServer
from tests.torch_checkpoints import safetensors_torch, torch

CAPACITY = 64 * 1024


def _piece(start: int, length: int, *, direct: bool = False, itemsize: int = 4) -> Any:
    """A stand-in for a Piece: ``length`` bytes at ``start`` of file "f" (a tensor of its own)."""
    info = SimpleNamespace(start=start, file="f")
    read = SimpleNamespace(info=info, file_dtype=SimpleNamespace(itemsize=itemsize))
    filling = SimpleNamespace(read=read, direct=memoryview(bytearray(length)) if direct else None)
    return SimpleNamespace(filling=filling, offset=0, length=length)


def _held(run: list[tuple[Any, int | None]]) -> int:
    """What a run holds at most: the staging it uses, and the whole span of its pieces when
    they are not back to back in staging as in the file (a request then takes scratch)."""
    staged = [(p, at) for p, at in run if at is not None]
    used = max((at + p.length for p, at in staged), default=0)
    starts = sorted((p.filling.read.info.start, at, p.length) for p, at in run)
    back_to_back = all(
        at is not None and b_at == at + n and a + n == b
        for (a, at, n), (b, b_at, _) in itertools.pairwise(starts)
    )
    span = starts[-1][0] + starts[-1][2] - starts[0][0] if starts else 0
    return used + (0 if back_to_back or len(run) < 2 else span)


def test_back_to_back_pieces_are_staged_as_the_file_lays_them_out() -> None:
    pieces = [_piece(1000 + 4096 * i, 4096, direct=i % 2 == 0) for i in range(8)]
    runs = _Lane(CAPACITY, pinned=False).runs(pieces, merged=True)
    assert len(runs) == 1  # one plan: the pieces are coalesced into one request
    placed = sorted(runs[0], key=lambda item: item[0].filling.read.info.start)
    assert [at for _, at in placed] == [4096 * i for i in range(8)]  # in place ones too


def test_a_misaligned_piece_starts_an_aligned_stretch() -> None:
    pieces = [_piece(0, 3, itemsize=1), _piece(3, 8, itemsize=4), _piece(11, 8, itemsize=4)]
    runs = _Lane(CAPACITY, pinned=False).runs(pieces, merged=True)
    offsets = [at for run in runs for _, at in run]
    assert offsets[0] == 0
    assert offsets[1] is not None
    assert offsets[1] % ALIGN == 0
    assert offsets[2] is not None
    assert offsets[2] % 4 == 0
    assert all(_held(run) <= CAPACITY for run in runs)


@pytest.mark.parametrize("direct", [False, True])
def test_pieces_with_gaps_are_cut_into_runs_within_the_capacity(direct: bool) -> None:
    # 15 pieces of 4 KiB with 100 bytes between them: their staging alone fits (60 KiB), but
    # with the span their requests pass through, it would not.
    pieces = [_piece(4196 * i, 4096, direct=direct) for i in range(15)]
    runs = _Lane(CAPACITY, pinned=False).runs(pieces, merged=True)
    assert sorted(id(p) for run in runs for p, _ in run) == sorted(id(p) for p in pieces)
    assert all(_held(run) <= CAPACITY for run in runs)
    assert len(runs) <= 3  # still coalesced: several pieces a run
    if direct:  # not back to back: read in place through scratch, as before
        assert all(at is None for run in runs for _, at in run)


def test_local_reads_are_one_run_and_in_place_where_they_can_be() -> None:
    pieces = [_piece(4196 * i, 4096, direct=i == 1) for i in range(3)]
    (run,) = _Lane(CAPACITY, pinned=False).runs(pieces, merged=False)
    assert [at for _, at in run] == [0, None, 4096]


def _mixed() -> dict[str, Any]:
    """Tensors of several element sizes, some of odd byte lengths, in the reference's order."""
    torch.manual_seed(3)
    out: dict[str, Any] = {}
    for i in range(24):
        out[f"w{i:02d}"] = torch.randn(300 + i)
        out[f"h{i:02d}"] = torch.randn(77 + i).to(torch.float16)
        out[f"m{i:02d}"] = torch.rand(13 + i) > 0.5
    return out


@pytest.mark.parametrize("skip", [False, True])
def test_conversions_in_small_lanes_land_right(faulty: FaultyServer, skip: bool) -> None:
    """Into float64 tensors (staged) beside float16 ones read in place, through lanes of 8
    KiB; with every third tensor left out (gaps between the pieces of a batch) or not."""
    tensors = _mixed()
    url = faulty.put("m.safetensors", safetensors_torch.save(tensors))
    wanted = {n: t for i, (n, t) in enumerate(sorted(tensors.items())) if not (skip and i % 3 == 0)}
    module = torch.nn.Module()
    for name, tensor in wanted.items():
        dtype = torch.float64 if tensor.dtype == torch.float32 else tensor.dtype
        module.register_buffer(name, torch.zeros(tensor.shape, dtype=dtype))
    window = 8192  # the header, and little data: the rest is read by the lanes
    report = rt.load_into(
        module,
        url,
        strict=False,
        max_in_flight_bytes=64 * 1024,
        options=rt.ReadOptions(header_window_bytes=window),
    )
    assert set(report.loaded) == set(wanted)
    for name, tensor in wanted.items():
        got = getattr(module, name)
        assert torch.equal(got, tensor.to(got.dtype)), name
    data_requests = [e for e in faulty.log.entries if e.range != f"bytes=0-{window - 1}"]
    assert 0 < len(data_requests) < len(wanted) // 3  # coalesced

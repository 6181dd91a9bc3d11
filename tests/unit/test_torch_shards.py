"""What a rank reads for its DTensor shard: pure planning, checked without a process group
against DTensor's own chunking (``torch.chunk``'s) and against the bytes of a row-major file."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from remotetensors.errors import FrameworkError
from remotetensors.index import TensorInfo, TensorLayout
from remotetensors.integrations.torch_shards import (
    Sharding,
    box_bytes,
    local_box,
    read_placements,
)

torch = pytest.importorskip("torch", reason="torch is not installed (the CPU wheel in CI)")
placement_types = pytest.importorskip("torch.distributed.tensor")
Shard, Replicate, Partial = (
    placement_types.Shard,
    placement_types.Replicate,
    placement_types.Partial,
)


def _info(shape: tuple[int, ...], strides: tuple[int, ...] | None = None) -> TensorInfo:
    nbytes = 4 * int(torch.tensor(shape).prod()) if shape else 4
    layout = TensorLayout(strides, predicted=False) if strides is not None else None
    return TensorInfo("w", "F32", shape, 1000, 1000 + nbytes, layout=layout)


def test_every_shard_reads_as_rows_of_a_row_major_tensor() -> None:
    info = _info((6, 8))
    assert read_placements((Shard(1), Replicate()), info, "w") == (Shard(0), Replicate())
    assert read_placements((Shard(0), Shard(1)), info, "w") == (Shard(0), Shard(0))


def test_a_strided_view_is_read_whole() -> None:
    transposed = _info((8, 6), strides=(1, 8))
    assert read_placements((Shard(0), Shard(1)), transposed, "w") == (Replicate(), Replicate())


def test_partial_is_refused_by_name() -> None:
    with pytest.raises(FrameworkError, match=r"w: a DTensor placed .*Partial"):
        read_placements((Partial(),), _info((4,)), "w")


@pytest.mark.parametrize("rows", [7, 8, 3, 1])
@pytest.mark.parametrize("mesh", [(4,), (2, 2), (3,)])
def test_boxes_tile_the_tensor_as_torch_chunk_does(rows: int, mesh: tuple[int, ...]) -> None:
    """The read boxes of every coordinate are torch.chunk's chunks, nested per mesh dimension:
    together they cover each row once (uneven and empty shards included)."""
    shape = (rows, 5)
    placements = [Shard(0)] * len(mesh)
    covered: list[int] = []
    for coordinate in itertools.product(*(range(n) for n in mesh)):
        box, offsets = local_box(shape, mesh, coordinate, placements)
        assert box[1:] == shape[1:]
        covered += range(offsets[0], offsets[0] + box[0])
        # The first level of chunks is torch.chunk's.
        chunks = torch.arange(rows).chunk(mesh[0])
        if box[0] and len(mesh) == 1:
            assert covered[-box[0] :] == chunks[coordinate[0]].tolist()
    assert sorted(covered) == list(range(rows))


def test_a_box_of_rows_is_one_run_of_bytes() -> None:
    info = _info((10, 6))
    box, offsets = local_box(info.shape, (4,), (2,), [Shard(0)])
    assert (box, offsets) == ((3, 6), (6, 0))
    assert box_bytes(info, offsets, box) == 6 * 6 * 4
    with pytest.raises(ValueError, match="not one run"):
        box_bytes(info, (0, 3), (10, 3))


def test_a_sharding_knows_whether_rows_are_exchanged() -> None:
    def sharding(placements: tuple[Any, ...], read: tuple[Any, ...]) -> Sharding:
        return Sharding(None, placements, read, (4, 6), (0, 0), (2, 6))

    assert sharding((Shard(1),), (Shard(0),)).exchanged
    assert not sharding((Shard(0),), (Shard(0),)).exchanged
    assert sharding((Shard(1),), (Shard(0),)).stride == (6, 1)


def test_only_a_single_row_wise_shard_is_exchanged_in_slabs() -> None:
    from remotetensors.integrations.torch_shards import exchange_dim

    def sharding(placements: tuple[Any, ...]) -> Sharding:
        read = read_placements(placements, _info((4, 6)), "w")
        return Sharding(None, placements, read, (4, 6), (0, 0), (2, 6))

    assert exchange_dim(sharding((Shard(1),))) == 0
    assert exchange_dim(sharding((Replicate(), Shard(1)))) == 1
    assert exchange_dim(sharding((Shard(0),))) is None  # nothing to exchange
    assert exchange_dim(sharding((Shard(0), Shard(1)))) is None  # redistribute's


def test_chunks_are_torch_chunks() -> None:
    from remotetensors.integrations.torch_shards import chunk

    for size, ranks in [(7, 4), (8, 4), (3, 4), (10, 3)]:
        pieces = torch.arange(size).chunk(ranks)
        for index in range(ranks):
            start, length = chunk(size, ranks, index)
            expected = pieces[index].tolist() if index < len(pieces) else []
            assert list(range(start, start + length)) == expected

"""The DCP reader's planning (``integrations/dcp_plan.py``): pure, no process group, no IO."""

from __future__ import annotations

import itertools
import json
import math
import pickle

import pytest

torch = pytest.importorskip("torch")

from torch.distributed.checkpoint.metadata import TensorStorageMetadata  # noqa: E402

from remotetensors.errors import (  # noqa: E402
    CheckpointMismatchError,
    HeaderError,
    TensorNotFoundError,
    UnsupportedDtypeError,
)
from remotetensors.formats.safetensors import parse_header  # noqa: E402
from remotetensors.index import FileIndex  # noqa: E402
from remotetensors.integrations.dcp_plan import (  # noqa: E402
    CheckpointStorage,
    WantedBox,
    batches,
    checkpoint_metadata,
    order_boxes,
    plan_pieces,
    saved_offsets,
    split_box,
)
from remotetensors.sources.recipe import SourceRecipe  # noqa: E402


def _index(
    tensors: dict[str, tuple[str, list[int]]], metadata: dict[str, str] | None = None
) -> FileIndex:
    """A file's index from a header written here: name -> (dtype, shape), packed in order."""
    header: dict[str, object] = {}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = math.prod(shape) * {"F32": 32, "BF16": 16, "F4": 4}[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    if metadata is not None:
        header["__metadata__"] = metadata
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return parse_header(raw, file_size=8 + len(raw) + offset)


def _recipe(name: str) -> SourceRecipe:
    return SourceRecipe("local", f"/ckpt/{name}", f"/ckpt/{name}", 1, None)


def test_saved_offsets_from_dcp_sharding_info() -> None:
    info = {"DCP_SHARDING_INFO": json.dumps({"w": {"saved_offsets": [4, 0]}})}
    assert saved_offsets(info, "w", 2, location="x") == (4, 0)
    assert saved_offsets(info, "other", 2, location="x") == (0, 0)
    assert saved_offsets(None, "w", 3, location="x") == (0, 0, 0)
    for bad in ("{nope", json.dumps({"w": {"saved_offsets": [1]}})):
        with pytest.raises(HeaderError, match="DCP_SHARDING_INFO"):
            saved_offsets({"DCP_SHARDING_INFO": bad}, "w", 2, location="x")
    with pytest.raises(HeaderError, match="saved_offsets"):
        saved_offsets(
            {"DCP_SHARDING_INFO": json.dumps({"w": {"saved_offsets": [-1, 0]}})},
            "w",
            2,
            location="x",
        )


def test_metadata_of_chunks_placed_by_dcp() -> None:
    """Two files each holding half of ``w`` (rows 0-3, 4-7) and one whole ``b``: one tensor
    of size [8, 6] with two chunks, as torch's HuggingFaceStorageReader reads them."""
    first = _index(
        {"w": ("F32", [4, 6]), "b": ("BF16", [6])},
        {"DCP_SHARDING_INFO": json.dumps({"w": {"saved_offsets": [0, 0]}})},
    )
    second = _index(
        {"w": ("F32", [4, 6])},
        {"DCP_SHARDING_INFO": json.dumps({"w": {"saved_offsets": [4, 0]}})},
    )
    files = {"a.safetensors": first, "b.safetensors": second}
    metadata = checkpoint_metadata("/ckpt", files, {n: _recipe(n) for n in files})
    w, b = metadata.state_dict_metadata["w"], metadata.state_dict_metadata["b"]
    assert isinstance(w, TensorStorageMetadata)
    assert isinstance(b, TensorStorageMetadata)
    assert w.size == torch.Size([8, 6])
    assert w.properties.dtype == torch.float32
    assert [tuple(c.offsets) for c in w.chunks] == [(0, 0), (4, 0)]
    assert b.properties.dtype == torch.bfloat16
    storage = metadata.storage_data
    assert isinstance(storage, CheckpointStorage)
    assert storage.chunk(("w", (4, 0))).file == "b.safetensors"
    assert pickle.loads(pickle.dumps(storage)) == storage
    with pytest.raises(TensorNotFoundError, match=r"chunks start at \[\[0, 0\], \[4, 0\]\]"):
        storage.chunk(("w", (2, 0)))


def test_metadata_refuses_what_it_cannot_serve() -> None:
    same = _index({"w": ("F32", [2, 2])})
    with pytest.raises(HeaderError, match="two files hold the chunk"):
        checkpoint_metadata("/c", {"a": same, "b": same}, {"a": _recipe("a"), "b": _recipe("b")})
    other = _index({"w": ("BF16", [2, 2])})
    with pytest.raises(HeaderError, match="differ"):
        checkpoint_metadata(
            "/c",
            {"a": same, "b": other},
            {"a": _recipe("a"), "b": _recipe("b")},
        )
    with pytest.raises(UnsupportedDtypeError, match="F4"):
        checkpoint_metadata("/c", {"a": _index({"q": ("F4", [4])})}, {"a": _recipe("a")})
    # A sharded index routes each tensor to one file: a stray copy elsewhere is not a chunk.
    metadata = checkpoint_metadata(
        "/c", {"a": same, "b": same}, {"a": _recipe("a"), "b": _recipe("b")}, routing={"w": "b"}
    )
    assert [c.file for c in metadata.storage_data.chunks.values()] == ["b"]


@pytest.mark.parametrize(
    ("offsets", "lengths", "shape", "max_bytes", "expected"),
    [
        # Fits: one box.
        ((0, 0), (4, 6), (8, 6), 1000, [((0, 0), (4, 6))]),
        # Rows of 24 bytes, 48 at most: two rows a box.
        ((1, 0), (5, 6), (8, 6), 48, [((1, 0), (2, 6)), ((3, 0), (2, 6)), ((5, 0), (1, 6))]),
        # A column block: its rows' stride counts (the box spans whole rows in the file).
        ((0, 2), (3, 2), (8, 6), 24, [((0, 2), (1, 2)), ((1, 2), (1, 2)), ((2, 2), (1, 2))]),
        # One row longer than the bound: cut inside the row too.
        ((2, 0), (1, 6), (8, 6), 8, [((2, 0), (1, 2)), ((2, 2), (1, 2)), ((2, 4), (1, 2))]),
        # A scalar, and an empty box.
        ((), (), (), 1, [((), ())]),
        ((0,), (0,), (5,), 1, [((0,), (0,))]),
    ],
)
def test_split_box(
    offsets: tuple[int, ...],
    lengths: tuple[int, ...],
    shape: tuple[int, ...],
    max_bytes: int,
    expected: list[tuple[tuple[int, ...], tuple[int, ...]]],
) -> None:
    assert split_box(offsets, lengths, shape, itemsize=4, max_bytes=max_bytes) == expected


def test_pieces_cover_each_box_once_within_the_bound() -> None:
    index = _index({"w": ("F32", [64, 48]), "v": ("F32", [10])})
    storage = checkpoint_metadata("/c", {"a": index}, {"a": _recipe("a")}).storage_data
    boxes = [
        WantedBox(0, ("w", (0, 0)), (0, 24), (64, 24)),  # a Shard(1) half: 64 runs
        WantedBox(1, ("v", (0,)), (0,), (10,)),
        WantedBox(2, ("w", (0, 0)), (32, 0), (32, 48)),  # a Shard(0) half: one run
    ]
    bound = 4096
    pieces = plan_pieces(boxes, storage, max_piece_bytes=bound // 2)
    for request, box in enumerate(boxes):
        mine = [p for p in pieces if p.request == request]
        assert sum(p.nbytes for p in mine) == math.prod(box.lengths) * 4
        # The pieces tile the box: every element once (in the box's own coordinates), each
        # piece read from the same place of the stored tensor.
        cells = [
            cell
            for p in mine
            for cell in itertools.product(
                *(range(d, d + n) for d, n in zip(p.dest_offsets, p.lengths, strict=True))
            )
        ]
        assert sorted(cells) == list(itertools.product(*(range(n) for n in box.lengths)))
        for p in mine:
            assert [o - d for o, d in zip(p.offsets, p.dest_offsets, strict=True)] == list(
                box.offsets
            )
    assert all(p.plan.covering.length <= bound // 2 for p in pieces)
    whole_rows = [p for p in pieces if p.request == 2]
    assert all(p.plan.counts == () for p in whole_rows)  # each one range of the file
    groups = batches(pieces, max_bytes=bound)
    assert [p for g in groups for p in g] == pieces
    assert all(sum(p.cost for p in g) <= bound for g in groups)


def test_plan_errors_name_the_tensor() -> None:
    index = _index({"w": ("F32", [8, 6])})
    storage = checkpoint_metadata("/c", {"a": index}, {"a": _recipe("a")}).storage_data
    with pytest.raises(CheckpointMismatchError, match=r"tensor w's chunk at \[0, 0\].*\[8, 6\]"):
        plan_pieces([WantedBox(0, ("w", (0, 0)), (6, 0), (4, 6))], storage, max_piece_bytes=64)
    with pytest.raises(TensorNotFoundError, match="no tensor of that name"):
        order_boxes([WantedBox(0, ("x", (0,)), (0,), (1,))], storage)

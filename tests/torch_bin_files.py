"""PyTorch ``.bin`` files for the tests, written by ``torch.save`` (the reference writer), and
``torch.load(..., weights_only=True)`` as the reference reader.

- :func:`minilm_bin`: sentence-transformers/all-MiniLM-L6-v2 as its repo ships it in
  ``pytorch_model.bin``: a transformers ``BertModel`` built from the model's real config with
  seeded random weights, its state dict plus ``embeddings.position_ids`` (a non-persistent
  buffer in transformers 5, but the published checkpoint carries it).
- :func:`shard_like_transformers`: a state dict in ``pytorch_model-0000i-of-0000n.bin`` shards
  and ``pytorch_model.bin.index.json``, as transformers 4's ``save_pretrained(...,
  safe_serialization=False)`` wrote them (transformers 5 writes safetensors only).
- :func:`as_zip64`: the same archive with zip64 end records and directory entries.
- :func:`payload_bin`: a ``.bin`` whose pickle calls ``os.system``, as a malicious upload does.
"""

from __future__ import annotations

import functools
import io
import json
import os
import struct
import warnings
import zipfile
from typing import Any

import numpy as np
import pytest

from remotetensors.formats.torch_bin import TorchIndex, read_bin
from remotetensors.formats.torch_zip import HeldBytes, NeedBytes

torch = pytest.importorskip("torch")  # the reference writer and reader (remotetensors needs none)

# sentence-transformers/all-MiniLM-L6-v2's config.json as the hub serves it (its _name_or_path
# and transformers_version left out).
MINILM_CONFIG: dict[str, Any] = {
    "architectures": ["BertModel"],
    "attention_probs_dropout_prob": 0.1,
    "gradient_checkpointing": False,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 384,
    "initializer_range": 0.02,
    "intermediate_size": 1536,
    "layer_norm_eps": 1e-12,
    "max_position_embeddings": 512,
    "model_type": "bert",
    "num_attention_heads": 12,
    "num_hidden_layers": 6,
    "pad_token_id": 0,
    "position_embedding_type": "absolute",
    "type_vocab_size": 2,
    "use_cache": True,
    "vocab_size": 30522,
}


DTYPE_NAMES = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint64: "U64", torch.uint32: "U32", torch.uint16: "U16", torch.uint8: "U8",
    torch.bool: "BOOL", torch.complex64: "C64", torch.float8_e4m3fn: "F8_E4M3",
    torch.float8_e5m2: "F8_E5M2",
}  # fmt: skip
"""torch dtypes -> the dtype names remotetensors gives them (safetensors' names)."""


def saved(state: Any, **kwargs: Any) -> bytes:
    """``torch.save(state)``'s bytes."""
    buffer = io.BytesIO()
    torch.save(state, buffer, **kwargs)
    return buffer.getvalue()


def loaded(data: bytes) -> Any:
    """``torch.load(..., weights_only=True)`` of ``data``: the reference reader (its warnings,
    such as one for a pickle protocol other than 2, silenced: the tests take them for errors).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(io.BytesIO(data), weights_only=True, map_location="cpu")


@functools.cache
def minilm_state() -> dict[str, Any]:
    """The state dict of all-MiniLM-L6-v2's architecture, seeded (built once per process)."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(31)
    model = transformers.BertModel(transformers.BertConfig(**MINILM_CONFIG)).eval()
    state = dict(model.state_dict())
    state["embeddings.position_ids"] = torch.arange(512).unsqueeze(0)
    return state


@functools.cache
def minilm_bin() -> bytes:
    """``pytorch_model.bin`` of that state dict."""
    return saved(minilm_state())


def shard_like_transformers(state: dict[str, Any], max_shard_bytes: int) -> dict[str, bytes]:
    """File name -> bytes: the shards and the index, as transformers 4 wrote them (tensors in
    the state dict's order, a new shard when the next tensor would pass ``max_shard_bytes``;
    ``total_size`` the bytes of all tensors)."""
    shards: list[dict[str, Any]] = [{}]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards, start=1):
        name = f"pytorch_model-{i:05d}-of-{len(shards):05d}.bin"
        files[name] = saved(shard)
        weight_map.update(dict.fromkeys(shard, name))
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    files["pytorch_model.bin.index.json"] = json.dumps(index, indent=2).encode()
    return files


def as_zip64(data: bytes) -> bytes:
    """The archive ``data`` with zip64 records, as a writer does for files past 4 GiB: every
    directory entry's sizes and local header offset in a zip64 extra field (0xFFFFFFFF in
    their 32-bit places), a zip64 end of central directory and its locator before the EOCD,
    whose fields say 0xFFFF / 0xFFFFFFFF. Members stay where they are."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    infos = archive.infolist()
    directory = bytearray()
    for info in infos:
        extra = struct.pack("<HHQQQ", 1, 24, info.file_size, info.compress_size, info.header_offset)
        name = info.filename.encode()
        directory += struct.pack(
            "<4sHHHHHHIIIHHHHHII",
            b"PK\x01\x02",
            45,
            45,
            info.flag_bits,
            info.compress_type,
            0,
            0,
            info.CRC,
            0xFFFFFFFF,
            0xFFFFFFFF,
            len(name),
            len(extra),
            0,
            0,
            0,
            0,
            0xFFFFFFFF,
        )
        directory += name + extra
    start = _directory_start(data)  # the members end where the directory started
    eocd64_at = start + len(directory)
    eocd64 = struct.pack(
        "<4sQHHIIQQQQ",
        b"PK\x06\x06",
        44,
        45,
        45,
        0,
        0,
        len(infos),
        len(infos),
        len(directory),
        start,
    )
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, eocd64_at, 1)
    eocd = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return data[:start] + bytes(directory) + eocd64 + locator + eocd


def _directory_start(data: bytes) -> int:
    """Where the central directory of ``data`` (a zip without a comment) starts."""
    eocd = len(data) - 22
    return int(struct.unpack_from("<I", data, eocd + 16)[0])


class _Payload:
    """Pickled as a call of ``os.system`` with a command, as any object can ask to be."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (self.command,))


def payload_bin(marker: str) -> bytes:
    """A ``.bin`` whose pickle runs ``touch <marker>`` when unpickled the usual way; a real
    tensor beside it, so the file looks like a checkpoint."""
    return saved({"weight": torch.ones(3), "bias": _Payload(f"touch {marker}")})


def legacy_bin() -> bytes:
    """A file of the legacy format (before PyTorch 1.6)."""
    return saved({"w": torch.ones(2)}, _use_new_zipfile_serialization=False)


# --- reading with the formats alone, compared with torch.load ------------------------------------


def index_of(data: bytes, *, window: int | None = None) -> tuple[TorchIndex, int]:
    """The index of ``data``, read as a remote reader would: a suffix of ``window`` bytes
    (all of it by default), then what :func:`read_bin` asks for. Also the reads it took."""
    start = 0 if window is None else max(0, len(data) - window)
    held = HeldBytes(len(data), [(start, data[start:])])
    for reads in range(10):
        step = read_bin(held, location="x.bin")
        if not isinstance(step, NeedBytes):
            return step, reads
        held = held.with_bytes(step.start, data[step.start : step.end])
    raise AssertionError("no index after 10 reads")


def tensors_of(data: bytes, found: TorchIndex) -> dict[str, np.ndarray[Any, Any]]:
    """Every tensor, from the file's bytes where the index puts it (strided ones laid out)."""
    result = {}
    for name, info in found.index.tensors.items():
        place = found.places[name]
        place.check(data[place.header_start : place.start], location="x.bin")
        raw = np.frombuffer(data[info.start : info.end], dtype=np.uint8)
        view = found.strided.get(name)
        if view is None:
            result[name] = raw.view(info.dtype_info.numpy).reshape(info.shape)
        else:  # numpy strides over bytes only for ml_dtypes' types: each element a row
            size = info.dtype_info.numpy.itemsize
            strides = (*(s * size for s in view.stride), 1)
            elements = np.lib.stride_tricks.as_strided(raw, (*view.shape, size), strides)
            result[name] = elements.copy().view(info.dtype_info.numpy).reshape(view.shape)
    return result


def flat(value: Any, name: str = "") -> dict[str, Any]:
    """The tensors in ``value`` (a state dict, perhaps nested), named by their path."""
    if isinstance(value, torch.Tensor):
        return {name: value}
    if not isinstance(value, (dict, list, tuple)):
        return {}
    items = value.items() if isinstance(value, dict) else enumerate(value)
    found: dict[str, Any] = {}
    for key, item in items:
        found.update(flat(item, f"{name}.{key}" if name else str(key)))
    return found


def assert_same(data: bytes, found: TorchIndex) -> None:
    """The index and values agree with torch.load's."""
    reference = flat(loaded(data))
    ours = tensors_of(data, found)
    assert sorted(ours) == sorted(reference)
    for name, expected in reference.items():
        expected = expected.detach()
        info = found.index.tensors[name]
        assert (info.dtype, info.shape) == (DTYPE_NAMES[expected.dtype], tuple(expected.shape))
        as_bytes = (
            expected.clone(memory_format=torch.contiguous_format)
            .reshape(-1)
            .view(torch.uint8)
            .numpy()
            if expected.numel()
            else []
        )
        assert np.ascontiguousarray(ours[name]).reshape(-1).view(np.uint8).tobytes() == bytes(
            as_bytes
        ), name
    assert found.index.num_parameters == sum(t.numel() for t in reference.values())


def rezipped(data: bytes, change: Any = None, **kwargs: Any) -> bytes:
    """``data``'s members written again by Python's zipfile (no data descriptors, no
    alignment); ``change(name, bytes)`` may replace a member's bytes."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", **kwargs) as target:
        for info in source.infolist():
            member = source.read(info.filename)
            target.writestr(info.filename, change(info.filename, member) if change else member)
    return out.getvalue()

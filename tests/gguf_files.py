"""GGUF test files written with llama.cpp's own ``gguf`` package, and what its reader says.

``gguf.GGUFWriter`` writes them; quantized tensors come from ``gguf.quants.quantize`` where the
package can quantize (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, BF16, MXFP4, TQ*), and are random whole
blocks for K-quants (the package only dequantizes those). ``reference_view`` reads a file with
``gguf.GGUFReader`` into plain values to compare with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (llama.cpp's) is the oracle")

Q = gguf.GGMLQuantizationType
V = gguf.GGUFValueType

# key -> (value, type, sub type): every value type, and arrays of each.
EVERY_VALUE: dict[str, tuple[Any, Any, Any]] = {
    "t.u8": (255, V.UINT8, None),
    "t.i8": (-128, V.INT8, None),
    "t.u16": (65535, V.UINT16, None),
    "t.i16": (-32768, V.INT16, None),
    "t.u32": (2**32 - 1, V.UINT32, None),
    "t.i32": (-(2**31), V.INT32, None),
    "t.f32": (1.5, V.FLOAT32, None),
    "t.bool": (True, V.BOOL, None),
    "t.false": (False, V.BOOL, None),
    "t.str": ("héllo ✓", V.STRING, None),
    "t.empty_str": ("", V.STRING, None),
    "t.u64": (2**64 - 1, V.UINT64, None),
    "t.i64": (-(2**63), V.INT64, None),
    "t.f64": (-2.25e300, V.FLOAT64, None),
    "t.arr_u8": ([0, 1, 255], V.ARRAY, V.UINT8),
    "t.arr_i8": ([-1, 2], V.ARRAY, V.INT8),
    "t.arr_u16": ([1, 65535], V.ARRAY, V.UINT16),
    "t.arr_i16": ([-3, 4], V.ARRAY, V.INT16),
    "t.arr_u32": ([7, 2**32 - 1], V.ARRAY, V.UINT32),
    "t.arr_i32": ([-(2**31), 5], V.ARRAY, V.INT32),
    "t.arr_f32": ([0.5, -1.25], V.ARRAY, V.FLOAT32),
    "t.arr_bool": ([True, False, True], V.ARRAY, V.BOOL),
    "t.arr_str": (["a", "", "ü✓", "<0xFF>"], V.ARRAY, V.STRING),
    "t.arr_u64": ([2**64 - 1], V.ARRAY, V.UINT64),
    "t.arr_i64": ([-(2**63), 1], V.ARRAY, V.INT64),
    "t.arr_f64": ([1e-300, 3.0], V.ARRAY, V.FLOAT64),
}


def quantized(rng: np.random.Generator, qtype: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Bytes of a tensor of ``qtype`` with numpy ``shape``: the package's quantizer where it has
    one, else random whole blocks (K-quants)."""
    values = rng.standard_normal(shape).astype(np.float32)
    try:
        return gguf.quants.quantize(values, qtype)  # type: ignore[no-any-return]
    except NotImplementedError:
        block, size = gguf.GGML_QUANT_SIZES[qtype]
        byte_shape = (*shape[:-1], shape[-1] // block * size)
        raw = rng.integers(0, 256, byte_shape, dtype=np.uint8)
        # The f16 scales sit at even offsets of each block: no infinities or NaNs among them.
        halves = raw.view("<u2")
        halves[(halves & 0x7C00) == 0x7C00] &= 0xBFFF
        return raw


def sample_tensors(seed: int = 0) -> dict[str, tuple[np.ndarray, Any]]:
    """name -> (array as the writer takes it, raw GGML type or None for native numpy types)."""
    rng = np.random.default_rng(seed)
    out: dict[str, tuple[np.ndarray, Any]] = {
        "token_embd.weight": (quantized(rng, Q.Q8_0, (40, 64)), Q.Q8_0),
        "blk.0.attn_q.weight": (quantized(rng, Q.Q4_0, (64, 64)), Q.Q4_0),
        "blk.0.attn_k.weight": (quantized(rng, Q.Q5_1, (32, 64)), Q.Q5_1),
        "blk.0.ffn_up.weight": (quantized(rng, Q.Q4_K, (16, 512)), Q.Q4_K),
        "blk.0.ffn_down.weight": (quantized(rng, Q.Q6_K, (3, 4, 256)), Q.Q6_K),
        "blk.0.ffn_gate.weight": (quantized(rng, Q.BF16, (8, 16)), Q.BF16),
        "blk.0.attn_norm.weight": (rng.standard_normal(64).astype(np.float32), None),
        "blk.0.attn_v.weight": (rng.standard_normal((24, 64)).astype(np.float16), None),
        "blk.0.ids": (rng.integers(-1000, 1000, (5, 3), dtype=np.int32), None),
        "blk.0.i8": (rng.integers(-100, 100, (7,), dtype=np.int8), None),
        "output.weight": (quantized(rng, Q.Q4_1, (40, 64)), Q.Q4_1),
        "blk.1.mxfp4": (quantized(rng, Q.MXFP4, (2, 64)), Q.MXFP4),
    }
    return out


def vocabulary(size: int, seed: int = 1) -> list[str]:
    """``size`` distinct token strings of varied lengths."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 24, size)
    letters = "abcdefghijklmnopqrstuvwxyzĠ▁"
    return [
        f"{i}" + "".join(letters[(i * 7 + k) % len(letters)] for k in range(n))
        for i, n in enumerate(lengths)
    ]


def write_gguf(
    path: Path,
    tensors: dict[str, tuple[np.ndarray, Any]] | None = None,
    *,
    vocab_size: int = 300,
    merges: int = 0,
    every_value: bool = True,
    alignment: int | None = None,
    split_max_tensors: int = 0,
    arch: str = "llama",
) -> list[Path]:
    """Write a GGUF model (or its split parts) with the package's writer; returns the files."""
    writer = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    writer.add_name("test model")
    writer.add_context_length(4096)
    writer.add_block_count(2)
    writer.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    if alignment is not None:
        writer.add_custom_alignment(alignment)
    if every_value:
        for key, (value, vtype, sub) in EVERY_VALUE.items():
            writer.add_key_value(key, value, vtype, sub_type=sub)
    if vocab_size:
        tokens = vocabulary(vocab_size)
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list(tokens)
        writer.add_token_types([1] * vocab_size)
        writer.add_token_scores([float(-i) for i in range(vocab_size)])
    if merges:
        tokens = vocabulary(merges, seed=2)
        writer.add_token_merges(
            [f"{a} {b}" for a, b in zip(tokens, tokens[1:] + tokens[:1], strict=True)]
        )
    writer.add_bos_token_id(1)
    writer.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}" * 5)
    for name, (array, raw) in (tensors if tensors is not None else sample_tensors()).items():
        writer.add_tensor(name, array, raw_dtype=raw)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return writer.format_shard_names(path)  # type: ignore[no-any-return]


@dataclass
class ReferenceTensor:
    name: str
    type_name: str
    shape: tuple[int, ...]  # numpy order
    start: int
    nbytes: int
    values: np.ndarray  # dequantized float32 for quantized types, native otherwise


@dataclass
class ReferenceView:
    metadata: dict[str, Any]
    types: dict[str, tuple[int, ...]]
    tensors: dict[str, ReferenceTensor]
    data_start: int
    alignment: int


def reference_view(path: Path) -> ReferenceView:
    """What ``gguf.GGUFReader`` reads from ``path``, as plain values."""
    reader = gguf.GGUFReader(path)
    metadata: dict[str, Any] = {}
    types: dict[str, tuple[int, ...]] = {}
    for key, fld in reader.fields.items():
        if key.startswith("GGUF."):  # the reader's pseudo-fields for the fixed header
            continue
        value = fld.contents()
        metadata[key] = tuple(value) if isinstance(value, list) else value
        types[key] = tuple(int(t) for t in fld.types)
    tensors = {}
    for t in reader.tensors:
        qtype = Q(int(t.tensor_type))
        if qtype in (Q.F32, Q.F16, Q.F64, Q.I8, Q.I16, Q.I32, Q.I64):
            values = np.array(t.data)
        else:
            values = gguf.quants.dequantize(np.array(t.data), qtype)
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        tensors[t.name] = ReferenceTensor(
            t.name, qtype.name, shape, int(t.data_offset), int(t.n_bytes), values.reshape(shape)
        )
    return ReferenceView(metadata, types, tensors, int(reader.data_offset), int(reader.alignment))

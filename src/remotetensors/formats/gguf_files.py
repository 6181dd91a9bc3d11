"""What a GGUF model is made of beyond one header: which files form it (one ``.gguf`` file, or
every part of a split set ``name-00001-of-00003.gguf``) and what its metadata says to a reader
(architecture, context, quantization by llama.cpp's name, tokenizer). Sans-IO."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..index import TensorInfo

__all__ = ["describe", "gguf_models", "quantization", "split_names"]

_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


def split_names(name: str) -> list[str] | None:
    """All parts of a split GGUF (``m-00001-of-00003.gguf``) from the name of any one of them.

    Returns:
        The part names in order (same folder as ``name``), or None when ``name`` is not a part.
    """
    folder, _, base = name.rpartition("/")
    match = _SPLIT.match(base)
    if match is None:
        return None
    count = int(match.group("count"))
    if count < 1 or not 1 <= int(match.group("no")) <= count:
        return None
    prefix = f"{folder}/" if folder else ""
    stem = match.group("stem")
    return [f"{prefix}{stem}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def gguf_models(files: list[str]) -> dict[str, list[str]]:
    """GGUF models among a folder's file names: a plain ``.gguf`` file, or a split set.

    Returns:
        A display name (the file, or the first part) -> the files to open, sorted by name.
    """
    models: dict[str, list[str]] = {}
    present = set(files)
    for name in sorted(files):
        if not name.lower().endswith(".gguf"):
            continue
        parts = split_names(name)
        if parts is None:
            models[name] = [name]
        elif name == parts[0] and all(p in present for p in parts):
            models[name] = parts
    return models


def describe(metadata: Mapping[str, Any], tensors: Mapping[str, TensorInfo]) -> dict[str, Any]:
    """What ``info`` shows of a GGUF model: architecture, context length, quantization, tokenizer,
    and the other scalar keys; arrays are shown by their length, never their contents.
    """
    arch = metadata.get("general.architecture")
    summary: dict[str, Any] = {
        "architecture": arch,
        "name": metadata.get("general.name"),
        "context_length": metadata.get(f"{arch}.context_length") if arch else None,
        "quantization": quantization(metadata, tensors),
        "tokenizer": metadata.get("tokenizer.ggml.model"),
        "tokenizer_size": len(metadata.get("tokenizer.ggml.tokens", ())),
    }
    other: dict[str, Any] = {}
    for key, value in metadata.items():
        if key == "tokenizer.ggml.tokens":
            continue
        if isinstance(value, tuple):
            other[key] = f"[{len(value)} items]"
        elif isinstance(value, str) and len(value) > 120:
            other[key] = value[:117] + "..."
        else:
            other[key] = value
    summary["metadata"] = other
    return summary


def quantization(metadata: Mapping[str, Any], tensors: Mapping[str, TensorInfo]) -> str | None:
    """The model's quantization: ``general.file_type`` by llama.cpp's name (``Q4_K_M``), else the
    GGML type holding the most bytes."""
    from .gguf import FILE_TYPES  # here: GGUF's parser only for GGUF models

    file_type = metadata.get("general.file_type")
    if isinstance(file_type, int) and file_type in FILE_TYPES:
        return FILE_TYPES[file_type]
    by_type: dict[str, int] = {}
    for info in tensors.values():
        by_type[info.dtype] = by_type.get(info.dtype, 0) + info.nbytes
    return max(by_type, key=lambda k: by_type[k]) if by_type else None

"""Where ``remotetensors get`` writes a tensor: a ``.npy`` that numpy can load, or ``.safetensors``.

``.npy`` files hold numpy's own dtypes only. numpy has no bfloat16, float8, float6 or float4,
and saving an ml_dtypes array writes ``'<V2'``-style opaque records that ``np.load`` cannot turn
back into numbers. Such tensors are therefore saved as float32, which holds every one of their
values exactly (each of these formats is a subset of float32), and the command says so; use
``.safetensors`` to keep the original dtype and size. ``.safetensors`` files keep every dtype,
sub-byte ones packed as in the source.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..dtypes import DTYPES, DType, pack
from ..errors import RemoteTensorsError

SUFFIXES = (".npy", ".safetensors")


class OutputError(RemoteTensorsError, ValueError):
    """An output file that cannot be written: wrong suffix, missing folder."""


def check_output(path: Path) -> None:
    """Fail before any download when ``path`` cannot be written.

    Raises:
        OutputError: the suffix is not .npy/.safetensors, the folder does not exist or cannot
            be written to, or the path is a folder.
    """
    if path.suffix not in SUFFIXES:
        raise OutputError(f"--output must end in .npy or .safetensors, got {path.name!r}")
    folder = path.parent
    if not folder.is_dir():
        raise OutputError(f"cannot write {path}: the folder {folder} does not exist")
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a folder")
    if not os.access(folder, os.W_OK):
        raise OutputError(f"cannot write {path}: no permission to write in {folder}")


def save(path: Path, name: str, array: np.ndarray[Any, Any], dtype_name: str) -> str | None:
    """Write ``array`` (tensor ``name`` of header dtype ``dtype_name``) to ``path``.

    Returns:
        A note for the user when the stored dtype differs from the tensor's, else None.
    """
    if path.suffix == ".npy":
        if array.dtype.kind == "V":  # ml_dtypes' types: numpy saves them as opaque records
            np.save(path, array.astype(np.float32))
            return (
                f"stored as float32: numpy cannot load {dtype_name} from .npy; every value is "
                f"exact (use .safetensors to keep {dtype_name})"
            )
        np.save(path, array)
        return None
    write_safetensors(path, {name: (array, dtype_name)})
    return None


def write_safetensors(path: Path, tensors: dict[str, tuple[np.ndarray[Any, Any], str]]) -> None:
    """Write tensors as a safetensors file: name -> (array, header dtype name).

    Sub-byte dtypes (F4, F6_*) are packed as the format stores them; every other array is
    written little-endian, back to back.
    """
    header: dict[str, Any] = {"__metadata__": {"format": "np"}}
    blobs: list[bytes] = []
    offset = 0
    for name, (array, dtype_name) in tensors.items():
        dt = DTYPES.get(dtype_name) or _dtype_of(array)
        if dt.packed:
            raw = pack(array.astype(dt.numpy), dt).tobytes()
        else:
            raw = np.ascontiguousarray(array, dtype=dt.numpy).tobytes()
        header[name] = {
            "dtype": dt.name,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with path.open("wb") as out:
        out.write(len(text).to_bytes(8, "little") + text)
        for raw in blobs:
            out.write(raw)


def _dtype_of(array: np.ndarray[Any, Any]) -> DType:
    """The safetensors dtype of an array whose source dtype has no safetensors name (a GGUF
    block type decoded to floats).

    Raises:
        OutputError: numpy's dtype has no safetensors name either.
    """
    for dt in DTYPES.values():
        if not dt.packed and dt.numpy == array.dtype:
            return dt
    raise OutputError(f"cannot store an array of {array.dtype} in a safetensors file")

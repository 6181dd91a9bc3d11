"""The ``framework=``, ``device=`` and ``backend=`` arguments of ``safe_open``, and turning numpy
results into the array type a caller asked for."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from ..dtypes import DTYPES, pack
from ..errors import BackendError, FrameworkError, UnsupportedDtypeError

_NUMPY = ("numpy", "np")
_TORCH = ("pt", "torch", "pytorch")

# Header dtype name -> torch dtype attribute, for dtypes numpy cannot hand to torch directly.
_TORCH_VIEWS = {
    "BF16": "bfloat16",
    "F8_E5M2": "float8_e5m2",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E8M0": "float8_e8m0fnu",
    "F8_E4M3FNUZ": "float8_e4m3fnuz",
    "F8_E5M2FNUZ": "float8_e5m2fnuz",
}


# Header dtype name -> torch dtype attribute, for the dtypes a torch tensor holds one value per
# element of (the sub-byte F4 and F6 are left out: torch has no unpacked type for them).
_TORCH_DTYPES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "U16": "uint16",
    "F16": "float16",
    "I32": "int32",
    "U32": "uint32",
    "F32": "float32",
    "C64": "complex64",
    "F64": "float64",
    "I64": "int64",
    "U64": "uint64",
    **_TORCH_VIEWS,
}


def torch_dtype(dtype_name: str) -> Any:
    """The torch dtype whose elements are stored exactly as the header's ``dtype_name`` stores
    them (``"BF16"`` -> ``torch.bfloat16``), so that a file's bytes can land in a tensor as
    they are.

    Raises:
        UnsupportedDtypeError: F4 and F6 (packed, no torch type of one value per element), or
            a dtype this torch lacks (the float8 kinds of an old torch).
    """
    import torch

    attribute = _TORCH_DTYPES.get(dtype_name)
    found = getattr(torch, attribute, None) if attribute is not None else None
    if found is None:
        raise UnsupportedDtypeError(
            f"{dtype_name} has no torch dtype of one value per element here; read it with "
            "framework='numpy' (ml_dtypes)"
        )
    return found


def check_framework(framework: str) -> str:
    """Normalise ``framework`` to ``"numpy"`` or ``"pt"``.

    Raises:
        FrameworkError: for an unknown name, or ``"pt"`` without torch installed.
    """
    name = framework.lower()
    if name in _NUMPY:
        return "numpy"
    if name in _TORCH:
        if importlib.util.find_spec("torch") is None:
            raise FrameworkError(
                "framework='pt' needs torch, which is not installed; install it or use "
                "framework='numpy'"
            )
        return "pt"
    # The reference's wording ("framework xx is invalid"), then what we accept.
    raise FrameworkError(f"framework {framework} is invalid; expected 'numpy' (or 'np') or 'pt'")


BACKENDS = ("mmap", "pread")
"""The ``backend=`` values of ``safetensors.safe_open`` 0.8, accepted by ours with one meaning:
local files are read with positioned reads (``preadv``) straight into fresh arrays and remote
files with byte-range requests; nothing is memory-mapped, so both values read the same way."""


def check_backend(backend: object) -> str:
    """Validate ``safe_open(..., backend=)`` as the reference does.

    Raises:
        TypeError: ``backend`` is not a string (the reference's message).
        BackendError: a string other than ``"mmap"`` or ``"pread"`` (the reference's message).
    """
    if not isinstance(backend, str):
        # pyo3's wording, which names None by itself and any other value by its type.
        seen = "'None'" if backend is None else f"{type(backend).__name__!r} object"
        raise TypeError(f"argument 'backend': {seen} is not an instance of 'str'")
    if backend not in BACKENDS:
        expected = ", ".join(f'"{name}"' for name in BACKENDS)
        raise BackendError(f'backend "{backend}" is invalid (expected one of: {expected})')
    return backend


def check_device(device: object, framework: str) -> None:
    """Accept only the CPU (``"cpu"`` or ``torch.device("cpu")``): arrays live in host memory.

    Raises:
        FrameworkError: any other device, in the reference's words
            ("Device cuda is not supported for framework numpy") and ours.
    """
    # str() also accepts torch.device("cpu"), which the reference refuses.
    if str(device) != "cpu":
        raise FrameworkError(
            f"Device {device} is not supported for framework {framework}: remotetensors builds "
            "arrays in host memory only (device='cpu'); move them afterwards"
        )


def convert(array: np.ndarray[Any, Any], dtype_name: str, framework: str) -> Any:
    """Return ``array`` as the framework's array type, sharing memory where possible.

    F4 becomes torch's ``float4_e2m1fn_x2`` as the reference returns it: two values per byte
    along the last dimension, so that dimension is halved (element ``2k`` in the low nibble).

    Raises:
        UnsupportedDtypeError: a dtype the framework has no type for (F6 in torch, F4 in a torch
            without ``float4_e2m1fn_x2`` or with an odd or missing last dimension).
    """
    if framework == "numpy":
        return array
    import torch

    if dtype_name in _TORCH_VIEWS:
        target = getattr(torch, _TORCH_VIEWS[dtype_name], None)
        if target is None:
            raise UnsupportedDtypeError(f"this torch has no dtype for {dtype_name}")
        raw = torch.from_numpy(array.view(f"u{array.dtype.itemsize}"))
        return raw.view(target)
    if dtype_name == "F4":
        return _torch_float4(array)
    if dtype_name in ("F6_E2M3", "F6_E3M2"):
        raise UnsupportedDtypeError(
            f"{dtype_name} has no torch dtype here; read it with framework='numpy' (ml_dtypes)"
        )
    return torch.from_numpy(array)


def _torch_float4(array: np.ndarray[Any, Any]) -> Any:
    import torch

    target = getattr(torch, "float4_e2m1fn_x2", None)
    if target is None:
        raise UnsupportedDtypeError(
            "this torch has no float4_e2m1fn_x2 (torch 2.8 added it); read F4 with "
            "framework='numpy' (ml_dtypes)"
        )
    if array.ndim == 0 or array.shape[-1] % 2:
        raise UnsupportedDtypeError(
            f"F4 of shape {list(array.shape)} cannot be a torch float4_e2m1fn_x2, which packs "
            "pairs along an even last dimension; read it with framework='numpy' (ml_dtypes)"
        )
    packed = pack(array, DTYPES["F4"]).reshape(*array.shape[:-1], array.shape[-1] // 2)
    return torch.from_numpy(packed).view(target)

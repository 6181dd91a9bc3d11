"""Turning numpy results into the array type a caller asked for (``framework=``)."""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from .errors import FrameworkError, UnsupportedDtypeError

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
    raise FrameworkError(f"unknown framework {framework!r}; expected 'numpy' (or 'np') or 'pt'")


def convert(array: np.ndarray[Any, Any], dtype_name: str, framework: str) -> Any:
    """Return ``array`` as the framework's array type, sharing memory where possible.

    Raises:
        UnsupportedDtypeError: a dtype the framework has no type for (F4 and F6 in torch).
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
    if dtype_name in ("F4", "F6_E2M3", "F6_E3M2"):
        raise UnsupportedDtypeError(
            f"{dtype_name} has no torch dtype here; read it with framework='numpy' (ml_dtypes)"
        )
    return torch.from_numpy(array)

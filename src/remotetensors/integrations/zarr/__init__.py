"""Checkpoints for the Zarr world (``pip install "remotetensors[zarr]"``).

- ``Model.as_zarr_store()``: a read-only Zarr v3 store of the model, read through our reader
  (:class:`.store.CheckpointStore`).
- ``Model.to_kerchunk()``: kerchunk references (version 1), which fsspec's reference
  filesystem and zarr read without us (:mod:`.kerchunk`).
- :class:`SafetensorsParser`: a VirtualiZarr 2 parser (:mod:`.virtualizarr`).
- :func:`register_dtypes`: bfloat16, the float8 kinds and float4/float6 for zarr-python, as
  ml_dtypes arrays (:mod:`.kinds`; the store and the parser register them themselves).

Names here are imported on first use: the kerchunk references need no zarr, the store no
VirtualiZarr.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import TYPE_CHECKING, Any

from ...errors import MissingDependencyError

if TYPE_CHECKING:
    from ...models.model import AsyncModel
    from .kinds import register_dtypes
    from .store import CheckpointStore
    from .virtualizarr import SafetensorsParser

__all__ = ["CheckpointStore", "SafetensorsParser", "register_dtypes"]

_LAZY = {
    "CheckpointStore": ".store",
    "SafetensorsParser": ".virtualizarr",
    "register_dtypes": ".kinds",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(_imported(module), name)


def _imported(module: str) -> Any:
    """``module`` of this package, or MissingDependencyError naming the extra to install."""
    try:
        return importlib.import_module(module, __name__)
    except ImportError as exc:
        hint = _INSTALL.get(exc.name or "")
        if hint is None:
            raise
        raise MissingDependencyError(f"this needs {exc.name}: {hint}", name=exc.name) from exc


_INSTALL = {
    "zarr": 'pip install "remotetensors[zarr]"',
    "virtualizarr": 'pip install "virtualizarr>=2"',
    "obstore": 'pip install "virtualizarr>=2"',
    "obspec_utils": 'pip install "virtualizarr>=2"',
}


def model_zarr_store(
    model: AsyncModel,
    *,
    loop: asyncio.AbstractEventLoop | None,
    chunk_bytes: int,
    coalesce_window_seconds: float | None = None,
) -> CheckpointStore:
    """The hook behind ``as_zarr_store``: a :class:`CheckpointStore` of ``model``, whose files
    live on ``loop`` (the running loop when None).

    Raises:
        MissingDependencyError: zarr is not installed.
        ValueError: a non-positive ``chunk_bytes`` or a negative window.
    """
    store_module = _imported(".store")
    extra = {}
    if coalesce_window_seconds is not None:
        extra["coalesce_window_seconds"] = coalesce_window_seconds
    store: CheckpointStore = store_module.CheckpointStore(
        model,
        loop=loop if loop is not None else asyncio.get_running_loop(),
        chunk_bytes=chunk_bytes,
        **extra,
    )
    return store


def model_kerchunk(model: AsyncModel, *, chunk_bytes: int) -> dict[str, Any]:
    """The hook behind ``to_kerchunk``: see :func:`.kerchunk.references`."""
    from .kerchunk import references

    return references(model, chunk_bytes=chunk_bytes)

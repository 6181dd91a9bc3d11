"""A model as kerchunk references (version 1): fsspec and zarr read its tensors without us.

``{"version": 1, "refs": {key: JSON text | [url, offset, length]}}`` with Zarr v2 keys:
``.zgroup`` and ``.zattrs`` at the root, ``<name>/.zarray`` and ``<name>/.zattrs`` (with
``_ARRAY_DIMENSIONS``, for xarray) per tensor, and one ``<name>/<i>.0...`` per chunk (``0`` for
a scalar), each ``[url of its file, offset, length]``: a byte range of the file (see
:mod:`.layout`). A hub file's URL is its resolve URL at the commit the model was read from
(``.../resolve/<sha>/...``), so the references keep naming those bytes after the branch moves.

Read them with ``fsspec.filesystem("reference", fo=refs, remote_protocol=...)`` and zarr (or
``xarray.open_dataset("reference://", engine="zarr", ...)``). BF16 and the float8 kinds are
written under the names of :mod:`.dtypes`; zarr-python knows them once
:func:`~remotetensors.integrations.zarr.register_dtypes` ran, and refuses them (never misreads
them) before. No zarr is needed to write references.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...errors import LeftOutWarning, ShardNotOpenedError, warn_at_caller
from ...reading.hub_onecall import LazyTensorFile
from .layout import Plan, group_attributes, plan_arrays

if TYPE_CHECKING:
    from ...models.model import AsyncModel
    from ...reading.file import AsyncTensorFile


def references(model: AsyncModel, *, chunk_bytes: int) -> dict[str, Any]:
    """Kerchunk references (version 1) of every tensor of ``model`` that Zarr can express.

    Args:
        model: the open model.
        chunk_bytes: target bytes of a chunk (whole rows).

    Warns:
        LeftOutWarning: per tensor left out (packed F4/F6, GGUF's quantized kinds, names
            that are no Zarr node names), named with the reason.

    Raises:
        ShardNotOpenedError: a shard known only from the hub's metadata endpoint has not been
            opened (its offsets are not final; the sync ``Model.to_kerchunk`` opens them).
        ValueError: ``chunk_bytes`` is not positive.
    """
    plan = reference_plan(model, chunk_bytes=chunk_bytes)
    urls = {name: file_url(model.file(name), local_as_uri=False) for name in model.files}
    refs: dict[str, Any] = {}
    for path in plan.groups:
        prefix = f"{path}/" if path else ""
        refs[f"{prefix}.zgroup"] = json.dumps({"zarr_format": 2})
        attributes = group_attributes(model.location, model.metadata) if path == "" else {}
        refs[f"{prefix}.zattrs"] = json.dumps(attributes)
    for path, array in plan.arrays.items():
        zarray, zattrs = array.v2_metadata()
        refs[f"{path}/.zarray"] = json.dumps(zarray)
        refs[f"{path}/.zattrs"] = json.dumps(zattrs)
        assert array.info.file is not None
        url = urls[array.info.file]
        for index in range(array.chunk_count):
            offset, _ = array.file_bytes(*array.chunk_rows(index))
            key = ".".join(map(str, (index, *[0] * (len(array.shape) - 1)))) or "0"
            refs[f"{path}/{key}"] = [url, array.info.start + offset, array.chunk_nbytes]
    return {"version": 1, "refs": refs}


def reference_plan(model: AsyncModel, *, chunk_bytes: int) -> Plan:
    """The hierarchy of ``model`` whose chunks are byte ranges of its files (shared by the
    kerchunk references and the VirtualiZarr manifests), with a warning per tensor left out.

    Raises:
        ShardNotOpenedError: see :func:`references`.
    """
    predicted: dict[str, list[str]] = {}
    for name, info in model.tensors.items():
        if info.layout is not None and info.layout.predicted and info.file is not None:
            predicted.setdefault(info.file, []).append(name)
    for name in model.files:
        file = model.file(name)
        if isinstance(file, LazyTensorFile) and not file.opened:
            raise ShardNotOpenedError(
                f"{file.location}: the shard's offsets are not final until its 8-byte length is "
                "read; await model.open_shards(model.keys()) first (the sync Model does it)"
            )
        if not file.offsets_confirmed(predicted.get(name, [])):
            raise ShardNotOpenedError(
                f"{file.location}: where its storages' bytes start is predicted from the zip's "
                "directory until their local headers are read; await "
                "model.open_shards(model.keys()) first (the sync Model does it)"
            )
    sizes = {name: index.file_size for name, index in model.index.files.items()}
    plan = plan_arrays(model.tensors, chunk_bytes=chunk_bytes, file_sizes=sizes)
    for name, why in plan.left_out:
        warn_at_caller(LeftOutWarning(f"{model.location}: tensor {name} is left out: {why}"))
    return plan


def file_url(file: AsyncTensorFile, *, local_as_uri: bool) -> str:
    """Where a reader finds ``file`` at the version read: a hub file's resolve URL at the
    pinned commit, an HTTP or fsspec URL as given, a local file's absolute path (a ``file://``
    URI with ``local_as_uri``). A file opened on an fsspec filesystem object is named by its
    location."""
    try:
        recipe = file.recipe()
    except NotImplementedError:
        return file.location
    if recipe.kind != "local":
        return recipe.target
    path = Path(os.path.abspath(recipe.target))
    return path.as_uri() if local_as_uri else path.as_posix()


def write_references(refs: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Write ``refs`` as JSON to ``path`` (a new file, or one replaced whole)."""
    Path(path).write_text(json.dumps(refs), encoding="utf-8")

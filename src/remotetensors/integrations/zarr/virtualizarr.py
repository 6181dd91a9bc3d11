"""A VirtualiZarr 2 parser for safetensors checkpoints (``pip install virtualizarr``).

VirtualiZarr 2's parser protocol is a callable ``parser(url, registry) -> ManifestStore``: it
reads the file's layout itself (VirtualiZarr reads no format) and returns a ``ManifestStore``,
a ``ManifestGroup`` of ``ManifestArray`` s, each Zarr v3 array metadata (an
``ArrayV3Metadata``) plus a ``ChunkManifest`` of ``(path, offset, length)`` per chunk key; the
``registry`` (an obstore ``ObjectStoreRegistry``) then reads those byte ranges when values are
loaded. What the protocol needs of us:

- the layout: our reader reads the headers (one request per file, a sharded model's index
  too, any location ``open_model`` takes), so the parser opens the model and closes it
  before returning;
- the chunks as byte ranges, and the URLs the registry resolves: the plan of
  :mod:`.layout` for references (the last chunk of a tensor may reach past it; packed F4/F6
  are left out) and each file's URL at the version read (:func:`.kerchunk.file_url`, a
  ``file://`` URI for a local file, the pinned resolve URL for a hub file);
- chunk keys with the ``.`` separator (``ManifestStore`` lists arrays only under it) and
  ``dimension_names`` on every array (``to_virtual_dataset`` needs them);
- BF16 and the float8 kinds registered with zarr (:mod:`.kinds`), as ``ArrayV3Metadata``
  parses the data type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from virtualizarr.manifests import ChunkManifest, ManifestArray, ManifestGroup, ManifestStore
from zarr.core.metadata import ArrayV3Metadata

from ...models.model import load_model, warn_problems
from ...models.sync import run_sync
from ...options import DEFAULT_ZARR_CHUNK_BYTES
from . import kinds
from .kerchunk import file_url, reference_plan
from .layout import ArrayPlan, Plan, group_attributes

if TYPE_CHECKING:
    from obspec_utils.registry import ObjectStoreRegistry

kinds.register_dtypes()


class SafetensorsParser:
    """Parse a checkpoint into a VirtualiZarr ``ManifestStore``.

    ``open_virtual_dataset(url, registry=registry, parser=SafetensorsParser())`` gives an
    ``xarray.Dataset`` with one virtual variable per tensor (named as the checkpoint names it).
    ``url`` is anything :func:`remotetensors.open_model` opens: one file, a sharded
    checkpoint's folder or index, a hub repo; the registry must hold a store for the URLs of
    its files (for a hub file, the hub's resolve URL at the commit read).

    Args:
        chunk_bytes: target bytes of a chunk (whole rows).
        **open_model_kwargs: passed to :func:`remotetensors.open_model` (``token``,
            ``storage_options``, ``revision``, ``http_options``, ...).
    """

    def __init__(self, *, chunk_bytes: int = DEFAULT_ZARR_CHUNK_BYTES, **open_model_kwargs: Any):
        self.chunk_bytes = chunk_bytes
        self.open_model_kwargs = open_model_kwargs

    def __call__(self, url: str, registry: ObjectStoreRegistry[Any]) -> ManifestStore:
        """The manifest store of the checkpoint at ``url``; chunks are read through
        ``registry``.

        Warns:
            LeftOutWarning: per tensor that cannot be a manifest array (named, with why).

        Raises:
            NotFoundError, HeaderError, ...: as :func:`remotetensors.open_model` raises.
        """
        model = run_sync(load_model(url, **self.open_model_kwargs))
        try:
            warn_problems(model)
            run_sync(model.open_shards(model.keys()))
            plan = reference_plan(model, chunk_bytes=self.chunk_bytes)
            urls = {name: file_url(model.file(name), local_as_uri=True) for name in model.files}
            attributes = group_attributes(model.location, model.metadata)
        finally:
            run_sync(model.aclose())
        return ManifestStore(group=_group(plan, "", urls, attributes), registry=registry)


def _group(plan: Plan, path: str, urls: Mapping[str, str], attributes: dict[str, Any]) -> Any:
    """The ``ManifestGroup`` at ``path``, its subgroups built the same way."""
    arrays: dict[str, ManifestArray] = {}
    groups: dict[str, ManifestGroup] = {}
    for member in plan.groups[path]:
        child = f"{path}/{member}" if path else member
        if child in plan.arrays:
            arrays[member] = _array(plan.arrays[child], urls)
        else:
            groups[member] = _group(plan, child, urls, {})
    return ManifestGroup(arrays=arrays, groups=groups, attributes=attributes)


def _array(array: ArrayPlan, urls: Mapping[str, str]) -> ManifestArray:
    """One tensor as a ``ManifestArray``: its metadata and a byte range per chunk."""
    grid = tuple(-(-n // c) for n, c in zip(array.shape, array.chunk_shape, strict=True))
    paths = np.full(grid, "", dtype=np.dtypes.StringDType())
    offsets = np.zeros(grid, dtype=np.uint64)
    lengths = np.zeros(grid, dtype=np.uint64)
    assert array.info.file is not None
    url = urls[array.info.file]
    for index in range(array.chunk_count):
        at = (index, *[0] * (len(grid) - 1)) if grid else ()
        offset, _ = array.file_bytes(*array.chunk_rows(index))
        paths[at] = url
        offsets[at] = array.info.start + offset
        lengths[at] = array.chunk_nbytes
    manifest = ChunkManifest.from_arrays(paths=paths, offsets=offsets, lengths=lengths)
    metadata = ArrayV3Metadata.from_dict(array.v3_metadata("."))
    return ManifestArray(metadata=metadata, chunkmanifest=manifest)

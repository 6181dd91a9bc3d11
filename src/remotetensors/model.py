"""Models: one file, or a sharded checkpoint (``model.safetensors.index.json``) anywhere.

Discovery costs one round of requests: for a folder, prefix or repo, ``model.safetensors`` and
``model.safetensors.index.json`` are asked for at the same time. A sharded model's shard headers
then come in a second round, all concurrently, each shard's first window sized from what the
index says it holds, so the header phase transfers about the headers' bytes and no more.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import httpx

from .errors import HeaderError, HeaderErrorKind, NotFoundError, TensorNotFoundError
from .fetch import gather_or_cancel
from .formats.index_json import ShardIndex, parse_index
from .index import FileIndex, ModelIndex, TensorInfo, with_file
from .opening import Opening
from .options import ReadOptions
from .progress import bar, wanted
from .reader import AsyncTensorFile
from .sources.http import HttpOptions
from .sources.resolve import Place, split_location

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
INDEX_WINDOW_BYTES = 1024 * 1024
"""First request for an index file; longer ones cost one more request for the rest."""

# Bytes a header spends on one tensor besides its name: the JSON entry with its dtype, shape and
# offsets (about 70 for a 2-D tensor of a large model), rounded up so most shards fit one window.
_HEADER_BYTES_PER_TENSOR = 100
_HEADER_BYTES_FIXED = 8 + 256  # the length prefix, braces, __metadata__ and padding


def header_window_for(names: Iterable[str]) -> int:
    """First-request size for a shard holding tensors ``names``: its header, estimated."""
    return _HEADER_BYTES_FIXED + sum(len(n.encode()) + _HEADER_BYTES_PER_TENSOR for n in names)


class AsyncModel:
    """An open model: the joined index, and tensors fetched from the shards that hold them.

    Create it with :class:`open_model_async` (``async with`` or ``await``).
    """

    def __init__(
        self,
        location: str,
        files: Mapping[str, AsyncTensorFile],
        index: ModelIndex,
        *,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.location = location
        self._files = dict(files)
        self.index = index
        self._client = client  # shared by the files' HTTP sources; closed with the model

    # --- what the headers say --------------------------------------------------------------

    @property
    def tensors(self) -> Mapping[str, TensorInfo]:
        """name -> TensorInfo (with its file) across all shards, sorted by name."""
        return self.index.tensors

    @property
    def metadata(self) -> Mapping[str, object] | None:
        """The index's metadata (sharded) or the file's ``__metadata__``."""
        return self.index.metadata

    @property
    def files(self) -> list[str]:
        """The model's file names."""
        return list(self.index.files)

    def keys(self) -> list[str]:
        """Tensor names, sorted."""
        return self.index.keys()

    def parameter_count(self) -> dict[str, int]:
        """Elements per dtype, as the hub counts them."""
        return self.index.parameter_count()

    @property
    def num_parameters(self) -> int:
        """Total number of parameters (elements)."""
        return self.index.num_parameters

    @property
    def nbytes(self) -> int:
        """Total bytes of tensor data."""
        return self.index.nbytes

    def select(self, names: str | Iterable[str]) -> list[str]:
        """Tensor names for ``names``: a list of names, or one name or glob pattern.

        Raises:
            TensorNotFoundError: a name the model does not hold, or a pattern matching nothing.
        """
        if isinstance(names, str):
            if names in self.index.tensors:
                return [names]
            matched = fnmatch.filter(self.index.keys(), names)
            if not matched:
                raise TensorNotFoundError(
                    f"Model does not contain tensor {names} ({self.location}): no name matches",
                    name=names,
                )
            return matched
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            if name not in self.index.tensors:
                raise TensorNotFoundError(
                    f"Model does not contain tensor {name} ({self.location})", name=name
                )
        return wanted

    # --- data --------------------------------------------------------------------------------

    async def get_tensor(self, name: str) -> Any:
        """Fetch one tensor from its shard."""
        self.select([name])
        file = self.tensors[name].file
        assert file is not None
        return await self._files[file].get_tensor(name)

    async def get_tensors(self, names: str | Iterable[str]) -> dict[str, Any]:
        """Fetch tensors by names or a glob (``"model.layers.0.*"``), touching only the shards
        that hold them, concurrently.

        Returns:
            name -> array, in the order asked (sorted for a glob).
        """
        wanted = self.select(names)
        by_file: dict[str, list[str]] = {}
        for name in wanted:
            file = self.tensors[name].file
            assert file is not None
            by_file.setdefault(file, []).append(name)
        results: dict[str, Any] = {}

        async def load(file: str, file_names: list[str]) -> None:
            results.update(await self._files[file].get_tensors(file_names))

        await gather_or_cancel([load(f, n) for f, n in by_file.items()])
        return {name: results[name] for name in wanted}

    def get_slice(self, name: str) -> Any:
        """A lazy view of a tensor: ``await model.get_slice(name)[rows]``."""
        self.select([name])
        file = self.tensors[name].file
        assert file is not None
        return self._files[file].get_slice(name)

    async def aclose(self) -> None:
        """Release every file's connections."""
        await asyncio.gather(*(f.aclose() for f in self._files.values()))
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> AsyncModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _repr_html_(self) -> str:
        from .display import html_view

        return html_view(self.location, self.tensors.values(), show_files=True)

    def __repr__(self) -> str:
        return (
            f"<AsyncModel {self.location}: {len(self.index.files)} file(s), "
            f"{len(self.tensors)} tensors, {self.num_parameters} parameters>"
        )


async def load_model(
    location: str | os.PathLike[str],
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
    options: ReadOptions | None = None,
    http_options: HttpOptions | None = None,
    framework: str = "numpy",
) -> AsyncModel:
    """Open a model: a file, or a folder, prefix or repo holding one file or shards.

    Args:
        location: ``hf://org/name[@rev][/path]``, ``s3://bucket/prefix/`` (any fsspec URL),
            ``https://host/dir/``, a local folder, or a file in any of them (a ``.safetensors``
            or ``.bt`` file, or an ``*.index.json``).
        revision: the hub revision (overrides ``@rev``).
        token: the hub token (see :func:`remotetensors.sources.hub.resolve_token`).
        storage_options: passed to fsspec untouched.
        options: header window, gap, part size and concurrency (per file).
        http_options: timeouts, retries, headers.
        framework: ``"numpy"`` or ``"pt"``.

    Raises:
        NotFoundError: neither ``model.safetensors`` nor its index exists at a folder.
        HeaderError: an index or header is malformed, or a tensor of the weight map is missing
            from its shard.
    """
    options = options or ReadOptions()
    client = (http_options or HttpOptions()).new_client()
    text = os.fspath(location)
    try:
        place, name = split_location(
            text,
            revision=revision,
            token=token,
            http_options=http_options,
            client=client,
            storage_options=storage_options,
        )
        if name is not None and name.endswith(".json"):
            shard_index = await _read_index(place, name)
            model = await _open_sharded(text, place, shard_index, options, framework)
        elif name is not None:
            file = await AsyncTensorFile.open(
                place.open(name), options=options, framework=framework
            )
            model = _single(text, name, file)
        else:
            model = await _discover(text, place, options, framework)
    except BaseException:
        await client.aclose()
        raise
    model._client = client
    return model


def _single(location: str, name: str, file: AsyncTensorFile) -> AsyncModel:
    tensors = {n: with_file(info, name) for n, info in file.index.tensors.items()}
    index = ModelIndex({name: file.index}, tensors, file.index.metadata)
    return AsyncModel(location, {name: file}, index)


async def _discover(
    location: str, place: Place, options: ReadOptions, framework: str
) -> AsyncModel:
    single_task = asyncio.ensure_future(
        AsyncTensorFile.open(place.open(SINGLE_FILE), options=options, framework=framework)
    )
    index_task = asyncio.ensure_future(_read_index(place, INDEX_FILE))
    await asyncio.gather(single_task, index_task, return_exceptions=True)
    single_error = single_task.exception()
    index_error = index_task.exception()
    if index_error is None:
        if single_error is None:
            await single_task.result().aclose()
        return await _open_sharded(location, place, index_task.result(), options, framework)
    if single_error is None:
        return _single(location, SINGLE_FILE, single_task.result())
    if isinstance(single_error, NotFoundError) and isinstance(index_error, NotFoundError):
        raise NotFoundError(
            f"{location}: no model here: neither {place.location(SINGLE_FILE)} nor "
            f"{place.location(INDEX_FILE)} exists; name another file or index explicitly"
        )
    raise single_error if not isinstance(single_error, NotFoundError) else index_error


async def _read_index(place: Place, name: str) -> ShardIndex:
    """Fetch an index file (one request when it fits the window) and parse it."""
    source = place.open(name)
    try:
        prefix = await source.open_prefix(INDEX_WINDOW_BYTES)
        data = prefix.data
        if prefix.size > len(data):
            data += await source.read(len(data), prefix.size)
    finally:
        await source.aclose()
    return parse_index(data, location=place.location(name))


async def _open_sharded(
    location: str,
    place: Place,
    shard_index: ShardIndex,
    options: ReadOptions,
    framework: str,
) -> AsyncModel:
    weight_map = shard_index.weight_map
    by_file = shard_index.tensors_by_file()
    opened: dict[str, AsyncTensorFile] = {}
    shown = bar(
        total=len(by_file),
        unit="file",
        description="shard headers",
        enabled=wanted(options.progress),
    )

    async def open_shard(file: str, names: list[str]) -> None:
        shard_options = replace(options, header_window_bytes=header_window_for(names))
        opened[file] = await AsyncTensorFile.open(
            place.open(file), options=shard_options, framework=framework
        )
        shown.update(1)

    try:
        await gather_or_cancel([open_shard(f, names) for f, names in by_file.items()])
    except BaseException:
        await asyncio.gather(*(f.aclose() for f in opened.values()))
        raise
    finally:
        shown.close()
    files = {file: opened[file] for file in by_file}
    tensors: dict[str, TensorInfo] = {}
    for tensor, file in weight_map.items():
        info = files[file].index.tensors.get(tensor)
        if info is None:
            await asyncio.gather(*(f.aclose() for f in files.values()))
            raise HeaderError(
                HeaderErrorKind.INVALID_TENSOR_INFO,
                f"the weight map puts tensor `{tensor}` in {file}, but that file has no such "
                "tensor",
                location=place.location(INDEX_FILE),
            )
        tensors[tensor] = with_file(info, file)
    unmapped = tuple(
        sorted(
            name
            for file, f in files.items()
            for name in f.index.tensors
            if weight_map.get(name) != file
        )
    )
    file_indexes: dict[str, FileIndex] = {file: f.index for file, f in files.items()}
    index = ModelIndex(file_indexes, tensors, shard_index.metadata, unmapped)
    return AsyncModel(location, files, index)


def open_model_async(location: str | os.PathLike[str], **kwargs: Any) -> Opening[AsyncModel]:
    """Open a model for async use: ``async with open_model_async("s3://bucket/llama/") as m:``.

    Also awaitable: ``m = await open_model_async(...)`` (then ``await m.aclose()``). Takes the
    keyword arguments of :func:`load_model`.
    """
    return Opening(lambda: load_model(location, **kwargs))

"""Models: one file, or a sharded checkpoint (``model.safetensors.index.json``) anywhere.

Discovery costs one round of requests: for a folder, prefix or repo, ``model.safetensors``,
``model.safetensors.index.json``, ``config.json`` and ``quantization_config.json`` are asked for
at the same time (a location naming a file asks for the configs beside it, also at once). A
sharded model's shard headers then come in a second round, all concurrently, each shard's first
window sized from what the index says it holds, so the header phase transfers about the headers'
bytes and no more.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import logging
import os
import warnings
from dataclasses import replace
from typing import TYPE_CHECKING, Any, overload

from .. import hooks
from ..errors import (
    FileClosedError,
    HeaderError,
    HeaderErrorKind,
    NotFoundError,
    RemoteTensorsError,
    TensorNotFoundError,
    did_you_mean,
)
from ..formats.gguf_files import split_names
from ..formats.index_json import ShardIndex, parse_index
from ..index import FileIndex, ModelIndex, Row, TensorInfo, TensorTable, placed
from ..options import DEFAULT_CHUNK_BYTES, ReadOptions
from ..quantization import (
    LogicalTensor,
    ParameterCount,
    Quantization,
    count_parameters,
    declared_total,
    stored_shape_tensors,
)
from ..quantization.memory import MemoryEstimate, estimate_memory
from ..reading import hub_onecall
from ..reading.fetch import gather_or_cancel
from ..reading.file import AsyncTensorFile
from ..reading.hub_onecall import LazyTensorFile
from ..reading.opening import open_tensor_file
from ..reading.progress import bar, wanted
from ..redact import redact_url
from ..sources.base import Traffic
from ..sources.http.client import Client, HttpOptions
from ..sources.resolve import Place, split_location
from .configs import ConfigFiles, ConfigWarning, read_configs
from .gguf_parts import find_gguf, join_parts, open_parts
from .opening import Opening

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    import dask.array as da

log = logging.getLogger(__name__)

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
        client: Client | None = None,
        configs: ConfigFiles | None = None,
    ) -> None:
        self.location = redact_url(location)  # named in messages and views: no secrets
        self._files = dict(files)
        self.index = index
        self._client = client  # shared by the files' HTTP sources; closed with the model
        self._closed = False
        self.configs = configs or ConfigFiles()
        """``config.json`` and ``quantization_config.json`` as found beside the weights."""
        self._true_count: ParameterCount | None = None
        self._logical_shapes: dict[str, tuple[int, ...]] = {}
        self._shape_problems: tuple[str, ...] = ()
        # file name -> counters, shared with the place that opened the files; it also holds
        # what discovery cost (probes that found nothing, the index, configs).
        self._traffic: dict[str, Traffic] = {}
        for name, file in self._files.items():
            if isinstance(file, LazyTensorFile):
                file.on_open = functools.partial(self._file_opened, name)

    def _file_opened(self, name: str, real: FileIndex) -> None:
        """A lazily opened shard (see :mod:`.hub_onecall`) now has its final offsets."""
        files = {**self.index.files, name: real}
        real_rows = real.tensors.rows()
        rows = {
            n: (placed(real_rows[n], name) if row[4] == name else row)
            for n, row in self.index.tensors.rows().items()
        }
        self.index = ModelIndex(files, TensorTable(rows), self.index.metadata, self.index.unmapped)

    async def open_shards(self, names: str | Iterable[str]) -> None:
        """Make the offsets of the shards holding ``names`` final (shards known from the hub's
        metadata endpoint read their 8-byte length first); nothing to do for other models."""
        files = {self.tensors[n].file for n in self.select(names)}
        lazy = [f for name, f in self._files.items() if name in files]
        await gather_or_cancel(
            [f._ensure_open() for f in lazy if isinstance(f, LazyTensorFile) and not f.opened]
        )

    def _set_configs(self, configs: ConfigFiles) -> None:
        self.configs = configs
        self._true_count = None

    async def _read_logical_shapes(self) -> None:
        """Fetch the stored logical shapes of packed weights (compressed-tensors'
        ``*.weight_shape``, a few bytes each, next to one another in each file), which make
        their counts exact. Costs one more round, only for such checkpoints, and only while
        the count is not already exact."""
        names = stored_shape_tensors(self.tensors)
        if not names or self.true_count.exact:
            return
        try:
            arrays = await self.get_tensors(names)
        except RemoteTensorsError as exc:
            self._shape_problems = (
                f"{self.location}: the stored weight shapes could not be read ({exc}); packed "
                "counts are upper bounds",
            )
        else:
            self._logical_shapes = {
                name: tuple(int(v) for v in array.reshape(-1).tolist())
                for name, array in arrays.items()
            }
        self._true_count = None

    def _declaring_metadata(self) -> Mapping[str, object] | None:
        """The metadata that declares ``total_parameters``: the index's, else a shard's."""
        candidates = [self.index.metadata, *(f.metadata for f in self.index.files.values())]
        for metadata in candidates:
            if declared_total(metadata) is not None:
                return metadata
        return self.index.metadata

    @property
    def true_count(self) -> ParameterCount:
        """The true count: each tensor's role and logical size (see :mod:`.quantization`)."""
        if self._true_count is None:
            configs = self.configs
            count = count_parameters(
                self.index.tensors,
                configs.config,
                quantization_config=configs.quantization_config,
                metadata=self._declaring_metadata(),
                logical_shapes=self._logical_shapes,
                config_location=configs.config_location,
                quantization_config_location=configs.quantization_config_location,
            )
            problems = (*configs.problems, *self._shape_problems, *count.problems)
            self._true_count = replace(count, problems=problems)
        return self._true_count

    # --- what crossed the network --------------------------------------------------------------

    @property
    def traffic_by_file(self) -> dict[str, Traffic]:
        """File name -> requests, bytes and seconds so far: every file opened for this model,
        the index, configs and probes for files that were not there included."""
        traffic = dict(self._traffic)
        for name, file in self._files.items():
            traffic.setdefault(name, file.traffic)
        return traffic

    @property
    def traffic(self) -> Traffic:
        """What crossed the network for this model so far, over all its files (``seconds`` is
        summed over files, which are read concurrently: an upper bound of the wall time)."""
        return Traffic.total(self.traffic_by_file.values())

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

    @property
    def config(self) -> dict[str, Any] | None:
        """``config.json`` beside the weights, parsed; ``None`` when absent or unusable."""
        return self.configs.config

    @property
    def quantization(self) -> Quantization | None:
        """How the checkpoint is quantized (from its config), or ``None``."""
        return self.true_count.quantization

    @property
    def logical_tensors(self) -> Mapping[str, LogicalTensor]:
        """name -> role (weight or quantization bookkeeping) and logical size, per tensor."""
        return self.true_count.tensors

    def parameter_count(self) -> dict[str, int]:
        """Elements per dtype as stored: the hub's (and huggingface_hub's) naive count.

        For a quantized checkpoint this counts packed containers and bookkeeping tensors; the
        model's true count is :attr:`num_parameters`.
        """
        return self.index.parameter_count()

    @property
    def num_parameters(self) -> int:
        """The true parameter count: what the unquantized model had.

        Packed weights count as the values they hold; scales, zero points and other
        bookkeeping are left out. An upper bound when ``true_count.exact`` is False. Elements
        as stored are :attr:`stored_parameters`.
        """
        return self.true_count.total

    @property
    def stored_parameters(self) -> int:
        """Elements as stored, over all tensors (the sum of :meth:`parameter_count`)."""
        return self.index.num_parameters

    def memory(
        self, context: int | None = None, *, batch: int = 1, kv_dtype: str | None = None
    ) -> MemoryEstimate:
        """Memory to serve the model: weights as stored, plus the KV cache for ``batch``
        sequences of ``context`` tokens (see :func:`remotetensors.memory.estimate_memory`).

        Args:
            context: tokens per sequence; ``None`` takes the config's maximum length.
            batch: sequences held at once.
            kv_dtype: ``"bf16"``, ``"fp8"``, …; ``None`` takes the config's dtype.

        Raises:
            ValueError: a bad context, batch or dtype name.
        """
        return estimate_memory(
            self.config, self.nbytes, context=context, batch=batch, kv_dtype=kv_dtype
        )

    @property
    def nbytes(self) -> int:
        """Total bytes of tensor data."""
        return self.index.nbytes

    def select(self, names: str | Iterable[str]) -> list[str]:
        """Tensor names for ``names``: a list of names, or one name or glob pattern.

        Raises:
            TensorNotFoundError: a name the model does not hold, or a pattern matching nothing.
            FileClosedError: the model was closed.
        """
        if self._closed:
            raise FileClosedError(f"Model is closed ({self.location})")
        if isinstance(names, str):
            if names in self.index.tensors:
                return [names]
            matched = fnmatch.filter(self.index.keys(), names)
            if not matched:
                raise TensorNotFoundError(
                    f"Model does not contain tensor {names} ({self.location}): no name matches"
                    f"{did_you_mean(names, self.index.tensors)}",
                    name=names,
                )
            return matched
        wanted = list(dict.fromkeys(names))
        for name in wanted:
            if name not in self.index.tensors:
                raise TensorNotFoundError(
                    f"Model does not contain tensor {name} ({self.location})"
                    f"{did_you_mean(name, self.index.tensors)}",
                    name=name,
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

    # A str is also an Iterable[str]; the first overload wins for it, as in typeshed.
    @overload
    def to_dask(  # type: ignore[overload-overlap]
        self, names: str, *, chunk_bytes: int = ...
    ) -> da.Array | dict[str, da.Array]: ...
    @overload
    def to_dask(self, names: Iterable[str], *, chunk_bytes: int = ...) -> dict[str, da.Array]: ...
    def to_dask(
        self, names: str | Iterable[str], *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
    ) -> da.Array | dict[str, da.Array]:
        """Lazy Dask arrays of tensors, read from their shards in chunks of about
        ``chunk_bytes`` (see :meth:`AsyncTensorFile.to_dask`); no tensor data is read here.

        Returns:
            one array for one exact tensor name; name -> array for a glob or a list.

        Raises:
            TensorNotFoundError, MissingDependencyError.
        """
        wanted = self.select(names)
        arrays = {}
        for name in wanted:
            file = self.tensors[name].file
            assert file is not None
            arrays[name] = self._files[file].to_dask(name, chunk_bytes=chunk_bytes)
        if isinstance(names, str) and names in self.index.tensors:
            return arrays[names]
        return arrays

    async def aclose(self) -> None:
        """Release every file's connections; later reads raise FileClosedError."""
        self._closed = True
        files = list(self._files.values())
        if len(files) == 1:  # the common case, without a task
            await files[0].aclose()
        else:
            await asyncio.gather(*(f.aclose() for f in files))
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> AsyncModel:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _repr_html_(self) -> str:
        return str(hooks.call("model_html", self))

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self) if cycle else str(hooks.call("model_text", self)))

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
    client: Client | None = None,
) -> AsyncModel:
    """Open a model: a file, or a folder, prefix or repo holding one file or shards.

    Args:
        location: ``hf://org/name[@rev][/path]``, ``s3://bucket/prefix/`` (any fsspec URL),
            ``https://host/dir/``, a local folder, or a file in any of them (a ``.safetensors``,
            ``.bt`` or ``.gguf`` file, a part of a split GGUF, or an ``*.index.json``). A folder
            or repo without a safetensors model opens its GGUF model if it holds exactly one.
        revision: the hub revision (overrides ``@rev``).
        token: the hub token (see :func:`remotetensors.sources.hub.repo.resolve_token`).
        storage_options: passed to fsspec untouched.
        options: header window, gap, part size and concurrency (per file).
        http_options: timeouts, retries, headers.
        framework: ``"numpy"`` or ``"pt"``.
        client: a client to share with other models (a scan does; see
            :mod:`.sources.http.client`); the caller closes it. By default the model creates
            its own and closes it in ``aclose``.

    Raises:
        NotFoundError: neither ``model.safetensors`` nor its index exists at a folder, nor a
            GGUF file.
        AmbiguousModelError: no safetensors model, and several GGUF models (named).
        HeaderError: an index or header is malformed, or a tensor of the weight map is missing
            from its shard.
    """
    options = options or ReadOptions()
    owned = client is None
    if client is None:
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
        # Configs are read alongside the weights' headers (no extra round); a scan that
        # does not want them makes no task for them.
        configs_task = asyncio.ensure_future(read_configs(place)) if options.read_configs else None
        try:
            if name is not None and name.endswith(".json"):
                shard_index = await _read_index(place, name)
                model = await _open_sharded(text, place, shard_index, options, framework)
            elif name is not None and (parts := split_names(name)) is not None:
                model = await _open_gguf(text, place, parts, options, framework)
            elif name is not None:
                file = await open_tensor_file(
                    place.open(name), options=options, framework=framework
                )
                model = _single(text, name, file)
            else:
                model = await _discover(text, place, options, framework)
        except BaseException:
            if configs_task is not None:
                configs_task.cancel()
                await asyncio.gather(configs_task, return_exceptions=True)
            raise
        model._traffic = place.traffic
        try:
            model._set_configs(ConfigFiles() if configs_task is None else await configs_task)
            await model._read_logical_shapes()
        except BaseException:
            await model.aclose()
            raise
    except BaseException:
        if owned:
            await client.aclose()
        raise
    if owned:
        model._client = client
    for problem in model.true_count.problems:
        warnings.warn(ConfigWarning(problem), stacklevel=2)
    return model


def _single(location: str, name: str, file: AsyncTensorFile) -> AsyncModel:
    return AsyncModel(location, {name: file}, ModelIndex.of_file(name, file.index))


async def _discover(
    location: str, place: Place, options: ReadOptions, framework: str
) -> AsyncModel:
    """One round: ``model.safetensors``, the index, and for hub repos the one-call metadata
    endpoint (alone once the endpoint is known to have it: see :mod:`.hub_onecall`). When both
    the single file and the index exist, the single file is the model, as huggingface_hub and
    transformers decide."""
    one_call = hub_onecall.plan(place)
    single_task = asyncio.ensure_future(
        open_tensor_file(place.open(SINGLE_FILE), options=options, framework=framework)
    )
    meta_task = asyncio.ensure_future(hub_onecall.ask(place, INDEX_FILE)) if one_call else None
    index_task = (
        None if one_call == "alone" else asyncio.ensure_future(_read_index(place, INDEX_FILE))
    )
    tasks = [t for t in (single_task, meta_task, index_task) if t is not None]
    try:
        await asyncio.gather(*tasks, return_exceptions=True)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if single_task.done() and not single_task.cancelled() and not single_task.exception():
            await single_task.result().aclose()
        raise
    single_error = single_task.exception()
    if single_error is None:
        return _single(location, SINGLE_FILE, single_task.result())
    index_error = index_task.exception() if index_task is not None else None
    shard_index = index_task.result() if index_task is not None and index_error is None else None
    if meta_task is not None and (index_task is None or index_error is None):
        metadata = hub_onecall.accept(place, meta_task.result(), location)
        if metadata is not None:
            files, index = hub_onecall.build(
                location, place, metadata, shard_index, INDEX_FILE, options, framework
            )
            return AsyncModel(location, files, index)
        if index_task is None:
            answer = meta_task.result()
            if answer.status == 404:
                index_error = NotFoundError(f"{place.location(INDEX_FILE)}: not found")
            elif answer.status in (401, 403):
                raise single_error
            else:
                try:  # the endpoint failed: read the index after all (one more round)
                    shard_index = await _read_index(place, INDEX_FILE)
                except RemoteTensorsError as exc:
                    index_error = exc
    if shard_index is not None:
        log.debug("%s: header phase from range reads of the index and shards", location)
        return await _open_sharded(location, place, shard_index, options, framework)
    assert index_error is not None
    for error in (single_error, index_error):
        # The hub says when the repo or revision itself is missing: that, not the files.
        if isinstance(error, NotFoundError) and error.code in ("RepoNotFound", "RevisionNotFound"):
            raise error
    if isinstance(single_error, NotFoundError) and isinstance(index_error, NotFoundError):
        gguf_files = await find_gguf(location, place)
        if gguf_files is not None:
            return await _open_gguf(location, place, gguf_files, options, framework)
        if single_error.code == "EntryNotFound":
            raise NotFoundError(
                f"{location}: the repo has no safetensors or GGUF weights where they are looked "
                f"for: neither {place.location(SINGLE_FILE)} nor {place.location(INDEX_FILE)} "
                "nor a .gguf file exists; name a subfolder, a file or an index explicitly"
            )
        raise NotFoundError(
            f"{redact_url(location)}: no model here: neither "
            f"{redact_url(place.location(SINGLE_FILE))} nor "
            f"{redact_url(place.location(INDEX_FILE))} exists; name another file or index "
            "explicitly"
        )
    raise single_error if not isinstance(single_error, NotFoundError) else index_error


async def _open_gguf(
    location: str, place: Place, names: list[str], options: ReadOptions, framework: str
) -> AsyncModel:
    """A GGUF model: one file, or the parts of a split one opened concurrently as shards."""
    files = await open_parts(place, names, options, framework)
    if len(files) == 1:
        return _single(location, names[0], files[names[0]])
    try:
        index = join_parts(files)
    except BaseException:
        await asyncio.gather(*(f.aclose() for f in files.values()))
        raise
    return AsyncModel(location, files, index)


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
    return parse_index(data, location=redact_url(place.location(name)))


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
        opened[file] = await open_tensor_file(
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
    rows_by_file = {file: f.index.tensors.rows() for file, f in files.items()}
    rows: dict[str, Row] = {}
    for tensor, file in weight_map.items():
        row = rows_by_file[file].get(tensor)
        if row is None:
            await asyncio.gather(*(f.aclose() for f in files.values()))
            raise HeaderError(
                HeaderErrorKind.INVALID_TENSOR_INFO,
                f"the weight map puts tensor `{tensor}` in {file}, but that file has no such "
                "tensor",
                location=redact_url(place.location(INDEX_FILE)),
            )
        rows[tensor] = placed(row, file)
    unmapped = tuple(
        sorted(
            name
            for file, f in files.items()
            for name in f.index.tensors
            if weight_map.get(name) != file
        )
    )
    file_indexes: dict[str, FileIndex] = {file: f.index for file, f in files.items()}
    index = ModelIndex(file_indexes, TensorTable(rows), shard_index.metadata, unmapped)
    return AsyncModel(location, files, index)


def open_model_async(location: str | os.PathLike[str], **kwargs: Any) -> Opening[AsyncModel]:
    """Open a model for async use: ``async with open_model_async("s3://bucket/llama/") as m:``.

    Also awaitable: ``m = await open_model_async(...)`` (then ``await m.aclose()``). Takes the
    keyword arguments of :func:`load_model`.
    """
    return Opening(lambda: load_model(location, **kwargs))

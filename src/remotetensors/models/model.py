"""Models: one file, or a sharded checkpoint (``model.safetensors.index.json``) anywhere.

:func:`load_model` owns what an open model holds (its client, unless the caller shares one, and
every file discovery opens: see :mod:`.discovery`) through one
:class:`~contextlib.AsyncExitStack`; it closes them all when opening fails, and otherwise hands
the stack to the :class:`AsyncModel` it builds, which closes it in ``aclose``.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import os
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import TYPE_CHECKING, Any, overload

from .. import hooks
from ..errors import (
    FileClosedError,
    RemoteTensorsError,
    TensorNotFoundError,
    did_you_mean,
    warn_at_caller,
)
from ..index import FileIndex, ModelIndex, TensorInfo
from ..options import DEFAULT_CHUNK_BYTES, DEFAULT_ZARR_CHUNK_BYTES, ReadOptions
from ..quantization import (
    LogicalTensor,
    ParameterCount,
    Quantization,
    count_parameters,
    declared_total,
    stored_shape_tensors,
)
from ..quantization.memory import MemoryEstimate, estimate_memory
from ..reading.fetch import gather_or_cancel
from ..reading.hub_onecall import LazyTensorFile
from ..reading.inflight import RequestsInFlight
from ..redact import redact_url
from ..sources.base import Traffic
from ..sources.http.client import HttpOptions
from ..sources.resolve import split_location
from .configs import ConfigFiles, ConfigWarning
from .discovery import close_files, discover
from .opening import Opening

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    import dask.array as da
    import zarr.abc.store

    from ..formats.model_index import PipelineManifest
    from ..reading.file import AsyncTensorFile, TensorPiece
    from ..sources.http.client import Client
    from .adapter import Adapter


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
        configs: ConfigFiles | None = None,
        traffic: dict[str, Traffic] | None = None,
        resources: AsyncExitStack | None = None,
        adapter: Adapter | None = None,
    ) -> None:
        """
        Args:
            location: where the model is (named in messages and views, its secrets redacted).
            files: file name -> the open file, for every file of ``index``.
            index: the files' headers, joined.
            configs: ``config.json`` and ``quantization_config.json`` as found beside the
                weights.
            traffic: file name -> counters, shared with the place that opened the files; it
                also holds what discovery cost (probes that found nothing, the index, configs).
            resources: what ``aclose`` releases: the files and the client, as
                :func:`load_model` opened them; by default the files.
            adapter: what ``adapter_config.json`` says, when the weights are a PEFT
                adapter's.
        """
        self.location = redact_url(location)  # named in messages and views: no secrets
        self._files = dict(files)
        try:  # the loop the files' connections belong to (a Zarr store reads on it)
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        self.index = index
        self._closed = False
        self.configs = configs or ConfigFiles()
        """``config.json`` and ``quantization_config.json`` as found beside the weights."""
        self.adapter = adapter
        """The PEFT adapter these weights are (kind, rank, alpha, targets, base model), or
        ``None``."""
        self.components: Mapping[str, AsyncModel] = {}
        """A diffusers pipeline's weighted components, by name (see
        :class:`~remotetensors.models.pipeline.AsyncPipeline`); empty for any other model."""
        self.pipeline: PipelineManifest | None = None
        """A diffusers pipeline's ``model_index.json``; ``None`` for any other model."""
        self._true_count: ParameterCount | None = None
        self._logical_shapes: dict[str, tuple[int, ...]] = {}
        self._shape_problems: tuple[str, ...] = ()
        self._traffic = traffic if traffic is not None else {}
        if resources is None:
            resources = AsyncExitStack()
            resources.push_async_callback(close_files, self._files.values())
        self._resources = resources
        for name, file in self._files.items():
            if isinstance(file, LazyTensorFile):
                file.on_open = functools.partial(self._file_opened, name)
        if self._files:
            # The streams are the model's budget: a read over many shards, or many reads at
            # once, keep that many requests in flight in all, not that many each, and what
            # one shard's reads measured of the link sizes the others'.
            first = next(iter(self._files.values()))
            budget = RequestsInFlight.for_options(first.read_options, first.location)
            for file in self._files.values():
                file.share_in_flight(budget)

    def _file_opened(self, name: str, real: FileIndex) -> None:
        """A lazily opened shard (see :mod:`..reading.hub_onecall`) now has its final offsets."""
        tensors = self.index.tensors
        tensors.move_offsets(name, real.tensors.rows())  # that shard's rows only, in place
        files = {**self.index.files, name: real}
        self.index = ModelIndex(files, tensors, self.index.metadata, self.index.unmapped)

    async def open_shards(self, names: str | Iterable[str]) -> None:
        """Make the offsets of the tensors ``names`` final: shards known from the hub's
        metadata endpoint read their 8-byte length, and a PyTorch ``.bin`` checks the local
        headers of the storages holding them (a few dozen bytes each; see
        :meth:`AsyncTensorFile.confirm_offsets`); nothing to do for other models.

        Raises:
            HeaderError: a ``.bin`` storage is not where its zip directory puts it.
        """
        by_file: dict[str, list[str]] = {}
        for name in self.select(names):
            file = self.tensors[name].file
            assert file is not None
            by_file.setdefault(file, []).append(name)
        lazy = [f for name, f in self._files.items() if name in by_file]
        await gather_or_cancel(
            [f._ensure_open() for f in lazy if isinstance(f, LazyTensorFile) and not f.opened]
        )
        await gather_or_cancel(
            [
                self._files[file].confirm_offsets(tensors)
                for file, tensors in by_file.items()
                if not self._files[file].offsets_confirmed(tensors)
            ]
        )

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

    @functools.cached_property
    def _gguf_config(self) -> dict[str, Any] | None:
        """A GGUF model's metadata read as a config (what counts and memory read instead of a
        ``config.json``, which describes some other file if one is there); None otherwise."""
        files = self.index.files
        if not files or any(f.format != "gguf" for f in files.values()):
            return None
        # Here: GGUF's modules only for GGUF models.
        from ..formats.gguf_files import quantization as gguf_file_type
        from ..quantization.gguf import config_from_gguf

        metadata = self.index.metadata or {}
        return config_from_gguf(metadata, file_type=gguf_file_type(metadata, self.tensors))

    def _counting_config(self) -> tuple[dict[str, Any] | None, str]:
        """(the config the count and the memory estimate read, where it was read)."""
        gguf = self._gguf_config
        if gguf is not None:
            return gguf, next(iter(self.index.files))  # the file whose metadata it is
        return self.configs.config, self.configs.config_location

    @property
    def true_count(self) -> ParameterCount:
        """The true count: each tensor's role and logical size, and the mixture of experts'
        active parameters (see :mod:`..quantization`)."""
        if self._true_count is None:
            configs = self.configs
            config, location = self._counting_config()
            count = count_parameters(
                self.index.tensors,
                config,
                quantization_config=configs.quantization_config
                if config is configs.config
                else None,
                metadata=self._declaring_metadata(),
                logical_shapes=self._logical_shapes,
                config_location=location,
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

    def file(self, name: str) -> AsyncTensorFile:
        """The open file ``name`` (one of :attr:`files`).

        Raises:
            KeyError: the model has no such file.
        """
        return self._files[name]

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
    def num_active_parameters(self) -> int | None:
        """Parameters used per token: :attr:`num_parameters` for a dense model; for a mixture
        of experts, minus the routed experts a token does not use (convention:
        :data:`remotetensors.quantization.moe.ACTIVE_CONVENTION`). ``None`` when the config
        does not say how many experts a token uses; not exact when
        ``true_count.active_exact`` is False."""
        return self.true_count.active

    @property
    def stored_parameters(self) -> int:
        """Elements as stored, over all tensors (the sum of :meth:`parameter_count`)."""
        return self.index.num_parameters

    def memory(
        self, context: int | None = None, *, batch: int = 1, kv_dtype: str | None = None
    ) -> MemoryEstimate:
        """Memory to serve the model: weights as stored, plus the KV cache for ``batch``
        sequences of ``context`` tokens (see
        :func:`remotetensors.quantization.memory.estimate_memory`).

        Args:
            context: tokens per sequence; ``None`` takes the config's maximum length.
            batch: sequences held at once.
            kv_dtype: ``"bf16"``, ``"fp8"``, …; ``None`` takes the config's dtype.

        Raises:
            ValueError: a bad context, batch or dtype name.
        """
        return estimate_memory(
            self._counting_config()[0],
            self.nbytes,
            context=context,
            batch=batch,
            kv_dtype=kv_dtype,
            experts=self.true_count.moe,
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

    async def read_into(self, pieces: Sequence[TensorPiece]) -> None:
        """Fill caller-given buffers with stored bytes of tensors (see
        :meth:`AsyncTensorFile.read_into`), each shard's pieces in one plan, the shards
        concurrently, under the model's one budget of requests in flight.

        Raises:
            TensorNotFoundError: a piece names a tensor the model does not hold.
            ValueError: a piece reaches beyond its tensor's bytes.
            whatever the sources raise; on error, the remaining reads are cancelled.
        """
        self.select([piece.name for piece in pieces])
        by_file: dict[str, list[TensorPiece]] = {}
        for piece in pieces:
            file = self.tensors[piece.name].file
            assert file is not None
            by_file.setdefault(file, []).append(piece)
        await gather_or_cancel([self._files[f].read_into(p) for f, p in by_file.items()])

    @property
    def reads_now(self) -> bool:
        """Whether every file reads without an event loop (local files), so that
        :meth:`read_into_now` reads."""
        return bool(self._files) and all(f.reads_now for f in self._files.values())

    def read_into_now(self, pieces: Sequence[TensorPiece]) -> bool:
        """:meth:`read_into` in the calling thread when every file reads without an event loop
        (see :attr:`reads_now` and :meth:`AsyncTensorFile.read_into_now`); else False, having
        read nothing. Safe to call from several threads at once.

        Raises:
            TensorNotFoundError, ValueError: as :meth:`read_into`.
        """
        if not self.reads_now:
            return False
        self.select([piece.name for piece in pieces])
        for piece in pieces:
            file = self.tensors[piece.name].file
            assert file is not None
            self._files[file].read_into_now([piece])
        return True

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

    def as_zarr_store(
        self,
        *,
        chunk_bytes: int = DEFAULT_ZARR_CHUNK_BYTES,
        coalesce_window_seconds: float | None = None,
    ) -> zarr.abc.store.Store:
        """The model as a read-only Zarr v3 store, one array per tensor, chunks of whole rows of
        about ``chunk_bytes``, read through this model's files on the loop it was opened on
        (see :mod:`remotetensors.integrations.zarr.store`); nothing is read here.

        Use zarr's async API on that loop, or its sync API from another thread (not from the
        loop's own thread: the reads need it).

        Warns:
            LeftOutWarning: per tensor Zarr cannot express (named, with the reason).

        Raises:
            MissingDependencyError: zarr is not installed (``pip install "remotetensors[zarr]"``).
        """
        store: zarr.abc.store.Store = hooks.call(
            "model_zarr_store",
            self,
            loop=self._loop,
            chunk_bytes=chunk_bytes,
            coalesce_window_seconds=coalesce_window_seconds,
        )
        return store

    def to_kerchunk(self, *, chunk_bytes: int = DEFAULT_ZARR_CHUNK_BYTES) -> dict[str, Any]:
        """Kerchunk references (version 1) of the model's tensors, hub files at the commit read
        (see :mod:`remotetensors.integrations.zarr.kerchunk`); nothing is read here.

        Warns:
            LeftOutWarning: per tensor Zarr cannot express.

        Raises:
            ShardNotOpenedError: a shard known only from the hub's metadata endpoint is not
                open yet (``await open_shards(keys())`` first; the sync ``Model`` does it).
        """
        refs: dict[str, Any] = hooks.call("model_kerchunk", self, chunk_bytes=chunk_bytes)
        return refs

    async def aclose(self) -> None:
        """Release every file's connections; later reads raise FileClosedError."""
        self._closed = True
        for file in self._files.values():
            if isinstance(file, LazyTensorFile):
                file.on_open = None  # it names this model: a cycle for the collector otherwise
        await self._resources.aclose()

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
    variant: str | None = None,
) -> AsyncModel:
    """Open a model: a file, or a folder, prefix or repo holding one file or shards.

    Args:
        location: ``hf://org/name[@rev][/path]``, ``s3://bucket/prefix/`` (any fsspec URL),
            ``https://host/dir/``, a local folder, or a file in any of them (a ``.safetensors``,
            ``.bt`` or ``.gguf`` file, a part of a split GGUF, or an ``*.index.json``). A folder
            or repo without a safetensors model opens the diffusers pipeline it holds
            (``model_index.json``: an :class:`~remotetensors.models.pipeline.AsyncPipeline`),
            its PEFT adapter (``adapter_config.json``), or its GGUF model if it holds exactly
            one.
        revision: the hub revision (overrides ``@rev``).
        token: the hub token (see :func:`remotetensors.sources.hub.repo.resolve_token`).
        storage_options: passed to fsspec untouched.
        options: header window, gap, part size and concurrency (one budget for the model).
        http_options: timeouts, retries, headers.
        framework: ``"numpy"`` or ``"pt"``.
        client: a client to share with other models (a scan does; see
            :mod:`remotetensors.sources.http.client`); the caller closes it. By default the
            model creates its own and closes it in ``aclose``.
        variant: a pipeline's weights variant (``"fp16"``: each component's
            ``diffusion_pytorch_model.fp16.safetensors``); components without it read their
            plain files, as diffusers does.

    Raises:
        NotFoundError: neither ``model.safetensors`` nor its index exists at a folder, nor a
            GGUF file.
        AmbiguousModelError: no safetensors model, and several GGUF models (named).
        HeaderError: an index or header is malformed, or a tensor of the weight map is missing
            from its shard.

    Config problems are not warned of here (this may run on the IO thread): the openers
    call :func:`warn_problems` in their caller's thread.
    """
    options = options or ReadOptions()
    text = os.fspath(location)
    stack = AsyncExitStack()  # the client (unless shared) and every file opened, in one place
    if client is None:
        client = (http_options or HttpOptions()).new_client()
        stack.push_async_callback(client.aclose)
    try:
        place, name = split_location(
            text,
            revision=revision,
            token=token,
            http_options=http_options,
            client=client,
            storage_options=storage_options,
            cache=options.cache,
        )
        found = await discover(text, place, name, stack, options=options, framework=framework)
        if found.pipeline is not None:
            # models/pipeline.py builds on this module, so it is reached through a hook (see
            # hooks.py): a pipeline is a model of its components' models.
            model: AsyncModel = await hooks.call(
                "open_pipeline",
                text,
                place,
                found,
                stack,
                options=options,
                framework=framework,
                variant=variant,
            )
        else:
            model = AsyncModel(
                text,
                found.files,
                found.index,
                configs=found.configs,
                traffic=place.traffic,
                resources=stack,
                adapter=found.adapter,
            )
            await model._read_logical_shapes()
    except BaseException:
        await stack.aclose()
        raise
    return model


def warn_problems(model: AsyncModel) -> None:
    """Warn (:class:`ConfigWarning`) of each config problem found while opening ``model``,
    from the user's line: called by the openers in the caller's thread, not on the IO loop."""
    for problem in model.true_count.problems:
        warn_at_caller(ConfigWarning(problem))


async def _load_and_warn(location: str | os.PathLike[str], **kwargs: Any) -> AsyncModel:
    model = await load_model(location, **kwargs)
    warn_problems(model)
    return model


def open_model_async(location: str | os.PathLike[str], **kwargs: Any) -> Opening[AsyncModel]:
    """Open a model for async use: ``async with open_model_async("s3://bucket/llama/") as m:``.

    Also awaitable: ``m = await open_model_async(...)`` (then ``await m.aclose()``). Takes the
    keyword arguments of :func:`load_model`.
    """
    return Opening(lambda: _load_and_warn(location, **kwargs))

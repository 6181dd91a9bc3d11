"""The one sync bridge, and the sync facade over the async reader.

Every sync call is one call of its async twin on a single event loop that runs on a daemon
thread (the approach of fsspec and zarr). It never touches the caller's loop, so it works inside
Jupyter and other code that already runs a loop, and from many threads at once. Ctrl-C in the
waiting thread cancels the work in flight.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .. import hooks
from ..options import DEFAULT_CHUNK_BYTES, DEFAULT_ZARR_CHUNK_BYTES, ReadOptions
from ..reading.file import AsyncTensorFile
from ..reading.frameworks import check_backend, check_device
from ..reading.opening import open_tensor_file, open_tensor_file_now
from ..sources.resolve import open_local_source, open_source
from .model import AsyncModel, load_model, warn_problems
from .opening import Opening

if TYPE_CHECKING:
    from collections.abc import Coroutine, Iterable, Mapping

    import dask.array as da
    import numpy as np
    import numpy.typing as npt
    import zarr.abc.store

    from ..formats.model_index import PipelineManifest
    from ..index import FileIndex, ModelIndex, TensorInfo
    from ..quantization import LogicalTensor, ParameterCount, Quantization
    from ..quantization.memory import MemoryEstimate
    from ..reading.file import AsyncTensorSlice
    from ..sources.base import Traffic
    from ..sources.http.client import HttpOptions
    from .adapter import Adapter
    from .configs import ConfigFiles

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def _bridge_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    with _lock:
        if _loop is None or _thread is None or not _thread.is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="remotetensors-io", daemon=True)
            thread.start()
            _loop, _thread = loop, thread
        return _loop


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run ``coroutine`` on the bridge loop and wait for its result in this thread.

    Raises:
        whatever the coroutine raises; KeyboardInterrupt cancels it first.
        RuntimeError: when called from the bridge loop itself (that would deadlock).
    """
    loop = _bridge_loop()
    if threading.current_thread() is _thread:
        coroutine.close()
        raise RuntimeError("a sync remotetensors call was made on its own IO thread; await it")
    future: concurrent.futures.Future[T] = concurrent.futures.Future()
    tasks: list[asyncio.Task[T]] = []

    def start() -> None:
        task = loop.create_task(coroutine)
        tasks.append(task)
        task.add_done_callback(lambda done: _settle(done, future))

    loop.call_soon_threadsafe(start)
    try:
        return future.result()
    except KeyboardInterrupt:
        # Cancel the work and let it unwind (close connections, collect its subtasks) before
        # the interrupt goes on, so nothing is left to fail unobserved at exit. A second
        # Ctrl-C stops the wait.
        loop.call_soon_threadsafe(lambda: tasks and tasks[0].cancel())
        with contextlib.suppress(KeyboardInterrupt):
            concurrent.futures.wait([future], timeout=CANCEL_GRACE_SECONDS)
        raise


CANCEL_GRACE_SECONDS = 5.0
"""After Ctrl-C, how long a sync call waits for its cancelled work to unwind."""


def _settle(task: asyncio.Task[T], future: concurrent.futures.Future[T]) -> None:
    """Copy a finished task's outcome into the future the calling thread waits on."""
    if task.cancelled():
        future.cancel()
        future.set_running_or_notify_cancel()  # wakes concurrent.futures.wait() too
    elif task.exception() is not None:
        future.set_exception(task.exception())
    else:
        future.set_result(task.result())


async def open_file_async(
    location: str | os.PathLike[str],
    *,
    framework: str = "numpy",
    options: ReadOptions | None = None,
    http_options: HttpOptions | None = None,
    storage_options: Mapping[str, Any] | None = None,
    token: str | bool | None = None,
    revision: str | None = None,
) -> AsyncTensorFile:
    """Open a file and read its header (the coroutine behind ``open_async``)."""
    source = open_source(
        location,
        http_options=http_options,
        storage_options=storage_options,
        token=token,
        revision=revision,
        cache=(options or ReadOptions()).cache,
    )
    return await open_tensor_file(source, options=options, framework=framework)


def open_async(location: str | os.PathLike[str], **kwargs: Any) -> Opening[AsyncTensorFile]:
    """Open a tensor file for async use.

    ``async with open_async(url) as f: array = await f.get_tensor("embed")``, or
    ``f = await open_async(url)`` (then ``await f.aclose()``).

    Once opened, the header has been read: ``keys()``, ``offset_keys()``, ``metadata()`` and
    ``index`` are plain; the methods that fetch data are coroutines. Takes the keyword arguments
    of :func:`open_file_async` (``framework``, ``options``, ``http_options``,
    ``storage_options``, ``token``, ``revision``).
    """
    return Opening(lambda: open_file_async(location, **kwargs))


class safe_open:  # safetensors' name for it, so that one import changes
    """Open a tensor file where it lives; the surface of ``safetensors.safe_open``.

    ``with safe_open("https://host/model.safetensors", framework="numpy") as f:`` reads the
    header (one request when it fits the first window) and then fetches only the tensors asked
    for. Works in scripts, threads and Jupyter alike.

    Args:
        location: an ``http(s)://`` or ``hf://`` URL, any fsspec URL (``s3://...``), a
            ``file://`` URL or a local path.
        framework: ``"numpy"`` (or ``"np"``) or ``"pt"`` (torch tensors; needs torch).
        device: accepted for compatibility; only ``"cpu"``.
        backend: ``"mmap"`` (the default) or ``"pread"``, the reference's values, accepted so
            that code passing them runs unchanged; both read the same way here (positioned reads
            or byte ranges straight into fresh arrays, never a memory map).
        storage_options: for fsspec URLs, passed to fsspec untouched.
        token, revision: for ``hf://`` URLs.
        options: header window, coalescing gap, part size and concurrency.
        http_options: timeouts, retries, headers of the HTTP source.

    Raises:
        NotFoundError, PermissionDeniedError, HeaderError, TransportError, …: all subclasses of
        RemoteTensorsError. Those the reference raises as ``SafetensorError`` (header, slice,
        closed file, unknown tensor/framework/device/backend) derive from DropInError, which is
        also a ``safetensors.SafetensorError`` and ``bintensors.BintensorError`` when installed.
        TypeError: ``backend`` is not a string.
    """

    def __init__(
        self,
        location: str | os.PathLike[str],
        framework: str = "numpy",
        device: str = "cpu",
        *,
        options: ReadOptions | None = None,
        http_options: HttpOptions | None = None,
        storage_options: Mapping[str, Any] | None = None,
        token: str | bool | None = None,
        revision: str | None = None,
        backend: str = "mmap",
    ) -> None:
        check_backend(backend)
        check_device(device, framework)
        # A local file is opened right here: an open, a pread and a parse, no event loop
        # needed. Not a second bridge: nothing waits on a loop; it is a plain blocking call.
        local = open_local_source(location)
        if local is not None:
            opened = open_tensor_file_now(local, options=options, framework=framework)
            if opened is not None:
                self._file = opened
                return
        self._file = run_sync(
            open_file_async(
                location,
                framework=framework,
                options=options,
                http_options=http_options,
                storage_options=storage_options,
                token=token,
                revision=revision,
            )
        )

    @property
    def index(self) -> FileIndex:
        """The validated header: TensorInfo per name, header length, file size."""
        return self._file.index

    def keys(self) -> list[str]:
        """Tensor names, sorted."""
        return self._file.keys()

    def offset_keys(self) -> list[str]:
        """Tensor names in data order."""
        return self._file.offset_keys()

    def metadata(self) -> dict[str, Any] | None:
        """The header's ``__metadata__``, or None; a GGUF file's typed key/value metadata."""
        return self._file.metadata()

    @property
    def traffic(self) -> Traffic:
        """What crossed the network for this file so far: requests, bytes, seconds."""
        return self._file.traffic

    def get_tensor(self, name: str) -> Any:
        """Fetch one tensor (only its bytes cross the network)."""
        # Small local reads are done right here (see AsyncTensorFile.get_tensors_now).
        got = self._file.get_tensor_now(name)
        if got is not None:
            return got
        return run_sync(self._file.get_tensor(name))

    def get_tensors(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        """Fetch several tensors in one coalesced, concurrent plan; all of them when None."""
        if names is not None:
            names = list(names)  # iterated twice when the local path steps aside
        got = self._file.get_tensors_now(names)
        if got is not None:
            return got
        return run_sync(self._file.get_tensors(names))

    def get_tensor_bytes(self, name: str) -> npt.NDArray[np.uint8]:
        """A tensor's bytes as stored (1-D uint8; packed for F4 and F6)."""
        return run_sync(self._file.get_tensor_bytes(name))

    def get_slice(self, name: str) -> TensorSlice:
        """A lazy view: ``f.get_slice("embed")[1000:2000]`` fetches only those rows."""
        return TensorSlice(self._file.get_slice(name))

    def to_dask(self, name: str, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> da.Array:
        """Tensor ``name`` as a lazy Dask array of range-read chunks (no IO until computed, but
        for a PyTorch ``.bin`` the local header of its storage, a few dozen bytes, once)."""
        if not self._file.offsets_confirmed([name]):
            run_sync(self._file.confirm_offsets([name]))
        return self._file.to_dask(name, chunk_bytes=chunk_bytes)

    def close(self) -> None:
        """Release connections; later calls raise FileClosedError ("File is closed")."""
        if not self._file.close_now():
            run_sync(self._file.aclose())

    def __enter__(self) -> safe_open:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _repr_html_(self) -> str:
        return self._file._repr_html_()

    def __repr__(self) -> str:
        return repr(self._file).replace("AsyncTensorFile", "safe_open", 1)


class TensorSlice:
    """``get_slice`` result: ``get_shape()``, ``get_dtype()``, and ``[...]`` to fetch."""

    def __init__(self, view: AsyncTensorSlice) -> None:
        self._view = view

    def get_shape(self) -> list[int]:
        """The tensor's shape."""
        return self._view.get_shape()

    def get_dtype(self) -> str:
        """The header's dtype name."""
        return self._view.get_dtype()

    def __getitem__(self, index: Any) -> Any:
        # Small local slices are read right here (see AsyncTensorFile.read_slice_now).
        got = self._view.get_now(index)
        if got is not None:
            return got
        return run_sync(self._view[index])


class Model:
    """A whole model, one file or sharded, from any location; the sync twin of AsyncModel.

    ``m = open_model("hf://org/model")``; ``m.parameter_count()``, ``m.tensors``,
    ``m.get_tensors("model.layers.0.*")``. Use it as a context manager, or call ``close()``.
    """

    def __init__(self, model: AsyncModel) -> None:
        self._model = model
        self._components: dict[str, Model] | None = None

    @property
    def location(self) -> str:
        """The location as given."""
        return self._model.location

    @property
    def index(self) -> ModelIndex:
        """The joined index of all files."""
        return self._model.index

    @property
    def tensors(self) -> Mapping[str, TensorInfo]:
        """name -> TensorInfo (with its file) across all shards."""
        return self._model.tensors

    @property
    def metadata(self) -> Mapping[str, object] | None:
        """The index's metadata (sharded) or the file's ``__metadata__``."""
        return self._model.metadata

    @property
    def files(self) -> list[str]:
        """The model's file names."""
        return self._model.files

    def keys(self) -> list[str]:
        """Tensor names, sorted."""
        return self._model.keys()

    @property
    def config(self) -> dict[str, Any] | None:
        """``config.json`` beside the weights, parsed; ``None`` when absent or unusable."""
        return self._model.config

    @property
    def configs(self) -> ConfigFiles:
        """``config.json`` and ``quantization_config.json`` as found, with their locations and
        any problem reading them."""
        return self._model.configs

    @property
    def quantization(self) -> Quantization | None:
        """How the checkpoint is quantized (method, bits, group size, …), or ``None``."""
        return self._model.quantization

    @property
    def components(self) -> dict[str, Model]:
        """A diffusers pipeline's weighted components (``unet``, ``vae``, ``text_encoder``,
        …), each a model of its own files; empty for any other model. The pipeline's own
        tensors are theirs, named ``component/tensor``, and its counts their sums."""
        if self._components is None:
            self._components = {n: Model(m) for n, m in self._model.components.items()}
        return self._components

    @property
    def pipeline(self) -> PipelineManifest | None:
        """A diffusers pipeline's ``model_index.json`` (its class, every component, those
        without weights too); ``None`` for any other model."""
        return self._model.pipeline

    @property
    def adapter(self) -> Adapter | None:
        """The PEFT adapter these weights are (kind, rank, alpha, target modules, base
        model), or ``None``; its own parameter count is :attr:`num_parameters`."""
        return self._model.adapter

    @property
    def true_count(self) -> ParameterCount:
        """The true count, exact or an upper bound, with each tensor's role and logical size."""
        return self._model.true_count

    @property
    def logical_tensors(self) -> Mapping[str, LogicalTensor]:
        """name -> role (weight or quantization bookkeeping) and logical size, per tensor."""
        return self._model.logical_tensors

    def parameter_count(self) -> dict[str, int]:
        """Elements per dtype as stored, as the hub and huggingface_hub count them (packed
        containers and quantization bookkeeping included); see :attr:`num_parameters`."""
        return self._model.parameter_count()

    @property
    def num_parameters(self) -> int:
        """The true parameter count: what the unquantized model had."""
        return self._model.num_parameters

    @property
    def num_active_parameters(self) -> int | None:
        """Parameters used per token (the total for a dense model); see
        :attr:`remotetensors.AsyncModel.num_active_parameters`."""
        return self._model.num_active_parameters

    @property
    def stored_parameters(self) -> int:
        """Elements as stored, over all tensors."""
        return self._model.stored_parameters

    def memory(
        self, context: int | None = None, *, batch: int = 1, kv_dtype: str | None = None
    ) -> MemoryEstimate:
        """Weights as stored plus the KV cache for ``batch`` sequences of ``context`` tokens;
        no IO (the config came with the model)."""
        return self._model.memory(context, batch=batch, kv_dtype=kv_dtype)

    @property
    def nbytes(self) -> int:
        """Total bytes of tensor data."""
        return self._model.nbytes

    @property
    def traffic(self) -> Traffic:
        """What crossed the network for this model so far: requests, bytes, seconds."""
        return self._model.traffic

    @property
    def traffic_by_file(self) -> dict[str, Traffic]:
        """File name -> what crossed the network for it (index, configs and probes too)."""
        return self._model.traffic_by_file

    def tree(self) -> Any:
        """The tensors as a tree of modules, repeated blocks folded: a
        :class:`~remotetensors.views.tree.Tree` (drawn by ``views/``, through the hooks)."""
        return hooks.call("model_tree", self._model)

    def tensor(self, name: str) -> Any:
        """A :class:`~remotetensors.TensorView` of one tensor: its card (name, dtype, shape,
        bytes, shard, byte range) and, on request, ``.stats()``, ``.heatmap()``, ``.get()``;
        nothing is fetched here.

        Raises:
            TensorNotFoundError: the model has no such tensor.
        """
        self._model.select([name])
        logical = self._model.logical_tensors.get(name)
        return hooks.call("tensor_view", self, self.tensors[name], logical)

    def _fetch_slices(self, name: str, keys: list[Any]) -> list[Any]:
        """``get_slice(name)[key]`` for each key, fetched concurrently."""
        view = self._model.get_slice(name)

        async def fetch() -> list[Any]:
            return list(await asyncio.gather(*(view[key] for key in keys)))

        return run_sync(fetch())

    def get_tensor(self, name: str) -> Any:
        """Fetch one tensor from its shard."""
        return run_sync(self._model.get_tensor(name))

    def get_tensors(self, names: str | Iterable[str]) -> dict[str, Any]:
        """Fetch tensors by names or a glob, only from the shards that hold them."""
        return run_sync(self._model.get_tensors(names))

    def get_slice(self, name: str) -> TensorSlice:
        """A lazy view: ``m.get_slice("embed")[1000:2000]`` fetches only those rows."""
        return TensorSlice(self._model.get_slice(name))

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
        """Lazy Dask arrays of range-read chunks: one for a tensor name, a dict for a glob or
        a list (no IO until computed, except the 8-byte length of shards known only from the
        hub's metadata endpoint)."""
        run_sync(self._model.open_shards(names))
        return self._model.to_dask(names, chunk_bytes=chunk_bytes)

    def as_zarr_store(
        self,
        *,
        chunk_bytes: int = DEFAULT_ZARR_CHUNK_BYTES,
        coalesce_window_seconds: float | None = None,
    ) -> zarr.abc.store.Store:
        """The model as a read-only Zarr v3 store: ``zarr.open_group(m.as_zarr_store(),
        mode="r")``, ``xarray.open_zarr(store, consolidated=False)``. One array per tensor,
        named as the checkpoint names it, chunks of whole rows of about ``chunk_bytes``, each
        read through this model (retries, version pin, coalescing); nothing is read here.
        Chunk reads arriving within ``coalesce_window_seconds`` are planned together.

        Warns:
            LeftOutWarning: per tensor Zarr cannot express (named, with the reason).

        Raises:
            MissingDependencyError: zarr is not installed (``pip install "remotetensors[zarr]"``).
        """
        return self._model.as_zarr_store(
            chunk_bytes=chunk_bytes, coalesce_window_seconds=coalesce_window_seconds
        )

    def to_kerchunk(self, *, chunk_bytes: int = DEFAULT_ZARR_CHUNK_BYTES) -> dict[str, Any]:
        """Kerchunk references (version 1) of the model's tensors, for fsspec's reference
        filesystem and zarr; hub files at the commit read. No tensor data is read (shards
        known only from the hub's metadata endpoint read their 8-byte length).

        Warns:
            LeftOutWarning: per tensor Zarr cannot express.
        """
        run_sync(self._model.open_shards(self._model.keys()))
        return self._model.to_kerchunk(chunk_bytes=chunk_bytes)

    def close(self) -> None:
        """Release connections."""
        run_sync(self._model.aclose())

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _repr_html_(self) -> str:
        return self._model._repr_html_()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        self._model._repr_pretty_(printer, cycle)

    def __repr__(self) -> str:
        return repr(self._model).replace("AsyncModel", "Model", 1)


def open_model(
    location: str | os.PathLike[str],
    *,
    revision: str | None = None,
    token: str | bool | None = None,
    storage_options: Mapping[str, Any] | None = None,
    options: ReadOptions | None = None,
    http_options: HttpOptions | None = None,
    framework: str = "numpy",
    variant: str | None = None,
) -> Model:
    """Open a model (see :func:`remotetensors.models.model.load_model` for the arguments):
    a diffusers pipeline's repo opens as one, with its :attr:`Model.components`.

    Warns:
        ConfigWarning: for each config that cannot be used as it is, from the caller's line.
    """
    model = run_sync(
        load_model(
            location,
            revision=revision,
            token=token,
            storage_options=storage_options,
            options=options,
            http_options=http_options,
            framework=framework,
            variant=variant,
        )
    )
    warn_problems(model)  # here, in the caller's thread: the IO thread has no user frame
    return Model(model)

"""Discovery: which files make the model at a location, opened, and the index that joins them.

Discovery costs one round of requests: for a folder, prefix or repo, ``model.safetensors``,
``model.safetensors.index.json``, ``config.json`` and ``quantization_config.json`` are asked for
at the same time (a location naming a file asks for the configs beside it, also at once). A
sharded model's shard headers then come in a second round, all concurrently, each shard's first
window sized from what the index says it holds, so the header phase transfers about the headers'
bytes and no more. A hub model repo also asks the one-call metadata endpoint in the first round
(see :mod:`..reading.hub_onecall`). A folder or repo without a safetensors model is looked at
once more (listed where it can be, else asked for the files below at once): a diffusers pipeline
(``model_index.json``: its components are opened by :mod:`.pipeline`), a PEFT adapter
(``adapter_config.json`` beside ``adapter_model.safetensors``: see :mod:`.adapter`), a PyTorch
model (``pytorch_model.bin``, else ``pytorch_model.bin.index.json`` and its shards: safetensors
wins where a folder has both, as in transformers), or its GGUF model, a file or every part of a
split one, when it holds exactly one.

:func:`discover` says what it found in one value, :class:`Discovered`. Every file it opens is
closed by the caller's :class:`~contextlib.AsyncExitStack`, on failure as on close of the model.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import HeaderError, HeaderErrorKind, NotFoundError, RemoteTensorsError
from ..formats.gguf_files import split_names
from ..formats.index_json import ShardIndex, parse_index
from ..formats.model_index import PIPELINE_FILE, PipelineManifest, parse_model_index
from ..index import FileIndex, ModelIndex, Row, TensorLayout, TensorTable, placed
from ..reading import hub_onecall
from ..reading.fetch import gather_or_cancel
from ..reading.opening import open_tensor_file
from ..reading.progress import bar, wanted
from ..redact import redact_url
from ..sources.cache.source import read_metadata
from .adapter import ADAPTER_CONFIG, ADAPTER_WEIGHTS, Adapter, parse_adapter_config
from .configs import CONFIG_WINDOW_BYTES, ConfigFiles, read_configs, read_small_file
from .gguf_parts import find_gguf, join_parts
from .weight_names import DIFFUSERS, TRANSFORMERS, WeightNames

if TYPE_CHECKING:
    from collections.abc import Awaitable, Iterable, Mapping, Sequence
    from contextlib import AsyncExitStack

    from ..options import ReadOptions
    from ..reading.file import AsyncTensorFile
    from ..reading.progress import Progress
    from ..sources.resolve import Place

__all__ = [
    "INDEX_FILE",
    "SINGLE_FILE",
    "TORCH_FILE",
    "TORCH_INDEX_FILE",
    "Discovered",
    "close_files",
    "discover",
]

log = logging.getLogger(__name__)

SINGLE_FILE = TRANSFORMERS.single
INDEX_FILE = TRANSFORMERS.index
TORCH_FILE = TRANSFORMERS.bin_single
TORCH_INDEX_FILE = TRANSFORMERS.bin_index
"""A folder's PyTorch model, looked for when it has no safetensors model (which wins when it
has both, as in transformers)."""
INDEX_WINDOW_BYTES = 1024 * 1024
"""First request for an index file; longer ones cost one more request for the rest."""

# Bytes a header spends on one tensor besides its name: the JSON entry with its dtype, shape and
# offsets (about 70 for a 2-D tensor of a large model), rounded up so most shards fit one window.
_HEADER_BYTES_PER_TENSOR = 100
_HEADER_BYTES_FIXED = 8 + 256  # the length prefix, braces, __metadata__ and padding

A = TypeVar("A")
B = TypeVar("B")

_Weights = tuple["dict[str, AsyncTensorFile]", ModelIndex]
"""The model's files (name -> open file, in the model's order) and their joined index."""


def header_window_for(names: Iterable[str]) -> int:
    """First-request size for a shard holding tensors ``names``: its header, estimated."""
    return _HEADER_BYTES_FIXED + sum(len(n.encode()) + _HEADER_BYTES_PER_TENSOR for n in names)


@dataclass(frozen=True, slots=True)
class Discovered:
    """What discovery found at a location.

    Attributes:
        files: file name -> the open file, in the model's order (shards as the weight map
            first names them); shards known from the hub's metadata endpoint open on their
            first data read.
        index: the files' headers, joined.
        configs: ``config.json`` and ``quantization_config.json`` as found beside the weights
            (empty when not asked for).
        pipeline: a diffusers pipeline's ``model_index.json`` when the folder holds one
            instead of weights (``files`` is then empty: the components hold them).
        listing: the folder's files, when it was listed (a pipeline's components are chosen
            from it); None when it was not, or cannot be.
        adapter: the PEFT adapter that ``adapter_config.json`` describes, when the weights
            are an adapter's.
    """

    files: Mapping[str, AsyncTensorFile]
    index: ModelIndex
    configs: ConfigFiles
    pipeline: PipelineManifest | None = None
    listing: tuple[str, ...] | None = None
    adapter: Adapter | None = None


async def discover(
    location: str,
    place: Place,
    name: str | None,
    stack: AsyncExitStack,
    *,
    options: ReadOptions,
    framework: str,
    weights: WeightNames = TRANSFORMERS,
) -> Discovered:
    """Find and open the model at ``place``: the file ``name`` there (a weights file, an index
    or a part of a split GGUF), or when ``name`` is None whatever model the folder holds, its
    weight files named as ``weights`` says (transformers' names by default).

    Every file opened is put on ``stack``, which closes them all (concurrently) when it is
    closed, whether discovery failed or the model it opened is closed.

    Raises:
        NotFoundError, AmbiguousModelError, HeaderError: see :func:`.model.load_model`.
        RemoteFileChangedError: a hub repo was pushed to while its files were read (they
            would come from two commits).
    """
    location = redact_url(location)  # named in messages and log lines only: no secrets
    opened: list[AsyncTensorFile] = []
    stack.push_async_callback(close_files, opened)  # the files as they are when it unwinds
    # Configs are read alongside the weights' headers (no extra round); a scan that does not
    # want them makes no task for them.
    configs_task = asyncio.ensure_future(read_configs(place)) if options.read_configs else None
    try:
        if name is None:
            found = await _at_folder(location, place, opened, options, framework, weights)
        else:
            found = await _at_name(place, name, opened, options, framework)
    except BaseException:
        if configs_task is not None:
            configs_task.cancel()
            await asyncio.gather(configs_task, return_exceptions=True)
        raise
    configs = ConfigFiles() if configs_task is None else await configs_task
    return replace(found, configs=configs)


async def _at_name(
    place: Place, name: str, opened: list[AsyncTensorFile], options: ReadOptions, framework: str
) -> Discovered:
    """The model of file ``name``: an index and its shards, the parts of a split GGUF, an
    adapter's weights (its config read beside them), or one file."""
    if name.endswith(".json"):
        shard_index = await _read_shard_index(place, name)
        return _weights(await _sharded(place, shard_index, name, opened, options, framework))
    if (parts := split_names(name)) is not None:
        return _weights(await _gguf(place, parts, opened, options, framework))
    if name == ADAPTER_WEIGHTS:
        file, adapter = await _together(
            _open(place, name, opened, options, framework), _adapter_at(place)
        )
        return replace(_weights(_single(name, file)), adapter=adapter)
    return _weights(_single(name, await _open(place, name, opened, options, framework)))


async def close_files(files: Iterable[AsyncTensorFile]) -> None:
    """Close ``files`` concurrently (one, the common case, without a task)."""
    files = list(files)
    if len(files) == 1:
        await files[0].aclose()
    else:
        await asyncio.gather(*(f.aclose() for f in files))


async def _open(
    place: Place,
    name: str,
    opened: list[AsyncTensorFile],
    options: ReadOptions,
    framework: str,
) -> AsyncTensorFile:
    """Open file ``name`` of ``place`` (its header phase), kept in ``opened``."""
    file = await open_tensor_file(place.open(name), options=options, framework=framework)
    opened.append(file)
    return file


def _single(name: str, file: AsyncTensorFile) -> _Weights:
    return {name: file}, ModelIndex.of_file(name, file.index)


def _weights(weights: _Weights) -> Discovered:
    """What discovery found when it found weights (the configs come in at the end)."""
    return Discovered(*weights, ConfigFiles())


async def _at_folder(
    location: str,
    place: Place,
    opened: list[AsyncTensorFile],
    options: ReadOptions,
    framework: str,
    weights: WeightNames,
) -> Discovered:
    """One round: the single file (``model.safetensors``), the index, and for hub repos the
    one-call metadata endpoint (alone once the endpoint is known to have it: see
    :mod:`..reading.hub_onecall`); ``weights`` names the two files. When both the single file
    and the index exist, the single file is the model, as huggingface_hub and transformers
    decide. With neither, what else the folder holds (see :func:`_elsewhere`)."""
    single_name, index_name = weights.single, weights.index
    visit = await hub_onecall.plan_visit(place, single_name, index_name)
    call = visit.call
    single_task = asyncio.ensure_future(_open(place, single_name, opened, options, framework))
    if visit.sparing:  # the hub's buckets run low: nothing a single-file repo does not need
        await _all_settled([single_task])
        if single_task.exception() is None:
            return _weights(_single(single_name, single_task.result()))
    meta_task = asyncio.ensure_future(hub_onecall.ask(call, index_name)) if call else None
    index_task = (
        None
        if (call and call.alone) or visit.single_kept
        else asyncio.ensure_future(_read_shard_index(place, index_name))
    )
    tasks = [t for t in (single_task, meta_task, index_task) if t is not None]
    await _all_settled([single_task])
    others = [t for t in tasks if t is not single_task]
    single_error = single_task.exception()
    if single_error is None:
        # The single file is the model: what the others ask is not needed, and a request
        # still waiting for a rate limit is not sent.
        for task in others:
            task.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        return _weights(_single(single_name, single_task.result()))
    await _all_settled(others)
    if index_task is None and visit.single_kept:
        raise single_error  # kept at the commit, yet it failed: no index to fall back on
    index_error = index_task.exception() if index_task is not None else None
    shard_index = index_task.result() if index_task is not None and index_error is None else None
    if call is not None and meta_task is not None and index_error is None:
        answer = meta_task.result()
        metadata = hub_onecall.accept(call, answer, location, shard_index, index_name)
        if metadata is not None:
            files, index = hub_onecall.build(
                location, place, metadata, shard_index, index_name, options, framework
            )
            opened.extend(files.values())
            return _weights((dict(files), index))
        if index_task is None:
            if answer.status == 404:
                index_error = hub_onecall.refusal(call, answer, index_name)
            elif answer.status in (401, 403):
                raise single_error
            else:
                try:  # the endpoint failed: read the index after all (one more round)
                    shard_index = await _read_shard_index(place, index_name)
                except RemoteTensorsError as exc:
                    index_error = exc
    if shard_index is not None:
        log.debug("%s: header phase from range reads of the index and shards", location)
        return _weights(await _sharded(place, shard_index, index_name, opened, options, framework))
    assert index_error is not None
    _raise_unless_missing(single_error, index_error)
    in_repo = isinstance(single_error, NotFoundError) and single_error.code == "EntryNotFound"
    return await _elsewhere(location, place, weights, in_repo, opened, options, framework)


def _raise_unless_missing(*errors: BaseException | None) -> None:
    """Go on looking only when every file asked for is simply not there: raise the first error
    that is not a file's absence, the hub's missing repo or revision first (that, not the
    files, is what the user must hear), then any other failure (a refused ``.bin``, ...)."""
    for error in errors:
        if isinstance(error, NotFoundError) and error.code in ("RepoNotFound", "RevisionNotFound"):
            raise error
    for error in errors:
        if error is not None and not isinstance(error, NotFoundError):
            raise error


async def _elsewhere(
    location: str,
    place: Place,
    weights: WeightNames,
    in_repo: bool,
    opened: list[AsyncTensorFile],
    options: ReadOptions,
    framework: str,
) -> Discovered:
    """A folder without the weight files ``weights`` names: a diffusers pipeline, a PEFT
    adapter, a diffusers model (a pipeline's component, named by its folder) or a GGUF
    model, in that order. One more round: the folder's listing, or where it cannot be listed
    (plain HTTP) ``model_index.json`` and ``adapter_config.json``; ``in_repo``: the hub said
    the files are not in the repo (its message says so).

    Raises:
        NotFoundError: none of them is here.
        AmbiguousModelError: several GGUF models.
        HeaderError: ``model_index.json`` or ``adapter_config.json`` is malformed.
    """
    try:
        listing = await place.list_files()
    except NotFoundError:
        listing = None  # the "no model here" below says more
    # Unlisted (plain HTTP), the PyTorch files are asked for in the same round as the small
    # files; listed, only what the listing shows is opened, and PyTorch's after the others.
    torch_task = (
        None
        if listing is not None
        else asyncio.ensure_future(_torch_unlisted(place, weights, opened, options, framework))
    )
    try:
        pipeline, adapter = await _together(
            _pipeline_at(place, listing), _adapter_at(place, listing)
        )
    except BaseException:
        if torch_task is not None:
            torch_task.cancel()
            await asyncio.gather(torch_task, return_exceptions=True)
        raise
    names = tuple(listing) if listing is not None else None
    if torch_task is not None and (pipeline is not None or adapter is not None):
        torch_task.cancel()  # its file, if it opened one, is closed with the others
        await asyncio.gather(torch_task, return_exceptions=True)
    if pipeline is not None:
        return Discovered({}, ModelIndex({}, TensorTable({}), None), ConfigFiles(), pipeline, names)
    if adapter is not None:
        file = await _open(place, ADAPTER_WEIGHTS, opened, options, framework)
        return replace(_weights(_single(ADAPTER_WEIGHTS, file)), adapter=adapter)
    if listing is not None:
        torch = await _torch_listed(place, weights, listing, opened, options, framework)
    else:
        assert torch_task is not None
        torch = await torch_task
    if torch is not None:
        return _weights(torch)
    diffusers = next((n for n in DIFFUSERS.files() if listing and n in listing), None)
    if diffusers is not None:
        return await _at_name(place, diffusers, opened, options, framework)
    gguf_files = find_gguf(location, place, listing)
    if gguf_files is not None:
        return _weights(await _gguf(place, gguf_files, opened, options, framework))
    looked_for = " nor ".join(place.location(name) for name in weights.files())
    if in_repo:
        raise NotFoundError(
            f"{location}: the repo has no safetensors, PyTorch or GGUF weights where they are "
            f"looked for: neither {looked_for} nor a .gguf file exists, nor a pipeline's "
            f"{PIPELINE_FILE} or an adapter's {ADAPTER_CONFIG}; name a subfolder, a file or "
            "an index explicitly"
        )
    raise NotFoundError(
        f"{location}: no model here: neither {looked_for} exists, nor a pipeline's "
        f"{PIPELINE_FILE} or an adapter's {ADAPTER_CONFIG}; name another file or index "
        "explicitly"
    )


async def _torch_listed(
    place: Place,
    weights: WeightNames,
    listing: list[str],
    opened: list[AsyncTensorFile],
    options: ReadOptions,
    framework: str,
) -> _Weights | None:
    """The PyTorch model that the folder's ``listing`` shows (``pytorch_model.bin``, else its
    index and shards, as ``weights`` names them), opened; None when it shows neither."""
    if weights.bin_single in listing:
        return _single(
            weights.bin_single, await _open(place, weights.bin_single, opened, options, framework)
        )
    if weights.bin_index in listing:
        shard_index = await _read_shard_index(place, weights.bin_index)
        return await _sharded(place, shard_index, weights.bin_index, opened, options, framework)
    return None


async def _torch_unlisted(
    place: Place,
    weights: WeightNames,
    opened: list[AsyncTensorFile],
    options: ReadOptions,
    framework: str,
) -> _Weights | None:
    """A folder that cannot be listed: its ``pytorch_model.bin`` and its index asked for at
    once; the single file wins, as for safetensors. None when neither is there.

    Raises:
        the first error that is not a missing file (a ``.bin`` whose pickle is refused, ...).
    """
    single_task = asyncio.ensure_future(
        _open(place, weights.bin_single, opened, options, framework)
    )
    index_task = asyncio.ensure_future(_read_shard_index(place, weights.bin_index))
    tasks = [single_task, index_task]
    await _all_settled(tasks)
    single_error, index_error = single_task.exception(), index_task.exception()
    if single_error is None:
        return _single(weights.bin_single, single_task.result())
    if index_error is None:
        return await _sharded(
            place, index_task.result(), weights.bin_index, opened, options, framework
        )
    _raise_unless_missing(single_error, index_error)
    return None


async def _all_settled(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Wait until every task has ended, each with its result or error (read them from the
    tasks); if the wait itself is cancelled, cancel them all first."""
    try:
        await asyncio.gather(*tasks, return_exceptions=True)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _together(first: Awaitable[A], second: Awaitable[B]) -> tuple[A, B]:
    """Both at once; on the first error cancel the other, then raise it."""
    results: list[Any] = [None, None]

    async def put(i: int, awaitable: Awaitable[Any]) -> None:
        results[i] = await awaitable

    await gather_or_cancel([put(0, first), put(1, second)])
    return results[0], results[1]


async def _pipeline_at(place: Place, listing: list[str] | None) -> PipelineManifest | None:
    """The folder's ``model_index.json``, parsed; None when it has none."""
    data = await _small_file(place, PIPELINE_FILE, listing)
    if data is None:
        return None
    return parse_model_index(data, location=place.location(PIPELINE_FILE))


async def _adapter_at(place: Place, listing: list[str] | None = None) -> Adapter | None:
    """The folder's ``adapter_config.json``, parsed; None when it has none."""
    data = await _small_file(place, ADAPTER_CONFIG, listing)
    if data is None:
        return None
    return parse_adapter_config(data, location=place.location(ADAPTER_CONFIG))


async def _small_file(place: Place, name: str, listing: list[str] | None) -> bytes | None:
    """File ``name`` of the folder read whole (through the helper that reads configs), or
    None when the folder's ``listing`` lacks it or it is not found."""
    if listing is not None and name not in listing:
        return None
    try:
        return await read_small_file(place, name, window_bytes=CONFIG_WINDOW_BYTES)
    except NotFoundError:
        return None


async def _open_all(
    place: Place,
    options_by_name: Mapping[str, ReadOptions],
    opened: list[AsyncTensorFile],
    framework: str,
    shown: Progress | None = None,
) -> dict[str, AsyncTensorFile]:
    """Open the files named concurrently (one header phase each, with its own options); on
    the first failure cancel the rest. Name -> file, in the order of ``options_by_name``."""
    files: dict[str, AsyncTensorFile] = {}

    async def one(name: str, options: ReadOptions) -> None:
        files[name] = await _open(place, name, opened, options, framework)
        if shown is not None:
            shown.update(1)

    await gather_or_cancel([one(name, options) for name, options in options_by_name.items()])
    return {name: files[name] for name in options_by_name}


async def _gguf(
    place: Place,
    names: list[str],
    opened: list[AsyncTensorFile],
    options: ReadOptions,
    framework: str,
) -> _Weights:
    """A GGUF model: one file, or the parts of a split one opened concurrently as shards."""
    files = await _open_all(place, dict.fromkeys(names, options), opened, framework)
    if len(files) == 1:
        return _single(names[0], files[names[0]])
    return files, join_parts(files)


async def _read_shard_index(place: Place, name: str) -> ShardIndex:
    """Fetch an index file (one request when it fits the window) and parse it."""
    source = place.open(name)
    try:
        prefix = await source.open_prefix(INDEX_WINDOW_BYTES)
        data = await read_metadata(source, 0, prefix.size, held=prefix.data)
    finally:
        await source.aclose()
    return parse_index(data, location=place.location(name))


async def _sharded(
    place: Place,
    shard_index: ShardIndex,
    index_name: str,
    opened: list[AsyncTensorFile],
    options: ReadOptions,
    framework: str,
) -> _Weights:
    """A sharded model: every shard's header concurrently, each shard's first window sized
    from the tensors the index puts there; then the index routes each tensor to its shard.
    ``index_name`` is the index file's name (named in errors).

    Raises:
        HeaderError: the weight map puts a tensor in a shard that does not hold it.
    """
    weight_map = shard_index.weight_map
    by_file = shard_index.tensors_by_file()
    window_options = {
        file: replace(options, header_window_bytes=header_window_for(names))
        for file, names in by_file.items()
    }
    shown = bar(
        total=len(by_file),
        unit="file",
        description="shard headers",
        enabled=wanted(options.progress),
    )
    try:
        files = await _open_all(place, window_options, opened, framework, shown)
    finally:
        shown.close()
    rows_by_file = {file: f.index.tensors.rows() for file, f in files.items()}
    rows: dict[str, Row] = {}
    layouts: dict[str, TensorLayout] = {}
    for tensor, file in weight_map.items():
        layout = files[file].index.tensors.layouts().get(tensor)
        if layout is not None:
            layouts[tensor] = layout
        row = rows_by_file[file].get(tensor)
        if row is None:
            raise HeaderError(
                HeaderErrorKind.INVALID_TENSOR_INFO,
                f"the weight map puts tensor `{tensor}` in {file}, but that file has no such "
                "tensor",
                location=place.location(index_name),
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
    index = ModelIndex(
        file_indexes, TensorTable(rows, layouts=layouts), shard_index.metadata, unmapped
    )
    return files, index

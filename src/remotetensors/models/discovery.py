"""Discovery: which files make the model at a location, opened, and the index that joins them.

Discovery costs one round of requests: for a folder, prefix or repo, ``model.safetensors``,
``model.safetensors.index.json``, ``config.json`` and ``quantization_config.json`` are asked for
at the same time (a location naming a file asks for the configs beside it, also at once). A
sharded model's shard headers then come in a second round, all concurrently, each shard's first
window sized from what the index says it holds, so the header phase transfers about the headers'
bytes and no more. A hub model repo also asks the one-call metadata endpoint in the first round
(see :mod:`..reading.hub_onecall`). A folder or repo without a safetensors model opens its GGUF
model, a file or every part of a split one, when it holds exactly one.

:func:`discover` says what it found in one value, :class:`Discovered`. Every file it opens is
closed by the caller's :class:`~contextlib.AsyncExitStack`, on failure as on close of the model.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..errors import HeaderError, HeaderErrorKind, NotFoundError, RemoteTensorsError
from ..formats.gguf_files import split_names
from ..formats.index_json import ShardIndex, parse_index
from ..index import FileIndex, ModelIndex, Row, TensorTable, placed
from ..reading import hub_onecall
from ..reading.fetch import gather_or_cancel
from ..reading.opening import open_tensor_file
from ..reading.progress import bar, wanted
from ..redact import redact_url
from ..sources.cache.source import read_metadata
from .configs import ConfigFiles, read_configs
from .gguf_parts import find_gguf, join_parts

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from contextlib import AsyncExitStack

    from ..options import ReadOptions
    from ..reading.file import AsyncTensorFile
    from ..reading.progress import Progress
    from ..sources.resolve import Place

__all__ = ["INDEX_FILE", "SINGLE_FILE", "Discovered", "close_files", "discover"]

log = logging.getLogger(__name__)

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
INDEX_WINDOW_BYTES = 1024 * 1024
"""First request for an index file; longer ones cost one more request for the rest."""

# Bytes a header spends on one tensor besides its name: the JSON entry with its dtype, shape and
# offsets (about 70 for a 2-D tensor of a large model), rounded up so most shards fit one window.
_HEADER_BYTES_PER_TENSOR = 100
_HEADER_BYTES_FIXED = 8 + 256  # the length prefix, braces, __metadata__ and padding

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
    """

    files: Mapping[str, AsyncTensorFile]
    index: ModelIndex
    configs: ConfigFiles


async def discover(
    location: str,
    place: Place,
    name: str | None,
    stack: AsyncExitStack,
    *,
    options: ReadOptions,
    framework: str,
) -> Discovered:
    """Find and open the model at ``place``: the file ``name`` there (a weights file, an index
    or a part of a split GGUF), or when ``name`` is None whatever model the folder holds.

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
            files, index = await _at_folder(location, place, opened, options, framework)
        elif name.endswith(".json"):
            shard_index = await _read_shard_index(place, name)
            files, index = await _sharded(place, shard_index, name, opened, options, framework)
        elif (parts := split_names(name)) is not None:
            files, index = await _gguf(place, parts, opened, options, framework)
        else:
            files, index = _single(name, await _open(place, name, opened, options, framework))
    except BaseException:
        if configs_task is not None:
            configs_task.cancel()
            await asyncio.gather(configs_task, return_exceptions=True)
        raise
    configs = ConfigFiles() if configs_task is None else await configs_task
    return Discovered(files, index, configs)


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


async def _at_folder(
    location: str,
    place: Place,
    opened: list[AsyncTensorFile],
    options: ReadOptions,
    framework: str,
) -> _Weights:
    """One round: ``model.safetensors``, the index, and for hub repos the one-call metadata
    endpoint (alone once the endpoint is known to have it: see :mod:`..reading.hub_onecall`).
    When both the single file and the index exist, the single file is the model, as
    huggingface_hub and transformers decide. With neither, the folder's GGUF model."""
    call = hub_onecall.plan(place)
    single_task = asyncio.ensure_future(_open(place, SINGLE_FILE, opened, options, framework))
    meta_task = asyncio.ensure_future(hub_onecall.ask(call, INDEX_FILE)) if call else None
    index_task = (
        None if call and call.alone else asyncio.ensure_future(_read_shard_index(place, INDEX_FILE))
    )
    tasks = [t for t in (single_task, meta_task, index_task) if t is not None]
    try:
        await asyncio.gather(*tasks, return_exceptions=True)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    single_error = single_task.exception()
    if single_error is None:
        return _single(SINGLE_FILE, single_task.result())
    index_error = index_task.exception() if index_task is not None else None
    shard_index = index_task.result() if index_task is not None and index_error is None else None
    if call is not None and meta_task is not None and index_error is None:
        answer = meta_task.result()
        metadata = hub_onecall.accept(call, answer, location)
        if metadata is not None:
            files, index = hub_onecall.build(
                location, place, metadata, shard_index, INDEX_FILE, options, framework
            )
            opened.extend(files.values())
            return dict(files), index
        if index_task is None:
            if answer.status == 404:
                index_error = hub_onecall.refusal(call, answer, INDEX_FILE)
            elif answer.status in (401, 403):
                raise single_error
            else:
                try:  # the endpoint failed: read the index after all (one more round)
                    shard_index = await _read_shard_index(place, INDEX_FILE)
                except RemoteTensorsError as exc:
                    index_error = exc
    if shard_index is not None:
        log.debug("%s: header phase from range reads of the index and shards", location)
        return await _sharded(place, shard_index, INDEX_FILE, opened, options, framework)
    assert index_error is not None
    names = await _gguf_instead(location, place, single_error, index_error)
    return await _gguf(place, names, opened, options, framework)


async def _gguf_instead(
    location: str, place: Place, single_error: BaseException, index_error: BaseException
) -> list[str]:
    """Neither ``model.safetensors`` nor its index opened: the files of the folder's GGUF
    model, or the error that says why there is no model.

    Raises:
        NotFoundError: the repo or revision is missing, or no model is here; else whichever
            of the two errors is not "not found".
    """
    for error in (single_error, index_error):
        # The hub says when the repo or revision itself is missing: that, not the files.
        if isinstance(error, NotFoundError) and error.code in ("RepoNotFound", "RevisionNotFound"):
            raise error
    if not isinstance(single_error, NotFoundError):
        raise single_error
    if not isinstance(index_error, NotFoundError):
        raise index_error
    gguf_files = await find_gguf(location, place)
    if gguf_files is not None:
        return gguf_files
    if single_error.code == "EntryNotFound":
        raise NotFoundError(
            f"{location}: the repo has no safetensors or GGUF weights where they are looked "
            f"for: neither {place.location(SINGLE_FILE)} nor {place.location(INDEX_FILE)} "
            "nor a .gguf file exists; name a subfolder, a file or an index explicitly"
        )
    raise NotFoundError(
        f"{location}: no model here: neither {place.location(SINGLE_FILE)} nor "
        f"{place.location(INDEX_FILE)} exists; name another file or index explicitly"
    )


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
    for tensor, file in weight_map.items():
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
    index = ModelIndex(file_indexes, TensorTable(rows), shard_index.metadata, unmapped)
    return files, index

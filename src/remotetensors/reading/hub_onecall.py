"""A sharded hub model's header phase in one request: the hub's safetensors-metadata endpoint.

For ``hf://`` model repos on ``main`` (or a commit that the endpoint says is main's), discovery
(:mod:`..models.discovery`) asks
``/api/models/{repo}/safetensors-metadata/model.safetensors.index.json`` in the same round as
``model.safetensors`` and the configs. The answer holds every shard's header; each is validated
like a header read from a file, and the shards are opened lazily: the first data read from a
shard fetches its first 8 bytes (the header length N, the file size and version) and checks
them against the header before any tensor byte is trusted (:class:`LazyTensorFile`).

Until an endpoint is known to have the route, the index file is read in the same round as well
(its weight map then routes the tensors and names the unmapped ones); once it is known, the
endpoint's answer alone is the header phase, unless a persistent cache is to keep the answer.
Any failure falls back to range reads; a debug log line says which path was taken.

**Which commit an answer describes.** The endpoint answers for ``main`` as it is when asked, and
names no commit (no answer of the hub's API carries ``X-Repo-Commit``; its resolve answers do).
An answer is tied to commit C, and kept in the cache under it, only when the index file read in
the same round at C (its resolve answer named C, or the cache held it at C) says what the
answer says: the same shards, every tensor of the weight map in the header of the shard it
names, and the same ``metadata``. An answer that disagrees with the index is not used (the
shards are read instead); one for another revision than ``main`` is used only when it names
that commit itself. A repo the cache knows as single-file at the visit's commit is not asked at
all (the single file wins), nor one the cache knows has no index there. Every shard's first 8
bytes are still checked against its header before a tensor byte is trusted.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import HeaderError, HeaderErrorKind, RemoteTensorsError, ShardNotOpenedError
from ..formats.hub_metadata import ShardedMetadata, parse_sharded_metadata
from ..formats.safetensors import PREFIX_BYTES, header_length, rebase
from ..index import ROW_FILE, FileIndex, ModelIndex, Row, TensorInfo, TensorTable, placed
from ..options import DEFAULT_CHUNK_BYTES
from ..sources.cache.source import read_metadata
from ..sources.hub.api import (
    MetadataAnswer,
    endpoint_support,
    fetch_sharded_metadata,
    is_kept,
    keep_answer,
    names_commits,
)
from ..sources.hub.repo import hub_status_error, in_shared_visit
from ..sources.ratelimit import limiter_for
from ..sources.resolve import HubPlace
from .file import AsyncTensorFile, AsyncTensorSlice, TensorPiece

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from ..formats.index_json import ShardIndex
    from ..options import ReadOptions
    from ..sources.base import ByteSource
    from ..sources.hub.repo import HubRepo
    from ..sources.resolve import Place

log = logging.getLogger(__name__)

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True, slots=True)
class OneCall:
    """The endpoint is to be asked for the model at ``place``.

    Attributes:
        place: the hub repo, or the folder in it, that holds the model.
        alone: the endpoint is known to have the route, so its answer alone is the header
            phase (skip the index file); False while that is not known yet (read the index in
            the same round too).
    """

    place: HubPlace
    alone: bool


def plan(place: Place) -> OneCall | None:
    """Whether to ask the endpoint, and whether its answer alone will do (see
    :class:`OneCall`); None when ``place`` is not a hub model repo on main or on a commit, or
    its endpoint is known to lack the route. No IO: see :func:`plan_visit` for a visit that a
    persistent cache knows."""
    if not isinstance(place, HubPlace) or place.path.repo_type != "models":
        return None
    revision = place.path.revision
    if revision not in (None, "main") and not _COMMIT.match(revision or ""):
        return None
    support = endpoint_support(place.repo.endpoint, place.repo.store)
    if support is False:
        return None
    if (
        revision not in (None, "main")
        and names_commits(place.repo.endpoint, place.repo.store) is False
    ):
        return None  # its answer (main's) cannot be tied to the commit named
    # The index is read beside the answer when the answer must be tied to a commit: to be
    # kept (a cache), or for a revision named by its commit (the answer is main's).
    tied = revision in (None, "main") or names_commits(place.repo.endpoint) is True
    alone = bool(support) and place.repo.store is None and tied
    return OneCall(place, alone=alone)


@dataclass(frozen=True, slots=True)
class Visit:
    """What the first round of a hub folder asks, decided before it starts.

    Attributes:
        call: the endpoint to ask, or None.
        single_kept: the cache holds the single file at the visit's commit: it is the model
            (it wins over an index), and neither the index nor the endpoint is asked.
    """

    call: OneCall | None
    single_kept: bool = False
    sparing: bool = False
    """The hub's buckets are running low (:data:`SPARE_BELOW`): ask for the single file
    first, and for the index and the endpoint only if it is not there (two rounds for a sharded
    model, but no request a single-file repo does not need)."""


SPARE_BELOW = 0.5
"""Share of a rate-limit bucket's quota below which discovery spares requests (see
:class:`Visit`)."""


async def plan_visit(place: Place, single_name: str, index_name: str) -> Visit:
    """:func:`plan`, after fixing the visit's commit (:meth:`HubRepo.settle`: no request on a
    first visit, one revision question, shared with the files, on a later one): a repo the cache
    knows as single-file at that commit, or as having no ``index_name`` there, is not asked."""
    call = plan(place)
    if not isinstance(place, HubPlace):
        return Visit(call)
    repo = place.repo
    try:
        await repo.settle()
    except RemoteTensorsError:
        return Visit(call)  # the files' reads meet the error again, and report it
    if repo.kept_kind(place.path.child(single_name).path) == "file":
        return Visit(None, single_kept=True)
    if call is not None and repo.kept_kind(place.path.child(index_name).path) == "absent":
        return Visit(None)
    if call is not None and repo.warm and not repo.moved:
        # A repo seen at this commit before: the endpoint's answer kept at it costs nothing;
        # without it, the shards' headers come from what the cache holds of them.
        if is_kept(repo, place.path.child(index_name).path):
            return Visit(call)
        return Visit(None)
    api, resolvers = _rooms(repo, index_name)
    # A scan spares requests (its time is the hub's rate limits and the CPU of its requests,
    # not one model's rounds), and so does any visit once a bucket runs low.
    sparing = in_shared_visit() or min(api, resolvers) < SPARE_BELOW
    if call is not None and api < resolvers:
        # Spend the buckets, not the clock: with less of the api quota left than of the
        # resolvers', a sharded model's headers come from range reads (resolvers) instead.
        log.debug("%s: the api bucket has less room than resolvers; range reads", place)
        return Visit(None, sparing=sparing)
    return Visit(call, sparing=sparing)


def _rooms(repo: HubRepo, index_name: str) -> tuple[float, float]:
    """The share of the ``api`` and the ``resolvers`` quota left, as the hub's answers told
    them (1.0 while a bucket is not known)."""
    api = limiter_for(f"{repo.endpoint}/api/models/{repo.repo.repo_id}/safetensors-metadata/x")
    resolvers = limiter_for(repo.url(index_name))
    api_room, resolvers_room = api.room(), resolvers.room()
    return (
        1.0 if api_room is None else api_room,
        1.0 if resolvers_room is None else resolvers_room,
    )


async def ask(call: OneCall, index_name: str) -> MetadataAnswer:
    """Ask the endpoint for the model whose index is ``index_name`` in the call's place."""
    return await fetch_sharded_metadata(call.place.repo, call.place.path.child(index_name).path)


def accept(
    call: OneCall,
    answer: MetadataAnswer,
    location: str,
    shard_index: ShardIndex | None = None,
    index_name: str = "",
) -> ShardedMetadata | None:
    """The validated answer when it describes the revision asked for; else None (logged).

    ``shard_index`` is the index file ``index_name`` as read in the same round (at the visit's
    commit), when it was: an answer that names no commit is tied to that commit when the index
    says what it says, and kept in the cache under it (see the module).

    Raises:
        HeaderError: the answer came for the right revision but a header is malformed.
    """
    if answer.body is None:
        log.debug("%s: metadata endpoint unusable (%s); range reads", location, answer.reason)
        return None
    repo = call.place.repo
    asked = call.place.path.revision
    if asked not in (None, "main") and answer.commit != asked:
        log.debug(
            "%s: revision %s is not main's commit %s; range reads", location, asked, answer.commit
        )
        return None
    if not repo.agrees(answer.commit):
        log.debug("%s: main moved during discovery; range reads", location)
        return None
    metadata = parse_sharded_metadata(answer.body, location=location)
    if shard_index is not None and not describes(metadata, shard_index):
        log.debug("%s: the endpoint's answer is not the index's model; range reads", location)
        return None
    if answer.commit is None and shard_index is not None and repo.pinned:
        keep_answer(repo, call.place.path.child(index_name).path, repo.revision, answer)
    repo.pin(answer.commit, location)
    log.debug("%s: header phase from the one-call metadata endpoint", location)
    return metadata


def describes(metadata: ShardedMetadata, shard_index: ShardIndex) -> bool:
    """Whether the endpoint's ``metadata`` is the model that ``shard_index`` describes: the
    same shards, every tensor of the weight map in the header of the shard it names, and the
    same ``metadata`` object (``total_size``, ...). No IO."""
    headers = metadata.headers
    if set(headers) != set(shard_index.weight_map.values()):
        return False
    if (metadata.metadata or None) != (shard_index.metadata or None):
        return False
    return all(tensor in headers[file].tensors for tensor, file in shard_index.weight_map.items())


def refusal(call: OneCall, answer: MetadataAnswer, index_name: str) -> Exception:
    """The error that the endpoint's refusal of the model (its status and ``X-Error-Code``)
    stands for, worded as a read of the index file ``index_name`` would word it."""
    return hub_status_error(
        call.place.repo,
        answer.status,
        answer.url,
        answer.headers,
        shown=call.place.location(index_name),
        path=call.place.path.child(index_name).path,
    )


def build(
    location: str,
    place: Place,
    metadata: ShardedMetadata,
    shard_index: ShardIndex | None,
    index_name: str,
    options: ReadOptions,
    framework: str,
) -> tuple[dict[str, LazyTensorFile], ModelIndex]:
    """Lazy shard files and the joined index from the endpoint's headers (routed by the
    weight map when the index was read too, else by the headers themselves).

    Raises:
        HeaderError: the weight map names a shard or tensor that the headers do not hold.
    """
    headers = metadata.headers
    rows: dict[str, Row] = {}
    if shard_index is not None:
        for tensor, file in shard_index.weight_map.items():
            row = headers[file].tensors.rows().get(tensor) if file in headers else None
            if row is None:
                raise HeaderError(
                    HeaderErrorKind.INVALID_TENSOR_INFO,
                    f"the weight map puts tensor `{tensor}` in {file}, but the hub's metadata "
                    "for that file has no such tensor",
                    location=place.location(index_name),
                )
            rows[tensor] = placed(row, file)
        owner = shard_index.weight_map
    else:
        for file, index in headers.items():
            for name, row in index.tensors.rows().items():
                rows.setdefault(name, placed(row, file))
        owner = {name: row[ROW_FILE] or "" for name, row in rows.items()}
    unmapped = tuple(
        sorted(
            name
            for file, index in headers.items()
            for name in index.tensors
            if owner.get(name) != file
        )
    )
    files = {
        file: LazyTensorFile(place.open(file), index, options=options, framework=framework)
        for file, index in headers.items()
    }
    model_metadata: dict[str, Any] | None = (
        shard_index.metadata if shard_index is not None else metadata.metadata
    )
    return files, ModelIndex(dict(headers), TensorTable(rows), model_metadata, unmapped)


class LazyTensorFile(AsyncTensorFile):
    """A shard known from the endpoint's header: opened on its first data read.

    That read fetches the file's first 8 bytes (one request, which also pins the file's size and
    version), moves the offsets to the real data start and checks that the header describes the
    whole file; only then are tensor bytes read. Concurrent first reads share one opening.
    """

    def __init__(
        self, source: ByteSource, provisional: FileIndex, *, options: ReadOptions, framework: str
    ) -> None:
        super().__init__(source, provisional, b"", options=options, framework=framework)
        self._opening: asyncio.Future[None] | None = None
        self.on_open: Callable[[FileIndex], None] | None = None
        """Called with the real index once the file is opened (the model updates its own)."""

    @property
    def opened(self) -> bool:
        """Whether the file's length prefix has been read and its offsets are final."""
        return self._opening is not None and self._opening.done() and not self._opening.exception()

    async def _ensure_open(self) -> None:
        if self._opening is None or (self._opening.done() and self._opening.exception()):
            self._opening = asyncio.ensure_future(self._open())
        await asyncio.shield(self._opening)

    async def _open(self) -> None:
        prefix = await self._source.open_prefix(PREFIX_BYTES)
        location = self._source.location
        # Kept by a persistent cache: the next data read of this shard (in a later visit too)
        # needs no request for it.
        head = await read_metadata(self._source, 0, PREFIX_BYTES, held=prefix.data)
        n = header_length(head, file_size=prefix.size, location=location)
        self._set_index(
            rebase(self._index, header_length=n, file_size=prefix.size, location=location)
        )
        self._prefix = prefix.data
        if self.on_open is not None:
            self.on_open(self._index)

    async def get_tensors(self, names: Iterable[str] | None = None) -> dict[str, Any]:
        self._check_open()
        await self._ensure_open()
        return await super().get_tensors(names)

    async def get_tensor_bytes(self, name: str) -> Any:
        self._check_open()
        await self._ensure_open()
        return await super().get_tensor_bytes(name)

    async def read_into(self, pieces: Sequence[TensorPiece]) -> None:
        self._check_open()
        await self._ensure_open()  # the pieces' offsets are read from the final index
        await super().read_into(pieces)

    async def _read_slice(self, info: TensorInfo, index: Any) -> Any:
        self._check_open()
        await self._ensure_open()
        return await super()._read_slice(self._index.tensors[info.name], index)

    def read_slice_now(self, info: TensorInfo, index: Any) -> Any | None:
        return None  # the offsets are final only once the async opening has run

    @property
    def reads_now(self) -> bool:
        return False  # the same: its first read is the async opening

    def read_into_now(self, pieces: Sequence[TensorPiece]) -> bool:
        return False

    def get_slice(self, name: str) -> AsyncTensorSlice:
        return AsyncTensorSlice(self, self.info(name))

    def to_dask(self, name: str, *, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Any:
        if not self.opened:
            raise ShardNotOpenedError(
                f"{self.location}: the shard's offsets are not final until its 8-byte length "
                "is read; await model.open_shards(names) before to_dask (the sync Model does it "
                "for you)"
            )
        return super().to_dask(name, chunk_bytes=chunk_bytes)

    async def aclose(self) -> None:
        if self._opening is not None and not self._opening.done():
            self._opening.cancel()
            await asyncio.gather(self._opening, return_exceptions=True)
        await super().aclose()

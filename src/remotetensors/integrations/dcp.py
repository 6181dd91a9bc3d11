"""A ``torch.distributed.checkpoint`` storage reader for safetensors checkpoints anywhere.

``remotetensors.dcp.StorageReader(location)`` reads what ``dcp.load`` plans from a checkpoint
at ``hf://``, ``https://``, ``s3://`` (any fsspec URL) or a local path: one file, a sharded
checkpoint (``model.safetensors.index.json``), or the files DCP's own safetensors writer wrote
(``HuggingFaceStorageWriter``; with ``save_distributed=True`` each file holds chunks, placed by
``DCP_SHARDING_INFO`` in its ``__metadata__``). Each rank reads exactly the boxes of its
``ReadItem`` s: a box contiguous in the file is one range, any other a grid of runs read through
the slice planner (:mod:`~remotetensors.reading.slicing`); nearby runs, of one item or of
several, are coalesced (``ReadOptions.max_gap_bytes``), and a rank holds at most
``max_in_flight_bytes`` of bytes asked for and not yet in their tensors. A DTensor shard that
is not one range (``Shard(1)`` of a matrix) is read, with ``exchange``, as the rows it would
hold under ``Shard(0)`` and moved into place between the ranks, as ``load_into`` does (see
:mod:`.torch_exchange`).

Headers once per job: when ``torch.distributed`` is initialised, the coordinator reads the
headers in ``read_metadata`` and broadcasts the ``Metadata`` (every rank calls it in
``dcp.load``'s local step); its ``storage_data`` (:class:`~.dcp_plan.CheckpointStorage`) holds
each file's recipe and each chunk's header entry, so a rank reopens a file with one 8-byte
request that checks its version and reads its boxes, never a header. Planning is in
:mod:`.dcp_plan` (pure); this module does the IO and the torch side.
"""

from __future__ import annotations

import collections
import os
import pickle
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import (
    CheckpointMismatchError,
    MissingDependencyError,
    NotFoundError,
    RemoteTensorsError,
)
from ..models.model import load_model
from ..models.sync import run_sync
from ..options import ReadOptions
from ..reading.fetch import Target, fetch_into, gather_or_cancel
from ..reading.frameworks import torch_dtype
from ..reading.opening import open_tensor_file
from ..redact import redact_url
from ..sources.base import CountingSource, Traffic
from ..sources.http.client import HttpOptions
from ..sources.names import scheme_of
from ..sources.reopen import PIN_CHECK_BYTES, reopen
from ..sources.resolve import split_location
from .dcp_plan import (
    CheckpointStorage,
    Piece,
    WantedBox,
    batches,
    checkpoint_metadata,
    order_boxes,
    plan_pieces,
)
from .torch_stream import DEFAULT_MAX_IN_FLIGHT_BYTES, MIN_IN_FLIGHT_BYTES

try:
    import torch
    from torch.distributed.checkpoint.planner import LoadItemType
    from torch.distributed.checkpoint.storage import StorageReader as _StorageReader
    from torch.futures import Future
except ImportError as exc:  # pragma: no cover - the torch extra is not installed
    raise MissingDependencyError(
        'remotetensors.dcp needs torch: pip install "remotetensors[torch]"', name="torch"
    ) from exc

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    import numpy.typing as npt
    from torch.distributed import ProcessGroup
    from torch.distributed.checkpoint.metadata import Metadata
    from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, ReadItem

    from ..reading.file import AsyncTensorFile
    from ..reading.slicing import SliceChunk
    from ..sources.base import ByteSource
    from ..sources.http.client import Client
    from ..sources.recipe import SourceRecipe
    from .torch_shards import Sharding

__all__ = ["StorageReader"]

SUFFIX = ".safetensors"


class StorageReader(_StorageReader):
    """Reads a safetensors checkpoint where it lives for ``torch.distributed.checkpoint``.

    ``dcp.load(state_dict, storage_reader=StorageReader("hf://org/model"),
    planner=DefaultLoadPlanner(allow_partial_load=True))`` fills the state dict's tensors and
    DTensors, each rank reading only the bytes of its local shards.

    Args:
        location: ``hf://org/name[@rev]``, ``https://host/dir/``, ``s3://bucket/prefix/`` (any
            fsspec URL), a local folder, or one ``.safetensors`` file or index in any of them.
        options: header window, gap, part size and concurrency of the reads.
        max_in_flight_bytes: bound of the bytes a rank has asked for and not yet put in their
            tensors (fetched spans, and staging where a tensor cannot take the bytes in place:
            another dtype or device, or a box not contiguous in it).
        revision: the hub revision (overrides ``@rev``).
        token: the hub token.
        storage_options: passed to fsspec untouched.
        http_options: timeouts, retries, headers. The coordinator reads the headers with its
            own; a rank reads its boxes with its own, plus the headers (credentials) the
            coordinator's reads carried.
        process_group: the group ``dcp.load`` runs in (default: the default group).
        coordinator_rank: the rank, in that group, that reads the headers (``dcp.load``'s
            ``coordinator_rank``).
        share_headers: when ``torch.distributed`` is initialised and the group has several
            ranks, the coordinator reads the headers and broadcasts them (every rank of the
            group must then call ``read_metadata``, as ``dcp.load`` does); False: each rank
            reads them itself.
        exchange: a DTensor shard that is not one range of its file (``Shard(1)`` of a
            matrix: one short run per row) is read as the rows it would hold under
            ``Shard(0)`` (one range) and moved into place between the ranks (DTensor's
            ``redistribute``, or pairwise sends), as ``load_into`` does: each byte crosses
            the network once for the job, in few requests. It holds those rows besides the
            tensors until the exchange. Needs a process group, DTensors on a mesh of the
            whole group, and a planner that keeps its state dict (``DefaultLoadPlanner``);
            other tensors, and all with False, are read box by box as DCP plans them.

    Raises:
        ValueError: ``max_in_flight_bytes`` below 64 KiB.
    """

    def __init__(
        self,
        location: str | os.PathLike[str],
        *,
        options: ReadOptions | None = None,
        max_in_flight_bytes: int = DEFAULT_MAX_IN_FLIGHT_BYTES,
        revision: str | None = None,
        token: str | bool | None = None,
        storage_options: Mapping[str, Any] | None = None,
        http_options: HttpOptions | None = None,
        process_group: ProcessGroup | None = None,
        coordinator_rank: int = 0,
        share_headers: bool = True,
        exchange: bool = True,
    ) -> None:
        super().__init__()
        if max_in_flight_bytes < MIN_IN_FLIGHT_BYTES:
            raise ValueError(
                f"max_in_flight_bytes must be >= {MIN_IN_FLIGHT_BYTES}, got {max_in_flight_bytes}"
            )
        self.location = os.fspath(location)
        self.checkpoint_id: str | os.PathLike[str] | None = self.location
        self.options = options or ReadOptions()
        self.max_in_flight_bytes = max_in_flight_bytes
        self._revision = revision
        self._token = token
        self._storage_options = storage_options
        self._http_options = http_options
        self._group = process_group
        self._coordinator_rank = coordinator_rank
        self._share_headers = share_headers
        self._storage: CheckpointStorage | None = None
        self._metadata: Metadata | None = None
        self._set_up_metadata: Metadata | None = None
        self._exchanges = exchange
        self.is_coordinator = False
        self.header_traffic = Traffic()
        """What reading the headers cost this rank (nothing where the coordinator shared them)."""
        self.data_traffic = Traffic()
        """What reading the boxes cost this rank: the version checks and the data."""

    def __repr__(self) -> str:
        return f"StorageReader({redact_url(self.location)})"

    # --- DCP's contract ----------------------------------------------------------------------

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """Start a new read, of ``checkpoint_id`` when given (a location, as ``location``),
        else of the same location; what an earlier read learnt is dropped."""
        if checkpoint_id is not None:
            self.location = os.fspath(checkpoint_id)
            self.checkpoint_id = checkpoint_id
        self._storage = None
        self._metadata = None
        self.header_traffic = Traffic()
        self.data_traffic = Traffic()

    def read_metadata(self) -> Metadata:
        """The checkpoint's ``Metadata``, from its headers: read here, or on the coordinator
        and broadcast to the group (see ``share_headers``). Read once until :meth:`reset`:
        a caller that reads it to build its state dict, then hands the reader to
        ``dcp.load``, costs no second read (nor a second broadcast).

        Raises:
            NotFoundError: no safetensors checkpoint at the location.
            HeaderError: a malformed header, index or ``DCP_SHARDING_INFO``.
            UnsupportedDtypeError: a tensor whose dtype torch cannot hold (F4, F6).
            RemoteTensorsError: any other failure of the reads (a ``TransportError``, ...).
                On a shared read, every rank raises the coordinator's error.
        """
        if self._metadata is not None:
            return self._metadata
        if not self._shares():
            self._metadata = self._read_here()
            return self._metadata
        import torch.distributed as dist

        group = self._group
        is_coordinator = dist.get_rank(group) == self._coordinator_rank
        source = (
            self._coordinator_rank
            if group is None
            else dist.get_global_rank(group, self._coordinator_rank)
        )
        box: list[Any] = [None]
        failure: BaseException | None = None
        if is_coordinator:
            try:
                box[0] = ("metadata", self._read_here())
            except Exception as exc:
                failure = exc
                box[0] = ("error", _portable(exc))
        dist.broadcast_object_list(box, src=source, group=group)
        kind, value = box[0]
        if failure is not None:
            raise failure
        if kind == "error":
            raise value
        self._metadata = value
        return value  # type: ignore[no-any-return]

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        """Keep what ``metadata`` says of where each chunk is stored.

        Raises:
            RemoteTensorsError: ``metadata`` was not read by this reader.
        """
        storage = metadata.storage_data
        if not isinstance(storage, CheckpointStorage):
            raise RemoteTensorsError(
                f"{redact_url(self.location)}: this metadata was not read by "
                "remotetensors.dcp.StorageReader (its storage_data is "
                f"{type(storage).__name__}); use the metadata its read_metadata returns"
            )
        self._storage = storage
        self._set_up_metadata = metadata
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        """``plan`` with its items in the order their bytes lie (by file, then offset).

        Raises:
            TensorNotFoundError: an item of a chunk the checkpoint does not hold.
        """
        storage = self._storage_or_raise()
        order = order_boxes(_boxes(plan.items), storage)
        return replace(plan, items=[plan.items[box.request] for box in order])

    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]:
        """The plans unchanged: every rank reads its own boxes, nothing to coordinate."""
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        """Read every item of ``plan`` into the tensor ``planner.resolve_tensor`` gives, then
        ``planner.commit_tensor`` it; the future is done when all are (errors are raised
        here, before it is returned).

        Raises:
            TensorNotFoundError: an item of a chunk the checkpoint does not hold.
            CheckpointMismatchError: an item's box outside its stored chunk, or a tensor of
                another shape than the box.
            RemoteFileChangedError: a file changed since its header was read.
            RemoteTensorsError: an item that is not a tensor (DCP's ``BYTE_IO``), or any
                other failure of the reads (a ``TransportError``, ...).
        """
        storage = self._storage_or_raise()
        # Decided alike on every rank (the same state dict, the same metadata): those that
        # exchange all reach the agreement below, whatever failed before it.
        exchanged = self._exchanged(planner, storage)
        failure: Exception | None = None
        boxes: dict[str, torch.Tensor] = {}
        try:
            boxes = self._read(plan, planner, storage, exchanged)
        except Exception as exc:
            if not exchanged:
                raise
            failure = exc
        if exchanged:
            self._exchange(plan, planner, exchanged, boxes, failure)
        done: Future[None] = Future()
        done.set_result(None)
        return done

    def _read(
        self,
        plan: LoadPlan,
        planner: LoadPlanner,
        storage: CheckpointStorage,
        exchanged: Mapping[str, tuple[Any, Sharding]],
    ) -> dict[str, torch.Tensor]:
        """Read the plan's items, but those of the ``exchanged`` tensors, into the planner's
        tensors; and the ``Shard(0)`` box of each exchanged tensor into a tensor of its own
        (returned, by name)."""
        from torch.distributed.checkpoint.metadata import ChunkStorageMetadata
        from torch.distributed.checkpoint.planner_helpers import (
            create_read_items_for_chunk_list,
        )

        for item in plan.items:
            if item.type != LoadItemType.TENSOR:
                raise RemoteTensorsError(
                    f"{redact_url(self.location)}: {item.storage_index.fqn} is not a tensor "
                    f"(a {item.type.name} item); a safetensors checkpoint holds tensors only"
                )
        own = [item for item in plan.items if item.dest_index.fqn not in exchanged]
        boxes: dict[str, torch.Tensor] = {}
        theirs: list[tuple[str, ReadItem]] = []
        metadata = self._set_up_metadata
        assert metadata is not None  # set with the storage
        for name, (_, sharding) in exchanged.items():
            stored = metadata.state_dict_metadata[name]
            boxes[name] = torch.empty(sharding.box, dtype=exchanged[name][0].dtype)
            box = ChunkStorageMetadata(torch.Size(sharding.offsets), torch.Size(sharding.box))
            found = create_read_items_for_chunk_list(name, stored, [box])  # type: ignore[arg-type]
            theirs += [(name, item) for item in found]
        items = [*own, *(item for _, item in theirs)]

        def resolve(i: int) -> torch.Tensor:
            if i < len(own):
                return planner.resolve_tensor(items[i]).detach()
            return _narrowed(boxes[theirs[i - len(own)][0]], items[i])

        def commit(i: int, tensor: torch.Tensor) -> None:
            if i < len(own):
                planner.commit_tensor(items[i], tensor)

        order = order_boxes(_boxes(items), storage)
        pieces = plan_pieces(order, storage, max_piece_bytes=max(1, self.max_in_flight_bytes // 2))
        left = collections.Counter(piece.request for piece in pieces)
        job = _Job(self, storage, items, resolve, commit)
        try:
            run_sync(job.open({piece.chunk.file for piece in pieces}))
            for group in batches(pieces, max_bytes=self.max_in_flight_bytes):
                reads = [job.prepare(piece) for piece in group]
                run_sync(job.fetch(reads))
                for read in reads:
                    read.finish()
                    left[read.piece.request] -= 1
                    if not left[read.piece.request]:
                        job.commit(read.piece.request)
        finally:
            run_sync(job.close())
        return boxes

    def _exchanged(
        self, planner: LoadPlanner, storage: CheckpointStorage
    ) -> dict[str, tuple[Any, Sharding]]:
        """The state dict's DTensors whose shard is not one range of the file (a
        ``Shard(1)`` of a matrix): read as the rows they would hold were every ``Shard(d)`` a
        ``Shard(0)`` (one range), then moved into place between the ranks, as ``load_into``
        does. Only with ``exchange``, in a process group, for DTensors on a mesh of the whole
        group, with the default planner's state dict (``planner.state_dict``)."""
        if not self._exchanges or not self._shares_group():
            return {}
        import torch.distributed as dist
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata
        from torch.distributed.tensor import DTensor

        from ..errors import FrameworkError
        from ..index import TensorInfo
        from .torch_shards import sharding_of

        state = getattr(planner, "state_dict", None)
        metadata = self._set_up_metadata
        if not isinstance(state, dict) or metadata is None:
            return {}
        dtypes = {name: chunk.info.dtype for (name, _), chunk in storage.chunks.items()}
        world = dist.get_world_size()
        found: dict[str, tuple[Any, Sharding]] = {}
        for name in sorted(state):
            value = state[name]
            stored = metadata.state_dict_metadata.get(name)
            if not isinstance(value, DTensor) or not isinstance(stored, TensorStorageMetadata):
                continue
            shape = tuple(stored.size)
            if value.device_mesh.size() != world or tuple(value.shape) != shape:
                continue
            info = TensorInfo(name, dtypes[name], shape, 0, 0)  # row-major: all it is asked
            try:
                sharding = sharding_of(value, info, name)
            except FrameworkError:
                continue  # read as DCP plans it (a Partial placement fails there, as in torch)
            if sharding is not None and sharding.exchanged:
                found[name] = (value, sharding)
        return found

    def _exchange(
        self,
        plan: LoadPlan,
        planner: LoadPlanner,
        exchanged: Mapping[str, tuple[Any, Sharding]],
        boxes: Mapping[str, torch.Tensor],
        failure: Exception | None,
    ) -> None:
        """Agree that every rank read (else raise, exchanging nothing), then move each
        exchanged tensor's rows into its placements, in name order on every rank, and hand
        the planner its items' parts of the result."""
        from .torch_exchange import all_ranks_read, placed

        first = next(iter(exchanged.values()))[0]
        kind = first.device_mesh.device_type
        device = (
            torch.device(kind, torch.cuda.current_device())
            if kind == "cuda"
            else torch.device(kind)
        )
        agreed = all_ranks_read(failure is None, device)
        if failure is not None:
            raise failure
        if not agreed:
            raise RemoteTensorsError(
                f"{redact_url(self.location)}: another rank failed to read its part of the "
                "checkpoint (its own error says why); no rows were exchanged"
            )
        by_name: dict[str, list[ReadItem]] = {}
        for item in plan.items:
            by_name.setdefault(item.dest_index.fqn, []).append(item)
        for name, (value, sharding) in exchanged.items():
            local = boxes[name].to(value.device)
            moved = placed(sharding, local).to_local()
            for item in by_name.get(name, []):
                target = planner.resolve_tensor(item).detach()
                target.copy_(_narrowed(moved, item))
                planner.commit_tensor(item, target)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Whether ``checkpoint_id`` is a location this reader opens: a URL of a scheme it
        reads (``hf``, ``http(s)``, and any fsspec protocol that is installed), or a local
        path that exists. Does no IO beyond asking the local disk."""
        text = os.fspath(checkpoint_id)
        scheme = scheme_of(text)
        if scheme in ("", "file"):
            return os.path.exists(text.removeprefix("file://"))
        if scheme in ("hf", "http", "https"):
            return True
        try:
            import fsspec
        except ImportError:
            return False
        try:
            fsspec.get_filesystem_class(scheme)
        except (ImportError, ValueError):
            return False
        return True

    # --- reading the headers -----------------------------------------------------------------

    def _shares(self) -> bool:
        return self._share_headers and self._shares_group()

    def _shares_group(self) -> bool:
        """Whether this reader runs in an initialised process group of several ranks."""
        import torch.distributed as dist

        return bool(
            dist.is_available() and dist.is_initialized() and dist.get_world_size(self._group) > 1
        )

    def _read_here(self) -> Metadata:
        metadata: Metadata = run_sync(self._read_headers())
        return metadata

    async def _read_headers(self) -> Metadata:
        kwargs: dict[str, Any] = {
            "revision": self._revision,
            "token": self._token,
            "storage_options": self._storage_options,
            "options": replace(self.options, progress=False, read_configs=False),
            "http_options": self._http_options,
        }
        try:
            model = await load_model(self.location, **kwargs)
        except NotFoundError as missing:
            return await self._read_listed(missing)
        try:
            if model.pipeline is not None:
                raise NotFoundError(
                    f"{redact_url(self.location)}: a diffusers pipeline, whose components hold "
                    "the weights; name a component's folder"
                )
            await model.open_shards(model.keys())
            files = {name: model.file(name) for name in model.files}
            recipes = {name: f.recipe() for name, f in files.items()}
            routing = {name: info.file for name, info in model.tensors.items() if info.file}
            metadata = checkpoint_metadata(
                self.location,
                model.index.files,
                recipes,
                routing=routing,
                file_locations={name: f.location for name, f in files.items()},
            )
        finally:
            _add(self.header_traffic, model.traffic)
            await model.aclose()
        return metadata

    async def _read_listed(self, missing: NotFoundError) -> Metadata:
        """No model file nor index at the location: DCP's own sharded files, if a listing of
        the folder shows ``*.safetensors`` files (each a chunk of some tensors)."""
        options = replace(self.options, progress=False)
        client = (self._http_options or HttpOptions()).new_client()
        files: dict[str, AsyncTensorFile] = {}
        try:
            place, name = split_location(
                self.location,
                revision=self._revision,
                token=self._token,
                http_options=self._http_options,
                client=client,
                storage_options=self._storage_options,
                cache=options.cache,
            )
            listing = None if name is not None else await place.list_files()
            names = sorted(n for n in listing or () if n.endswith(SUFFIX) and "/" not in n)
            if not names:
                raise missing
            sources = {n: CountingSource(place.open(n), self.header_traffic) for n in names}

            async def one(name: str) -> None:
                files[name] = await open_tensor_file(sources[name], options=options)

            await gather_or_cancel([one(n) for n in names])
            return checkpoint_metadata(
                self.location,
                {n: files[n].index for n in names},
                {n: files[n].recipe() for n in names},
                file_locations={n: files[n].location for n in names},
            )
        finally:
            for file in files.values():
                await file.aclose()
            await client.aclose()

    def _storage_or_raise(self) -> CheckpointStorage:
        if self._storage is None:
            raise RemoteTensorsError(
                f"{redact_url(self.location)}: set_up_storage_reader(read_metadata(), ...) "
                "must come first (dcp.load calls them in that order)"
            )
        return self._storage

    def _recipe(self, recipe: SourceRecipe) -> SourceRecipe:
        """``recipe`` as this rank opens it: with its own HTTP options, keeping the headers
        (credentials) the coordinator's recipe carries under its own."""
        own = self._http_options
        if recipe.kind != "http" or own is None:
            return recipe
        carried = recipe.http_options.headers if recipe.http_options is not None else {}
        return replace(recipe, http_options=replace(own, headers={**carried, **own.headers}))


def _boxes(items: Sequence[ReadItem]) -> list[WantedBox]:
    return [
        WantedBox(
            i,
            (item.storage_index.fqn, tuple(item.storage_index.offset or ())),
            tuple(item.storage_offsets),
            tuple(item.lengths),
        )
        for i, item in enumerate(items)
    ]


def _narrowed(tensor: torch.Tensor, item: ReadItem) -> torch.Tensor:
    """The part of ``tensor`` that ``item`` fills: its ``dest_offsets`` + ``lengths``."""
    index = tuple(slice(o, o + n) for o, n in zip(item.dest_offsets, item.lengths, strict=True))
    return tensor[index] if index else tensor


def _portable(exc: BaseException) -> BaseException:
    """``exc`` if it pickles (to cross to the other ranks), else its words in our root."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RemoteTensorsError(f"the coordinator failed: {type(exc).__name__}: {exc}")
    return exc


def _add(total: Traffic, more: Traffic) -> None:
    total.requests += more.requests
    total.bytes += more.bytes
    total.seconds += more.seconds


# --- one read_data call ------------------------------------------------------------------------


@dataclass
class _PieceRead:
    """One piece being read: where its bytes go, and what to do once they are there."""

    piece: Piece
    dest: torch.Tensor
    out: npt.NDArray[np.uint8]
    in_place: bool
    targets: list[Target]
    gathers: list[tuple[SliceChunk, npt.NDArray[np.uint8]]] = field(default_factory=list)

    def finish(self) -> None:
        """Pick the runs out of the fetched spans, then copy (and convert) a staged piece
        into its tensor."""
        for chunk, scratch in self.gathers:
            chunk.gather(scratch, self.out)
        self.gathers.clear()
        if not self.in_place:
            stored = torch_dtype(self.piece.chunk.info.dtype)
            staged = torch.from_numpy(self.out).view(stored).reshape(self.piece.lengths)
            self.dest.copy_(staged)


class _Job:
    """The state of one read of items: the sources open for it, the tensors resolved and not
    yet committed. ``resolve(i)`` gives the tensor item ``i`` fills (``planner.resolve_tensor``,
    or a box of the reader's own); ``commit(i, tensor)`` hands it on once filled."""

    def __init__(
        self,
        reader: StorageReader,
        storage: CheckpointStorage,
        items: Sequence[ReadItem],
        resolve: Callable[[int], torch.Tensor],
        commit: Callable[[int, torch.Tensor], None],
    ) -> None:
        self._reader = reader
        self._storage = storage
        self._items = items
        self._resolve = resolve
        self._commit = commit
        self._options = replace(reader.options, progress=reader.options.progress or False)
        self._chunk_bytes = max(1, reader.max_in_flight_bytes // 2)
        self._sources: dict[str, ByteSource] = {}
        self._clients: dict[Any, Client] = {}
        self._targets: dict[int, torch.Tensor] = {}
        self._budget: Any = None

    async def open(self, files: set[str]) -> None:
        """Open ``files`` again at the version their headers were read from (one 8-byte
        request each), concurrently."""
        from ..reading.inflight import RequestsInFlight

        traffic = self._reader.data_traffic

        async def one(file: str) -> None:
            recipe = self._reader._recipe(self._storage.recipes[file])
            source = await reopen(recipe, client=self._client(recipe))
            # The version check is this rank's traffic too (made before the counting wrapper).
            traffic.requests += 1
            traffic.bytes += PIN_CHECK_BYTES
            self._sources[file] = CountingSource(source, traffic)

        await gather_or_cancel([one(file) for file in sorted(files)])
        first = next(iter(self._sources.values()), None)
        self._budget = RequestsInFlight.for_options(
            self._options, first.location if first is not None else None
        )

    def _client(self, recipe: SourceRecipe) -> Client | None:
        if recipe.kind != "http":
            return None
        options = recipe.http_options or HttpOptions()
        key = repr(options.client_key())
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = options.new_client()
        return client

    async def close(self) -> None:
        for source in self._sources.values():
            await source.aclose()
        for client in self._clients.values():
            await client.aclose()

    def prepare(self, piece: Piece) -> _PieceRead:
        """Where ``piece``'s bytes go: straight into its tensor when that holds them as the
        file does (host memory, same dtype, contiguous), else a staging buffer.

        Raises:
            CheckpointMismatchError: the planner's tensor for the item is not of its shape.
        """
        target = self._target(piece.request)
        index = tuple(
            slice(o, o + n) for o, n in zip(piece.dest_offsets, piece.lengths, strict=True)
        )
        dest = target[index] if index else target
        stored = torch_dtype(piece.chunk.info.dtype)
        in_place = dest.device.type == "cpu" and dest.dtype == stored and dest.is_contiguous()
        if in_place:
            out: npt.NDArray[np.uint8] = dest.reshape(-1).view(torch.uint8).numpy()
        else:
            out = np.empty(piece.nbytes, dtype=np.uint8)
        read = _PieceRead(piece, dest, out, in_place, [])
        view = out.data
        chunks = piece.plan.chunks(
            max_gap_bytes=self._options.max_gap_bytes, chunk_bytes=self._chunk_bytes
        )
        for chunk in chunks:
            size = chunk.span_bytes
            if chunk.direct:
                for i, span in enumerate(chunk.spans()):
                    at = chunk.out_start + i * size
                    read.targets.append(Target(span, view[at : at + size]))
            else:
                scratch = np.empty(chunk.fetched_bytes, dtype=np.uint8)
                room = scratch.data
                for i, span in enumerate(chunk.spans()):
                    read.targets.append(Target(span, room[i * size : (i + 1) * size]))
                read.gathers.append((chunk, scratch))
        return read

    def _target(self, request: int) -> torch.Tensor:
        target = self._targets.get(request)
        if target is None:
            item = self._items[request]
            target = self._resolve(request)
            if tuple(target.shape) != tuple(item.lengths):
                name = item.storage_index.fqn
                location = redact_url(self._storage.location)
                raise CheckpointMismatchError(
                    f"{location}: the planner's tensor for {name} (at "
                    f"{list(item.dest_offsets)}) has shape {list(target.shape)}, but the item "
                    f"reads {list(item.lengths)} elements of the checkpoint's",
                    location=location,
                    mismatched={name: (tuple(target.shape), tuple(item.lengths))},
                )
            self._targets[request] = target
        return target

    async def fetch(self, reads: Sequence[_PieceRead]) -> None:
        """Every target of ``reads``, one coalesced plan per file, the files concurrently
        (sharing one budget of requests in flight)."""
        by_file: dict[str, list[Target]] = {}
        for read in reads:
            by_file.setdefault(read.piece.chunk.file, []).extend(read.targets)
        await gather_or_cancel(
            [
                fetch_into(self._sources[file], targets, options=self._options, budget=self._budget)
                for file, targets in by_file.items()
                if targets
            ]
        )

    def commit(self, request: int) -> None:
        """Hand the filled tensor of item ``request`` to the planner."""
        self._commit(request, self._targets.pop(request))

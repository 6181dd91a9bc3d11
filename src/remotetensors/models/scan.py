"""Many models at once: bounded concurrency, one small result per location, as each completes.

``rt.scan(["hf://org/a", "s3://bucket/b/", ...])`` opens each location like
:func:`~remotetensors.open_model` (only the headers and configs are read), summarises it and
closes it. Guarantees:

- one bad location never stops the scan: its result carries the error instead of a summary;
- at most ``concurrency`` models are open at once and locations are taken from the iterable only
  as slots free up, so memory does not grow with the number of locations (nothing is kept for a
  finished location beyond the result handed out); from a sequence (a list, which the caller
  holds whole already), up to ``concurrency`` more are taken ahead, so that the commits of hub
  repos the persistent cache knows are asked for while the models before them open (each is
  asked once: the scan is one visit of each repo, see :func:`..sources.hub.repo.shared_revisions`);
- the models of the scan share a few HTTP clients (pools of :data:`POOL_CONNECTIONS`) and the
  per-host rate limiters of the process (:mod:`remotetensors.sources.ratelimit`); each result
  says how long its requests waited for them.

Results are yielded in completion order, not input order; each names its location.

The scan is ``concurrency`` workers, each opening one location after another: a worker that has
handed over its result takes the next location at once, in the same turn of the event loop,
rather than a new task per location that would wait behind every other file's work first.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Iterable,
    Iterator,
    Sequence,
)
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..options import DEFAULT_SCAN_CONCURRENCY, ReadOptions
from ..redact import redact_text, redact_url, url_secrets
from ..sources.http.client import HttpOptions
from ..sources.hub.repo import shared_revisions
from ..sources.ratelimit import WaitTally, quotas_left, tally_waits
from ..sources.resolve import HubPlace, split_location
from .model import load_model, warn_problems
from .sync import run_sync

if TYPE_CHECKING:
    from ..sources.http.client import Client


@dataclass(frozen=True, slots=True)
class ModelSummary:
    """What a scan says about one model (plain values: it pickles and converts to JSON).

    Attributes:
        parameters: the true parameter count (quantized weights unpacked, bookkeeping left out;
            see :attr:`remotetensors.AsyncModel.num_parameters`).
        exact: False when ``parameters`` is an upper bound.
        quantization: the quantization's summary (``method``, ``bits``, ...), or None.
        stored_parameters: elements as stored, summed over every tensor: the hub's count.
        by_dtype: elements as stored per dtype name (the hub's per-dtype counts).
        nbytes: bytes of tensor data.
        files: number of weight files.
        active_parameters: parameters used per token (the total for a dense model; see
            :attr:`remotetensors.AsyncModel.num_active_parameters`), None when unknown.
    """

    parameters: int
    exact: bool
    quantization: dict[str, Any] | None
    stored_parameters: int
    by_dtype: dict[str, int]
    nbytes: int
    files: int
    active_parameters: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready keys: parameters, exact, active_parameters, quantization,
        stored_parameters, by_dtype, bytes, files."""
        return {
            "parameters": self.parameters,
            "exact": self.exact,
            "active_parameters": self.active_parameters,
            "quantization": self.quantization,
            "stored_parameters": self.stored_parameters,
            "by_dtype": dict(self.by_dtype),
            "bytes": self.nbytes,
            "files": self.files,
        }


@dataclass(frozen=True, slots=True)
class ScanResult:
    """One location's outcome: a summary, or the error that stopped it.

    Attributes:
        location: the location as given, its secrets redacted (it is printed and logged).
        summary: the model's summary; None when it failed.
        error: the error's message (it names the location); None when it succeeded.
        error_type: the error's class name (``"NotFoundError"``, ``"HeaderError"``, ...).
        waited_seconds: time this location's requests spent waiting for rate limiters.
        elapsed_seconds: wall time from the start of its opening to its result.
        quotas: the rate-limit policies the process's requests counted against (the hub's
            ``api``, ``resolvers``...), as ``"scheme://host policy" -> (requests left, quota)``
            when this result was made (estimates between answers; empty when no server said).
    """

    location: str
    summary: ModelSummary | None = None
    error: str | None = None
    error_type: str | None = None
    waited_seconds: float = 0.0
    elapsed_seconds: float = field(default=0.0, compare=False)
    quotas: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        """Whether the location gave a summary."""
        return self.summary is not None

    def as_dict(self) -> dict[str, Any]:
        """``{"location": ..., <summary keys>}`` or ``{"location": ..., "error": ...,
        "error_type": ...}``, plus ``waited_seconds``."""
        head: dict[str, Any] = {"location": self.location}
        if self.summary is not None:
            head.update(self.summary.as_dict())
        else:
            head.update(error=self.error, error_type=self.error_type)
        head["waited_seconds"] = round(self.waited_seconds, 3)
        return head


async def summarise(location: str, **open_model_kwargs: Any) -> ModelSummary:
    """Open the model at ``location``, summarise it, close it.

    Raises:
        whatever :func:`~remotetensors.models.model.load_model` raises.
    """
    model = await load_model(location, **open_model_kwargs)
    # A scan's models open on the IO loop: no user frame to name, the loop's is named.
    warn_problems(model)
    try:
        count = model.true_count
        stored = model.parameter_count()
        return ModelSummary(
            parameters=count.total,
            exact=count.exact,
            quantization=count.quantization.as_dict() if count.quantization else None,
            stored_parameters=sum(stored.values()),
            by_dtype=stored,
            nbytes=model.nbytes,
            files=len(model.files),
            active_parameters=count.active,
        )
    finally:
        await model.aclose()


async def _one(location: str, scan_kwargs: dict[str, Any]) -> ScanResult:
    shown = redact_url(location)
    tally = WaitTally()
    started = time.perf_counter()
    try:
        with tally_waits(tally):  # this location's limiter waits (its tasks' too)
            summary = await summarise(location, **scan_kwargs)
    except Exception as exc:  # one bad location never stops the scan
        return ScanResult(
            shown,
            # Ours name the location redacted; another library's words (a bug's) may not.
            error=redact_text(str(exc) or repr(exc), secrets=url_secrets(location)),
            error_type=type(exc).__name__,
            waited_seconds=tally.seconds,
            elapsed_seconds=time.perf_counter() - started,
            quotas=quotas_left(),
        )
    return ScanResult(
        shown,
        summary,
        waited_seconds=tally.seconds,
        elapsed_seconds=time.perf_counter() - started,
        quotas=quotas_left(),
    )


async def _locations(
    locations: Iterable[str | os.PathLike[str]] | AsyncIterable[str],
) -> AsyncIterator[str]:
    if isinstance(locations, AsyncIterable):
        async for item in locations:
            yield item
    else:
        for location in locations:
            yield os.fspath(location)


@dataclass(frozen=True, slots=True)
class _Failed:
    """The locations iterable raised: the scan ends with this error."""

    error: Exception


_WORKER_DONE = object()


async def scan_async(
    locations: Iterable[str | os.PathLike[str]] | AsyncIterable[str],
    *,
    concurrency: int = DEFAULT_SCAN_CONCURRENCY,
    **open_model_kwargs: Any,
) -> AsyncGenerator[ScanResult, None]:
    """Open and summarise every location, ``concurrency`` at a time; yield results as they
    complete (see the module's guarantees).

    ``concurrency`` workers each take the next location as soon as they have handed over a
    result, so no slot waits for the others; at most ``concurrency`` results wait for the
    caller (a worker with a result waits too, and takes no new location meanwhile).

    Args:
        locations: any iterable (a generator, a file's lines, an async iterable): consumed
            lazily.
        concurrency: models open at once.
        open_model_kwargs: passed to :func:`~remotetensors.models.model.load_model` (``token``,
            ``revision``, ``storage_options``, ``options``, ``http_options``). Progress bars of
            single models are off unless ``options`` asks for them.

    Raises:
        ValueError: ``concurrency`` below 1. Errors of a location are in its result; an error
            of the locations iterable itself ends the scan (after the results finished
            before it).
    """
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {concurrency}")
    options = open_model_kwargs.pop("options", None) or ReadOptions(progress=False)
    http_options = open_model_kwargs.get("http_options") or HttpOptions()
    client = open_model_kwargs.pop("client", None)
    owned = client is None
    clients = [client] if client is not None else _clients(http_options, concurrency)
    source = _locations(locations).__aiter__()
    taking = asyncio.Lock()  # one worker at a time asks the iterable
    exhausted = False
    results: asyncio.Queue[object] = asyncio.Queue(concurrency)
    # Taken ahead of the workers (a sequence only): their hub revisions asked for meanwhile.
    lookahead = concurrency if isinstance(locations, Sequence) and options.cache else 0
    ahead: deque[str] = deque()
    asking: set[asyncio.Future[None]] = set()

    async def pull() -> str | None:
        nonlocal exhausted
        if exhausted:
            return None
        try:
            return await source.__anext__()
        except StopAsyncIteration:
            exhausted = True
        except Exception as exc:  # the iterable's own failure ends the scan
            exhausted = True
            await results.put(_Failed(exc))
        return None

    async def next_location() -> str | None:
        async with taking:
            while len(ahead) <= lookahead and (location := await pull()) is not None:
                ahead.append(location)
                if lookahead:
                    kwargs = {**open_model_kwargs, "client": clients[len(asking) % len(clients)]}
                    asking.add(asyncio.ensure_future(_ask_ahead(location, options, kwargs)))
            return ahead.popleft() if ahead else None

    async def work(client: Client) -> None:
        kwargs = {**open_model_kwargs, "options": options, "client": client}
        try:
            while (location := await next_location()) is not None:
                await results.put(await _one(location, kwargs))
        except Exception as exc:  # a fault of the scan itself: end it rather than hang
            await results.put(_Failed(exc))
            return
        await results.put(_WORKER_DONE)

    workers: list[asyncio.Task[None]] = []
    try:
        # The workers (and what they start) share one visit of each repo; they keep that
        # setting once made, so it is left before anything is handed to the caller.
        with shared_revisions():
            # Workers take the clients in turn, as the locations did before them.
            for i in range(concurrency):
                workers.append(asyncio.create_task(work(clients[i % len(clients)])))
                # Let it start before the next one does: each goes as far as its first
                # request while the next starts, instead of every worker finishing one step
                # before any takes the next (the first requests would all wait for the last
                # connection).
                await asyncio.sleep(0)
        running = len(workers)
        while running:
            item = await results.get()
            if item is _WORKER_DONE:
                running -= 1
            elif isinstance(item, _Failed):
                raise item.error
            else:
                assert isinstance(item, ScanResult)
                yield item
    finally:
        for task in [*workers, *asking]:
            task.cancel()
        await asyncio.gather(*workers, *asking, return_exceptions=True)
        if owned:
            await asyncio.gather(*(c.aclose() for c in clients))


async def _ask_ahead(location: str, options: ReadOptions, kwargs: dict[str, Any]) -> None:
    """Ask for the commit of a hub location's revision ahead of its opening, when the cache
    knows the repo (its model takes the answer: see
    :func:`..sources.hub.repo.shared_revisions`); nothing for other locations. A failure is
    the opening's to report, which meets it again."""
    try:
        place, _ = split_location(
            location,
            revision=kwargs.get("revision"),
            token=kwargs.get("token"),
            http_options=kwargs.get("http_options"),
            client=kwargs.get("client"),
            storage_options=kwargs.get("storage_options"),
            cache=options.cache,
        )
        if isinstance(place, HubPlace):
            await place.repo.settle()
    except Exception:  # the opening meets it again, and reports it
        pass


POOL_CONNECTIONS = 16
"""Connections per HTTP client of a scan. httpcore 1.0's pool does work quadratic in its
connections on every request start and end (encode/httpcore#1035): one pool of 128 connections
spent three quarters of a 64-at-once scan's CPU there. Several small pools hold the same
connections for a fraction of that."""


def _clients(http_options: HttpOptions, concurrency: int) -> list[Client]:
    """The scan's HTTP clients: two connections per model open at once (at least the options'
    ``max_connections``), spread over pools of :data:`POOL_CONNECTIONS`; models take them in
    turn."""
    total = max(http_options.max_connections, 2 * concurrency)
    pools = -(-total // POOL_CONNECTIONS)
    each = replace(http_options, max_connections=-(-total // pools))
    return [each.new_client() for _ in range(pools)]


def scan(
    locations: Iterable[str | os.PathLike[str]],
    *,
    concurrency: int = DEFAULT_SCAN_CONCURRENCY,
    **open_model_kwargs: Any,
) -> Iterator[ScanResult]:
    """The sync twin of :func:`scan_async`: an iterator of results as they complete.

    The scan runs on the sync bridge's loop and keeps working while the caller handles a
    result (up to ``2 * concurrency`` results wait for the caller); each call into the bridge
    hands over every result ready by then. Leaving the loop early (``break``) cancels the
    models still open.
    """
    results = scan_async(locations, concurrency=concurrency, **open_model_kwargs)

    async def start() -> _Pump:
        return _Pump(results, bound=2 * max(concurrency, 1))

    pump = run_sync(start())
    try:
        while True:
            for item in run_sync(pump.ready()):
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                assert isinstance(item, ScanResult)
                yield item
    finally:
        run_sync(pump.aclose())


_END = object()


class _Pump:
    """Runs a scan to its end on the current loop, keeping up to ``bound`` results for the
    thread that takes them; then the end marker, or the exception that stopped the scan."""

    def __init__(self, results: AsyncGenerator[ScanResult, None], *, bound: int) -> None:
        self._results = results
        self._queue: asyncio.Queue[object] = asyncio.Queue(bound + 1)  # + the end marker
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        try:
            async for result in self._results:
                await self._queue.put(result)
        except Exception as exc:  # the scan's own arguments or locations iterable failed
            await self._queue.put(exc)
            return
        await self._queue.put(_END)

    async def ready(self) -> list[object]:
        """Every item ready now; waits for the first one."""
        items = [await self._queue.get()]
        while not self._queue.empty():
            items.append(self._queue.get_nowait())
        return items

    async def aclose(self) -> None:
        """Stop the scan (cancelling the models still open) and close it."""
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self._results.aclose()

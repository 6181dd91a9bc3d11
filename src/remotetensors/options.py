"""The knobs of reading, with their defaults defined once."""

from __future__ import annotations

from dataclasses import dataclass

from .ranges import DEFAULT_MAX_GAP_BYTES, DEFAULT_PART_SIZE_BYTES

DEFAULT_HEADER_WINDOW_BYTES = 64 * 1024
"""First request of a file: this many bytes. Most shard headers fit (a 7B model's shards hold
30-60 KB of header); a longer header costs one more request for just the missing tail."""

DEFAULT_MAX_BYTES_IN_FLIGHT = 128 * 1024 * 1024
"""Bound of the bytes that the requests in flight of a file or model fetch at once, when their
number or size adapts (see ``remotetensors.reading.streams``): round two's eight parts of 16
MiB. Parts read straight into their arrays hold no memory for it; parts read through scratch
buffers (several small tensors in one request, or a source that returns bytes) hold at most
this much. On a link of 50 ms round trips it still allows about 2.6 GB/s."""

DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
"""``to_dask``: target bytes of one Dask chunk (whole rows; one range read each)."""

DEFAULT_ZARR_CHUNK_BYTES = 4 * 1024 * 1024
"""``as_zarr_store``, ``to_kerchunk``: target bytes of one Zarr chunk (whole rows). Smaller than
a Dask chunk: a Zarr chunk is what a reader moves, so ten rows of an embedding cost one chunk,
not the matrix."""


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """How a file is read.

    Attributes:
        header_window_bytes: bytes fetched by the first request of a file (header and, for
            small files, everything).
        max_gap_bytes: largest hole between wanted byte ranges that is fetched to save a request.
        part_size_bytes: largest single request; bigger ranges are split and fetched
            concurrently. None (the default) adapts it to the link: it starts at 8 MiB, grows
            where larger parts are no slower, and shrinks as streams grow to stay within
            ``max_bytes_in_flight``, from 1 to 64 MiB (``remotetensors.reading.streams``); a
            number pins it.
        max_concurrency: requests in flight at once, for one file, or for a whole model (its
            shards share one budget), whatever number of calls run concurrently. None (the
            default) adapts it to the link: it starts at 8, doubles while throughput
            rises (up to 64), tries half as many where they deliver as much, and halves on
            failures and retries; a number pins it.
        max_bytes_in_flight: bound of ``streams * part size`` while either adapts; pinning
            both ``max_concurrency`` and ``part_size_bytes`` sets it aside.
        progress: show tqdm bars for downloads and shard scans that take more than a second;
            None (the default) shows them when stderr is a terminal.
        read_configs: models only: ask for ``config.json`` and ``quantization_config.json``
            beside the weights in the discovery round (two more requests, no more rounds).
            Off, the true count relies on the tensors alone and ``memory()`` has no config.
        cache: keep what describes remote files (headers, hub revisions, listings, index and
            config files) in the persistent cache and ask it first (``REMOTETENSORS_CACHE``,
            else the platform's user cache folder; see :mod:`remotetensors.sources.cache`).
            False reads everything over the network and keeps nothing. Offline mode
            (``HF_HUB_OFFLINE=1``) needs it.

    Raises:
        ValueError: on construction, for a non-positive size, concurrency or bound, or a
            negative gap.
    """

    header_window_bytes: int = DEFAULT_HEADER_WINDOW_BYTES
    max_gap_bytes: int = DEFAULT_MAX_GAP_BYTES
    part_size_bytes: int | None = None
    max_concurrency: int | None = None
    max_bytes_in_flight: int = DEFAULT_MAX_BYTES_IN_FLIGHT
    progress: bool | None = None
    read_configs: bool = True
    cache: bool = True

    def __post_init__(self) -> None:
        if self.header_window_bytes < 8:
            raise ValueError(f"header_window_bytes must be >= 8, got {self.header_window_bytes}")
        if self.max_gap_bytes < 0:
            raise ValueError(f"max_gap_bytes must be >= 0, got {self.max_gap_bytes}")
        if self.part_size_bytes is not None and self.part_size_bytes <= 0:
            raise ValueError(f"part_size_bytes must be > 0, got {self.part_size_bytes}")
        if self.max_concurrency is not None and self.max_concurrency <= 0:
            raise ValueError(f"max_concurrency must be > 0, got {self.max_concurrency}")
        if self.max_bytes_in_flight <= 0:
            raise ValueError(f"max_bytes_in_flight must be > 0, got {self.max_bytes_in_flight}")

    @property
    def fixed_part_size_bytes(self) -> int:
        """The part size where nothing adapts (local reads in the calling thread, and the size
        up to which they count as small): the one pinned, else 16 MiB."""
        return DEFAULT_PART_SIZE_BYTES if self.part_size_bytes is None else self.part_size_bytes


DEFAULT_SCAN_CONCURRENCY = 64
"""Models opened at once by a scan (each opens its files concurrently as well). A hub model's
first visit takes two or three rounds of requests: a 300-repo scan at 50 ms per request waits
on those round trips at 16 (2.45 s) and still partly at 32 (1.8 s); at 64 it is bound by the
client's CPU (1.45-1.8 s in a fresh process on two cores,
``benchmarks/results/2026-11-29-hub2026.md``). The hub's rate-limit buckets pace a scan
whatever the number (:mod:`~remotetensors.sources.ratelimit`), and its memory does not grow
with the count of models scanned (docs/guides/many-models.md)."""

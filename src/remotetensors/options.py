"""The knobs of reading, with their defaults defined once."""

from __future__ import annotations

from dataclasses import dataclass

from .ranges import DEFAULT_MAX_GAP_BYTES, DEFAULT_PART_SIZE_BYTES

DEFAULT_HEADER_WINDOW_BYTES = 64 * 1024
"""First request of a file: this many bytes. Most shard headers fit (a 7B model's shards hold
30-60 KB of header); a longer header costs one more request for just the missing tail."""

DEFAULT_MAX_CONCURRENCY = 8
"""Requests in flight at once per file or model."""

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
            concurrently.
        max_concurrency: requests in flight at once, for one file, or for a whole model (its
            shards share one budget), whatever number of calls run concurrently.
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
        ValueError: on construction, for a non-positive size or concurrency or a negative gap.
    """

    header_window_bytes: int = DEFAULT_HEADER_WINDOW_BYTES
    max_gap_bytes: int = DEFAULT_MAX_GAP_BYTES
    part_size_bytes: int = DEFAULT_PART_SIZE_BYTES
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY
    progress: bool | None = None
    read_configs: bool = True
    cache: bool = True

    def __post_init__(self) -> None:
        if self.header_window_bytes < 8:
            raise ValueError(f"header_window_bytes must be >= 8, got {self.header_window_bytes}")
        if self.max_gap_bytes < 0:
            raise ValueError(f"max_gap_bytes must be >= 0, got {self.max_gap_bytes}")
        if self.part_size_bytes <= 0:
            raise ValueError(f"part_size_bytes must be > 0, got {self.part_size_bytes}")
        if self.max_concurrency <= 0:
            raise ValueError(f"max_concurrency must be > 0, got {self.max_concurrency}")


DEFAULT_SCAN_CONCURRENCY = 16
"""Models opened at once by a scan (each opens its files concurrently as well)."""

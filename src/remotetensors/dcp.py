"""``torch.distributed.checkpoint`` from every location remotetensors reads.

``from remotetensors.dcp import StorageReader``, then ``dcp.load(state_dict,
storage_reader=StorageReader("hf://org/model"), planner=DefaultLoadPlanner(
allow_partial_load=True))``: each rank reads only the bytes of its shards, from the hub, HTTP,
S3 (any fsspec URL) or a local path, and the coordinator alone reads the headers. See
:class:`remotetensors.integrations.dcp.StorageReader`. Needs torch
(``pip install "remotetensors[torch]"``).
"""

from __future__ import annotations

from .integrations.dcp import StorageReader

__all__ = ["StorageReader"]

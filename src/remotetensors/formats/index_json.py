"""The index of a sharded checkpoint (``model.safetensors.index.json``), validated. Sans-IO."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import HeaderError, HeaderErrorKind


@dataclass(frozen=True, slots=True)
class ShardIndex:
    """What an index file says.

    Attributes:
        weight_map: tensor name -> shard file name (relative to the index's folder).
        metadata: the ``metadata`` object (``total_size``, ...), or None.
    """

    weight_map: dict[str, str]
    metadata: dict[str, Any] | None

    def tensors_by_file(self) -> dict[str, list[str]]:
        """Shard file name -> its tensor names, in the order of first mention."""
        by_file: dict[str, list[str]] = {}
        for tensor, file in self.weight_map.items():
            by_file.setdefault(file, []).append(tensor)
        return by_file


def parse_index(data: bytes, *, location: str = "<bytes>") -> ShardIndex:
    """Parse an index file's bytes.

    Raises:
        HeaderError: INVALID_JSON when it is not JSON or has no ``weight_map`` of strings.
    """
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeaderError(
            HeaderErrorKind.INVALID_JSON, f"the index is not JSON: {exc}", location=location
        ) from None
    weight_map = parsed.get("weight_map") if isinstance(parsed, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise HeaderError(
            HeaderErrorKind.INVALID_JSON,
            'the index has no "weight_map" object of tensor name -> file name',
            location=location,
        )
    metadata = parsed.get("metadata")
    return ShardIndex(weight_map, metadata if isinstance(metadata, dict) else None)

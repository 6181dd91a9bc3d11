"""The hub's one-call sharded metadata, validated. Sans-IO.

``GET {endpoint}/api/models/{repo}/safetensors-metadata/{index path}`` answers
``{"index": {<the index without "weight_map">}, "headers": {"<shard>": {<header object>}}}``.
Each header object is serialised again the way safetensors writers do (compact JSON, padded with
spaces to a multiple of 8 bytes) and validated by the same rules as a header read from a file
(:func:`.safetensors.parse_header_unsized`); the one rule that needs the file itself (the header
describes all of it) is applied by :func:`.safetensors.rebase` when a shard is first read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import HeaderError, HeaderErrorKind
from .index_json import check_shard_name
from .safetensors import parse_header_unsized

if TYPE_CHECKING:
    from ..index import FileIndex


@dataclass(frozen=True, slots=True)
class ShardedMetadata:
    """What the endpoint said.

    Attributes:
        metadata: the index's ``metadata`` object (``total_size``, ...), or None.
        headers: shard file name (relative to the index's folder) -> provisional index, in the
            order the answer lists them.
    """

    metadata: dict[str, Any] | None
    headers: dict[str, FileIndex]


def serialise_header(header: object) -> bytes:
    """A header object as a writer stores it: compact JSON, space-padded to 8-byte alignment."""
    data = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    return data + b" " * (-len(data) % 8)


def parse_sharded_metadata(body: bytes, *, location: str = "<bytes>") -> ShardedMetadata:
    """Parse and validate the endpoint's answer.

    Raises:
        HeaderError: INVALID_JSON when the answer is not of the documented shape;
            FILE_OUTSIDE_MODEL for a shard named outside the model (as in an index); any kind
            a header read from a file could fail with, naming the shard.
    """
    try:
        parsed = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise HeaderError(
            HeaderErrorKind.INVALID_JSON,
            f"the metadata answer is not JSON: {exc}",
            location=location,
        ) from None
    index = parsed.get("index") if isinstance(parsed, dict) else None
    headers = parsed.get("headers") if isinstance(parsed, dict) else None
    if not isinstance(index, dict) or not isinstance(headers, dict) or not headers:
        raise HeaderError(
            HeaderErrorKind.INVALID_JSON,
            'the metadata answer has no "index" object and non-empty "headers" object',
            location=location,
        )
    parsed_headers: dict[str, FileIndex] = {}
    for shard, header in headers.items():
        check_shard_name(shard, location=location)
        if not isinstance(header, dict):
            raise HeaderError(
                HeaderErrorKind.INVALID_JSON,
                f"the header of shard {shard} is not a JSON object",
                location=location,
            )
        parsed_headers[shard] = parse_header_unsized(
            serialise_header(header), location=f"{location} (header of {shard})"
        )
    metadata = index.get("metadata")
    return ShardedMetadata(metadata if isinstance(metadata, dict) else None, parsed_headers)

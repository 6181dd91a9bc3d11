"""The index of a sharded checkpoint (``model.safetensors.index.json``), validated. Sans-IO.

Its ``weight_map`` names files inside the model only: a path relative to the index's folder,
subfolders allowed (``sub/model-00001.safetensors``). An index from an untrusted mirror must
not steer a reader to any other file, so a name is refused (:func:`check_shard_name`) when it
is empty, absolute (``/etc/x``, ``C:x``), has a ``..`` segment, holds a backslash or a
control character, or carries a URL scheme (``https://``, ``hf://``, ``s3://``,
``simplecache::``), in its text or once percent-decoded (servers decode ``%2e%2e`` to ``..``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from ..errors import HeaderError, HeaderErrorKind
from ..redact import redact_url


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
        HeaderError: INVALID_JSON when it is not JSON or has no ``weight_map`` of strings;
            FILE_OUTSIDE_MODEL when the map names a file outside the model (see the module).
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
    checked: set[str] = set()
    for tensor, file in weight_map.items():
        if file not in checked:  # each file once, before any file is opened
            check_shard_name(file, location=location, tensor=tensor)
            checked.add(file)
    metadata = parsed.get("metadata")
    return ShardIndex(weight_map, metadata if isinstance(metadata, dict) else None)


# A scheme (RFC 3986: a letter, then letters, digits, "+", "-", ".") and its colon; a Windows
# drive ("C:") reads as one too.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_shard_name(name: str, *, location: str = "<bytes>", tensor: str | None = None) -> None:
    """Refuse a shard file name that points outside its model (see the module).

    Args:
        name: the file name, as the index (or the hub's metadata) gives it.
        location: the index, named in the error.
        tensor: a tensor the weight map puts in that file, named in the error.

    Raises:
        HeaderError: FILE_OUTSIDE_MODEL, naming the entry (a URL in it redacted) and why.
    """
    for text in dict.fromkeys((name, unquote(name))):
        why = _outside(text)
        if why is not None:
            entry = f"`{tensor}` -> " if tensor is not None else ""
            decoded = "" if text == name else f", percent-decoded {redact_url(text)!r},"
            raise HeaderError(
                HeaderErrorKind.FILE_OUTSIDE_MODEL,
                f"the entry {entry}{redact_url(name)!r}{decoded} {why}; an index names files "
                "inside its model only (relative paths, subfolders allowed)",
                location=location,
            )


def _outside(name: str) -> str | None:
    """Why ``name`` is not a path inside the model, or None when it is one."""
    if not name:
        return "is empty"
    if _CONTROL.search(name):
        return "holds a control character"
    if "\\" in name:
        return "holds a backslash (a Windows path may climb out or be absolute)"
    if name.startswith("/"):
        return "is an absolute path"
    if _SCHEME.match(name):
        return "starts with a URL scheme or a drive"
    if ".." in name.split("/"):
        return "has a '..' segment (a way out of the model)"
    return None

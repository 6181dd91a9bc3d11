"""JSON as the reference safetensors reader (serde_json) accepts it.

Python's ``json`` module is more lenient than serde_json: it accepts NaN and Infinity, numbers
that overflow to infinity, lone surrogate escapes and unlimited nesting. :func:`loads` closes
those gaps and keeps what the structural reader needs to be exact:

- objects come back as :class:`Pairs` (a list of ``(key, value)``), so duplicate keys are seen;
- integers outside ``[-2**63, 2**64)`` and ``-0`` become floats, as serde_json stores them, so a
  field that wants an unsigned integer rejects them;
- nesting is checked by the caller with :func:`max_depth`, only where values are not otherwise
  read (serde_json's limit: 127 levels accepted, 128 rejected).
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 127
"""Deepest nesting of arrays and objects that serde_json accepts (the top-level object is 1)."""

_SURROGATE = re.compile("[\ud800-\udfff]")
_U64_LIMIT = 2**64
_I64_MIN = -(2**63)


class StrictJSONError(ValueError):
    """Text that serde_json would reject; the message says why and where."""


class Pairs(list[tuple[str, Any]]):
    """A JSON object, as its key/value pairs in text order (duplicates kept)."""


def _raise_constant(name: str) -> Any:
    raise StrictJSONError(f"{name} is not valid JSON")


def _parse_float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise StrictJSONError(f"number out of range: {text[:40]}")
    return value


def _parse_int(text: str) -> int | float:
    # serde_json keeps integers in u64 or i64 and everything else as f64 (where -0 is -0.0).
    if text == "-0":
        return -0.0
    if len(text) <= 21:
        value = int(text)
        if _I64_MIN <= value < _U64_LIMIT:
            return value
    return _parse_float(text)


_DECODER = json.JSONDecoder(
    object_pairs_hook=Pairs,
    parse_float=_parse_float,
    parse_int=_parse_int,
    parse_constant=_raise_constant,
    strict=True,
)


def loads(text: str) -> Any:
    """Parse ``text`` as one JSON value with serde_json's number and string rules.

    Surrounding JSON whitespace (space, tab, LF, CR) is allowed; anything else after the value is
    not.

    Raises:
        StrictJSONError: the text is not JSON serde_json would parse.
    """
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise StrictJSONError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise StrictJSONError(f"recursion limit exceeded (more than {MAX_DEPTH} levels)") from None
    # A lone surrogate can only come from a \u escape: the text itself is valid UTF-8.
    if "\\u" in text and _has_lone_surrogate(value):
        raise StrictJSONError("lone surrogate in a \\u escape")
    return value


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, Pairs):
            for key, inner in item:
                if _SURROGATE.search(key):
                    return True
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)
    return False


def max_depth(value: Any) -> int:
    """Nesting depth of arrays and objects in ``value`` (0 for a scalar, 1 for ``[]``)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, list):
            depth += 1
            deepest = max(deepest, depth)
            children = (v for _, v in item) if isinstance(item, Pairs) else iter(item)
            stack.extend((child, depth) for child in children)
    return deepest

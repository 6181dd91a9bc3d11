"""Structured field values (RFC 9651): a header field holding a List of Items; no IO.

:func:`parse_list` reads a List field such as ``RateLimit: "api";r=5;t=200`` into
:class:`Item` values (a bare item and its parameters). Bare items are what RFC 9651 defines:
Integer and Decimal (``int``, ``float``), String and Display String (``str``), Token
(:class:`Token`, a ``str``), Byte Sequence (``bytes``), Boolean (``bool``) and Date
(:class:`Date`, an ``int`` of seconds since the epoch).

RFC 9651 fails a whole field on the first error; headers seen in the wild are not always
well formed, and one bad member must not hide the good ones, so this parser is lenient in two
documented ways, and never raises:

- a member (an item or an inner list) that does not parse is dropped, and parsing goes on after
  the next comma outside a string;
- a String where a parameter key belongs ends the item and starts a new one: the Hugging Face
  Hub sends ``RateLimit-Policy: "fixed window";"api";q=500;w=300``, read as the bare item
  ``"fixed window"`` followed by the item ``"api"`` with ``q`` and ``w``.

Inner lists are parsed (to find where they end) and dropped: no field read here uses them.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import TypeAlias
from urllib.parse import unquote_to_bytes


class Token(str):
    """A Token bare item (``default``, ``text/html``); a String bare item is a plain ``str``."""

    __slots__ = ()


class Date(int):
    """A Date bare item (``@1659578233``): seconds since the Unix epoch."""

    __slots__ = ()


BareItem: TypeAlias = int | float | str | bytes | bool
"""One of RFC 9651's bare items (``Token`` and ``Date`` are subclasses of ``str`` and ``int``)."""


@dataclass(frozen=True, slots=True)
class Item:
    """One member of a List: its bare item and its parameters (later keys win, as in RFC 9651).

    A parameter given without a value is ``True``.
    """

    value: BareItem
    params: dict[str, BareItem] = field(default_factory=dict)


class _Malformed(Exception):
    """The member being parsed is not well formed (caught by :func:`parse_list`)."""


_DIGITS = frozenset("0123456789")
_LCALPHA = frozenset("abcdefghijklmnopqrstuvwxyz")
_ALPHA = _LCALPHA | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_KEY_REST = _LCALPHA | _DIGITS | frozenset("_-.*")
_TOKEN_REST = _ALPHA | _DIGITS | frozenset("!#$%&'*+-.^_`|~:/")
_BASE64 = _ALPHA | _DIGITS | frozenset("+/=")
_OWS = " \t"
_MAX_INTEGER_DIGITS = 15
_MAX_DECIMAL_INTEGER_DIGITS = 12
_MAX_DECIMAL_FRACTION_DIGITS = 3


def parse_list(text: str) -> list[Item]:
    """The items of a List field, in order; inner lists and malformed members left out.

    ``'"api";r=5;t=200, "resolvers";r=2900;t=200'`` gives two items, the first
    ``Item("api", {"r": 5, "t": 200})``. Never raises: what cannot be read is skipped (see the
    module docstring), and a field that holds nothing readable gives ``[]``.
    """
    reader = _Reader(text)
    items: list[Item] = []
    reader.skip(" ")
    while not reader.done():
        start = reader.at
        try:
            member = _member(reader)
            reader.skip(_OWS)
            if not reader.done():
                reader.expect(",")
                reader.skip(_OWS)
        except _Malformed:
            reader.at = start  # scanned again from its start, to know which quotes are open
            reader.skip_past_comma()
            reader.skip(_OWS)
            continue
        items.extend(member)
    return items


class _Reader:
    """A cursor over the field's text."""

    def __init__(self, text: str) -> None:
        self.text = text.rstrip(" ")  # RFC 9651 discards leading and trailing spaces
        self.at = 0

    def done(self) -> bool:
        return self.at >= len(self.text)

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        if not char:
            raise _Malformed("the field ends early")
        self.at += 1
        return char

    def expect(self, char: str) -> None:
        if self.take() != char:
            raise _Malformed(f"expected {char!r}")

    def skip(self, chars: str) -> None:
        while self.peek() and self.peek() in chars:
            self.at += 1

    def skip_past_comma(self) -> None:
        """Move past the next comma that is not inside a String (or to the end)."""
        quoted = False
        while not self.done():
            char = self.take()
            if quoted and char == "\\":
                self.at += 1
            elif char == '"':
                quoted = not quoted
            elif char == "," and not quoted:
                return


def _member(reader: _Reader) -> list[Item]:
    """One member: an item (or, in the hub's form, several), or an inner list (dropped)."""
    if reader.peek() == "(":
        _inner_list(reader)
        return []
    items = []
    while True:
        value = _bare_item(reader)
        params, another = _parameters(reader)
        items.append(Item(value, params))
        if not another:
            return items


def _inner_list(reader: _Reader) -> None:
    reader.expect("(")
    while True:
        reader.skip(" ")
        if reader.peek() == ")":
            reader.take()
            _parameters(reader, strict=True)
            return
        _bare_item(reader)
        _parameters(reader, strict=True)
        if reader.peek() not in (" ", ")"):
            raise _Malformed("expected a space or ')' in an inner list")


def _parameters(reader: _Reader, *, strict: bool = False) -> tuple[dict[str, BareItem], bool]:
    """An item's parameters, and whether a String followed a ``;`` where a key belongs (the
    hub's form: another item follows; refused when ``strict``)."""
    params: dict[str, BareItem] = {}
    while reader.peek() == ";":
        reader.take()
        reader.skip(" ")
        if reader.peek() == '"' and not strict:
            return params, True
        key = _key(reader)
        value: BareItem = True
        if reader.peek() == "=":
            reader.take()
            value = _bare_item(reader)
        params[key] = value
    return params, False


def _key(reader: _Reader) -> str:
    start = reader.at
    first = reader.take()
    if first not in _LCALPHA and first != "*":
        raise _Malformed("a key starts with a lower-case letter or '*'")
    while reader.peek() and reader.peek() in _KEY_REST:
        reader.at += 1
    return reader.text[start : reader.at]


def _bare_item(reader: _Reader) -> BareItem:
    char = reader.peek()
    if char == "-" or char in _DIGITS:
        return _number(reader)
    if char == '"':
        return _string(reader)
    if char == "*" or char in _ALPHA:
        return _token(reader)
    if char == ":":
        return _byte_sequence(reader)
    if char == "?":
        return _boolean(reader)
    if char == "@":
        reader.take()
        number = _number(reader)
        if isinstance(number, float):
            raise _Malformed("a date is an integer")
        return Date(number)
    if char == "%":
        return _display_string(reader)
    raise _Malformed(f"no bare item starts with {char!r}")


def _number(reader: _Reader) -> int | float:
    start = reader.at
    negative = reader.peek() == "-"
    if negative:
        reader.take()
    digits_start = reader.at
    while reader.peek() and reader.peek() in _DIGITS:
        reader.at += 1
    integer_digits = reader.at - digits_start
    if integer_digits == 0:
        raise _Malformed("a number needs a digit")
    if reader.peek() != ".":
        if integer_digits > _MAX_INTEGER_DIGITS:
            raise _Malformed("an integer has at most 15 digits")
        return int(reader.text[start : reader.at])
    if integer_digits > _MAX_DECIMAL_INTEGER_DIGITS:
        raise _Malformed("a decimal has at most 12 integer digits")
    reader.take()
    fraction_start = reader.at
    while reader.peek() and reader.peek() in _DIGITS:
        reader.at += 1
    if not 1 <= reader.at - fraction_start <= _MAX_DECIMAL_FRACTION_DIGITS:
        raise _Malformed("a decimal has 1 to 3 fraction digits")
    return float(reader.text[start : reader.at])


def _string(reader: _Reader) -> str:
    reader.expect('"')
    chars = []
    while True:
        char = reader.take()
        if char == "\\":
            escaped = reader.take()
            if escaped not in ('"', "\\"):
                raise _Malformed("only '\"' and '\\' may be escaped in a string")
            chars.append(escaped)
        elif char == '"':
            return "".join(chars)
        elif not " " <= char <= "~":
            raise _Malformed("a string holds printable ASCII only")
        else:
            chars.append(char)


def _token(reader: _Reader) -> Token:
    start = reader.at
    reader.take()
    while reader.peek() and reader.peek() in _TOKEN_REST:
        reader.at += 1
    return Token(reader.text[start : reader.at])


def _byte_sequence(reader: _Reader) -> bytes:
    reader.expect(":")
    start = reader.at
    while reader.peek() and reader.peek() in _BASE64:
        reader.at += 1
    encoded = reader.text[start : reader.at]
    reader.expect(":")
    try:
        return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise _Malformed("not base64") from None


def _boolean(reader: _Reader) -> bool:
    reader.expect("?")
    char = reader.take()
    if char not in ("0", "1"):
        raise _Malformed("a boolean is ?0 or ?1")
    return char == "1"


def _display_string(reader: _Reader) -> str:
    reader.expect("%")
    reader.expect('"')
    start = reader.at
    while reader.peek() != '"':
        char = reader.take()
        if not " " <= char <= "~":
            raise _Malformed("a display string holds printable ASCII only")
    encoded = reader.text[start : reader.at]
    reader.take()
    try:
        return unquote_to_bytes(encoded).decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed("a display string is UTF-8") from None

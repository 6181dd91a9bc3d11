"""RFC 9651 Lists (``sources/structured_fields.py``): what the standard reads, what the hub sends,
and what a lenient reader skips; no server."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remotetensors.sources.structured_fields import BareItem, Date, Item, Token, parse_list


def test_the_hubs_fields() -> None:
    # The hub's RateLimit-Policy holds a bare item, then a ';' and a String where RFC 9651
    # wants a parameter key: read as the bare item "fixed window", then the item "api".
    assert parse_list('"fixed window";"api";q=500;w=300') == [
        Item("fixed window"),
        Item("api", {"q": 500, "w": 300}),
    ]
    assert parse_list('"api";r=5;t=200') == [Item("api", {"r": 5, "t": 200})]


def test_the_drafts_examples() -> None:
    assert parse_list('"default";q=100;w=10') == [Item("default", {"q": 100, "w": 10})]
    assert parse_list('"permin";q=50;w=60, "perhr";q=1000;w=3600') == [
        Item("permin", {"q": 50, "w": 60}),
        Item("perhr", {"q": 1000, "w": 3600}),
    ]
    assert parse_list('"peruser";q=100;w=60;pk=:cHsdsRa894==:') == [
        Item("peruser", {"q": 100, "w": 60, "pk": base64.b64decode("cHsdsRa894==")})
    ]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("42", 42),
        ("-17", -17),
        ("4.5", 4.5),
        ("-0.125", -0.125),
        ('"a \\"quoted\\" \\\\ string"', 'a "quoted" \\ string'),
        ("foo/bar:baz*", Token("foo/bar:baz*")),
        ("*star", Token("*star")),
        (":aGVsbG8=:", b"hello"),
        ("?1", True),
        ("?0", False),
        ("@1659578233", Date(1659578233)),
        ('%"caf%c3%a9"', "café"),
    ],
)
def test_every_bare_item(text: str, value: object) -> None:
    (item,) = parse_list(text)
    assert item.value == value
    assert type(item.value) is type(value)


def test_parameters_without_a_value_are_true_and_the_last_key_wins() -> None:
    assert parse_list("a;x;y=1;x=?0") == [Item(Token("a"), {"x": False, "y": 1})]
    assert parse_list("a; x=1") == [Item(Token("a"), {"x": 1})]  # spaces after ';' are allowed


def test_a_field_that_cannot_be_read_gives_nothing() -> None:
    assert parse_list('"unterminated, "good";r=1') == []  # the string swallows the rest
    assert parse_list("\x00\x01;;;") == []


@pytest.mark.parametrize(
    "bad",
    [
        '"a"x',  # garbage after an item
        "A;Q=1",  # a key starts lower-case
        '"a\\x"',  # only \" and \\ escape
        '"é"',  # strings are ASCII
        "1234567890123456",  # 16 digits
        "1.2345",  # 4 fraction digits
        "1.",  # no fraction digit
        "?2",
        ":not base64!:",
        "-",
        "a;r=",
        "@1.5",  # a date is an integer
        '("a" "b");q=1',  # an inner list: read past, not used
        "(a b",  # an inner list that never ends
    ],
)
def test_a_malformed_member_is_skipped_and_the_others_are_kept(bad: str) -> None:
    assert parse_list(f'{bad}, "good";r=1') == [Item("good", {"r": 1})]
    assert parse_list(f'"good";r=1, {bad}') == [Item("good", {"r": 1})]


def test_commas_inside_strings_do_not_end_a_member_being_skipped() -> None:
    assert parse_list('"a, b";r=?x, "c";r=2') == [Item("c", {"r": 2})]
    assert parse_list('"a, b";r=1, "c";r=2') == [Item("a, b", {"r": 1}), Item("c", {"r": 2})]


def test_empty_members_and_spaces() -> None:
    assert parse_list("") == []
    assert parse_list("   ") == []
    assert parse_list(" a ,\tb , ") == [Item(Token("a")), Item(Token("b"))]
    assert parse_list(",,") == []


@given(st.text())
def test_any_text_is_read_without_raising(text: str) -> None:
    for item in parse_list(text):
        assert isinstance(item.params, dict)


_keys = st.from_regex(r"[a-z*][a-z0-9_.*-]{0,6}", fullmatch=True)
_strings = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
_tokens = st.from_regex(r"[A-Za-z*][A-Za-z0-9!#$%&'*+.^_`|~:/-]{0,8}", fullmatch=True)
_values = st.one_of(
    st.integers(-(10**15) + 1, 10**15 - 1),
    st.integers(-(10**12) + 1, 10**12 - 1).map(lambda n: n + 0.5),
    st.booleans(),
    _strings,
    _tokens.map(Token),
)


def _serialize(value: BareItem) -> str:
    """RFC 9651's serialisation of the bare items generated here."""
    if isinstance(value, bool):
        return "?1" if value else "?0"
    if isinstance(value, Token):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(value)


@given(st.lists(st.tuples(_values, st.dictionaries(_keys, _values, max_size=4)), max_size=5))
def test_what_rfc_9651_serialises_is_read_back(
    members: list[tuple[BareItem, dict[str, BareItem]]],
) -> None:
    text = ", ".join(
        _serialize(value) + "".join(f";{k}={_serialize(v)}" for k, v in params.items())
        for value, params in members
    )
    assert parse_list(text) == [Item(value, params) for value, params in members]

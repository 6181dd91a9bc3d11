"""Patterns from configs, matched in linear time (a Thompson NFA), never by evaluating them.

compressed-tensors names modules with ``re:``-prefixed regular expressions (``"re:.*lm_head"``,
``"re:model.layers.\\d+.mlp.gate$"``) and matches them with ``re.match``: anchored at the start,
not at the end. A config is untrusted input, and a backtracking engine can take exponential time
on a hostile pattern, so this module compiles the subset such configs use into an automaton and
runs it over the name: time is at most (name length times pattern size).

Supported: literals, ``.``, escapes (``\\.``, ``\\d``, ``\\w``, ``\\s`` and their negations),
classes (``[a-z_]``, ``[^0-9]``), groups (``( )``, ``(?: )``, ``(?P<n> )``), ``|``, ``*``, ``+``,
``?``, ``{m}``, ``{m,}``, ``{m,n}`` (bounded), ``^`` and ``$``. Anything else (back-references,
look-arounds, flags) raises :class:`UnsupportedPattern`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MAX_PATTERN_CHARS = 1000
MAX_STATES = 20_000

Predicate = Callable[[str], bool]


class UnsupportedPattern(ValueError):
    """A pattern outside the supported subset, or too large."""


@dataclass
class _State:
    kind: str  # "char", "split", "bol", "eol", "match"
    test: Predicate | None = None
    out: int = -1
    alt: int = -1


_CLASSES: dict[str, Predicate] = {
    "d": str.isdigit,
    "w": lambda c: c.isalnum() or c == "_",
    "s": str.isspace,
}


def _escape_predicate(ch: str) -> Predicate:
    lower = ch.lower()
    if lower in _CLASSES:
        base = _CLASSES[lower]
        return base if ch == lower else (lambda c: not base(c))
    if ch.isalnum():
        raise UnsupportedPattern(f"escape \\{ch} is not supported")
    return lambda c: c == ch


def _equal(ch: str) -> Predicate:
    return lambda c: c == ch


def _between(low: str, high: str) -> Predicate:
    return lambda c: low <= c <= high


class _Parser:
    """Recursive descent over the pattern; builds nodes as nested tuples."""

    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0

    def peek(self) -> str | None:
        return self.p[self.i] if self.i < len(self.p) else None

    def take(self) -> str:
        ch = self.p[self.i]
        self.i += 1
        return ch

    def parse(self) -> tuple[object, ...]:
        node = self.alternation()
        if self.i != len(self.p):
            raise UnsupportedPattern(f"unbalanced ')' at {self.i}")
        return node

    def alternation(self) -> tuple[object, ...]:
        options = [self.sequence()]
        while self.peek() == "|":
            self.take()
            options.append(self.sequence())
        return options[0] if len(options) == 1 else ("alt", options)

    def sequence(self) -> tuple[object, ...]:
        items: list[tuple[object, ...]] = []
        while self.peek() not in (None, "|", ")"):
            items.append(self.quantified(self.atom()))
        return ("cat", items)

    def quantified(self, node: tuple[object, ...]) -> tuple[object, ...]:
        """``node`` with the quantifier after it, if any: one at most, as in ``re``."""
        ch = self.peek()
        if ch in ("*", "+", "?"):
            self.take()
            node = ({"*": "star", "+": "plus", "?": "opt"}[ch], node)
        elif ch == "{" and self._looks_like_count():
            low, high = self.count()
            node = ("repeat", node, low, high)
        else:
            return node
        if self.peek() == "?":  # lazy (``*?``, ``{2}?``): the same set of matches
            self.take()
        after = self.peek()
        if after in ("*", "+", "?") or (after == "{" and self._looks_like_count()):
            # ``a**`` is an error in re; ``a*+`` is possessive from Python 3.11 (it may fail
            # where ``a*`` matches): neither is taken, rather than read as a second repeat.
            raise UnsupportedPattern(f"a repeat after a repeat at {self.i} in {self.p!r}")
        return node

    def _looks_like_count(self) -> bool:
        end = self.p.find("}", self.i)
        body = self.p[self.i + 1 : end] if end > 0 else ""
        return bool(body) and all(c.isdigit() or c == "," for c in body) and body[0] != ","

    def count(self) -> tuple[int, int | None]:
        end = self.p.index("}", self.i)
        body = self.p[self.i + 1 : end]
        self.i = end + 1
        low_text, comma, high_text = body.partition(",")
        low = int(low_text)
        high = low if not comma else (int(high_text) if high_text else None)
        if high is not None and high < low:
            raise UnsupportedPattern(f"bad repeat {{{body}}}")
        if max(low, high or 0) > 100:
            raise UnsupportedPattern(f"repeat {{{body}}} is too large")
        return low, high

    def atom(self) -> tuple[object, ...]:
        ch = self.take()
        if ch == "(":
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.p.startswith("?P<", self.i):
                self.i = self.p.index(">", self.i) + 1
            elif self.peek() == "?":
                raise UnsupportedPattern("look-arounds and flags are not supported")
            node = self.alternation()
            if self.peek() != ")":
                raise UnsupportedPattern("missing ')'")
            self.take()
            return node
        if ch == "[":
            return ("char", self.char_class())
        if ch == ".":
            return ("char", lambda c: c != "\n")
        if ch == "\\":
            if self.peek() is None:
                raise UnsupportedPattern("pattern ends with '\\'")
            return ("char", _escape_predicate(self.take()))
        if ch == "^":
            return ("bol",)
        if ch == "$":
            return ("eol",)
        if ch in "*+?":
            raise UnsupportedPattern(f"nothing to repeat at {self.i - 1}")
        return ("char", _equal(ch))

    def char_class(self) -> Predicate:
        negated = self.peek() == "^"
        if negated:
            self.take()
        tests: list[Predicate] = []
        first = True
        while True:
            if self.peek() is None:
                raise UnsupportedPattern("missing ']'")
            ch = self.take()
            if ch == "]" and not first:
                break
            first = False
            if ch == "\\":
                if self.peek() is None:
                    raise UnsupportedPattern("missing ']'")
                tests.append(_escape_predicate(self.take()))
                continue
            if self.peek() == "-" and self.i + 1 < len(self.p) and self.p[self.i + 1] != "]":
                self.take()
                high = self.take()
                if high == "\\":
                    high = self.take()
                tests.append(_between(ch, high))
            else:
                tests.append(_equal(ch))
        if negated:
            return lambda c: not any(t(c) for t in tests)
        return lambda c: any(t(c) for t in tests)


class SafePattern:
    """A compiled pattern; :meth:`match` is ``re.match`` semantics (anchored at the start).

    Raises:
        UnsupportedPattern: outside the subset, or too large.
    """

    def __init__(self, pattern: str) -> None:
        if len(pattern) > MAX_PATTERN_CHARS:
            raise UnsupportedPattern(f"longer than {MAX_PATTERN_CHARS} characters")
        self.pattern = pattern
        self._states: list[_State] = [_State("match")]
        self._start = self._compile(_Parser(pattern).parse(), 0)

    def _new(self, state: _State) -> int:
        if len(self._states) >= MAX_STATES:
            raise UnsupportedPattern("too large once expanded")
        self._states.append(state)
        return len(self._states) - 1

    def _compile(self, node: tuple[object, ...], after: int) -> int:
        """States for ``node`` that continue to ``after``; returns the entry state."""
        kind = node[0]
        if kind == "char":
            test = node[1]
            assert callable(test)
            return self._new(_State("char", test, after))
        if kind in ("bol", "eol"):
            return self._new(_State(str(kind), None, after))
        if kind == "cat":
            entry = after
            items = node[1]
            assert isinstance(items, list)
            for item in reversed(items):
                entry = self._compile(item, entry)
            return entry
        if kind == "alt":
            options = node[1]
            assert isinstance(options, list)
            entries = [self._compile(o, after) for o in options]
            entry = entries[-1]
            for other in reversed(entries[:-1]):
                entry = self._new(_State("split", None, other, entry))
            return entry
        inner = node[1]
        assert isinstance(inner, tuple)
        if kind == "opt":
            return self._new(_State("split", None, self._compile(inner, after), after))
        if kind in ("star", "plus"):
            loop = self._new(_State("split", None, -1, after))
            body = self._compile(inner, loop)
            self._states[loop].out = body
            return loop if kind == "star" else body
        assert kind == "repeat"
        low, high = node[2], node[3]
        assert isinstance(low, int)
        assert high is None or isinstance(high, int)
        tail = ("star", inner) if high is None else ("cat", [("opt", inner)] * (high - low))
        return self._compile(("cat", [inner] * low + [tail]), after)

    def _closure(self, starts: list[int], pos: int, length: int) -> set[int]:
        seen: set[int] = set()
        stack = list(starts)
        while stack:
            index = stack.pop()
            if index in seen:
                continue
            seen.add(index)
            state = self._states[index]
            if state.kind == "split":
                stack += [state.out, state.alt]
            elif (state.kind == "bol" and pos == 0) or (state.kind == "eol" and pos == length):
                stack.append(state.out)
        return seen

    def match(self, text: str) -> bool:
        """Whether the pattern matches a prefix of ``text`` (``re.match``)."""
        current = self._closure([self._start], 0, len(text))
        for pos, ch in enumerate(text):
            if 0 in current:
                return True
            following = [
                s.out
                for s in (self._states[i] for i in current)
                if s.kind == "char" and s.test is not None and s.test(ch)
            ]
            if not following:
                return False
            current = self._closure(following, pos + 1, len(text))
        return 0 in current

"""PyTorch's ``data.pkl`` read without running it: a sans-IO interpreter of the pickle opcodes
a state dict uses, which imports nothing and calls nothing.

``torch.save`` pickles a state dict (protocol 2) as calls of a few globals: an
``collections.OrderedDict``, ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
requires_grad, hooks[, metadata])`` per tensor (``_rebuild_tensor_v3`` adds a dtype, for dtypes
newer than the legacy storage classes), ``_rebuild_parameter`` around parameters, and storages
as persistent ids ``('storage', <storage type>, key, location, numel)``. Any pickle can name any
callable, so an ordinary unpickler runs whatever the file says (``os.system`` included).

This reader is a pickle machine of its own (the opcodes of torch's ``weights_only`` unpickler,
``torch/_weights_only_unpickler.py``, no more) in which a global is only a name: the names a
state dict needs (:mod:`.torch_globals`, a subset of what ``weights_only=True`` allows) stand
for what they build (a dict, a :class:`TensorRef`, a :class:`StorageRef`), and any other name is a
:class:`~remotetensors.errors.HeaderError` (``FORBIDDEN_GLOBAL``) naming it, raised when the
``GLOBAL`` opcode is read, before anything could use it. Its rules follow torch's where torch
checks (a storage key read twice keeps its first type and size, ``requires_grad`` only for
floating dtypes, a tensor inside its storage), so what it accepts, ``torch.load(...,
weights_only=True)`` reads the same way; malformed input of any kind is a ``HeaderError``
(``INVALID_PICKLE``), never another exception.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from ..errors import HeaderError, HeaderErrorKind
from .torch_globals import (
    Global,
    ODict,
    Refused,
    StorageRef,
    TensorRef,
    allowed,
    call,
    dict_key,
    storage_of,
    what,
)

__all__ = [
    "MAX_PICKLE_BYTES",
    "PickledTensors",
    "StorageRef",
    "TensorRef",
    "read_pickle",
]

MAX_PICKLE_BYTES = 100_000_000
"""Largest ``data.pkl`` read (decimal bytes; one of exactly this size passes), as safetensors
caps its header: a state dict's pickle is about 100 bytes per tensor, a few MB for the largest
checkpoints. The zip's directory names its size, so :func:`.torch_zip.read_archive` refuses a
larger one before its bytes are asked for."""

NAME_BYTES_PER_PICKLE_BYTE = 16
"""Tensor names (nested keys joined with ``.``) may total this many bytes per byte of the
pickle, plus :data:`MIN_NAME_BYTES`: a pickle holds each key once, and a memo reference
(``BINGET``, 2 bytes) can repeat a container under a long key thousands of times."""

MIN_NAME_BYTES = 1 << 20
"""See :data:`NAME_BYTES_PER_PICKLE_BYTE`."""

MAX_NESTING = 64
"""Deepest nesting of dicts, lists and tuples walked for tensors (a pickle can build a list
that holds itself)."""


@dataclass(frozen=True, slots=True)
class PickledTensors:
    """What a ``data.pkl`` holds.

    Attributes:
        tensors: name -> tensor, in the pickle's order; names join the keys of nested dicts
            (and the positions in lists) with ``.``.
        storages: key -> storage, for every storage the pickle names.
    """

    tensors: dict[str, TensorRef]
    storages: dict[str, StorageRef]


class _Machine:
    """The pickle machine: a stack, marks and a memo, fed opcode by opcode."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.storages: dict[str, StorageRef] = {}

    def take(self, count: int) -> bytes:
        end = self.pos + count
        if end > len(self.data):
            raise Refused(f"the pickle ends at byte {len(self.data)}, {count} bytes were wanted")
        chunk = self.data[self.pos : end]
        self.pos = end
        return chunk

    def line(self) -> str:
        end = self.data.find(b"\n", self.pos)
        if end < 0:
            raise Refused("a GLOBAL name runs to the end of the pickle")
        raw = self.data[self.pos : end]
        self.pos = end + 1
        return raw.decode("utf-8")

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise Refused("an opcode asks for a MARK that was never set")
        items = self.stack
        self.stack = self.marks.pop()
        return items

    def run(self) -> Any:
        """Run to ``STOP``; the object it returns."""
        while True:
            at = self.pos
            op = self.take(1)[0]
            handler = _OPCODES.get(op)
            if handler is None:
                raise Refused(f"opcode {bytes([op])!r} at byte {at} is not one a state dict uses")
            if handler is _stop:
                return self.stack.pop()
            handler(self, at)


# --- opcodes (the set of torch's weights_only unpickler) -----------------------------------------


def _stop(m: _Machine, at: int) -> None:  # handled by _Machine.run
    raise AssertionError


def _proto(m: _Machine, at: int) -> None:
    m.take(1)


def _global_op(m: _Machine, at: int) -> None:
    module, name = m.line(), m.line()
    found = allowed(module, name)
    if found is None:
        raise _Forbidden(f"{module}.{name}", at)
    m.stack.append(found)


def _reduce(m: _Machine, at: int) -> None:
    args = m.stack.pop()
    func = m.stack[-1]
    if not isinstance(func, Global) or not isinstance(args, tuple):
        raise Refused(f"REDUCE at byte {at} calls {what(func)}, which is not allowed")
    m.stack[-1] = call(func, args, at)


def _build(m: _Machine, at: int) -> None:
    state = m.stack.pop()
    if not isinstance(m.stack[-1], ODict) or not isinstance(state, dict):
        raise Refused(f"BUILD at byte {at} sets the state of {what(m.stack[-1])}")


def _append(m: _Machine, at: int) -> None:
    item = m.stack.pop()
    target = m.stack[-1]
    if type(target) is not list:
        raise Refused(f"APPEND at byte {at} to {what(target)}")
    target.append(item)


def _appends(m: _Machine, at: int) -> None:
    items = m.pop_mark()
    target = m.stack[-1]
    if type(target) is not list:
        raise Refused(f"APPENDS at byte {at} to {what(target)}")
    target.extend(items)


def _setitem(m: _Machine, at: int) -> None:
    value, key = m.stack.pop(), m.stack.pop()
    _dict_target(m, at)[dict_key(key, at)] = value


def _setitems(m: _Machine, at: int) -> None:
    items = m.pop_mark()
    target = _dict_target(m, at)
    if len(items) % 2:
        raise Refused(f"SETITEMS at byte {at} has a key without a value")
    for i in range(0, len(items), 2):
        target[dict_key(items[i], at)] = items[i + 1]


def _dict_target(m: _Machine, at: int) -> dict[Any, Any]:
    target = m.stack[-1]
    if type(target) not in (dict, ODict):
        raise Refused(f"a SETITEM at byte {at} into {what(target)}")
    result: dict[Any, Any] = target
    return result


def _mark(m: _Machine, at: int) -> None:
    m.marks.append(m.stack)
    m.stack = []


def _tuple(m: _Machine, at: int) -> None:
    items = m.pop_mark()  # first: it changes which list m.stack is
    m.stack.append(tuple(items))


def _tuple1(m: _Machine, at: int) -> None:
    m.stack[-1] = (m.stack[-1],)


def _tuple2(m: _Machine, at: int) -> None:
    second, first = m.stack.pop(), m.stack.pop()
    m.stack.append((first, second))


def _tuple3(m: _Machine, at: int) -> None:
    third, second, first = m.stack.pop(), m.stack.pop(), m.stack.pop()
    m.stack.append((first, second, third))


def _push(value: Any) -> Any:
    def push(m: _Machine, at: int) -> None:
        m.stack.append(value() if callable(value) else value)

    return push


def _binint(m: _Machine, at: int) -> None:
    m.stack.append(struct.unpack("<i", m.take(4))[0])


def _binint1(m: _Machine, at: int) -> None:
    m.stack.append(m.take(1)[0])


def _binint2(m: _Machine, at: int) -> None:
    m.stack.append(struct.unpack("<H", m.take(2))[0])


def _binfloat(m: _Machine, at: int) -> None:
    m.stack.append(struct.unpack(">d", m.take(8))[0])


def _long1(m: _Machine, at: int) -> None:
    count = m.take(1)[0]
    m.stack.append(int.from_bytes(m.take(count), "little", signed=True))


def _binunicode(m: _Machine, at: int) -> None:
    count = struct.unpack("<I", m.take(4))[0]
    m.stack.append(m.take(count).decode("utf-8", "surrogatepass"))


def _short_binstring(m: _Machine, at: int) -> None:
    count = m.take(1)[0]
    m.stack.append(m.take(count).decode("ascii"))  # torch.load's default encoding


def _binpersid(m: _Machine, at: int) -> None:
    pid = m.stack.pop()
    m.stack.append(storage_of(pid, m.storages, at))


def _binget(m: _Machine, at: int) -> None:
    _get(m, m.take(1)[0], at)


def _long_binget(m: _Machine, at: int) -> None:
    _get(m, struct.unpack("<I", m.take(4))[0], at)


def _get(m: _Machine, index: int, at: int) -> None:
    if index not in m.memo:
        raise Refused(f"GET at byte {at} of memo entry {index}, which was never put")
    m.stack.append(m.memo[index])


def _binput(m: _Machine, at: int) -> None:
    m.memo[m.take(1)[0]] = m.stack[-1]


def _long_binput(m: _Machine, at: int) -> None:
    m.memo[struct.unpack("<I", m.take(4))[0]] = m.stack[-1]


_OPCODES = {
    ord("."): _stop,
    0x80: _proto,
    ord("c"): _global_op,
    ord("R"): _reduce,
    ord("b"): _build,
    ord("a"): _append,
    ord("e"): _appends,
    ord("s"): _setitem,
    ord("u"): _setitems,
    ord("("): _mark,
    ord("t"): _tuple,
    0x85: _tuple1,
    0x86: _tuple2,
    0x87: _tuple3,
    ord("N"): _push(None),
    0x89: _push(False),
    0x88: _push(True),
    ord(")"): _push(()),
    ord("]"): _push(list),
    ord("}"): _push(dict),
    0x8F: _push(set),
    ord("J"): _binint,
    ord("K"): _binint1,
    ord("M"): _binint2,
    ord("G"): _binfloat,
    0x8A: _long1,
    ord("X"): _binunicode,
    ord("U"): _short_binstring,
    ord("Q"): _binpersid,
    ord("h"): _binget,
    ord("j"): _long_binget,
    ord("q"): _binput,
    ord("r"): _long_binput,
}


class _Forbidden(Exception):
    """A global outside the allowed names, at byte ``at``."""

    def __init__(self, name: str, at: int) -> None:
        super().__init__(name)
        self.name = name
        self.at = at


# --- what the allowed globals build ------------------------------------------------------------


# --- the tensors of the object -------------------------------------------------------------------


def _tensors_of(top: Any, budget: int, name_bytes: int) -> dict[str, TensorRef]:
    """Name -> tensor for every tensor reachable from ``top`` through dicts, lists and tuples
    (names join keys and positions with ``.``); other values are passed over. At most
    ``budget`` values are visited, and the names built (of containers too) total at most
    ``name_bytes`` characters: a pickle can refer to one container many times over, so that a
    short pickle names more paths, and longer ones, than can be walked or held."""
    found: dict[str, TensorRef] = {}
    visits = [budget]
    left = [name_bytes]

    def walk(value: Any, name: str, depth: int) -> None:
        visits[0] -= 1
        if visits[0] < 0:
            raise Refused(f"the pickle's containers refer to each other more than {budget} times")
        left[0] -= len(name)
        if left[0] < 0:
            raise Refused(
                f"the pickle's containers make more than {name_bytes} bytes of tensor names "
                f"(reached at a name of {len(name)} characters starting {name[:40]!r}); the "
                f"limit is {NAME_BYTES_PER_PICKLE_BYTE} per byte of the pickle, plus "
                f"{MIN_NAME_BYTES}"
            )
        if isinstance(value, TensorRef):
            if not name:
                raise Refused("the pickle holds a bare tensor, not a dict of named tensors")
            if name in found:
                raise Refused(f"two tensors are named {name!r}")
            found[name] = value
            return
        if isinstance(value, dict):
            items: Any = value.items()
        elif type(value) in (list, tuple):
            items = enumerate(value)
        else:
            return
        if depth >= MAX_NESTING:
            raise Refused(f"containers nest deeper than {MAX_NESTING} levels at {name!r}")
        for key, item in items:
            walk(item, f"{name}.{key}" if name else str(key), depth + 1)

    walk(top, "", 0)
    return found


def read_pickle(data: bytes, *, location: str = "<bytes>") -> PickledTensors:
    """Interpret ``data.pkl`` without running it (see the module).

    Args:
        data: the pickle's bytes.
        location: the file, named in errors.

    Raises:
        HeaderError: ``TOO_LARGE`` for a pickle over :data:`MAX_PICKLE_BYTES`;
            ``FORBIDDEN_GLOBAL`` naming a global outside the allowed ones (and where
            it is); ``INVALID_PICKLE`` for anything else this reader cannot read or that torch
            would refuse, saying what and at which byte.
    """
    if len(data) > MAX_PICKLE_BYTES:
        raise HeaderError(
            HeaderErrorKind.TOO_LARGE,
            f"data.pkl has {len(data)} bytes, more than the limit of {MAX_PICKLE_BYTES}",
            location=location,
        )
    machine = _Machine(data)
    try:
        top = machine.run()
        tensors = _tensors_of(
            top,
            budget=4 * len(data) + 1024,
            name_bytes=NAME_BYTES_PER_PICKLE_BYTE * len(data) + MIN_NAME_BYTES,
        )
    except _Forbidden as exc:
        raise HeaderError(
            HeaderErrorKind.FORBIDDEN_GLOBAL,
            f"data.pkl names {exc.name} at byte {exc.at}; only the globals that rebuild "
            "tensors and state dicts are read (as torch.load(weights_only=True) allows), and "
            "nothing is imported or called",
            location=location,
        ) from None
    except Refused as exc:
        raise HeaderError(HeaderErrorKind.INVALID_PICKLE, str(exc), location=location) from None
    except (IndexError, TypeError, ValueError, UnicodeDecodeError, RecursionError) as exc:
        # Python's own refusals of a malformed program: an opcode with too few values on the
        # stack (IndexError), an unhashable key (TypeError), text that is not UTF-8.
        raise HeaderError(
            HeaderErrorKind.INVALID_PICKLE,
            f"malformed at byte {machine.pos} ({type(exc).__name__}: {exc})",
            location=location,
        ) from None
    return PickledTensors(tensors, machine.storages)

"""What the globals of a torch pickle stand for: the allow-list of :mod:`.torch_pickle`, and
what each allowed name builds there. Sans-IO; nothing here is imported or called by name.

Allowed, and all a state dict needs (a subset of what ``torch.load(weights_only=True)``
allows): ``collections.OrderedDict``, ``torch._utils._rebuild_tensor_v2`` / ``_v3``,
``_rebuild_parameter`` / ``_rebuild_parameter_with_state``, the storage classes (``torch.
FloatStorage``, ..., ``torch.storage.UntypedStorage``), the ``torch.<dtype>`` values,
``torch.Size`` and ``_codecs.encode`` (bytes in protocol 2). Each builds a plain value here: a
dict, a :class:`TensorRef` (a strided view of a :class:`StorageRef`), a tuple, bytes. The checks
are torch's where torch checks (``set_``'s bounds, ``requires_grad`` for floats only, a storage
key keeping its first type), so a tensor built here is one torch would build.
"""

from __future__ import annotations

import math
import reprlib
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Global",
    "ODict",
    "Refused",
    "StorageRef",
    "TensorRef",
    "allowed",
    "call",
    "dict_key",
    "item_bytes",
    "short",
    "storage_of",
    "what",
]


class Refused(Exception):
    """Input this reader refuses (malformed, or what torch would refuse); says what."""


_STORAGE_DTYPES = {
    "DoubleStorage": "F64",
    "FloatStorage": "F32",
    "HalfStorage": "F16",
    "BFloat16Storage": "BF16",
    "LongStorage": "I64",
    "IntStorage": "I32",
    "ShortStorage": "I16",
    "CharStorage": "I8",
    "ByteStorage": "U8",
    "BoolStorage": "BOOL",
    "ComplexFloatStorage": "C64",
}
"""torch's legacy storage classes -> the dtype name of their elements."""

_TORCH_DTYPES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint64": "U64",
    "uint32": "U32",
    "uint16": "U16",
    "uint8": "U8",
    "bool": "BOOL",
    "complex64": "C64",
    "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2",
    "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float8_e8m0fnu": "F8_E8M0",
}
"""``torch.<dtype>`` globals (``_rebuild_tensor_v3``'s dtype) -> dtype names."""

_ITEM_BYTES = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U64": 8,
    "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "C64": 8, "F8_E4M3": 1, "F8_E5M2": 1,
    "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1, "F8_E8M0": 1,
}  # fmt: skip
"""Bytes per element of every dtype a torch file can hold here."""

_GRAD_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "C64", "F8_E4M3", "F8_E5M2"} | {
    "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0"
})  # fmt: skip
"""Dtypes whose tensors may require grad (torch: floating point and complex only)."""


def item_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name that a torch file can hold."""
    return _ITEM_BYTES[dtype]


@dataclass(frozen=True, slots=True)
class StorageRef:
    """A storage that the pickle names: ``<root>/data/<key>`` of the archive.

    Attributes:
        key: the storage's record name under ``data/``.
        dtype: the dtype name of its elements (``"U8"`` for an untyped storage).
        nbytes: its size in bytes (elements times their size), which the record must have.
    """

    key: str
    dtype: str
    nbytes: int


@dataclass(frozen=True, slots=True)
class TensorRef:
    """A tensor as the pickle rebuilds it: a strided view of a storage.

    Attributes:
        storage: the storage holding its elements.
        dtype: the tensor's dtype name.
        offset: position of its first element in the storage, in elements of ``dtype``.
        shape: its dimensions.
        stride: elements between neighbours along each dimension.
    """

    storage: StorageRef
    dtype: str
    offset: int
    shape: tuple[int, ...]
    stride: tuple[int, ...]

    @property
    def span(self) -> int:
        """Elements of the storage from the first one the tensor uses to its last one, both
        included (0 for an empty tensor)."""
        if math.prod(self.shape) == 0:
            return 0
        return 1 + sum(
            (size - 1) * step for size, step in zip(self.shape, self.stride, strict=True)
        )

    @property
    def contiguous(self) -> bool:
        """Whether its elements lie in row-major order, one after the other (torch's
        ``is_contiguous``: an empty tensor is, and dimensions of size 1 may have any stride)."""
        if math.prod(self.shape) == 0:
            return True
        expected = 1
        for size, step in zip(reversed(self.shape), reversed(self.stride), strict=True):
            if size != 1 and step != expected:
                return False
            expected *= size
        return True


@dataclass(frozen=True, slots=True)
class Global:
    """A name the pickle looked up; ``kind`` says what it stands for here."""

    module: str
    name: str
    kind: str  # odict, rebuild_v2, rebuild_v3, parameter, size, encode, storage, dtype
    dtype: str = ""


class ODict(dict[Any, Any]):
    """A ``collections.OrderedDict`` rebuilt by the pickle (its ``BUILD`` state, the
    ``_metadata`` of a state dict, is allowed and ignored)."""


_CALLABLE = {
    ("collections", "OrderedDict"): "odict",
    ("torch._utils", "_rebuild_tensor_v2"): "rebuild_v2",
    ("torch._utils", "_rebuild_tensor_v3"): "rebuild_v3",
    ("torch._utils", "_rebuild_parameter"): "parameter",
    ("torch._utils", "_rebuild_parameter_with_state"): "parameter",
    ("torch", "Size"): "size",
    ("_codecs", "encode"): "encode",
}


def allowed(module: str, name: str) -> Global | None:
    """What ``module.name`` stands for, or None when it is not allowed."""
    kind = _CALLABLE.get((module, name))
    if kind is not None:
        return Global(module, name, kind)
    if module == "torch" and name in _STORAGE_DTYPES:
        return Global(module, name, "storage", _STORAGE_DTYPES[name])
    if module == "torch.storage" and name == "UntypedStorage":
        return Global(module, name, "storage", "U8")
    if module == "torch" and name in _TORCH_DTYPES:
        return Global(module, name, "dtype", _TORCH_DTYPES[name])
    return None


def what(value: Any) -> str:
    """A value of the pickle in words for messages: a global's name, else its type."""
    if isinstance(value, Global):
        return f"{value.module}.{value.name}"
    return f"a {type(value).__name__}"


_SHORT = reprlib.Repr()  # keyword arguments only from Python 3.12
_SHORT.maxlevel, _SHORT.maxstring, _SHORT.maxother = 3, 40, 40
_SHORT.maxtuple, _SHORT.maxlist, _SHORT.maxdict = 8, 8, 4


def short(value: Any) -> str:
    """``repr`` of a value from the pickle, cut short (it may nest deep or run long)."""
    return _SHORT.repr(value)


_KEY_TYPES = (str, int, bytes, float, bool, type(None))

INT64_MAX = 2**63 - 1
"""torch keeps sizes, strides, storage offsets and element counts as int64."""


def dict_key(key: Any, at: int) -> Any:
    """``key`` as a dict key (of ``SETITEM(S)`` or an ``OrderedDict``'s pairs, at byte ``at``),
    if it is a plain value: a state dict's keys are names, and a tuple key would be hashed
    recursively, to any depth the pickle nests it (twice per level when it repeats itself).

    Raises:
        Refused: another type of key.
    """
    if type(key) not in _KEY_TYPES:
        raise Refused(f"a dict key at byte {at} is {what(key)}")
    return key


def call(func: Global, args: tuple[Any, ...], at: int) -> Any:
    """What ``REDUCE`` of the allowed ``func`` with ``args`` builds (the opcode at byte ``at``).

    Raises:
        Refused: ``func`` does not take these arguments (or cannot be called: a storage
            class, a dtype), or builds what torch would refuse.
    """
    kind = func.kind
    if kind == "odict":
        if args == ():
            return ODict()
        if (
            len(args) == 1
            and type(args[0]) is list
            and all(type(p) is tuple and len(p) == 2 for p in args[0])
        ):
            return ODict((dict_key(key, at), value) for key, value in args[0])
    elif kind == "rebuild_v2" and len(args) in (6, 7):
        storage = args[0]
        if isinstance(storage, StorageRef):
            return _tensor(storage, storage.dtype, args[1:6], args[6:], at)
    elif kind == "rebuild_v3" and len(args) in (7, 8):
        storage, dtype = args[0], args[6]
        if isinstance(storage, StorageRef) and isinstance(dtype, Global) and dtype.kind == "dtype":
            return _tensor(storage, dtype.dtype, args[1:6], args[7:], at)
    elif kind == "parameter" and len(args) == (3 if func.name == "_rebuild_parameter" else 4):
        data, requires_grad = args[0], args[1]
        if isinstance(data, TensorRef) and type(requires_grad) is bool:
            _check_grad(data.dtype, requires_grad, at)
            return data
    elif kind == "size" and len(args) == 1 and type(args[0]) is tuple:
        if all(type(n) is int for n in args[0]):
            return args[0]
    elif kind == "encode" and len(args) == 2 and type(args[0]) is str and args[1] == "latin1":
        return args[0].encode("latin-1")
    raise Refused(f"REDUCE at byte {at}: {what(func)} with arguments it does not take")


def _tensor(
    storage: StorageRef, dtype: str, args: tuple[Any, ...], extra: tuple[Any, ...], at: int
) -> TensorRef:
    """``_rebuild_tensor_v2``/``v3``'s tensor: ``args`` are (offset, size, stride,
    requires_grad, hooks), ``extra`` the optional metadata. Checked as torch's ``set_`` checks
    a view: ``offset`` and sizes at least 0, one stride per size, all of it inside the storage;
    and as its int64 arithmetic checks them (:func:`_check_int64`).
    """
    offset, shape, stride, requires_grad, hooks = args
    if type(offset) is not int or offset < 0:
        raise Refused(f"a tensor at byte {at} has storage offset {short(offset)}")
    if type(shape) is not tuple or not all(type(n) is int and n >= 0 for n in shape):
        raise Refused(f"a tensor at byte {at} has shape {short(shape)}")
    if type(stride) is not tuple or not all(type(n) is int and n >= 0 for n in stride):
        raise Refused(f"a tensor at byte {at} has strides {short(stride)}")
    if len(stride) != len(shape):
        raise Refused(f"a tensor at byte {at} has {len(shape)} sizes but {len(stride)} strides")
    if type(requires_grad) is not bool or type(hooks) not in (dict, ODict):
        raise Refused(
            f"a tensor at byte {at} has requires_grad {short(requires_grad)}, hooks {short(hooks)}"
        )
    if extra and extra[0] is not None and type(extra[0]) not in (dict, ODict):
        raise Refused(f"a tensor at byte {at} has metadata {short(extra[0])}")
    _check_grad(dtype, requires_grad, at)
    _check_int64(offset, shape, stride, at)
    tensor = TensorRef(storage, dtype, offset, shape, stride)
    needed = (offset + tensor.span) * item_bytes(dtype) if tensor.span else 0
    if needed > storage.nbytes:
        raise Refused(
            f"a tensor at byte {at} (offset {offset}, shape {list(shape)}, strides "
            f"{list(stride)}) needs {needed} bytes of storage {storage.key}, which holds "
            f"{storage.nbytes}"
        )
    return tensor


def _check_int64(offset: int, shape: tuple[int, ...], stride: tuple[int, ...], at: int) -> None:
    """Refuse what torch's ``set_`` refuses for not fitting its int64 arithmetic: any size,
    stride or offset past int64 (even of an empty tensor), and an element count whose product,
    taken left to right in uint64 as ``TensorImpl::safe_compute_numel`` takes it, overflows at
    any step or ends past int64 (so ``(2**62, 2**62, 0)`` is refused and ``(0, 2**62, 4)`` is
    not). The storage's bytes that a view reaches (``computeStorageNbytes``) need no check here:
    the view must lie inside its storage, whose bytes the file holds."""
    if offset > INT64_MAX or any(n > INT64_MAX for n in (*shape, *stride)):
        raise Refused(
            f"a tensor at byte {at} (offset {short(offset)}, shape {short(list(shape))}, "
            f"strides {short(list(stride))}) has a number that does not fit in a 64-bit "
            "integer, as torch keeps them"
        )
    count = 1
    for n in shape:
        count *= n
        if count > 2**64 - 1:
            break
    if count > INT64_MAX:
        raise Refused(
            f"a tensor at byte {at} of shape {short(list(shape))} has an element count that "
            "does not fit in a 64-bit integer, as torch counts them"
        )


def _check_grad(dtype: str, requires_grad: bool, at: int) -> None:
    if requires_grad and dtype not in _GRAD_DTYPES:
        raise Refused(
            f"a {dtype} tensor at byte {at} requires grad, which torch allows floats only"
        )


def storage_of(pid: Any, known: dict[str, StorageRef], at: int) -> StorageRef:
    """The storage a persistent id ``('storage', type, key, location, numel)`` names, kept in
    ``known``; a key seen before keeps the type and size it had then (as torch.load caches
    storages by key). The location (``cpu``, ``cuda:0``) does not matter here.

    Raises:
        Refused: the id is not a storage's.
    """
    if type(pid) is not tuple or len(pid) != 5 or pid[0] not in ("storage", b"storage"):
        raise Refused(f"the persistent id at byte {at} is {short(pid)}, not a storage")
    _, kind, key, location, numel = pid
    if isinstance(key, bytes):
        key = key.decode("ascii")
    if not isinstance(kind, Global) or kind.kind != "storage" or type(key) is not str:
        raise Refused(f"the persistent id at byte {at} is {short(pid)}, not a storage")
    if type(numel) is not int or numel < 0 or not isinstance(location, (str, bytes)):
        raise Refused(f"the persistent id at byte {at} gives storage {key} {short(numel)} elements")
    found = known.get(key)
    if found is None:
        found = known[key] = StorageRef(key, kind.dtype, numel * item_bytes(kind.dtype))
    return found

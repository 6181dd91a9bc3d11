"""A model's tensors as a tree of modules, with repeated blocks folded. Pure: no IO.

Names are split on dots. Where a module has numbered children (``model.layers.0`` …
``model.layers.31``), the children whose tensors look the same (same relative names, dtypes,
shapes and roles) are folded into one :class:`Section` (``model.layers.[0-31]``, 32 times) that
shows one block; children that differ (a first dense layer in a mixture of experts, a last
layer without an MLP) get sections of their own. So the size of a view does not grow with the
number of identical layers. Everything else is listed as rows, in natural order (``layers.2``
before ``layers.10``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..index import TensorInfo
    from ..quantization import LogicalTensor

WEIGHT = "weight"
AUXILIARY = "auxiliary"
_DIGITS = re.compile(r"([0-9]+)")


def natural_key(name: str) -> tuple[tuple[str | int, ...], str]:
    """Sort key that orders the numbers inside names by value: ``layers.2`` < ``layers.10``.

    Text and numbers alternate in the key (text at even positions), so keys always compare.
    The name itself breaks ties, so ``01`` and ``1`` still have a fixed order.
    """
    parts: list[str | int] = [int(p) if i % 2 else p for i, p in enumerate(_DIGITS.split(name))]
    return tuple(parts), name


def natural_sorted(names: Iterable[str]) -> list[str]:
    """``names`` in natural order (see :func:`natural_key`)."""
    return sorted(names, key=natural_key)


@dataclass(frozen=True, slots=True)
class Leaf:
    """One tensor in the tree.

    Attributes:
        name: the relative name inside its section (``self_attn.q_proj.weight``); the full
            name inside a tree's top level.
        info: the header's entry.
        role: ``"weight"`` (parameters) or ``"auxiliary"`` (quantization bookkeeping).
        parameters: the true parameters it holds (the unpacked count of a packed weight, 0 for
            bookkeeping; the element count when nothing says otherwise).
        packing: how its values are packed (``"gptq 4-bit, 8 per I32"``), else ``None``.
    """

    name: str
    info: TensorInfo
    role: str = WEIGHT
    parameters: int = 0
    packing: str | None = None


@dataclass(frozen=True, slots=True)
class Section:
    """Numbered children of one module that look alike, shown once.

    Attributes:
        label: the name with the indices (``model.layers.[0-31]``), relative to the section
            that holds it.
        indices: the children's numbers, ascending.
        items: one block's rows and nested sections (names relative to the block).
        tensors: tensors in one block.
        parameters: true parameters of one block.
        nbytes: bytes of one block.
    """

    label: str
    indices: tuple[int, ...]
    items: tuple[Leaf | Section, ...]
    tensors: int
    parameters: int
    nbytes: int

    @property
    def count(self) -> int:
        """How many blocks the section stands for."""
        return len(self.indices)


@dataclass(frozen=True, slots=True)
class Tree:
    """A folded view of tensors.

    Attributes:
        items: rows and sections of the top level, in natural order.
        tensors, parameters, stored_elements, nbytes: totals over every tensor.
        auxiliary: tensors that are quantization bookkeeping.
        packed: weights stored packed (several values per element).
        dtypes: stored elements per dtype, sorted by dtype.
        files: file names, in first-seen order (empty for one unnamed file).
    """

    items: tuple[Leaf | Section, ...]
    tensors: int
    parameters: int
    stored_elements: int
    nbytes: int
    auxiliary: int
    packed: int
    dtypes: Mapping[str, int]
    files: tuple[str, ...] = field(default=())


class _Node:
    __slots__ = ("children", "tensor")

    def __init__(self) -> None:
        self.tensor: Leaf | None = None
        self.children: dict[str, _Node] = {}


def ranges_label(indices: Iterable[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7-8"``."""
    runs: list[list[int]] = []
    for i in sorted(indices):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _leaves(node: _Node, prefix: str) -> list[tuple[str, Leaf]]:
    """(relative name, leaf) of every tensor under ``node``; a loop, not nested generators,
    because a model has hundreds of thousands of them."""
    found: list[tuple[str, Leaf]] = []
    stack = [(prefix, node)]
    while stack:
        name, current = stack.pop()
        if current.tensor is not None:
            found.append((name, current.tensor))
        for key, child in current.children.items():
            stack.append((f"{name}.{key}" if name else key, child))
    return found


def _signature(node: _Node) -> tuple[tuple[object, ...], ...]:
    """What makes two numbered blocks the same: their tensors' relative names, dtypes, shapes,
    roles and logical counts."""
    return tuple(
        sorted(
            (rel, leaf.info.dtype, leaf.info.shape, leaf.role, leaf.parameters)
            for rel, leaf in _leaves(node, "")
        )
    )


def _flatten(node: _Node, prefix: str) -> list[Leaf | Section]:
    """Rows (tensors under ``node`` named relative to it, ``prefix`` first) and sections
    (folded numbered children), in natural order."""
    items: list[Leaf | Section] = []
    if node.tensor is not None:
        leaf = node.tensor
        items.append(Leaf(prefix, leaf.info, leaf.role, leaf.parameters, leaf.packing))
    # ASCII digits only: "²".isdigit() is true, but int("²") fails; "٣" would print as "3".
    numbered = {k: c for k, c in node.children.items() if k.isascii() and k.isdigit()}
    numbers_done = False
    for key in natural_sorted(node.children):
        name = f"{prefix}.{key}" if prefix else key
        if key not in numbered:
            items.extend(_flatten(node.children[key], name))
        elif not numbers_done:
            numbers_done = True
            items.extend(_sections(numbered, prefix))
    return items


def _sections(numbered: Mapping[str, _Node], prefix: str) -> list[Section]:
    groups: dict[tuple[tuple[object, ...], ...], list[tuple[int, _Node]]] = {}
    for key in natural_sorted(numbered):
        groups.setdefault(_signature(numbered[key]), []).append((int(key), numbered[key]))
    sections = []
    for members in groups.values():
        indices = tuple(i for i, _ in members)
        block = _flatten(members[0][1], "")
        leaves = [leaf for _, leaf in _leaves(members[0][1], "")]
        inner = ranges_label(indices)
        label = inner if len(indices) == 1 else f"[{inner}]"
        sections.append(
            Section(
                f"{prefix}.{label}" if prefix else label,
                indices,
                tuple(block),
                len(leaves),
                sum(leaf.parameters for leaf in leaves),
                sum(leaf.info.nbytes for leaf in leaves),
            )
        )
    # Sections in the order of their first block, so layer 0's section comes first.
    return sorted(sections, key=lambda s: s.indices[0])


def build_tree(
    tensors: Iterable[TensorInfo],
    logical: Mapping[str, LogicalTensor] | None = None,
) -> Tree:
    """Fold ``tensors`` into a :class:`Tree`.

    Args:
        tensors: the header entries, in any order.
        logical: name -> role and true size (``model.logical_tensors``); without it every
            tensor is a weight of its element count.
    """
    root = _Node()
    files: dict[str, None] = {}
    dtypes: dict[str, int] = {}
    count = parameters = stored = nbytes = auxiliary = packed = 0
    for info in tensors:
        elements = info.num_elements
        role, params, packing = WEIGHT, elements, None
        if logical is not None and info.name in logical:
            entry = logical[info.name]
            role, params, packing = entry.role, entry.num_parameters, entry.packing
            if role != WEIGHT:
                packing = None
        node = root
        for part in info.name.split("."):
            child = node.children.get(part)
            if child is None:
                child = node.children[part] = _Node()
            node = child
        node.tensor = Leaf(info.name, info, role, params, packing)
        count += 1
        parameters += params
        stored += elements
        nbytes += info.nbytes
        auxiliary += role == AUXILIARY
        packed += packing is not None
        dtypes[info.dtype] = dtypes.get(info.dtype, 0) + elements
        if info.file:
            files.setdefault(info.file)
    return Tree(
        tuple(_flatten(root, "")),
        count,
        parameters,
        stored,
        nbytes,
        auxiliary,
        packed,
        dict(sorted(dtypes.items())),
        tuple(files),
    )


def tree_as_dict(tree: Tree) -> dict[str, object]:
    """A JSON-ready form: totals, then items (rows and sections, nested)."""

    def item(x: Leaf | Section) -> dict[str, object]:
        if isinstance(x, Leaf):
            return {
                "name": x.name,
                "dtype": x.info.dtype,
                "shape": list(x.info.shape),
                "bytes": x.info.nbytes,
                "parameters": x.parameters,
                "role": x.role,
                "packing": x.packing,
                "file": x.info.file,
            }
        return {
            "section": x.label,
            "count": x.count,
            "indices": list(x.indices),
            "tensors_each": x.tensors,
            "parameters_each": x.parameters,
            "bytes_each": x.nbytes,
            "items": [item(i) for i in x.items],
        }

    return {
        "tensors": tree.tensors,
        "parameters": tree.parameters,
        "stored_elements": tree.stored_elements,
        "bytes": tree.nbytes,
        "files": list(tree.files),
        "dtypes": dict(tree.dtypes),
        "auxiliary_tensors": tree.auxiliary,
        "packed_tensors": tree.packed,
        "items": [item(i) for i in tree.items],
    }

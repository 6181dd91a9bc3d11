"""How ``remotetensors tree`` draws an open model: a rich tree on a terminal, the plain-text view
when piped, JSON with ``--json`` (the command itself is :mod:`.tree`).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

from ..views.display import human_bytes, tree_text
from ..views.explore import model_tree
from ..views.tree import Leaf, Section, tree_as_dict

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.tree import Tree as RichTree

    from ..models.sync import Model


def tree_report(model: Model) -> dict[str, object]:
    """``tree --json``: totals, items (rows and folded sections), and the network counters."""
    report: dict[str, object] = {"location": model.location}
    report.update(tree_as_dict(model.tree()))
    quantization = model.quantization
    report["quantization"] = quantization.as_dict() if quantization is not None else None
    report["network"] = {name: t.as_dict() for name, t in model.traffic_by_file.items()}
    return report


def run_tree(model: Model, *, as_json: bool) -> int:
    """Print the tree of an open model; returns the exit status."""
    if as_json:
        print(json.dumps(tree_report(model)))
        return 0
    async_model = model._model
    if not sys.stdout.isatty():
        from ..views.explore import model_text

        print(model_text(async_model))
        return 0
    from rich.console import Console
    from rich.markup import escape
    from rich.tree import Tree as RichTree

    tree = model_tree(async_model)
    text = tree_text(model.location, tree, traffic=model.traffic_by_file).split("\n\n", 1)[0]
    root = RichTree(escape(text))
    _add_items(root, tree.items, "")
    Console().print(root)
    return 0


def _add_items(node: RichTree, items: Sequence[Leaf | Section], prefix: str) -> None:
    from rich.markup import escape

    for item in items:
        if isinstance(item, Leaf):
            mark = (
                " [dim]aux[/]"
                if item.role != "weight"
                else (" [yellow]packed[/]" if item.packing else "")
            )
            node.add(
                f"[cyan]{escape(item.name or prefix)}[/]{mark}  {item.info.dtype} "
                f"{list(item.info.shape)}  [dim]{human_bytes(item.info.nbytes)}[/]"
            )
            continue
        label = f"{prefix}.{item.label}" if prefix else item.label
        each = " each" if item.count > 1 else ""
        times = f"{item.count} \u00d7 " if item.count > 1 else ""
        child = node.add(
            f"[bold]{escape(label)}[/]  [blue]{times}({item.tensors} tensors, "
            f"{item.parameters:,} parameters{each})[/]"
        )
        head, _, _ = label.rpartition(".")
        first = f"{head}.{item.indices[0]}" if head else str(item.indices[0])
        _add_items(child, item.items, first)

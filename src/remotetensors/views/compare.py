"""``rt.compare(a, b)``: two tensors, or two models, side by side.

For two models the structure comes from their headers alone (tensors only in one, shape or
dtype changes); values are fetched only for the tensors named in ``names``, each model's in one
batched fetch. For two tensors (arrays, or views from ``m.tensor(name)``) the values are
compared: relative difference, cosine similarity, largest absolute difference.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

import numpy as np

from .stats import as_numbers
from .tree import natural_sorted

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ..models.sync import Model

_BOX = "font-family:system-ui,sans-serif;font-size:13px;line-height:1.45;color:inherit"
_TH = (
    "text-align:left;padding:2px 10px 2px 4px;border-bottom:1px solid rgba(127,127,127,0.5);"
    "background:rgba(127,127,127,0.12)"
)
_TD = "padding:1px 10px 1px 4px;border-bottom:1px solid rgba(127,127,127,0.15)"
MAX_LISTED = 50


@dataclass(frozen=True, slots=True)
class ValueDifference:
    """How far apart two tensors' values are.

    Attributes:
        name: what was compared (``"a.weight vs b.weight"`` or the common name).
        relative: ``norm(a - b) / norm(b)`` (inf when b is all zeros and a is not; 0 when both are).
        cosine: cosine similarity of the flattened values (nan when either is all zeros).
        max_abs: largest absolute difference.
    """

    name: str
    relative: float
    cosine: float
    max_abs: float

    def words(self) -> str:
        """One line of text."""
        return (
            f"{self.name}: relative difference {self.relative:.4g}, "
            f"cosine similarity {self.cosine:.6f}, max |a-b| {self.max_abs:.4g}"
        )


@dataclass(frozen=True, slots=True)
class Comparison:
    """What differs between two models (or two tensors).

    Attributes:
        only_in_a, only_in_b: tensor names in one only, natural order.
        changed: (name, what a has, what b has) for tensors whose shape or dtype differ.
        same: names in both with equal shape and dtype.
        values: value differences for the tensors compared by value.
    """

    only_in_a: tuple[str, ...]
    only_in_b: tuple[str, ...]
    changed: tuple[tuple[str, str, str], ...]
    same: tuple[str, ...]
    values: tuple[ValueDifference, ...]

    def lines(self) -> list[str]:
        """The comparison as text lines."""
        lines = []
        if self.only_in_a or self.only_in_b or self.same or self.changed:
            lines.append(
                f"{len(self.same):,} tensors alike in shape and dtype, {len(self.changed):,} "
                f"changed, {len(self.only_in_a):,} only in a, {len(self.only_in_b):,} only in b"
            )
        for label, names in (("only in a", self.only_in_a), ("only in b", self.only_in_b)):
            for name in names[:MAX_LISTED]:
                lines.append(f"  {label}: {name}")
            if len(names) > MAX_LISTED:
                lines.append(f"  {label}: … {len(names) - MAX_LISTED:,} more")
        for name, was, now in self.changed[:MAX_LISTED]:
            lines.append(f"  changed: {name}: {was} -> {now}")
        lines += [v.words() for v in self.values]
        return lines

    def _repr_html_(self) -> str:
        parts = [f'<div style="{_BOX}">']
        parts += [f"<div>{escape(line)}</div>" for line in self.lines() if "cosine" not in line]
        if self.values:
            head = "".join(
                f'<th style="{_TH}">{h}</th>'
                for h in ("tensor", "relative difference", "cosine similarity", "max |a-b|")
            )
            rows = "".join(
                f'<tr><td style="{_TD}"><code>{escape(v.name)}</code></td>'
                f'<td style="{_TD};text-align:right">{v.relative:.4g}</td>'
                f'<td style="{_TD};text-align:right">{v.cosine:.6f}</td>'
                f'<td style="{_TD};text-align:right">{v.max_abs:.4g}</td></tr>'
                for v in self.values
            )
            parts.append(
                '<table style="border-collapse:collapse;font-size:12px;color:inherit">'
                f"<tr>{head}</tr>{rows}</table>"
            )
        parts.append("</div>")
        return "".join(parts)

    def __repr__(self) -> str:
        return "\n".join(self.lines())


def value_difference(name: str, a: Any, b: Any) -> ValueDifference:
    """Relative difference, cosine similarity and largest absolute difference of two arrays
    (complex ones compared as complex numbers: the cosine is the real part of their inner
    product over their norms).

    Raises:
        ValueError: the shapes differ.
    """
    x, y = as_numbers(a), as_numbers(b)
    if x.shape != y.shape:
        raise ValueError(f"{name}: shapes differ: {list(x.shape)} and {list(y.shape)}")
    x, y = x.reshape(-1), y.reshape(-1)
    diff = float(np.linalg.norm(x - y))
    norm_x, norm_y = float(np.linalg.norm(x)), float(np.linalg.norm(y))
    relative = diff / norm_y if norm_y else (0.0 if diff == 0 else float("inf"))
    cosine = float(np.vdot(y, x).real / (norm_x * norm_y)) if norm_x and norm_y else float("nan")
    max_abs = float(np.abs(x - y).max()) if x.size else 0.0
    return ValueDifference(name, relative, cosine, max_abs)


def compare(a: Any, b: Any, *, names: str | Iterable[str] | None = None) -> Comparison:
    """Compare two models, or two tensors.

    Args:
        a, b: two open models (:class:`remotetensors.Model`), or two tensors (arrays, or views
            from ``m.tensor(name)``, which are fetched).
        names: for models, the tensors to compare by value: a glob (``"model.layers.0.*"``) or
            names; only those in both with the same shape are fetched. ``None``: compare the
            structure only, fetching nothing.

    Raises:
        TypeError: ``a`` and ``b`` are not both models or both tensors.
        ValueError: two tensors of different shapes.
    """
    from ..models.sync import Model
    from .explore import TensorView

    if isinstance(a, Model) and isinstance(b, Model):
        return _compare_models(a, b, names)
    if isinstance(a, Model) or isinstance(b, Model):
        raise TypeError("compare takes two models or two tensors, not one of each")
    label_a = a.name if isinstance(a, TensorView) else "a"
    label_b = b.name if isinstance(b, TensorView) else "b"
    x = a.get() if isinstance(a, TensorView) else a
    y = b.get() if isinstance(b, TensorView) else b
    name = label_a if label_a == label_b else f"{label_a} vs {label_b}"
    return Comparison((), (), (), (), (value_difference(name, x, y),))


def _compare_models(a: Model, b: Model, names: str | Iterable[str] | None) -> Comparison:
    ta, tb = a.tensors, b.tensors
    only_a = natural_sorted(set(ta) - set(tb))
    only_b = natural_sorted(set(tb) - set(ta))
    changed, same = [], []
    for name in natural_sorted(set(ta) & set(tb)):
        x, y = ta[name], tb[name]
        if (x.dtype, x.shape) == (y.dtype, y.shape):
            same.append(name)
        else:
            changed.append((name, f"{x.dtype} {list(x.shape)}", f"{y.dtype} {list(y.shape)}"))
    values: list[ValueDifference] = []
    if names is not None:
        common = {n for n in set(ta) & set(tb) if ta[n].shape == tb[n].shape}
        if isinstance(names, str):
            wanted = [n for n in natural_sorted(common) if fnmatch.fnmatchcase(n, names)]
        else:
            wanted = [n for n in dict.fromkeys(names) if n in common]
        if wanted:
            xs, ys = a.get_tensors(wanted), b.get_tensors(wanted)
            values = [value_difference(n, xs[n], ys[n]) for n in wanted]
    return Comparison(tuple(only_a), tuple(only_b), tuple(changed), tuple(same), tuple(values))

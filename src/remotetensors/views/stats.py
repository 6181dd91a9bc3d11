"""Numbers and pictures of one tensor's values: summary statistics, a histogram, a heatmap.

Pure: arrays in, values and PNG bytes out; no IO. matplotlib is optional; without it the
numbers still show, and the pictures say how to install it.
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MissingDependencyError

if TYPE_CHECKING:
    import numpy.typing as npt

MATPLOTLIB_HINT = 'pictures need matplotlib: pip install matplotlib (or "remotetensors[plot]")'

_BOX = "font-family:system-ui,sans-serif;font-size:13px;line-height:1.45;color:inherit"
_TD = "padding:1px 12px 1px 4px;border-bottom:1px solid rgba(127,127,127,0.2)"
_MUTED = "opacity:0.72"


COMPLEX_NOTE = "complex values: statistics of their magnitude |z|"
"""What a summary of a complex tensor (C64) says it is of."""


def as_float(array: Any) -> npt.NDArray[np.float64]:
    """Values as float64 (BF16, F8 and F4 arrays from ml_dtypes included); bools as 0/1;
    complex values as their magnitude ``|z|`` (a real number that keeps both parts' size,
    where a cast would drop the imaginary part)."""
    values = as_numbers(array)
    if np.iscomplexobj(values):
        magnitude: npt.NDArray[np.float64] = np.abs(values)
        return magnitude
    return values.astype(np.float64, copy=False)  # float64 already: no copy


def as_numbers(array: Any) -> npt.NDArray[np.float64] | npt.NDArray[np.complex128]:
    """Values as float64, or complex128 for complex ones (BF16, F8 and F4 from ml_dtypes
    included); bools as 0/1."""
    values = np.asarray(array)
    if values.dtype == np.bool_:
        values = values.astype(np.uint8)
    if np.iscomplexobj(values):
        return values.astype(np.complex128, copy=False)
    return values.astype(np.float64, copy=False)


def _figure(width: float, height: float) -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise MissingDependencyError(MATPLOTLIB_HINT) from exc
    # A Figure of its own, not pyplot: no global state, nothing shown twice in a notebook, and
    # a white card that reads the same on light and dark themes.
    return Figure(figsize=(width, height), dpi=100, facecolor="white")


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return buffer.getvalue()


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{data}" style="max-width:100%">'


@dataclass(frozen=True, slots=True)
class TensorStats:
    """Summary of a tensor's values (or of a stated sample of its rows).

    Attributes:
        name, dtype, shape: the tensor's.
        count: values looked at.
        sample: ``None`` when every value was looked at, else what the sample was.
        min, max, mean, std: over the finite values (NaN when there are none).
        zeros: share of values equal to 0 (0.0 to 1.0).
        nan, inf: how many values are NaN, ±Inf.
        histogram: counts per bin, over the finite values.
        edges: the bins' edges (one more than counts).
        note: how to read the values (``"stored values (packed: …)"``), or ``None``.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    count: int
    sample: str | None
    min: float
    max: float
    mean: float
    std: float
    zeros: float
    nan: int
    inf: int
    histogram: tuple[int, ...]
    edges: tuple[float, ...]
    note: str | None = None

    def histogram_png(self) -> bytes:
        """The histogram as a PNG image.

        Raises:
            MissingDependencyError: matplotlib is not installed.
        """
        figure = _figure(6.0, 2.4)
        axes = figure.subplots()
        if self.histogram:
            widths = np.diff(self.edges)
            axes.bar(self.edges[:-1], self.histogram, width=widths, align="edge", color="#3a7dc9")
        axes.set_title(f"{self.name} ({self.sample or 'all values'})", fontsize=9)
        axes.set_xlabel("value", fontsize=8)
        axes.set_ylabel("count", fontsize=8)
        axes.tick_params(labelsize=7)
        return _png(figure)

    def rows(self) -> list[tuple[str, str]]:
        """(label, value) pairs, as the views show them."""
        return [
            ("values", f"{self.count:,}"),
            ("min", f"{self.min:.6g}"),
            ("max", f"{self.max:.6g}"),
            ("mean", f"{self.mean:.6g}"),
            ("std", f"{self.std:.6g}"),
            ("zeros", f"{self.zeros:.2%}"),
            ("NaN", f"{self.nan:,}"),
            ("Inf", f"{self.inf:,}"),
        ]

    def _repr_html_(self) -> str:
        table = "".join(
            f'<tr><td style="{_TD};{_MUTED}">{k}</td><td style="{_TD};text-align:right">'
            f"{escape(v)}</td></tr>"
            for k, v in self.rows()
        )
        try:
            picture = _img(self.histogram_png(), f"histogram of {self.name}")
        except MissingDependencyError:
            picture = f'<div style="{_MUTED}">{escape(MATPLOTLIB_HINT)}</div>'
        notes = [n for n in (self.sample, self.note) if n]
        note = "".join(f'<div style="{_MUTED}">{escape(n)}</div>' for n in notes)
        return (
            f'<div style="{_BOX}"><div style="font-weight:600"><code>{escape(self.name)}</code>'
            f" {escape(self.dtype)} {list(self.shape)}</div>{note}"
            '<div style="display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start">'
            f'<table style="border-collapse:collapse;font-size:12px;color:inherit">{table}'
            f"</table><div>{picture}</div></div></div>"
        )

    def __repr__(self) -> str:
        head = f"{self.name} {self.dtype} {list(self.shape)}"
        body = "\n".join(f"  {k:<7} {v}" for k, v in self.rows())
        notes = "".join(f"\n  {n}" for n in (self.sample, self.note) if n)
        return f"{head}\n{body}{notes}"


def tensor_stats(
    name: str,
    dtype: str,
    shape: tuple[int, ...],
    values: Any,
    *,
    sample: str | None = None,
    bins: int = 64,
    note: str | None = None,
) -> TensorStats:
    """Statistics of ``values`` (the whole tensor, or the sample that ``sample`` describes);
    of their magnitude for complex values, as the result's note says.

    Args:
        bins: histogram bins over the finite values' range.
    """
    if np.iscomplexobj(values):
        note = COMPLEX_NOTE if note is None else f"{note}; {COMPLEX_NOTE}"
    data = as_float(values).reshape(-1)
    finite_mask = np.isfinite(data)
    finite = data[finite_mask]
    nan = int(np.isnan(data).sum())
    inf = int(data.size - finite.size - nan)
    if finite.size:
        lo, hi = float(finite.min()), float(finite.max())
        counts, edges = np.histogram(finite, bins=bins, range=(lo, hi) if hi > lo else None)
        mean, std = float(finite.mean()), float(finite.std())
    else:
        lo = hi = mean = std = float("nan")
        counts, edges = np.zeros(0, dtype=np.int64), np.zeros(0)
    return TensorStats(
        name,
        dtype,
        shape,
        int(data.size),
        sample,
        lo,
        hi,
        mean,
        std,
        float((data == 0).sum() / data.size) if data.size else 0.0,
        nan,
        inf,
        tuple(int(c) for c in counts),
        tuple(float(e) for e in edges),
        note,
    )


@dataclass(frozen=True, slots=True)
class Heatmap:
    """A 2-D slice of a tensor, to be drawn as a heatmap.

    Attributes:
        name: the tensor's name.
        region: what was sliced (``"[0:64, 0:64]"``).
        values: the slice (2-D, float64).
    """

    name: str
    region: str
    values: npt.NDArray[np.float64]

    def png(self) -> bytes:
        """The heatmap as a PNG image: a diverging colour map centred on zero.

        Raises:
            MissingDependencyError: matplotlib is not installed.
        """
        rows, cols = self.values.shape
        figure = _figure(min(8.0, 2.0 + cols / 16), min(6.0, 1.2 + rows / 16))
        axes = figure.subplots()
        finite = self.values[np.isfinite(self.values)]
        bound = float(np.abs(finite).max()) if finite.size else 1.0
        image = axes.imshow(
            self.values,
            cmap="RdBu_r",
            vmin=-bound or -1.0,
            vmax=bound or 1.0,
            aspect="auto",
            interpolation="nearest",
        )
        figure.colorbar(image, ax=axes)
        axes.set_title(f"{self.name}{self.region}", fontsize=9)
        axes.tick_params(labelsize=7)
        return _png(figure)

    def _repr_html_(self) -> str:
        if self.values.size == 0:
            return f'<div style="{_MUTED}">{escape(self.name)}: empty, nothing to draw</div>'
        try:
            return _img(self.png(), f"heatmap of {self.name}{self.region}")
        except MissingDependencyError:
            return f'<div style="{_MUTED}">{escape(MATPLOTLIB_HINT)}</div>'

    def __repr__(self) -> str:
        return f"<Heatmap {self.name}{self.region}: {self.values.shape}>"

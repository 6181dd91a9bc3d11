"""The names a library gives a model's weight files in its folder, with variants. Pure.

transformers writes ``model.safetensors`` (sharded: ``model.safetensors.index.json``), diffusers
``diffusion_pytorch_model.safetensors`` (and its index); both also wrote PyTorch pickles
(``pytorch_model.bin``, ``diffusion_pytorch_model.bin``, each with a ``.index.json``). A
*variant* (``fp16``, ``bf16``, ``ema``) is put before the last dot of each name, the rule of
both libraries' ``_add_variant``: ``diffusion_pytorch_model.fp16.safetensors``,
``diffusion_pytorch_model.safetensors.index.fp16.json``. Shard names come from the index.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

__all__ = ["DIFFUSERS", "TRANSFORMERS", "WeightNames", "add_variant"]

_VARIANT = re.compile(r"[A-Za-z0-9_-]+")
_SHARD = re.compile(r"-\d+-of-\d+$")  # "fp16-00001-of-00002": a shard of the variant fp16


def add_variant(name: str, variant: str | None) -> str:
    """``name`` with ``variant`` before its last dot (``model.fp16.safetensors``); ``name``
    itself when ``variant`` is None."""
    if variant is None:
        return name
    stem, _, suffix = name.rpartition(".")
    return f"{stem}.{variant}.{suffix}"


@dataclass(frozen=True, slots=True)
class WeightNames:
    """The weight files a library writes in a model's folder.

    Attributes:
        stem: the safetensors files' stem (``"model"``, ``"diffusion_pytorch_model"``).
        bin_stem: the PyTorch pickles' stem (``"pytorch_model"``, ``"diffusion_pytorch_model"``).
        variant: the variant named in every file name, or None for the plain files.
    """

    stem: str
    bin_stem: str
    variant: str | None = None

    @property
    def single(self) -> str:
        """The one safetensors file of an unsharded model."""
        return add_variant(f"{self.stem}.safetensors", self.variant)

    @property
    def index(self) -> str:
        """The index of a sharded safetensors model."""
        return add_variant(f"{self.stem}.safetensors.index.json", self.variant)

    @property
    def bin_single(self) -> str:
        """The one PyTorch pickle of an unsharded model."""
        return add_variant(f"{self.bin_stem}.bin", self.variant)

    @property
    def bin_index(self) -> str:
        """The index of a sharded PyTorch model."""
        return add_variant(f"{self.bin_stem}.bin.index.json", self.variant)

    def files(self) -> tuple[str, ...]:
        """The names to look for, in the order they are preferred: safetensors before pickles
        (as both libraries choose), one file before an index."""
        return (self.single, self.index, self.bin_single, self.bin_index)

    def with_variant(self, variant: str | None) -> WeightNames:
        """The same library's names for ``variant`` (None: the plain files)."""
        return replace(self, variant=variant)

    def variants_in(self, names: Iterable[str]) -> list[str]:
        """The variants of these weight files that ``names`` (one folder's files) hold, sorted."""
        found: set[str] = set()
        for name in names:
            for plain in self.with_variant(None).files():
                head, _, tail = plain.rpartition(".")
                if name.startswith(f"{head}.") and name.endswith(f".{tail}"):
                    variant = name[len(head) + 1 : len(name) - len(tail) - 1]
                    if _VARIANT.fullmatch(variant) and not _SHARD.search(variant):
                        found.add(variant)
        return sorted(found)


TRANSFORMERS = WeightNames("model", "pytorch_model")
"""transformers' names (and those of every library that saves with it)."""
DIFFUSERS = WeightNames("diffusion_pytorch_model", "diffusion_pytorch_model")
"""diffusers' names (its models: UNets, transformers, VAEs, ControlNets)."""

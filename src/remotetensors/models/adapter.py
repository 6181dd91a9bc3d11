"""PEFT adapters: ``adapter_config.json`` beside ``adapter_model.safetensors``.

PEFT's ``save_pretrained`` writes the adapter's own weights (``...q_proj.lora_A.weight``
``[r, in]``, ``...q_proj.lora_B.weight`` ``[out, r]``, DoRA's magnitudes, full copies of
``modules_to_save``) and a config naming its kind (``peft_type``), rank (``r``), scale
(``lora_alpha``), the modules it adapts (``target_modules``: names, or one regular expression
matched against whole module names) and the model it adapts (``base_model_name_or_path``).
The adapter opens as a model of its own weights (discovery finds it: :mod:`.discovery`);
:class:`Adapter` says what it is. Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import HeaderError, HeaderErrorKind

__all__ = ["ADAPTER_CONFIG", "ADAPTER_WEIGHTS", "Adapter", "parse_adapter_config"]

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


@dataclass(frozen=True, slots=True)
class Adapter:
    """A PEFT adapter, as its ``adapter_config.json`` describes it.

    Attributes:
        kind: PEFT's ``peft_type`` as written (``"LORA"``, ``"LOHA"``, ``"IA3"``, …).
        rank: ``r`` (LoRA's inner dimension; AdaLoRA's ``init_r``), or None when the kind
            has none.
        alpha: ``lora_alpha`` (LoHa and LoKr: ``alpha``): LoRA scales its update by
            ``alpha / rank`` (``alpha / sqrt(rank)`` with ``use_rslora``).
        target_modules: the module names it adapts, or PEFT's one regular expression (a
            string, matched against whole module names).
        base_model: ``base_model_name_or_path``: the model it adapts, as written.
        task_type: PEFT's ``task_type`` (``"CAUSAL_LM"``), when written.
        dora: ``use_dora``: LoRA with a learnt magnitude per output (DoRA).
        rslora: ``use_rslora``: scaled by ``alpha / sqrt(rank)``.
        rank_pattern: (module pattern, rank) where some modules differ from ``rank``.
        modules_to_save: modules stored whole beside the adapter's own weights.
        location: where the config was read.
    """

    kind: str
    rank: int | None
    alpha: float | None
    target_modules: tuple[str, ...] | str
    base_model: str | None
    task_type: str | None = None
    dora: bool = False
    rslora: bool = False
    rank_pattern: tuple[tuple[str, int], ...] = ()
    modules_to_save: tuple[str, ...] = ()
    location: str = ADAPTER_CONFIG

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready summary."""
        targets = self.target_modules
        return {
            "kind": self.kind,
            "rank": self.rank,
            "alpha": self.alpha,
            "target_modules": targets if isinstance(targets, str) else list(targets),
            "base_model": self.base_model,
            "task_type": self.task_type,
            "dora": self.dora,
            "rslora": self.rslora,
            "rank_pattern": dict(self.rank_pattern) if self.rank_pattern else None,
            "modules_to_save": list(self.modules_to_save),
        }


def parse_adapter_config(data: bytes, *, location: str) -> Adapter:
    """An ``adapter_config.json``'s bytes -> :class:`Adapter`. Fields of the wrong type are
    taken as absent (PEFT itself ignores what it does not know).

    Raises:
        HeaderError: INVALID_JSON when it is not a JSON object, or names no ``peft_type``.
    """
    try:
        config = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        detail = f"not JSON ({exc})"
        raise HeaderError(HeaderErrorKind.INVALID_JSON, detail, location=location) from None
    if not isinstance(config, dict):
        got = type(config).__name__
        raise HeaderError(
            HeaderErrorKind.INVALID_JSON, f"expected a JSON object, got {got}", location=location
        )
    kind = config.get("peft_type")
    if not isinstance(kind, str) or not kind:
        raise HeaderError(
            HeaderErrorKind.INVALID_JSON,
            'no "peft_type": not a PEFT adapter config',
            location=location,
        )
    rank = _first(config, int, "r", "init_r")
    alpha = _first(config, (int, float), "lora_alpha", "alpha")
    return Adapter(
        kind=kind,
        rank=rank,
        alpha=float(alpha) if alpha is not None else None,
        target_modules=_names(config.get("target_modules")),
        base_model=_first(config, str, "base_model_name_or_path"),
        task_type=_first(config, str, "task_type"),
        dora=config.get("use_dora") is True,
        rslora=config.get("use_rslora") is True,
        rank_pattern=_ranks(config.get("rank_pattern")),
        modules_to_save=_list_of_names(config.get("modules_to_save")),
        location=location,
    )


def _first(config: Mapping[str, Any], kind: type | tuple[type, ...], *keys: str) -> Any:
    """The first of ``keys`` whose value is of ``kind`` (a bool is no number here)."""
    for key in keys:
        value = config.get(key)
        if isinstance(value, kind) and not isinstance(value, bool):
            return value
    return None


def _names(value: object) -> tuple[str, ...] | str:
    """``target_modules``: PEFT's regular expression as is, else the names it lists."""
    if isinstance(value, str):
        return value
    return _list_of_names(value)


def _list_of_names(value: object) -> tuple[str, ...]:
    """A list of strings, sorted: PEFT keeps these as a set and writes them in any order."""
    if not isinstance(value, list):
        return ()
    return tuple(sorted(v for v in value if isinstance(v, str)))


def _ranks(value: object) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, dict):
        return ()
    return tuple((k, v) for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool))

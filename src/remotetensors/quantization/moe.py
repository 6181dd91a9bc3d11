"""Mixtures of experts: the routed experts in the tensors, how many a token uses, and the
parameters active per token. Pure.

The active count follows one convention (:data:`.values.ACTIVE_CONVENTION`): the total
minus, for each MoE layer, (routed experts - experts used per token) x the parameters of one
routed expert. Embeddings, the head, attention, routers and shared experts all count as
active. This gives
Mixtral's and Qwen's published figures; gpt-oss's card leaves the input embedding out of its
active figure, so ours is larger by the embedding.

Routed experts are found in the tensors, however a family names and stores them:

- one module per expert, ``….experts.<e>.…`` (Mixtral ``block_sparse_moe.experts.<e>.w1``,
  Qwen and DeepSeek ``mlp.experts.<e>.gate_proj``, Jamba ``feed_forward.experts.<e>``);
- fused per layer, ``….experts.<tensor>`` with the experts along one dim (gpt-oss
  ``mlp.experts.gate_up_proj_blocks``, Llama-4 ``feed_forward.experts.gate_up_proj``);
- GGUF, ``blk.<n>.ffn_<gate|up|down>_exps.weight``.

Shared experts (``shared_expert``, ``shared_experts``, GGUF's ``_shexp``) are never routed.
Quantized experts count as the weights they encode (the logical counts of :mod:`.layouts`), and
their bytes as stored, scales included. The numbers of experts come from the config, in each
family's spelling: routed ``num_local_experts`` (Mixtral, gpt-oss, Llama-4), ``num_experts``
(Qwen, Jamba), ``n_routed_experts`` (DeepSeek); used per token ``num_experts_per_tok`` or
``experts_per_token`` (gpt-oss); GGUF's ``expert_count`` and ``expert_used_count`` arrive here
under the first names (:mod:`.gguf`). Which layers are MoE layers is read from the tensors and
checked against the config's own keys (DeepSeek's ``first_k_dense_replace`` and
``moe_layer_freq``, Qwen's ``decoder_sparse_step`` and ``mlp_only_layers``, Llama-4's
``interleave_moe_layer_step`` or ``moe_layers``, Jamba's ``expert_layer_period`` and
``expert_layer_offset``): a disagreement is reported, and the tensors are counted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..index import TensorTable
from .config import text_config
from .kv_layers import positive_int
from .values import ACTIVE_CONVENTION, WEIGHT, ExpertLayer, MixtureOfExperts

if TYPE_CHECKING:
    from ..index import TensorInfo
    from .values import RawLogical

ROUTED_KEYS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
"""Config keys for the routed experts of a MoE layer, in the order they are tried."""
PER_TOKEN_KEYS = ("num_experts_per_tok", "experts_per_token", "moe_top_k")
"""Config keys for the experts each token is routed to."""

_LAYER = re.compile(r"(?:^|\.)(\d+)(?=\.|$)")


def _is_shared(name: str) -> bool:
    return "shared_expert" in name or "_shexp." in name


def _container(name: str) -> tuple[str, int | None] | None:
    """(the experts' container, the expert's number for one module per expert) of a routed
    expert's tensor, or None for any other tensor.

    String searches, not regular expressions: a DeepSeek-V3 checkpoint has 90,000 tensor
    names, nearly all of them experts'.
    """
    if _is_shared(name):
        return None
    at = name.find("experts.")
    while at > 0 and name[at - 1] != ".":  # "local_experts." is another module's name
        at = name.find("experts.", at + 1)
    if at >= 0:
        container, rest = name[: at + 7], name[at + 8 :]
        head, dot, _ = rest.partition(".")
        if dot and head.isascii() and head.isdigit():  # ….experts.<e>.…: one module each
            return container, int(head)
        return (container, None) if rest else None  # ….experts.<tensor>: fused
    end = name.find("_exps.")  # GGUF: blk.<n>.ffn_gate_exps.weight
    if end > 0:
        start = name.rfind(".", 0, end)
        return (name[:start], None) if start > 0 else None
    return None


def _layer_number(container: str) -> int | None:
    numbers = _LAYER.findall(container)
    return int(numbers[-1]) if numbers else None


def find_experts(
    names: Iterable[str],
    tensors: Mapping[str, TensorInfo],
    logical: Mapping[str, RawLogical] | None,
    config: Mapping[str, Any] | None,
    *,
    source: str = "config.json",
) -> tuple[MixtureOfExperts | None, tuple[str, ...]]:
    """The model's mixture of experts, or ``None`` for a dense model; and problems.

    Args:
        names: names of the tensors that may be routed experts (every tensor's, or those a
            cheap search kept).
        tensors: name -> TensorInfo, for the bytes.
        logical: name -> (role, parameters, …) of the true count; ``None`` counts every tensor
            as stored.
        config: ``config.json`` as a dict (a nested ``text_config`` is used), or ``None``.
        source: where the config was read (named in problems).

    Never raises for a bad config: what it cannot say is a problem message.
    """
    found: dict[str, dict[str, Any]] = {}
    shared = False
    # A table's rows give shapes and offsets without building a TensorInfo per tensor (row by
    # row: the table's every row would cost a model of thousands of dense tensors, whose
    # expert names are few or none, a pass over all of them).
    table = tensors if isinstance(tensors, TensorTable) else None
    for name in names:
        where = _container(name)
        if where is None:
            shared = shared or _is_shared(name)
            continue
        container, expert = where
        layer = found.get(container)
        if layer is None:
            layer = found[container] = {
                "numbers": set(),
                "firsts": set(),
                "parameters": 0,
                "nbytes": 0,
            }
        if table is not None:
            _, shape, start, end, _ = table.row(name)
        else:
            info = tensors[name]
            shape, start, end = info.shape, info.start, info.end
        if expert is not None:
            layer["numbers"].add(expert)
        elif len(shape) >= 2:
            layer["firsts"].add(shape[0])
        layer["nbytes"] += end - start
        if logical is None:
            layer["parameters"] += math.prod(shape)
        else:
            role, parameters, *_ = logical[name]
            layer["parameters"] += parameters if role == WEIGHT else 0
    cfg = text_config(config) if config is not None else {}
    configured = positive_int(cfg, *ROUTED_KEYS)
    per_token = positive_int(cfg, *PER_TOKEN_KEYS)
    if not found:
        return _unrecognised(configured, per_token, source)
    problems: list[str] = []
    layers = []
    for container, seen in found.items():
        # Fused experts lie along the leading dim their tensors share, when the config is silent.
        firsts = seen["firsts"]
        count = len(seen["numbers"]) or configured or (firsts.pop() if len(firsts) == 1 else None)
        if count is None:
            problems.append(
                f"{source}: the experts of {container} are fused and no key says how many "
                f"there are ({', '.join(ROUTED_KEYS)}); the active count is unknown"
            )
            continue
        layers.append(
            ExpertLayer(
                container, _layer_number(container), count, seen["parameters"], seen["nbytes"]
            )
        )
    if problems:  # experts there, but not how many: the active count is unknown
        return MixtureOfExperts(configured or 0, per_token, 0, ()), tuple(problems)
    problems += _check(cfg, layers, configured, per_token, source, has_config=config is not None)
    shared_count = positive_int(cfg, "n_shared_experts") or (1 if shared else 0)
    moe = MixtureOfExperts(configured or layers[0].experts, per_token, shared_count, tuple(layers))
    return moe, tuple(problems)


def _unrecognised(
    configured: int | None, per_token: int | None, source: str
) -> tuple[MixtureOfExperts | None, tuple[str, ...]]:
    """No tensor is named as a routed expert: a dense model, unless the config says it routes
    tokens to some of several experts (stored under names we do not know, such as Granite's
    ``block_sparse_moe.input_linear``): then the active count is unknown, and said so."""
    if configured is None or per_token is None or per_token >= configured:
        return None, ()
    problem = (
        f"{source}: says {per_token} of {configured} routed experts per token, but no tensor is "
        "named as a routed expert (….experts.<n>.…, ….experts.<tensor>, GGUF's _exps); "
        "the active count is unknown"
    )
    return MixtureOfExperts(configured, per_token, 0, ()), (problem,)


def _check(
    cfg: Mapping[str, Any],
    layers: list[ExpertLayer],
    configured: int | None,
    per_token: int | None,
    source: str,
    *,
    has_config: bool = True,
) -> list[str]:
    """What the config says that the tensors contradict, or that is missing (``has_config``:
    whether there is a config at all)."""
    problems = []
    if per_token is None and not has_config:
        problems.append(
            f"routed experts are stored ({len(layers)} MoE layer(s)) but there is no {source} "
            "to say how many a token uses; the active count is unknown"
        )
    elif per_token is None:
        problems.append(
            f"{source}: routed experts are stored ({len(layers)} MoE layer(s)) but no key says "
            f"how many a token uses ({', '.join(PER_TOKEN_KEYS)}); the active count is unknown"
        )
    counts = sorted({layer.experts for layer in layers})
    if configured is not None and counts != [configured]:
        problems.append(
            f"{source}: says {configured} routed experts per layer, but the tensors hold "
            f"{', '.join(map(str, counts))}; each layer is counted with the experts it holds"
        )
    if per_token is not None and any(per_token > layer.experts for layer in layers):
        problems.append(
            f"{source}: says {per_token} experts per token, more than a layer holds; those "
            "layers count every expert as active"
        )
    uneven = [layer.name for layer in layers if not layer.even]
    if uneven:
        problems.append(
            f"{source}: the routed experts of {uneven[0]}"
            + (f" and {len(uneven) - 1} more layer(s)" if len(uneven) > 1 else "")
            + " do not divide evenly by their number; the active count is not exact"
        )
    expected = moe_layers(cfg)
    if expected is not None:
        depth = positive_int(cfg, "num_hidden_layers")
        stored = {
            layer.layer
            for layer in layers
            if layer.layer is not None and (depth is None or layer.layer < depth)
        }
        if stored != expected:
            problems.append(
                f"{source}: its keys make layers {_ranges(expected)} MoE layers, but routed "
                f"experts are stored in layers {_ranges(stored)}; the tensors are counted"
            )
    return problems


def moe_layers(cfg: Mapping[str, Any]) -> set[int] | None:
    """The MoE layers the config's keys imply, or ``None`` when it has no such key (every
    layer, or whatever the tensors hold)."""
    depth = positive_int(cfg, "num_hidden_layers")
    if depth is None:
        return None
    listed = cfg.get("moe_layers")
    if isinstance(listed, list) and all(isinstance(i, int) for i in listed):
        return {i for i in listed if 0 <= i < depth}
    if "first_k_dense_replace" in cfg or "moe_layer_freq" in cfg:  # DeepSeek
        first = _int_or(cfg.get("first_k_dense_replace"), 0)
        every = max(_int_or(cfg.get("moe_layer_freq"), 1), 1)
        return {i for i in range(depth) if i >= first and i % every == 0}
    if "decoder_sparse_step" in cfg or "mlp_only_layers" in cfg:  # Qwen2/3-MoE
        step = max(_int_or(cfg.get("decoder_sparse_step"), 1), 1)
        dense = cfg.get("mlp_only_layers")
        skipped = set(dense) if isinstance(dense, list) else set()
        return {i for i in range(depth) if i not in skipped and (i + 1) % step == 0}
    if "interleave_moe_layer_step" in cfg:  # Llama-4: every step-th layer, the last of each
        step = max(_int_or(cfg.get("interleave_moe_layer_step"), 1), 1)
        return set(range(step - 1, depth, step))
    if "expert_layer_period" in cfg:  # Jamba
        period = max(_int_or(cfg.get("expert_layer_period"), 1), 1)
        offset = _int_or(cfg.get("expert_layer_offset"), 0)
        return {i for i in range(depth) if i % period == offset}
    return None


def _int_or(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _ranges(numbers: set[int]) -> str:
    """``"0-2, 5"`` for {0, 1, 2, 5}; ``"none"`` when empty."""
    if not numbers:
        return "none"
    parts: list[str] = []
    ordered = sorted(numbers)
    start = previous = ordered[0]
    for n in [*ordered[1:], None]:
        if n is not None and n == previous + 1:
            previous = n
            continue
        parts.append(f"{start}-{previous}" if previous > start else f"{start}")
        if n is not None:
            start = previous = n
    return ", ".join(parts)


__all__ = [
    "ACTIVE_CONVENTION",
    "PER_TOKEN_KEYS",
    "ROUTED_KEYS",
    "ExpertLayer",
    "MixtureOfExperts",
    "find_experts",
    "moe_layers",
]

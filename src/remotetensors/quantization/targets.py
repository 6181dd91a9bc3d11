"""Which of compressed-tensors' ``config_groups`` a module belongs to. Pure.

A group's ``targets`` name modules three ways: a module name (``"lm_head"``), a pattern
(``"re:.*down_proj$"``, matched as ``re.match`` by :mod:`.patterns`, never evaluated) or a layer
class (``"Linear"``). compressed-tensors (``match_named_modules``, and before it
``find_name_or_class_matches``, which sorts exact names before patterns) and vLLM both try a
module's name before its class, so a recipe that quantizes every ``Linear`` at 4 bits and the
down projections at 8 gives the down projections 8 bits whatever the groups' order in the
config. Within one kind, the config's order decides.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from .config import CompressedGroup
from .patterns import SafePattern, UnsupportedPattern

NAME, PATTERN, CLASS = 0, 1, 2
"""Kinds of target, in the order they are tried."""


def target_kind(target: str) -> int:
    """:data:`NAME`, :data:`PATTERN` (``re:``) or :data:`CLASS` (``Linear``: a capitalised word
    without dots)."""
    if target.startswith("re:"):
        return PATTERN
    if target[:1].isupper() and "." not in target:
        return CLASS
    return NAME


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> SafePattern:
    return SafePattern(pattern)


def target_matches(target: str, module: str, problems: list[str], source: str) -> bool:
    """Whether ``target`` names ``module``. A class name matches every module asked about: the
    caller only asks for modules whose packed tensors say they are quantized linear layers.
    A pattern outside the supported subset matches nothing and adds one problem naming
    ``source``."""
    kind = target_kind(target)
    if kind == PATTERN:
        try:
            return _compiled(target[3:]).match(module)
        except UnsupportedPattern as exc:
            message = f"{source}: target {target!r} not understood ({exc}); not matched"
            if message not in problems:
                problems.append(message)
            return False
    if kind == CLASS:
        return True
    return module == target or module.endswith(f".{target}")


def group_for(
    groups: Sequence[CompressedGroup], module: str, problems: list[str], source: str
) -> CompressedGroup | None:
    """The group that quantizes ``module``: the first whose targets name it, names before
    patterns before classes; ``None`` when none does."""
    for kind in (NAME, PATTERN, CLASS):
        for group in groups:
            for target in group.targets:
                if target_kind(target) == kind and target_matches(target, module, problems, source):
                    return group
    return None

"""The config pattern matcher agrees with ``re.match`` on the subset it takes, in linear time."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remotetensors.quantization.patterns import SafePattern, UnsupportedPattern

PATTERNS = [
    r".*lm_head",
    r"re_not_anchored",
    r".*mlp\.gate$",
    r"model\.layers\.\d+\.mlp\.experts\.\d+\.(gate|up|down)_proj$",
    r".*self_attn\.[qkvo]_proj$",
    r".*shared_experts\..*",
    r"^model\.layers\.(1[0-9]|2[0-3])\.",
    r".*(?:q|k)_proj",
    r"[^.]+\.embed_tokens",
    r"a{2,3}b?",
    r".*\w+_proj",
    r"x*|y+",
    r"(?P<name>model)\..*",
    r"a{2}?",  # lazy counts: exactly two, not "optionally two"
    r"a{2}?b",
    r"a{1,3}?$",
    r"a*?b",
    r"(ab)+?y",
]
NAMES = [
    "lm_head",
    "model.lm_head",
    "model.layers.3.mlp.gate",
    "model.layers.3.mlp.gate_proj",
    "model.layers.0.mlp.experts.17.down_proj",
    "model.layers.0.mlp.shared_experts.up_proj",
    "model.layers.12.self_attn.k_proj",
    "model.layers.25.self_attn.o_proj",
    "model.embed_tokens",
    "aab",
    "aaab",
    "ab",
    "",
    "yyy",
    "a",
    "aa",
    "b",
    "ababy",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_agrees_with_re_match(pattern: str) -> None:
    compiled = SafePattern(pattern)
    for name in NAMES:
        assert compiled.match(name) == bool(re.match(pattern, name)), (pattern, name)


@given(st.text(alphabet="ab._0123", max_size=12))
def test_agrees_on_generated_names(name: str) -> None:
    for pattern in (r"a*b", r"(a|b)*\.\d+", r"[ab]+_?[0-9]{1,2}$", r".*\.0"):
        assert SafePattern(pattern).match(name) == bool(re.match(pattern, name))


def test_hostile_pattern_runs_in_linear_time() -> None:
    pattern = "(a*)*" * 5 + "b"
    name = "a" * 5000
    started = time.perf_counter()
    assert SafePattern(pattern).match(name) is False
    assert time.perf_counter() - started < 5  # a backtracking engine would never return


@pytest.mark.parametrize(
    "pattern",
    [
        *(r"(a)\1", r"(?=x)", r"(?i)a", "a" * 2000, r"a{1000}", "(", r"[ab", "*a"),
        *(r"a**", r"a{2}*", r"a*+", r"a?{2}", r"a*??"),  # a repeat of a repeat
    ],
)
def test_outside_the_subset_is_refused(pattern: str) -> None:
    with pytest.raises(UnsupportedPattern):
        SafePattern(pattern)

"""Text and HTML views: human numbers, module grouping, and large models kept readable."""

from __future__ import annotations

import re

from remotetensors.display import (
    MAX_GROUPS_SHOWN,
    html_view,
    human_bytes,
    human_count,
    module_of,
    plain_table,
)
from remotetensors.index import FileIndex, ModelIndex, TensorInfo


def infos(count: int, *, per_layer: int = 4) -> list[TensorInfo]:
    result = []
    offset = 8
    for i in range(count):
        name = f"model.layers.{i // per_layer}.w{i % per_layer}.weight"
        result.append(TensorInfo(name, "BF16", (16, 8), offset, offset + 256, "a.safetensors"))
        offset += 256
    return result


def test_human_numbers() -> None:
    assert human_count(22_700_000) == "22.7M"
    assert human_count(999) == "999"
    assert human_count(70_553_706_496) == "70.6B"
    assert human_bytes(45_400_000) == "45.4 MB"
    assert human_bytes(12) == "12 B"


def test_module_grouping() -> None:
    assert module_of("model.layers.12.self_attn.q_proj.weight") == "model.layers.12"
    assert module_of("model.embed_tokens.weight") == "model.embed_tokens"
    assert module_of("lm_head") == "lm_head"


def test_plain_table_aligns_columns() -> None:
    text = plain_table(["a", "bb"], [["xxx", "y"], ["z", "wwww"]])
    assert text.splitlines() == ["a    bb", "xxx  y", "z    wwww"]


def test_html_of_a_sharded_model_groups_by_module() -> None:
    tensors = {i.name: i for i in infos(8)}
    file = FileIndex(tensors, None, 0, 8 + 8 * 256)
    model = ModelIndex({"a.safetensors": file}, tensors, {"total_size": 2048})
    html = model._repr_html_()
    assert html.count("<details>") == 2  # model.layers.0 and model.layers.1
    assert "model.layers.1" in html
    assert "a.safetensors" in html
    assert "BF16 1.0K" in html


def test_html_of_10000_tensors_stays_small() -> None:
    many = infos(10_000)
    file = FileIndex({i.name: i for i in many}, None, 0, 8 + 10_000 * 256)
    html = file._repr_html_()
    assert html == html_view("safetensors file", many)
    assert html.count("<details>") == MAX_GROUPS_SHOWN
    assert "more groups" in html
    assert len(html) < 200_000
    assert re.search(r"10,000 tensors", html)

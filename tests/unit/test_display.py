"""Text and HTML views: human numbers, natural order, folded trees of modules, quantized marks,
and views whose size does not grow with the number of identical layers."""

from __future__ import annotations

import math
import re

from remotetensors.index import FileIndex, ModelIndex, TensorInfo, TensorTable
from remotetensors.quantization import count_parameters
from remotetensors.views.display import (
    html_view,
    human_bytes,
    human_count,
    plain_table,
    tree_html,
    tree_text,
)
from remotetensors.views.tree import (
    Leaf,
    Section,
    build_tree,
    natural_key,
    natural_sorted,
    ranges_label,
    tree_as_dict,
)
from tests import quantized

Shape = tuple[int, ...]


class Writer:
    """TensorInfos laid out back to back, as a header would describe them."""

    def __init__(self) -> None:
        self.offset = 8
        self.infos: list[TensorInfo] = []

    def add(self, name: str, shape: Shape, dtype: str = "BF16", file: str = "a") -> None:
        nbytes = math.prod(shape) * (4 if dtype in ("I32", "F32") else 2)
        self.infos.append(TensorInfo(name, dtype, shape, self.offset, self.offset + nbytes, file))
        self.offset += nbytes


def decoder(
    layers: int, *, moe_from: int | None = None, last_without_mlp: bool = False
) -> list[TensorInfo]:
    """A Llama-like decoder: nine tensors per layer; optionally routed experts from layer
    ``moe_from`` on, and a last layer without an MLP."""
    w = Writer()
    w.add("model.embed_tokens.weight", (512, 64))
    for i in range(layers):
        p = f"model.layers.{i}."
        w.add(p + "input_layernorm.weight", (64,))
        w.add(p + "post_attention_layernorm.weight", (64,))
        for proj in ("q", "k", "v", "o"):
            w.add(p + f"self_attn.{proj}_proj.weight", (64, 64))
        if last_without_mlp and i == layers - 1:
            continue
        if moe_from is not None and i >= moe_from:
            w.add(p + "mlp.gate.weight", (8, 64))
            for e in range(8):
                for proj in ("gate", "up", "down"):
                    shape = (32, 64) if proj != "down" else (64, 32)
                    w.add(p + f"mlp.experts.{e}.{proj}_proj.weight", shape)
        else:
            for proj in ("gate", "up", "down"):
                w.add(p + f"mlp.{proj}_proj.weight", (128, 64) if proj != "down" else (64, 128))
    w.add("model.norm.weight", (64,))
    w.add("lm_head.weight", (512, 64))
    return w.infos


def sections(items: tuple[Leaf | Section, ...]) -> list[Section]:
    return [i for i in items if isinstance(i, Section)]


def test_human_numbers() -> None:
    assert human_count(22_700_000) == "22.7M"
    assert human_count(999) == "999"
    assert human_count(70_553_706_496) == "70.6B"
    assert human_bytes(45_400_000) == "45.4 MB"
    assert human_bytes(12) == "12 B"
    # A value that rounds up to a thousand of a unit is shown in the next one.
    assert human_count(999_960_000) == "1.0B"
    assert human_count(999_949) == "999.9K"
    assert human_count(999_950) == "1.0M"
    assert human_count(999_999_999_999_999) == "1000.0T"  # no unit above T
    assert human_bytes(999_999) == "1.0 MB"
    assert human_bytes(999) == "999 B"


def test_plain_table_aligns_columns() -> None:
    text = plain_table(["a", "bb"], [["xxx", "y"], ["z", "wwww"]])
    assert text.splitlines() == ["a    bb", "xxx  y", "z    wwww"]


def test_natural_order() -> None:
    names = [f"model.layers.{i}.w" for i in (10, 2, 1, 0, 100, 11, 9)]
    assert natural_sorted(names) == [f"model.layers.{i}.w" for i in (0, 1, 2, 9, 10, 11, 100)]
    assert natural_key("a2b") < natural_key("a10")  # mixed text and numbers still compare
    assert natural_sorted(["x10", "x9", "y", "x"]) == ["x", "x9", "x10", "y"]
    assert ranges_label([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"


def test_identical_layers_fold_into_one_section() -> None:
    infos = decoder(32)
    tree = build_tree(infos)
    (layers,) = sections(tree.items)
    assert layers.label == "model.layers.[0-31]"
    assert layers.count == 32
    assert layers.tensors == 9
    assert layers.parameters == 2 * 64 + 4 * 64 * 64 + 3 * 128 * 64
    # The block lists its tensors by relative name, in natural order.
    names = [i.name for i in layers.items if isinstance(i, Leaf)]
    assert names == natural_sorted(names)
    assert "self_attn.q_proj.weight" in names
    assert tree.parameters == sum(i.num_elements for i in infos)
    text = tree_text("m", tree)
    assert f"32 \u00d7 (9 tensors, {human_count(layers.parameters)} parameters each)" in text
    # Rows outside the block stay in natural order around it.
    top = [i.name if isinstance(i, Leaf) else i.label for i in tree.items]
    assert top == [
        "lm_head.weight",
        "model.embed_tokens.weight",
        "model.layers.[0-31]",
        "model.norm.weight",
    ]


def test_html_of_64_layers_is_not_larger_than_of_2() -> None:
    small = html_view("m", decoder(2))
    large = html_view("m", decoder(64))
    # Only the numbers in the labels and totals differ.
    assert abs(len(large) - len(small)) < 200
    assert "64 \u00d7 (9 tensors" in large
    assert "model.layers.[0-63]" in large
    assert large.count("<details") == small.count("<details")


def test_irregular_blocks_are_shown_apart() -> None:
    # A first dense layer, then routed experts; the experts fold inside their block.
    tree = build_tree(decoder(12, moe_from=1))
    dense, moe = sections(tree.items)
    assert (dense.label, dense.count) == ("model.layers.0", 1)
    assert (moe.label, moe.count) == ("model.layers.[1-11]", 11)
    (experts,) = sections(moe.items)
    assert experts.label == "mlp.experts.[0-7]"
    assert experts.count == 8
    assert experts.tensors == 3
    html = tree_html("moe", tree)
    assert "11 \u00d7 (" in html
    assert "8 \u00d7 (3 tensors" in html
    assert html.index("model.layers.0") < html.index("model.layers.[1-11]")
    # A last layer without an MLP.
    tree = build_tree(decoder(8, last_without_mlp=True))
    assert [(s.label, s.count, s.tensors) for s in sections(tree.items)] == [
        ("model.layers.[0-6]", 7, 9),
        ("model.layers.7", 1, 6),
    ]


def test_200_distinct_layers_are_listed_in_number_order() -> None:
    w = Writer()
    for i in range(200):
        w.add(f"model.layers.{i}.weight", (i + 1, 4))  # every layer differs
    tree = build_tree(w.infos)
    labels = [s.label for s in sections(tree.items)]
    assert labels == [f"model.layers.{i}" for i in range(200)]
    html = tree_html("m", tree)
    shown = re.findall(r"model\.layers\.(\d+)<", html)
    assert [int(x) for x in shown[:12]] == list(range(12))  # 2-9 right after 0 and 1


def test_names_with_non_ascii_digits_are_names_not_numbers() -> None:
    w = Writer()
    for key in ("0", "1", "²", "٣", "10"):
        w.add(f"model.layers.{key}.weight", (4, 4))
    tree = build_tree(w.infos)  # "²".isdigit() is true: int("²") raised here
    text = tree_text("m", tree)
    assert "model.layers.².weight" in text
    assert "model.layers.٣.weight" in text
    assert [s.label for s in sections(tree.items)] == ["model.layers.[0-1,10]"]


def test_names_without_dots_read_as_one_table() -> None:
    w = Writer()
    for name in ("embed", "w10", "w2", "w1", "bias"):
        w.add(name, (4, 4))
    tree = build_tree(w.infos)
    assert all(isinstance(i, Leaf) for i in tree.items)
    assert [i.name for i in tree.items if isinstance(i, Leaf)] == [
        "bias",
        "embed",
        "w1",
        "w2",
        "w10",
    ]
    html = tree_html("flat", tree)
    assert html.count("<table") == 1
    assert html.count("<th ") == 5  # one header row


def test_html_uses_inline_styles_only() -> None:
    html = html_view("m", decoder(4, moe_from=1))
    assert "<script" not in html
    assert "<style" not in html
    assert "class=" not in html.replace('class="remotetensors"', "")
    # Text inherits the theme's colour; nothing sets a page background.
    assert "color:inherit" in html
    assert "background:#" not in html
    assert "background:white" not in html


def test_a_quantized_model_marks_packed_and_auxiliary_tensors() -> None:
    arch = quantized.Arch()
    spec, config = quantized.gptq(arch, bits=4)
    w = Writer()
    for name, (dtype, shape) in spec.items():
        w.add(name, shape, dtype)
    tensors = {i.name: i for i in w.infos}
    count = count_parameters(tensors, config)
    tree = build_tree(w.infos, count.tensors)
    assert tree.parameters == quantized.float_count(arch) == count.total
    assert tree.stored_elements == sum(i.num_elements for i in w.infos)
    assert tree.auxiliary == len(count.auxiliary) > 0
    assert tree.packed == len(count.unpacked) > 0
    (layers,) = sections(tree.items)
    marks = {i.name: (i.role, i.packing) for i in layers.items if isinstance(i, Leaf)}
    assert marks["self_attn.q_proj.qweight"][1] is not None
    assert marks["self_attn.q_proj.scales"][0] == "auxiliary"
    html = tree_html("gptq", tree)
    assert f"{human_count(count.total)} parameters ({count.total:,})" in html
    assert "elements as stored" in html
    assert ">packed<" in html
    assert ">aux<" in html
    text = tree_text("gptq", tree)
    assert "[aux]" in text
    assert "[packed]" in text


def test_views_of_indexes_and_json() -> None:
    infos = decoder(3)
    tensors = TensorTable.of({i.name: i for i in infos})
    file = FileIndex(tensors, None, 0, infos[-1].end)
    model = ModelIndex({"a": file}, tensors, None)
    assert "model.layers.[0-2]" in file._repr_html_()
    assert "model.layers.[0-2]" in model._repr_html_()
    data = tree_as_dict(build_tree(infos))
    assert data["tensors"] == len(infos)
    items = data["items"]
    assert isinstance(items, list)
    folded = [i for i in items if "section" in i]
    assert folded[0]["count"] == 3
    assert folded[0]["tensors_each"] == 9
    card = infos[1]._repr_html_()
    for part in ("model.layers.0.input_layernorm.weight", "BF16", "[64]", "byte range", "shard"):
        assert part in card

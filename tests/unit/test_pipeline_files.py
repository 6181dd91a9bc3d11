"""What a pipeline's and an adapter's small files say, without IO: ``model_index.json`` as
diffusers writes it, weight file names with variants as transformers and diffusers name them,
and ``adapter_config.json`` as PEFT writes it."""

from __future__ import annotations

import json

import pytest

from remotetensors.errors import HeaderError
from remotetensors.formats.model_index import parse_model_index
from remotetensors.models.adapter import parse_adapter_config
from remotetensors.models.weight_names import DIFFUSERS, TRANSFORMERS, add_variant
from tests.pipelines import MODEL_INDEX


def test_model_index_names_each_component_and_which_have_weights() -> None:
    manifest = parse_model_index(json.dumps(MODEL_INDEX).encode(), location="x/model_index.json")
    assert manifest.class_name == "StableDiffusionXLPipeline"
    assert manifest.diffusers_version == "0.30.0"
    # Every [library, class] entry, in the file's order; plain options are no component.
    listed = [k for k, v in MODEL_INDEX.items() if isinstance(v, list)]
    assert [c.name for c in manifest.components] == listed
    assert [c.name for c in manifest.weighted] == [
        "text_encoder",
        "text_encoder_2",
        "unet",
        "vae",
    ]
    assert [c.name for c in manifest.without_weights] == ["scheduler", "tokenizer", "tokenizer_2"]
    assert [c.name for c in manifest.not_saved] == ["feature_extractor", "image_encoder"]
    unet = next(c for c in manifest.components if c.name == "unet")
    assert (unet.library, unet.class_name) == ("diffusers", "UNet2DConditionModel")


@pytest.mark.parametrize(
    ("text", "seen"),
    [
        (b"{", "not JSON"),
        (b"[]", "expected a JSON object, got list"),
        (b'{"unet": ["diffusers", "UNet2DConditionModel"]}', "_class_name"),
        (b'{"_class_name": "P", "unet": ["diffusers"]}', "component 'unet'"),
        (b'{"_class_name": "P", "unet": [1, 2]}', "component 'unet'"),
        (b'{"_class_name": "P", "..": ["diffusers", "UNet2DConditionModel"]}', "not a folder"),
        (b'{"_class_name": "P", "a/b": ["diffusers", "UNet2DConditionModel"]}', "not a folder"),
    ],
)
def test_a_malformed_model_index_is_a_header_error_naming_it(text: bytes, seen: str) -> None:
    with pytest.raises(HeaderError, match=seen) as caught:
        parse_model_index(text, location="hf://org/p/model_index.json")
    assert str(caught.value).startswith("hf://org/p/model_index.json: ")


@pytest.mark.parametrize(
    "name",
    [
        "model.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin",
        "diffusion_pytorch_model.safetensors.index.json",
    ],
)
@pytest.mark.parametrize("variant", [None, "fp16", "non_ema"])
def test_variant_names_follow_the_libraries_rule(name: str, variant: str | None) -> None:
    from transformers.modeling_utils import _add_variant

    assert add_variant(name, variant) == _add_variant(name, variant)


def test_weight_names_of_each_library_and_the_variants_a_folder_holds() -> None:
    fp16 = DIFFUSERS.with_variant("fp16")
    assert fp16.files() == (
        "diffusion_pytorch_model.fp16.safetensors",
        "diffusion_pytorch_model.safetensors.index.fp16.json",
        "diffusion_pytorch_model.fp16.bin",
        "diffusion_pytorch_model.bin.index.fp16.json",
    )
    assert TRANSFORMERS.files()[::2] == ("model.safetensors", "pytorch_model.bin")
    folder = [
        "config.json",
        "model.safetensors",
        "model.fp16-00001-of-00002.safetensors",  # a shard of fp16, not a variant of its own
        "model.safetensors.index.fp16.json",
        "pytorch_model.ema.bin",
        "diffusion_pytorch_model.bf16.safetensors",
    ]
    assert TRANSFORMERS.variants_in(folder) == ["ema", "fp16"]
    assert DIFFUSERS.variants_in(folder) == ["bf16"]


def lora_config(**changes: object) -> bytes:
    config: dict[str, object] = {
        "peft_type": "LORA",
        "r": 16,
        "lora_alpha": 32,
        "target_modules": ["v_proj", "q_proj"],
        "base_model_name_or_path": "org/base",
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": False,
        "rank_pattern": {},
        "modules_to_save": None,
    }
    config.update(changes)
    return json.dumps(config).encode()


def test_an_adapter_config_says_kind_rank_alpha_targets_and_base_model() -> None:
    adapter = parse_adapter_config(lora_config(), location="a/adapter_config.json")
    assert adapter.as_dict() == {
        "kind": "LORA",
        "rank": 16,
        "alpha": 32.0,
        "target_modules": ["q_proj", "v_proj"],
        "base_model": "org/base",
        "task_type": "CAUSAL_LM",
        "dora": False,
        "rslora": False,
        "rank_pattern": None,
        "modules_to_save": [],
    }
    regex = parse_adapter_config(
        lora_config(target_modules=r".*\.(q|v)_proj", use_dora=True, rank_pattern={"q": 8}),
        location="a/adapter_config.json",
    )
    assert regex.target_modules == r".*\.(q|v)_proj"
    assert regex.dora
    assert regex.rank_pattern == (("q", 8),)
    # Fields of the wrong type are absent, as PEFT would not use them.
    odd = parse_adapter_config(lora_config(r="16", lora_alpha=True), location="a.json")
    assert (odd.rank, odd.alpha) == (None, None)


@pytest.mark.parametrize(
    ("text", "seen"),
    [(b"not json", "not JSON"), (b"[1]", "got list"), (b'{"r": 8}', "peft_type")],
)
def test_a_malformed_adapter_config_is_a_header_error_naming_it(text: bytes, seen: str) -> None:
    with pytest.raises(HeaderError, match=seen) as caught:
        parse_adapter_config(text, location="hf://org/lora/adapter_config.json")
    assert str(caught.value).startswith("hf://org/lora/adapter_config.json: ")

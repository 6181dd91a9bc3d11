"""Small diffusers pipelines and PEFT adapters in the layouts their libraries write.

A pipeline (:func:`sdxl_pipeline`) is laid out as ``DiffusionPipeline.save_pretrained`` lays it
out: ``model_index.json`` at the root (``{"_class_name": ..., "unet": ["diffusers",
"UNet2DConditionModel"], ...}``), and a subfolder per component. The text encoders are real
transformers models saved by transformers' own ``save_pretrained`` (one file, and one sharded
with its own ``model.safetensors.index.json``), each also as the ``fp16`` variant. diffusers is
not installed here, so its models are written with the reference safetensors writer under
diffusers' names (``diffusion_pytorch_model.safetensors``; the VAE sharded as diffusers shards:
``diffusion_pytorch_model-00001-of-00002.safetensors`` and
``diffusion_pytorch_model.safetensors.index.json``; the ``fp16`` variants as
``diffusion_pytorch_model.fp16.safetensors`` and
``diffusion_pytorch_model.safetensors.index.fp16.json``). Schedulers and tokenizers are
configuration files only.

An adapter (:func:`lora_adapter`) is laid out as PEFT's ``save_pretrained`` writes a LoRA:
``adapter_config.json`` and ``adapter_model.safetensors`` with ``lora_A`` ``[r, in]`` and
``lora_B`` ``[out, r]`` per adapted module, named after the base model's modules.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load, save

WITHOUT_WEIGHTS = ("scheduler", "tokenizer", "tokenizer_2")

MODEL_INDEX = {
    "_class_name": "StableDiffusionXLPipeline",
    "_diffusers_version": "0.30.0",
    "feature_extractor": [None, None],
    "force_zeros_for_empty_prompt": True,
    "image_encoder": [None, None],
    "scheduler": ["diffusers", "EulerDiscreteScheduler"],
    "text_encoder": ["transformers", "CLIPTextModel"],
    "text_encoder_2": ["transformers", "CLIPTextModelWithProjection"],
    "tokenizer": ["transformers", "CLIPTokenizer"],
    "tokenizer_2": ["transformers", "CLIPTokenizer"],
    "unet": ["diffusers", "UNet2DConditionModel"],
    "vae": ["diffusers", "AutoencoderKL"],
}
WEIGHTED = ("text_encoder", "text_encoder_2", "unet", "vae")


def _unet() -> dict[str, np.ndarray]:
    """A few tensors named and shaped as a small UNet2DConditionModel's."""
    rng = np.random.default_rng(1)
    shapes = {
        "conv_in.weight": (32, 4, 3, 3),
        "conv_in.bias": (32,),
        "time_embedding.linear_1.weight": (128, 32),
        "time_embedding.linear_1.bias": (128,),
        "down_blocks.0.resnets.0.conv1.weight": (32, 32, 3, 3),
        "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight": (32, 16),
        "mid_block.resnets.0.norm1.weight": (32,),
        "conv_out.weight": (4, 32, 3, 3),
        "conv_out.bias": (4,),
    }
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


def _vae() -> dict[str, np.ndarray]:
    """A few tensors named and shaped as a small AutoencoderKL's."""
    rng = np.random.default_rng(2)
    shapes = {
        "encoder.conv_in.weight": (32, 3, 3, 3),
        "encoder.conv_in.bias": (32,),
        "encoder.conv_out.weight": (8, 32, 3, 3),
        "quant_conv.weight": (8, 8, 1, 1),
        "post_quant_conv.weight": (4, 4, 1, 1),
        "decoder.conv_in.weight": (32, 4, 3, 3),
        "decoder.conv_out.weight": (3, 32, 3, 3),
        "decoder.conv_out.bias": (3,),
    }
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}


def _diffusers_single(folder: str, tensors: dict[str, np.ndarray]) -> dict[str, bytes]:
    """One file, and its fp16 variant, as ``ModelMixin.save_pretrained`` names them."""
    half = {n: t.astype(np.float16) for n, t in tensors.items()}
    return {
        f"{folder}/diffusion_pytorch_model.safetensors": save(tensors, {"format": "pt"}),
        f"{folder}/diffusion_pytorch_model.fp16.safetensors": save(half, {"format": "pt"}),
    }


def _diffusers_sharded(folder: str, tensors: dict[str, np.ndarray]) -> dict[str, bytes]:
    """Two shards and their index, and the same as the fp16 variant, as diffusers names them
    (the variant before the last dot: ``...safetensors.index.fp16.json``)."""
    names = sorted(tensors)
    halves = (names[: len(names) // 2], names[len(names) // 2 :])
    files: dict[str, bytes] = {}
    for variant, dtype in ((None, np.float32), ("fp16", np.float16)):
        middle = f".{variant}" if variant else ""
        weight_map: dict[str, str] = {}
        total = 0
        for i, part in enumerate(halves, start=1):
            shard = f"diffusion_pytorch_model{middle}-{i:05d}-of-00002.safetensors"
            chunk = {n: tensors[n].astype(dtype) for n in part}
            files[f"{folder}/{shard}"] = save(chunk, {"format": "pt"})
            weight_map.update(dict.fromkeys(part, shard))
            total += sum(t.nbytes for t in chunk.values())
        index_name = f"diffusion_pytorch_model.safetensors.index{middle}.json"
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        files[f"{folder}/{index_name}"] = json.dumps(index, indent=2).encode()
    return files


def _text_encoders(root: Path) -> None:
    """Two CLIP text encoders, saved by transformers (the second in shards), each also as
    the fp16 variant."""
    import torch
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    config = CLIPTextConfig(
        vocab_size=100,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=2,
        max_position_embeddings=16,
        projection_dim=8,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    torch.manual_seed(0)
    for folder, cls, shard in (
        ("text_encoder", CLIPTextModel, "50GB"),
        ("text_encoder_2", CLIPTextModelWithProjection, "8KB"),
    ):
        model = cls(copy.deepcopy(config))  # saving in fp16 sets the config's dtype
        model.save_pretrained(root / folder, max_shard_size=shard)
        half = model.half()  # type: ignore[no-untyped-call]
        half.save_pretrained(root / folder, max_shard_size=shard, variant="fp16")


def sdxl_pipeline(root: Path) -> dict[str, bytes]:
    """An SDXL-shaped pipeline written under ``root``; returns every file (relative path ->
    bytes), for serving it elsewhere (a hub repo, an HTTP server)."""
    _text_encoders(root)
    files = {
        "model_index.json": json.dumps(MODEL_INDEX, indent=2).encode(),
        "scheduler/scheduler_config.json": json.dumps(
            {"_class_name": "EulerDiscreteScheduler", "num_train_timesteps": 1000}
        ).encode(),
        "unet/config.json": json.dumps({"_class_name": "UNet2DConditionModel"}).encode(),
        "vae/config.json": json.dumps({"_class_name": "AutoencoderKL"}).encode(),
        **_diffusers_single("unet", _unet()),
        **_diffusers_sharded("vae", _vae()),
    }
    for tokenizer in ("tokenizer", "tokenizer_2"):
        files[f"{tokenizer}/vocab.json"] = json.dumps({"a": 0, "</w>": 1}).encode()
        files[f"{tokenizer}/merges.txt"] = b"#version: 0.2\n"
        files[f"{tokenizer}/tokenizer_config.json"] = b'{"model_max_length": 77}'
    for relative, data in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_bytes(data)
    return {
        str(path.relative_to(root)): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def weight_files(files: dict[str, bytes], component: str, variant: str | None = None) -> list[str]:
    """The weight files a component's model is made of (its one file, or the shards its index
    names), found as the libraries' loaders find them: the oracle's view, from the names."""
    middle = f".{variant}" if variant else ""
    for stem in ("model", "diffusion_pytorch_model"):
        single = f"{component}/{stem}{middle}.safetensors"
        if single in files:
            return [single]
        index = f"{component}/{stem}.safetensors.index{middle}.json"
        if index in files:
            shards = json.loads(files[index])["weight_map"].values()
            return sorted({f"{component}/{shard}" for shard in shards})
    raise KeyError(f"no weights for {component} ({variant})")


def tensors_of(files: dict[str, bytes], names: list[str]) -> dict[str, np.ndarray]:
    """Every tensor of the files ``names``, read by the reference safetensors reader."""
    tensors: dict[str, np.ndarray] = {}
    for name in names:
        tensors.update(load(files[name]))
    return tensors


def count_of(files: dict[str, bytes], names: list[str]) -> int:
    """The sum of the elements of every tensor of the files ``names``."""
    return sum(math.prod(t.shape) for t in tensors_of(files, names).values())


def lora_adapter(
    base: Any, *, rank: int, alpha: int, targets: tuple[str, ...], base_name: str
) -> tuple[dict[str, bytes], int]:
    """A LoRA on the torch model ``base`` as PEFT saves one; returns (files, the parameters
    it adds: ``rank * (in + out)`` for every adapted ``nn.Linear``, from the base model)."""
    import torch

    rng = np.random.default_rng(3)
    tensors: dict[str, np.ndarray] = {}
    added = 0
    for module_name, module in base.named_modules():
        if not isinstance(module, torch.nn.Linear) or module_name.split(".")[-1] not in targets:
            continue
        prefix = f"base_model.model.{module_name}"
        a = rng.standard_normal((rank, module.in_features)).astype(np.float32)
        b = np.zeros((module.out_features, rank), np.float32)
        tensors[f"{prefix}.lora_A.weight"] = a
        tensors[f"{prefix}.lora_B.weight"] = b
        added += rank * (module.in_features + module.out_features)
    config: dict[str, Any] = {
        "alpha_pattern": {},
        "auto_mapping": None,
        "base_model_name_or_path": base_name,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "layers_pattern": None,
        "layers_to_transform": None,
        "lora_alpha": alpha,
        "lora_dropout": 0.05,
        "modules_to_save": None,
        "peft_type": "LORA",
        "r": rank,
        "rank_pattern": {},
        "revision": None,
        "target_modules": list(reversed(targets)),
        "task_type": "CAUSAL_LM",
        "use_dora": False,
        "use_rslora": False,
    }
    files = {
        "adapter_config.json": json.dumps(config, indent=2).encode(),
        "adapter_model.safetensors": save(tensors, {"format": "pt"}),
        "README.md": b"---\nlibrary_name: peft\n---\n",
    }
    return files, added

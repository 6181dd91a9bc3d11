"""A diffusers pipeline's ``model_index.json``, validated. Sans-IO.

diffusers' ``DiffusionPipeline.save_pretrained`` writes, at the root of the repo, one entry per
component (each saved in a subfolder of its name) as ``[library, class]``, beside keys of its
own that start with ``_`` and the pipeline's plain options::

    {"_class_name": "StableDiffusionPipeline", "_diffusers_version": "0.30.0",
     "unet": ["diffusers", "UNet2DConditionModel"], "vae": ["diffusers", "AutoencoderKL"],
     "text_encoder": ["transformers", "CLIPTextModel"],
     "scheduler": ["diffusers", "PNDMScheduler"], "tokenizer": ["transformers", "CLIPTokenizer"],
     "safety_checker": [null, null], "requires_safety_checker": false}

``[null, null]`` is a component the pipeline was saved without. Schedulers, tokenizers,
processors and feature extractors are configuration only: they have no weights.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..errors import HeaderError, HeaderErrorKind

__all__ = ["PIPELINE_FILE", "PipelineComponent", "PipelineManifest", "parse_model_index"]

PIPELINE_FILE = "model_index.json"

# Class-name endings of components that hold no weights: ``PNDMScheduler``,
# ``FlowMatchEulerDiscreteScheduler``, ``CLIPTokenizer``, ``T5TokenizerFast``,
# ``CLIPImageProcessor``, ``AutoProcessor``, ``CLIPFeatureExtractor``.
_WITHOUT_WEIGHTS = ("Scheduler", "Tokenizer", "TokenizerFast", "Processor", "FeatureExtractor")


@dataclass(frozen=True, slots=True)
class PipelineComponent:
    """One component as ``model_index.json`` names it.

    Attributes:
        name: the component, also its subfolder (``"unet"``, ``"text_encoder_2"``).
        library: the library of its class (``"diffusers"``, ``"transformers"``), or None when
            the pipeline was saved without it.
        class_name: its class (``"UNet2DConditionModel"``), or None likewise.
    """

    name: str
    library: str | None
    class_name: str | None

    @property
    def weighted(self) -> bool:
        """Whether it is a model with weights: present, and not a scheduler, tokenizer,
        processor or feature extractor."""
        if self.library is None or self.class_name is None:
            return False
        return not self.class_name.endswith(_WITHOUT_WEIGHTS)


@dataclass(frozen=True, slots=True)
class PipelineManifest:
    """What ``model_index.json`` says.

    Attributes:
        class_name: the pipeline's class (``"StableDiffusionPipeline"``).
        diffusers_version: the diffusers that saved it, when written.
        components: every component, in the file's order.
        location: where the file was read (named in messages).
    """

    class_name: str
    diffusers_version: str | None
    components: tuple[PipelineComponent, ...]
    location: str

    @property
    def weighted(self) -> tuple[PipelineComponent, ...]:
        """The components with weights, in the file's order."""
        return tuple(c for c in self.components if c.weighted)

    @property
    def without_weights(self) -> tuple[PipelineComponent, ...]:
        """The components saved without weights (schedulers, tokenizers, processors), in
        order."""
        return tuple(c for c in self.components if c.class_name and not c.weighted)

    @property
    def not_saved(self) -> tuple[PipelineComponent, ...]:
        """The components the pipeline was saved without (``[null, null]``), in order."""
        return tuple(c for c in self.components if not c.class_name)


def parse_model_index(data: bytes, *, location: str) -> PipelineManifest:
    """Parse ``model_index.json``'s bytes.

    Raises:
        HeaderError: INVALID_JSON when it is not a JSON object with a ``_class_name`` string,
            or a component's entry is not ``[library, class]`` (strings or nulls), or a
            component's name could not be a folder of the repo.
    """
    try:
        parsed = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _error(f"not JSON ({exc})", location) from None
    if not isinstance(parsed, dict):
        raise _error(f"expected a JSON object, got {type(parsed).__name__}", location)
    class_name = parsed.get("_class_name")
    if not isinstance(class_name, str) or not class_name:
        raise _error('no "_class_name" string: not a diffusers pipeline', location)
    version = parsed.get("_diffusers_version")
    components = tuple(
        _component(name, entry, location)
        for name, entry in parsed.items()
        if not name.startswith("_") and isinstance(entry, list)
    )
    return PipelineManifest(
        class_name, version if isinstance(version, str) else None, components, location
    )


def _component(name: str, entry: list[object], location: str) -> PipelineComponent:
    """One ``"name": [library, class]`` entry (the pipeline's plain options are not lists)."""
    if len(entry) != 2 or not all(v is None or isinstance(v, str) for v in entry):
        raise _error(
            f"component {name!r}: expected [library, class] (two strings or nulls), got "
            f"{json.dumps(entry)[:200]}",
            location,
        )
    # The name is a folder of the repo that the reader opens: nothing that leaves the pipeline.
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        raise _error(f"component {name!r}: not a folder name", location)
    library, class_name = entry
    assert library is None or isinstance(library, str)
    assert class_name is None or isinstance(class_name, str)
    return PipelineComponent(name, library, class_name)


def _error(what: str, location: str) -> HeaderError:
    return HeaderError(HeaderErrorKind.INVALID_JSON, what, location=location)

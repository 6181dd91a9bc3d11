"""What ``params`` and ``info`` add for a diffusers pipeline (its components) and for a PEFT
adapter (what it adapts): JSON-ready data first, text from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .display import human_bytes, human_count

if TYPE_CHECKING:
    from ..models.sync import Model

# PEFT's PeftType values as people write them; any other is shown as written.
_KIND_WORDS = {
    "LORA": "LoRA",
    "ADALORA": "AdaLoRA",
    "LOHA": "LoHa",
    "LOKR": "LoKr",
    "IA3": "IA3",
    "VERA": "VeRA",
    "BOFT": "BOFT",
    "OFT": "OFT",
    "PROMPT_TUNING": "prompt tuning",
    "PREFIX_TUNING": "prefix tuning",
    "P_TUNING": "p-tuning",
}


def parts_report(model: Model) -> dict[str, Any]:
    """The keys a pipeline or an adapter adds to ``params --json`` and ``info --json``;
    empty for any other model.

    Keys: ``pipeline`` (``class``, ``diffusers_version``, ``without_weights``: the
    components that have none, such as the scheduler and tokenizers; ``not_saved``: those
    the pipeline was saved without, ``[null, null]``),
    ``components`` (name -> ``parameters`` (true count), ``exact``, ``stored_parameters``,
    ``bytes``, ``files``, ``library``, ``class``); ``adapter`` (``kind``, ``rank``, ``alpha``,
    ``target_modules``, ``base_model``, ``task_type``, ``dora``, ``rslora``,
    ``rank_pattern``, ``modules_to_save``, and ``parameters``: its own count).
    """
    report: dict[str, Any] = {}
    manifest = model.pipeline
    if manifest is not None:
        named = {c.name: c for c in manifest.components}
        report["pipeline"] = {
            "class": manifest.class_name,
            "diffusers_version": manifest.diffusers_version,
            "without_weights": [c.name for c in manifest.without_weights],
            "not_saved": [c.name for c in manifest.not_saved],
        }
        report["components"] = {
            name: {
                "parameters": component.num_parameters,
                "exact": component.true_count.exact,
                "stored_parameters": component.stored_parameters,
                "bytes": component.nbytes,
                "files": len(component.files),
                "library": named[name].library,
                "class": named[name].class_name,
            }
            for name, component in model.components.items()
        }
    if model.adapter is not None:
        report["adapter"] = {**model.adapter.as_dict(), "parameters": model.num_parameters}
    return report


def adapter_words(adapter: Mapping[str, Any]) -> str:
    """One line from :func:`parts_report`'s ``adapter``: ``"LoRA adapter (PEFT): rank 16,
    alpha 32, on q_proj, v_proj; base model org/name"``."""
    kind = str(adapter["kind"])
    words = "DoRA" if kind == "LORA" and adapter["dora"] else _KIND_WORDS.get(kind, kind)
    parts = []
    if adapter["rank"] is not None:
        differ = " (some modules differ)" if adapter["rank_pattern"] else ""
        parts.append(f"rank {adapter['rank']}{differ}")
    if adapter["alpha"] is not None:
        parts.append(f"alpha {adapter['alpha']:g}")
    targets = adapter["target_modules"]
    if isinstance(targets, str):
        parts.append(f"on modules matching {targets!r}")
    elif targets:
        parts.append(f"on {', '.join(targets)}")
    text = f"{words} adapter (PEFT)" + (": " + ", ".join(parts) if parts else "")
    return f"{text}; base model {adapter['base_model'] or 'not named'}"


def parts_lines(report: Mapping[str, Any]) -> list[str]:
    """What a pipeline or adapter is, in words (from :func:`parts_report`'s keys)."""
    lines = []
    pipeline = report.get("pipeline")
    if pipeline is not None:
        version = f" (diffusers {pipeline['diffusers_version']})" * bool(
            pipeline["diffusers_version"]
        )
        components = report["components"]
        lines.append(
            f"pipeline: {pipeline['class']}{version}, {len(components)} component(s) with "
            f"weights: {', '.join(components)}"
        )
        if pipeline["without_weights"]:
            lines.append(f"without weights: {', '.join(pipeline['without_weights'])}")
        if pipeline["not_saved"]:
            lines.append(f"not saved: {', '.join(pipeline['not_saved'])}")
    adapter = report.get("adapter")
    if adapter is not None:
        own = adapter["parameters"]
        lines.append(f"{adapter_words(adapter)}; {human_count(own)} parameters of its own")
    return lines


def components_table(report: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """(headers, rows) of a pipeline's components and their total, from
    :func:`parts_report`'s ``components`` and the report's ``parameters`` and ``bytes``."""
    rows = []
    for name, c in report["components"].items():
        bound = "" if c["exact"] else "<= "
        rows.append(
            [
                name,
                str(c["class"]),
                f"{bound}{c['parameters']:,}",
                human_count(c["parameters"]),
                human_bytes(c["bytes"]),
            ]
        )
    total, size = report["parameters"], report["bytes"]
    rows.append(["total", "", f"{total:,}", human_count(total), human_bytes(size)])
    return ["component", "class", "parameters", "human", "size"], rows

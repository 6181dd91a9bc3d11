"""What ``remotetensors params`` and ``remotetensors memory`` print: data first, text from it.

Each report is a JSON-ready dict built from an open model; the text form is a few lines and a
table of rows, which the command line prints with rich or as plain columns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..index import bits_per_weight
from ..quantization.moe import ACTIVE_CONVENTION
from .display import human_bytes, human_count
from .pipelines import parts_lines, parts_report

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..models.sync import Model
    from ..quantization import ParameterCount


def quantization_words(quantization: Mapping[str, Any] | None) -> str:
    """``"gptq, 4-bit, group size 128"`` from :meth:`Quantization.as_dict`; ``"not
    quantized"`` for None."""
    if quantization is None:
        return "not quantized"
    method = str(quantization["method"])
    words = [method]
    fmt = quantization.get("format")
    if fmt and str(fmt) not in method:
        words.append(str(fmt))
    if quantization.get("bits"):
        words.append(f"{quantization['bits']}-bit")
    if quantization.get("group_size"):
        words.append(f"group size {quantization['group_size']}")
    if quantization.get("expert_dtype"):
        words.append(f"routed experts in {quantization['expert_dtype']}")
    return ", ".join(words)


def declared_words(total: int, declared: int | None) -> str | None:
    """The declared total beside ours, and by how much they differ; None when none declared."""
    if declared is None:
        return None
    difference = total - declared
    return f"declared: {declared:,} (metadata total_parameters)" + (
        f"; ours differs by {difference:+,}" if difference else ""
    )


def true_count_lines(count: ParameterCount) -> list[str]:
    """The true count, how the checkpoint is quantized and the declared total, as text lines
    (for the notebook view)."""
    bound = "" if count.exact else "at most "
    lines = [f"true count: {bound}{human_count(count.total)} parameters ({count.total:,})"]
    if count.quantization is not None:
        lines.append(
            f"quantized: {quantization_words(count.quantization.as_dict())}; "
            f"{len(count.unpacked)} packed tensor(s) unpacked, {len(count.auxiliary)} "
            "bookkeeping tensor(s) left out"
        )
    declared = declared_words(count.total, count.declared_total)
    if declared is not None:
        lines.append(declared)
    return lines


def _moe_summary(count: ParameterCount) -> dict[str, Any] | None:
    return count.moe.as_dict() if count.moe is not None else None


def active_words(
    active: int | None,
    exact: bool,
    moe: Mapping[str, Any] | None,
    *,
    phrase: str = "active per token",
) -> str | None:
    """``"12.9B active per token (12,879,925,248): 2 of 8 routed experts in 32 MoE layers"``
    (``phrase`` between the count and its digits); None for a dense model (all of it is
    active)."""
    if moe is None:
        return None
    experts = (
        f"{moe['experts_per_token']} of {moe['experts']} routed experts"
        if moe["experts_per_token"] is not None
        else f"{moe['experts']} routed experts"
    )
    if moe["shared_experts"]:
        experts += f" and {moe['shared_experts']} shared"
    where = f"{experts} in {moe['moe_layers']} MoE layer(s)"
    if active is None:
        why = (
            "the config does not say how many experts a token uses"
            if moe["experts_per_token"] is None
            else "the routed experts could not be found or counted in the tensors"
        )
        return f"{phrase}: unknown ({why}); {where}"
    bound = "" if exact else ", not exact"
    return f"{human_count(active)} {phrase} ({active:,}{bound}): {where}"


def params_report(model: Model) -> dict[str, Any]:
    """``params --json``: the true total first, the quantization, then counts as stored.

    Keys: ``parameters`` (true total), ``exact``, ``active_parameters`` (used per token: the
    total for a dense model; null when unknown), ``active_exact``, ``active_convention``,
    ``moe`` (null, or ``experts``, ``experts_per_token``, ``shared_experts``, ``moe_layers``,
    ``expert_parameters``, ``expert_bytes``, ``layer_experts_bytes``,
    ``inactive_parameters``), ``quantization`` (null or an object with
    ``method``, ``bits``, ``group_size``, …), ``declared_parameters``, ``stored_parameters``,
    ``parameters_by_dtype`` (true counts by stored dtype), ``unpacked_tensors``,
    ``auxiliary_tensors``; and, as before, ``total`` and ``by_dtype`` (elements as stored, the
    hub's count), ``bytes``, ``files`` and ``bits_per_weight`` (bits of storage per stored
    element, per dtype); ``bits_per_parameter`` is the data's bits per true parameter. A
    pipeline adds ``pipeline`` and ``components``, an adapter ``adapter``
    (:func:`.pipelines.parts_report`).
    """
    count = model.true_count
    stored = model.parameter_count()
    return {
        "parameters": count.total,
        "exact": count.exact,
        "active_parameters": count.active,
        "active_exact": count.active_exact,
        "active_convention": ACTIVE_CONVENTION,
        "moe": _moe_summary(count),
        "quantization": count.quantization.as_dict() if count.quantization else None,
        "declared_parameters": count.declared_total,
        "stored_parameters": count.stored_total,
        "parameters_by_dtype": count.by_dtype(model.tensors),
        "unpacked_tensors": len(count.unpacked),
        "auxiliary_tensors": len(count.auxiliary),
        "total": count.stored_total,
        "by_dtype": stored,
        "bytes": model.nbytes,
        "files": len(model.files),
        "bits_per_weight": bits_per_weight(model.tensors.values()),
        "bits_per_parameter": model.nbytes * 8 / count.total if count.total else None,
        **parts_report(model),
    }


def params_text(report: dict[str, Any]) -> tuple[list[str], list[str], list[list[str]]]:
    """(lines, table headers, table rows) for the human form of :func:`params_report`."""
    total = report["parameters"]
    bound = "" if report["exact"] else " at most"
    first = (
        f"{human_count(total)} parameters{bound} ({total:,}), "
        f"{human_bytes(report['bytes'])} in {report['files']} file(s)"
    )
    if report["quantization"] is not None and report["bits_per_parameter"]:
        first += f", {report['bits_per_parameter']:.2f} bits per parameter"
    lines = [first]
    active = active_words(report["active_parameters"], report["active_exact"], report["moe"])
    if active is not None:
        lines.append(active)
    lines.extend(parts_lines(report))
    quantization = report["quantization"]
    if quantization is not None:
        line = f"quantized: {quantization_words(quantization)}"
        if report["unpacked_tensors"] or report["auxiliary_tensors"]:  # GGUF has neither
            line += (
                f"; {report['unpacked_tensors']} packed tensor(s) unpacked, "
                f"{report['auxiliary_tensors']} bookkeeping tensor(s) left out"
            )
        lines.append(line)
    declared = declared_words(total, report["declared_parameters"])
    if declared is not None:
        lines.append(declared)
    stored = report["stored_parameters"]
    if quantization is not None or stored != total:
        lines.append(f"stored: {human_count(stored)} elements ({stored:,}) by dtype:")
    bits = report["bits_per_weight"]
    rows = [
        [dtype, f"{n:,}", human_count(n), f"{bits[dtype]:.2f}" if dtype in bits else ""]
        for dtype, n in report["by_dtype"].items()
    ]
    return lines, ["dtype", "parameters", "human", "bits/weight"], rows


def memory_report(
    model: Model, *, context: int | None, batch: int, kv_dtype: str | None
) -> dict[str, Any]:
    """``memory --json``: :meth:`MemoryEstimate.as_dict` with the location and the true count.

    Raises:
        ValueError: a bad context, batch or KV dtype.
    """
    estimate = model.memory(context, batch=batch, kv_dtype=kv_dtype)
    return {
        "location": model.location,
        "parameters": model.num_parameters,
        "active_parameters": model.num_active_parameters,
        "quantization": model.quantization.as_dict() if model.quantization else None,
        **estimate.as_dict(),
    }


def memory_text(report: dict[str, Any]) -> list[str]:
    """The human form of :func:`memory_report`."""
    how = quantization_words(report["quantization"])
    active = report.get("active_parameters")
    if active is not None and active != report["parameters"]:
        how = f"{human_count(active)} active per token; {how}"
    lines = [
        f"{report['location']}: {human_count(report['parameters'])} parameters ({how})",
        f"  weights   {human_bytes(report['weights_bytes']):>10}  as stored",
    ]
    kv = report["kv_cache_bytes"]
    if kv is None:
        lines.append(f"  KV cache  {'unknown':>10}  {report['kv_cache_unknown']}")
    else:
        layers = f"{report['full_layers']} full-context layer(s)"
        if report["window_layers"]:
            layers += f", {report['window_layers']} capped at {report['window_tokens']:,} tokens"
        if report["constant_layers"]:
            layers += f", {report['constant_layers']} of constant state"
        at_most = "at most " if report.get("kv_cache_bound") else ""
        lines.append(
            f"  KV cache  {at_most}{human_bytes(kv):>10}  {report['context']:,} tokens x "
            f"{report['batch']} sequence(s), {report['kv_dtype']}, {report['attention']}, "
            f"{human_bytes(report['kv_bytes_per_token'])} per token; {layers}"
        )
        if report.get("kv_cache_bound"):
            lines.append(f"            {report['kv_cache_bound']}")
    experts = report.get("experts")
    if experts and experts["moe_layers"]:  # none when no tensor was recognised as an expert
        lines.append(
            f"  experts   {human_bytes(experts['expert_bytes']):>10}  one routed expert; "
            f"{human_bytes(experts['layer_experts_bytes'])} per layer's "
            f"{experts['experts']} experts, in {experts['moe_layers']} MoE layer(s)"
        )
    lines.append(f"  total     {human_bytes(report['total_bytes']):>10}")
    return lines

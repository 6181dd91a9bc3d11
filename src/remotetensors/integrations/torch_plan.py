"""How a checkpoint's headers fit a torch module: which tensor fills which name, checked before
any tensor data is asked for. No IO here: the module and the headers in, a plan out.

A module's state is its parameters and buffers, each reachable by one or more dotted names
(several when tied: an LM head that *is* the embedding). Names are grouped by the tensor they
reach, so a tied pair is read once and stays one tensor, whichever of its names the checkpoint
holds. Persistent names are what ``state_dict()`` holds and what a checkpoint is expected to
hold; non-persistent buffers (BERT's ``position_ids``) are the module's own and are neither
missing nor unexpected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..errors import CheckpointMismatchError, FrameworkError, UnsupportedDtypeError
from ..reading.frameworks import torch_dtype
from .torch_shards import Sharding, box_bytes, sharding_of

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    import torch

    from ..index import TensorInfo

LISTED_NAMES = 10
"""Names spelled out in an error message per kind of problem; the error's attributes hold all."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One name of a module's state.

    Attributes:
        name: the dotted name (``"encoder.layer.0.attention.self.query.weight"``).
        owner: the submodule that holds it.
        attribute: its name in ``owner``.
        tensor: what the name reaches now (on the meta device for a module built empty).
        is_parameter: a parameter (else a buffer).
        persistent: in ``state_dict()`` (every parameter; buffers unless registered with
            ``persistent=False``).
    """

    name: str
    owner: Any
    attribute: str
    tensor: torch.Tensor
    is_parameter: bool
    persistent: bool


@dataclass(frozen=True, slots=True)
class Read:
    """One checkpoint tensor to read, and the module names it fills.

    Attributes:
        checkpoint_name: the tensor's name in the checkpoint.
        info: its header entry (file, byte range, dtype, shape); for a DTensor, the entry of
            the box this rank reads (its shape, and its bytes in the file).
        slots: the module names it fills: one, or every name of a tied group.
        file_dtype: the torch dtype that holds the file's bytes as they are.
        dtype: the dtype the tensor ends in (converted from ``file_dtype`` when they differ).
        device: where the tensor ends.
        in_place: filled in the module's own tensor (a real one of that dtype on that device);
            else a new tensor replaces it, as ``load_state_dict(..., assign=True)`` does.
        sharding: how this rank reads its part of a DTensor (None for a plain tensor).
        box_offset: where the bytes read start in the tensor's stored bytes (a DTensor's box).
    """

    checkpoint_name: str
    info: TensorInfo
    slots: tuple[Slot, ...]
    file_dtype: torch.dtype
    dtype: torch.dtype
    device: torch.device
    in_place: bool
    sharding: Sharding | None = None
    box_offset: int = 0

    @property
    def target(self) -> torch.Tensor:
        """The module's tensor that this read fills or replaces."""
        return self.slots[0].tensor

    def landing(self) -> torch.Tensor | None:
        """The module's own tensor that the bytes land in, when it is filled in place and is
        contiguous: a plain tensor, or a DTensor's local shard when it is what this rank reads
        (no rows exchanged); else None (the bytes go to a new tensor)."""
        if not self.in_place:
            return None
        tensor: Any = self.target  # a DTensor when sharded
        if self.sharding is not None:
            if self.sharding.exchanged:
                return None
            tensor = tensor.to_local()
        return tensor.detach() if tensor.is_contiguous() else None


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """What a load will do, decided from the headers alone.

    Attributes:
        reads: the checkpoint tensors to read, in file order (shard by shard, by offset).
        names: every module name, in the module's order (``named_parameters`` then buffers).
        missing: persistent module names the checkpoint lacks.
        unexpected: checkpoint names (under the prefix) that no module name asks for.
        converted: module names whose dtype differs from the file's (converted on arrival).
    """

    reads: tuple[Read, ...]
    names: tuple[str, ...]
    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    converted: tuple[str, ...]


def module_slots(module: torch.nn.Module) -> list[Slot]:
    """Every name of the module's parameters and buffers, tied names included (each name of a
    shared tensor or a shared submodule), in the order of ``named_modules``."""
    slots: list[Slot] = []
    for path, sub in module.named_modules(remove_duplicate=False):
        dotted = f"{path}." if path else ""
        for attribute, tensor in sub._parameters.items():
            if tensor is not None:
                slots.append(Slot(dotted + attribute, sub, attribute, tensor, True, True))
        for attribute, tensor in sub._buffers.items():
            if tensor is not None:
                persistent = attribute not in sub._non_persistent_buffers_set
                slots.append(Slot(dotted + attribute, sub, attribute, tensor, False, persistent))
    return slots


def tied_groups(slots: Iterable[Slot]) -> list[tuple[Slot, ...]]:
    """Slots grouped by the tensor they reach, in the order of each group's first name."""
    groups: dict[int, list[Slot]] = {}
    for slot in slots:
        groups.setdefault(id(slot.tensor), []).append(slot)
    return [tuple(group) for group in groups.values()]


def restore_ties(module: torch.nn.Module) -> None:
    """Tie what the module says is tied, where it says how (transformers models have
    ``tie_weights()``): a model built under ``accelerate.init_empty_weights()`` has lost the
    tie between its LM head and its embedding, which would otherwise be read twice and end as
    two tensors."""
    tie = getattr(module, "tie_weights", None)
    if callable(tie):
        tie()


def plan_load(
    module: torch.nn.Module,
    tensors: Mapping[str, TensorInfo],
    *,
    location: str,
    prefix: str = "",
    strict: bool = True,
    dtype: torch.dtype | None = None,
    device: torch.device | None = None,
    meta_device: torch.device | None = None,
) -> LoadPlan:
    """Match the module's names to the checkpoint's tensors and check each one.

    Args:
        module: the module to fill (not changed here).
        tensors: the checkpoint's header entries by name.
        location: the checkpoint, for messages (already redacted).
        prefix: prepended to every module name to find it in the checkpoint
            (``"encoder.layer.0."`` fills a lone layer from a whole model's checkpoint);
            checkpoint names outside the prefix are not unexpected.
        strict: raise on missing or unexpected names (else report them).
        dtype: the dtype floating-point tensors end in; by default each keeps the module's.
        device: where tensors end; by default meta ones go to ``meta_device`` and real ones
            stay.
        meta_device: where meta tensors go when ``device`` is None; the CPU by default.

    Raises:
        CheckpointMismatchError: a shape differs (always), or names are missing or unexpected
            with ``strict``; every problem found is listed.
        UnsupportedDtypeError: a checkpoint dtype with no torch dtype (F4, F6), named.
    """
    slots = module_slots(module)
    reads: list[Read] = []
    missing: list[str] = []
    mismatched: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    converted: list[str] = []
    for group in tied_groups(slots):
        found = _checkpoint_name(group, tensors, prefix)
        persistent = [slot.name for slot in group if slot.persistent]
        if found is None:
            missing += persistent
            continue
        if not persistent and not group[0].tensor.is_meta:
            continue  # the module's own buffer, made by the module: left as it is
        info = tensors[found]
        target = group[0].tensor
        if tuple(target.shape) != tuple(info.shape):
            if not persistent:
                continue  # a buffer of the module's own, of another size: not the file's
            mismatched[group[0].name] = (tuple(target.shape), tuple(info.shape))
            continue
        read = _read(found, info, group, dtype, device, meta_device, location)
        if read.dtype != read.file_dtype:
            converted += [slot.name for slot in group]
        reads.append(read)
    claimed = {prefix + slot.name for slot in slots}
    unexpected = [n for n in tensors if n.startswith(prefix) and n not in claimed]
    if mismatched or (strict and (missing or unexpected)):
        raise _mismatch(
            module, location, prefix, mismatched, missing if strict else [], unexpected, strict
        )
    reads.sort(key=lambda r: (r.info.file or "", r.info.start))
    return LoadPlan(
        tuple(reads),
        tuple(dict.fromkeys(slot.name for slot in slots)),
        tuple(missing),
        tuple(unexpected),
        tuple(converted),
    )


def _checkpoint_name(
    group: tuple[Slot, ...], tensors: Mapping[str, TensorInfo], prefix: str
) -> str | None:
    """The checkpoint name that fills ``group``: its first persistent name the checkpoint
    holds, else its first name at all (a non-persistent buffer the checkpoint carries)."""
    ordered = sorted(group, key=lambda slot: not slot.persistent)  # stable: module order kept
    for slot in ordered:
        if prefix + slot.name in tensors:
            return prefix + slot.name
    return None


def _read(
    name: str,
    info: TensorInfo,
    group: tuple[Slot, ...],
    dtype: torch.dtype | None,
    device: torch.device | None,
    meta_device: torch.device | None,
    location: str,
) -> Read:
    import torch

    try:
        file_dtype = torch_dtype(info.dtype)
    except UnsupportedDtypeError as exc:
        raise UnsupportedDtypeError(f"{location}: tensor {name}: {exc}") from None
    target = group[0].tensor
    wanted = dtype if dtype is not None and target.is_floating_point() else target.dtype
    sharding = sharding_of(target, info, f"{location}: tensor {name}")
    if sharding is not None:
        return _shard_read(name, info, group, file_dtype, wanted, sharding, device, location)
    if device is not None:
        where = device
    elif target.is_meta:
        where = meta_device if meta_device is not None else torch.device("cpu")
    else:
        where = target.device
    in_place = not target.is_meta and target.device == where and target.dtype == wanted
    return Read(name, info, group, file_dtype, wanted, where, in_place)


def _shard_read(
    name: str,
    info: TensorInfo,
    group: tuple[Slot, ...],
    file_dtype: torch.dtype,
    wanted: torch.dtype,
    sharding: Sharding,
    device: torch.device | None,
    location: str,
) -> Read:
    """A DTensor's read: this rank's box of the tensor, on the mesh's device.

    Raises:
        FrameworkError: ``device`` is not the mesh's kind of device.
    """
    import torch

    kind = sharding.mesh.device_type
    where = torch.device(kind)
    if kind == "cuda":  # the device this rank's process uses, as the mesh's collectives do
        where = torch.device(kind, torch.cuda.current_device())
    if device is not None and device.type != where.type:
        raise FrameworkError(
            f"{location}: tensor {name} is a DTensor on a {kind} mesh; device={device} "
            "cannot move it (leave device unset: shards go to the mesh's device)"
        )
    target: Any = group[0].tensor  # a DTensor
    local = target.to_local()
    in_place = not local.is_meta and local.device == where and target.dtype == wanted
    offset = box_bytes(info, sharding.offsets, sharding.box) if info.row_major else 0
    box = info
    if sharding.box != info.shape:
        start = info.start + offset
        nbytes = info.dtype_info.nbytes(math.prod(sharding.box))
        box = replace(info, shape=sharding.box, start=start, end=start + nbytes)
    return Read(name, box, group, file_dtype, wanted, where, in_place, sharding, offset)


def _mismatch(
    module: torch.nn.Module,
    location: str,
    prefix: str,
    mismatched: dict[str, tuple[tuple[int, ...], tuple[int, ...]]],
    missing: list[str],
    unexpected: list[str],
    strict: bool,
) -> CheckpointMismatchError:
    lines = [f"{location}: the checkpoint does not fit {type(module).__name__}:"]
    for name, (ours, theirs) in list(mismatched.items())[:LISTED_NAMES]:
        shown = name if not prefix else f"{name} (checkpoint {prefix}{name})"
        lines.append(
            f"  {shown}: shape {list(ours)} in the module, {list(theirs)} in the checkpoint"
        )
    if len(mismatched) > LISTED_NAMES:
        lines.append(f"  ... and {len(mismatched) - LISTED_NAMES} more shapes that differ")
    if missing:
        lines.append(f"  missing from the checkpoint ({len(missing)}): {_listed(missing)}")
    if strict and unexpected:
        lines.append(f"  not in the module ({len(unexpected)}): {_listed(unexpected)}")
    if missing or (strict and unexpected):
        lines.append("  (strict=False reports names that do not match instead of raising)")
    return CheckpointMismatchError(
        "\n".join(lines),
        location=location,
        missing=tuple(missing),
        unexpected=tuple(unexpected) if strict else (),
        mismatched=mismatched,
    )


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:LISTED_NAMES])
    return shown if len(names) <= LISTED_NAMES else f"{shown}, ... ({len(names)} in all)"

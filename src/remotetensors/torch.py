"""The reading half of ``safetensors.torch``, over every location remotetensors reads.

``from remotetensors.torch import load_file, load_model`` in place of
``from safetensors.torch import load_file, load_model``: same signatures, same return values,
for a local path as for ``hf://``, ``https://``, ``s3://`` (any fsspec URL), one file or a
sharded checkpoint. Only the bytes asked for cross the network, straight into the tensors.

Where ours differs, on purpose: ``load_model`` checks names and shapes against the headers
before reading anything (``safetensors`` loads the whole file into the model first, then
raises with ``strict=True``), reads only the tensors the model holds,
replaces parameters on the meta device with real ones on ``device`` (``safetensors`` leaves
them on meta), and counts a checkpoint's copy of a non-persistent buffer (BERT's
``position_ids``) neither missing nor unexpected (``safetensors`` reports it unexpected, and
raises for it with ``strict=True``). Its errors are ``RuntimeError`` subclasses, as there.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .integrations.torch import load_checkpoint, torch_device
from .integrations.torch_iter import iter_tensors
from .integrations.torch_stream import DEFAULT_MAX_IN_FLIGHT_BYTES
from .models.sync import run_sync
from .options import ReadOptions
from .reading.frameworks import check_backend

if TYPE_CHECKING:
    import torch

__all__ = ["load_file", "load_model"]


def load_file(
    filename: str | os.PathLike[str],
    device: str | int = "cpu",
    *,
    backend: str = "mmap",
) -> dict[str, torch.Tensor]:
    """Read every tensor of a checkpoint into torch tensors on ``device``, in file order.

    Args:
        filename: a file, or any location :func:`remotetensors.open_model` opens (a sharded
            checkpoint's tensors come shard after shard).
        device: where the tensors go (``"cpu"``, ``"cuda:0"``, an int for a CUDA device);
            each tensor is moved there as it arrives, so host memory holds a bounded amount.
        backend: ``"mmap"`` or ``"pread"``, accepted as ``safetensors`` accepts them; both
            read the same way here.

    Returns:
        name -> tensor, in file order (as ``safetensors.torch.load_file`` returns them).

    Raises:
        NotFoundError, HeaderError, TransportError, ...: as :func:`remotetensors.open_model`.
        FrameworkError: a device torch does not have.
        BackendError, TypeError: a backend ``safetensors`` refuses.
    """
    check_backend(backend)
    where = torch_device(device)
    moving = where is not None and where.type != "cpu"
    return {
        name: tensor.to(where) if moving else tensor
        for name, tensor in iter_tensors(filename, framework="pt")
    }


def load_model(
    model: torch.nn.Module,
    filename: str | os.PathLike[str],
    strict: bool = True,
    device: str | int = "cpu",
    *,
    backend: str = "mmap",
) -> tuple[set[str], list[str]]:
    """Fill ``model`` from a checkpoint: ``safetensors.torch.load_model`` over any location.

    Real parameters and buffers are filled in place, converted to their dtype; those on the
    meta device are replaced by real ones on ``device``. Tied names are read once and stay
    tied (see :func:`remotetensors.load_into`, which this calls).

    Args:
        model: the module to fill.
        filename: a file, or any location :func:`remotetensors.open_model` opens.
        strict: raise when names are missing or unexpected (before reading any data).
        device: where parameters on the meta device go; real ones stay where they are.
        backend: ``"mmap"`` or ``"pread"``, accepted as ``safetensors`` accepts them.

    Returns:
        ``(missing, unexpected)``: the model's names the checkpoint lacks (a set, as
        ``safetensors`` 0.8 returns it) and the checkpoint's names the model lacks (a list).

    Raises:
        CheckpointMismatchError: a ``RuntimeError``: shapes that differ, or names missing or
            unexpected with ``strict``.
        IncompleteLoadError: reading failed part way (it names what was loaded).
    """
    check_backend(backend)
    report = run_sync(
        load_checkpoint(
            model,
            filename,
            strict=strict,
            prefix="",
            max_in_flight_bytes=DEFAULT_MAX_IN_FLIGHT_BYTES,
            device=None,
            meta_device=device,
            dtype=None,
            open_kwargs={"options": ReadOptions(read_configs=False)},
        )
    )
    return set(report.missing), list(report.unexpected)

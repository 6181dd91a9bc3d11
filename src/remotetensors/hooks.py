"""Hooks: how a value reaches code of a layer above it without importing that layer.

Users expect an index, a file or a model to draw itself in a notebook (``_repr_html_``), to
give a tree of its modules (``Model.tree()``) or a Dask array (``to_dask``). The code that does
it lives above the value, in ``views/`` and ``integrations/``, and imports the value to read
it. Importing it back from the value, even inside a method, would point an import up the layers
and close a cycle. So the value calls a hook by name here, and the public face
(``remotetensors/__init__.py``, which sits above every layer) plugs each hook in: Python runs a
package's ``__init__`` before any of its modules, so every hook is plugged in before a value
can exist. Each implementation imports its view on first call, so ``import remotetensors``
stays cheap.

The hooks, by name (arguments as the caller passes them):

- ``tensor_card_html(info)``: one tensor's card (:class:`~remotetensors.index.TensorInfo`).
- ``tensors_html(title, tensors, *, show_files=False, traffic=None)``: a table of tensors.
- ``model_html(model)`` / ``model_text(model)``: a model's notebook view and its text.
- ``model_tree(model)``: the module tree of a model (``views.tree.Tree``).
- ``tensor_view(model, info, logical)``: ``views.explore.TensorView`` of one tensor.
- ``tensor_to_dask(recipe, info, options, *, chunk_bytes)``: a lazy ``dask.array.Array``.
- ``open_pipeline(location, place, found, stack, *, options, framework, variant)``: a diffusers
  pipeline's model (``models.pipeline.AsyncPipeline``, a subclass of the model that opens it:
  ``models.model`` reaches it here, as values reach their views).
- ``model_zarr_store(model, *, loop, chunk_bytes, coalesce_window_seconds)``: a read-only
  Zarr v3 store of an ``AsyncModel`` whose files live on ``loop``.
- ``model_kerchunk(model, *, chunk_bytes)``: kerchunk references of an ``AsyncModel``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["call", "plug"]

_plugged: dict[str, Callable[..., Any]] = {}


def plug(name: str, implementation: Callable[..., Any]) -> None:
    """Make ``implementation`` answer the hook ``name`` (the face does this once, at import)."""
    _plugged[name] = implementation


def call(name: str, *args: Any, **kwargs: Any) -> Any:
    """Call the implementation of hook ``name`` with the arguments given; returns its result.

    Raises:
        LookupError: nothing is plugged in for ``name`` (a bug: the face plugs every hook).
    """
    implementation = _plugged.get(name)
    if implementation is None:
        raise LookupError(f"remotetensors: no implementation of the hook {name!r} is plugged in")
    return implementation(*args, **kwargs)

"""Diffusers pipelines: a model made of its components' models.

A repo that diffusers' ``DiffusionPipeline.save_pretrained`` wrote holds ``model_index.json``
at its root and each component in a subfolder of its name: diffusers models
(``unet/diffusion_pytorch_model.safetensors``, or shards with their own
``diffusion_pytorch_model.safetensors.index.json``), transformers models
(``text_encoder/model.safetensors``), and configuration only (``scheduler/``,
``tokenizer/``), which has no weights. A *variant* is a second set of files beside the
first (``diffusion_pytorch_model.fp16.safetensors``).

:func:`open_pipeline` opens every weighted component concurrently, each through the model
discovery of any folder (:func:`.discovery.discover`: one file, an index and its shards, and
whatever formats that discovery reads), choosing its files from the repo's listing where there
is one (a hub repo's is recursive: one request for every folder), else asking for the library's
names. :class:`AsyncPipeline` is then one model of all their tensors, each named
``component/tensor`` (``unet/conv_in.weight``), so every command and view of a model works on a
pipeline; its count is the sum of its components' (each counted with its own config), and
:attr:`~AsyncPipeline.components` holds each component's model.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from dataclasses import replace
from typing import TYPE_CHECKING, Any, overload

from ..errors import AmbiguousModelError, NotFoundError
from ..index import ROW_FILE, ModelIndex, Row, TensorLayout, TensorTable, placed
from ..options import DEFAULT_CHUNK_BYTES
from ..quantization import LogicalTensors, ParameterCount
from ..quantization.memory import MemoryEstimate, estimate_memory
from ..reading.fetch import gather_or_cancel
from ..redact import redact_url
from .discovery import Discovered, discover
from .model import AsyncModel
from .weight_names import DIFFUSERS, TRANSFORMERS, WeightNames

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    import dask.array as da

    from ..formats.model_index import PipelineComponent, PipelineManifest
    from ..options import ReadOptions
    from ..quantization.values import RawLogical
    from ..sources.base import Traffic
    from ..sources.resolve import Place

__all__ = ["AsyncPipeline", "open_pipeline"]


class AsyncPipeline(AsyncModel):
    """A diffusers pipeline: its weighted components' tensors as one model, each named
    ``component/tensor``; reads go to the component that holds the tensor.

    Attributes:
        components: component name -> its model, in ``model_index.json``'s order.
        pipeline: what ``model_index.json`` says (the pipeline's class, every component).
    """

    def __init__(
        self,
        location: str,
        components: Mapping[str, AsyncModel],
        manifest: PipelineManifest,
        *,
        traffic: dict[str, Traffic],
        resources: AsyncExitStack,
    ) -> None:
        """
        Args:
            location: where the pipeline is (its root).
            components: component name -> its open model.
            manifest: ``model_index.json``, parsed.
            traffic: what the root itself cost (probes, ``model_index.json``).
            resources: releases every component's files and the client.
        """
        super().__init__(location, {}, _joined(components), traffic=traffic, resources=resources)
        self.components = dict(components)
        self.pipeline = manifest

    def _split(self, name: str) -> tuple[AsyncModel, str]:
        """The component holding tensor ``name`` (``unet/conv_in.weight``), and its name there."""
        component, _, inner = name.partition("/")
        return self.components[component], inner

    @property
    def true_count(self) -> ParameterCount:
        """The sum of the components' true counts (each read with its own config); exact
        when every component's is. ``quantization`` is the first quantized component's."""
        if self._true_count is None:
            counts = {name: model.true_count for name, model in self.components.items()}
            raw: dict[str, RawLogical] = {
                f"{name}/{tensor}": logical
                for name, count in counts.items()
                for tensor, logical in count.tensors.raw_items()
            }
            quantized = [c.quantization for c in counts.values() if c.quantization is not None]
            self._true_count = ParameterCount(
                total=sum(c.total for c in counts.values()),
                exact=all(c.exact for c in counts.values()),
                stored_total=sum(c.stored_total for c in counts.values()),
                quantization=quantized[0] if quantized else None,
                tensors=LogicalTensors(raw),
                problems=tuple(p for c in counts.values() for p in c.problems),
            )
        return self._true_count

    @property
    def traffic_by_file(self) -> dict[str, Traffic]:
        """File name -> what crossed the network for it: the root's files, then each
        component's as ``component/file``."""
        traffic = dict(self._traffic)
        for name, model in self.components.items():
            for file, counted in model.traffic_by_file.items():
                traffic[f"{name}/{file}"] = counted
        return traffic

    async def open_shards(self, names: str | Iterable[str]) -> None:
        by_component = self._by_component(self.select(names))
        await gather_or_cancel([m.open_shards(inner) for m, inner in by_component.values()])

    async def get_tensor(self, name: str) -> Any:
        """Fetch one tensor (``component/tensor``) from its component."""
        self.select([name])
        model, inner = self._split(name)
        return await model.get_tensor(inner)

    async def get_tensors(self, names: str | Iterable[str]) -> dict[str, Any]:
        """Fetch tensors by names or a glob (``"unet/down_blocks.0.*"``, ``"vae/*"``), from
        the components that hold them, concurrently.

        Returns:
            name -> array, in the order asked (sorted for a glob).
        """
        wanted = self.select(names)
        results: dict[str, Any] = {}

        async def load(component: str, model: AsyncModel, inner: list[str]) -> None:
            for tensor, array in (await model.get_tensors(inner)).items():
                results[f"{component}/{tensor}"] = array

        by_component = self._by_component(wanted)
        await gather_or_cancel([load(c, m, inner) for c, (m, inner) in by_component.items()])
        return {name: results[name] for name in wanted}

    def get_slice(self, name: str) -> Any:
        """A lazy view of a tensor (``component/tensor``):
        ``await pipeline.get_slice(name)[rows]``."""
        self.select([name])
        model, inner = self._split(name)
        return model.get_slice(inner)

    @overload
    def to_dask(  # type: ignore[overload-overlap]
        self, names: str, *, chunk_bytes: int = ...
    ) -> da.Array | dict[str, da.Array]: ...
    @overload
    def to_dask(self, names: Iterable[str], *, chunk_bytes: int = ...) -> dict[str, da.Array]: ...
    def to_dask(
        self, names: str | Iterable[str], *, chunk_bytes: int = DEFAULT_CHUNK_BYTES
    ) -> da.Array | dict[str, da.Array]:
        """Lazy Dask arrays, each read by its component (see :meth:`AsyncModel.to_dask`)."""
        arrays: dict[str, da.Array] = {}
        for name in self.select(names):
            model, inner = self._split(name)
            arrays[name] = model.to_dask([inner], chunk_bytes=chunk_bytes)[inner]
        if isinstance(names, str) and names in self.index.tensors:
            return arrays[names]
        return arrays

    def memory(
        self, context: int | None = None, *, batch: int = 1, kv_dtype: str | None = None
    ) -> MemoryEstimate:
        """The components' weights as stored; a pipeline's models keep no KV cache between
        calls, so none is estimated.

        Raises:
            ValueError: a bad context, batch or dtype name.
        """
        estimate = estimate_memory(
            None, self.nbytes, context=context, batch=batch, kv_dtype=kv_dtype
        )
        return replace(estimate, kv_cache_unknown="a diffusers pipeline: no KV cache to estimate")

    def _by_component(self, names: Iterable[str]) -> dict[str, tuple[AsyncModel, list[str]]]:
        """Component name -> (its model, the names there), for tensors ``names``."""
        grouped: dict[str, tuple[AsyncModel, list[str]]] = {}
        for name in names:
            component, _, inner = name.partition("/")
            grouped.setdefault(component, (self.components[component], []))[1].append(inner)
        return grouped

    def __repr__(self) -> str:
        assert self.pipeline is not None
        return (
            f"<AsyncModel {self.location}: {self.pipeline.class_name} pipeline, "
            f"{len(self.components)} component(s) with weights ({', '.join(self.components)}), "
            f"{len(self.tensors)} tensors, {self.num_parameters} parameters>"
        )


def _joined(components: Mapping[str, AsyncModel]) -> ModelIndex:
    """One index over the components: files as ``component/file``, tensors as
    ``component/tensor``."""
    files = {}
    rows: dict[str, Row] = {}
    layouts: dict[str, TensorLayout] = {}
    unmapped: list[str] = []
    for name, model in components.items():
        index = model.index
        files.update({f"{name}/{file}": file_index for file, file_index in index.files.items()})
        for tensor, row in index.tensors.rows().items():
            rows[f"{name}/{tensor}"] = placed(row, f"{name}/{row[ROW_FILE]}")
        for tensor, layout in index.tensors.layouts().items():
            layouts[f"{name}/{tensor}"] = layout
        unmapped += [f"{name}/{tensor}" for tensor in index.unmapped]
    return ModelIndex(files, TensorTable(rows, layouts=layouts), None, tuple(unmapped))


async def open_pipeline(
    location: str,
    place: Place,
    found: Discovered,
    stack: AsyncExitStack,
    *,
    options: ReadOptions,
    framework: str,
    variant: str | None = None,
) -> AsyncPipeline:
    """Open the pipeline whose ``model_index.json`` discovery found at ``place``: every
    weighted component concurrently (one round more, two for a sharded component).

    Args:
        location: the pipeline's root, as the user named it.
        place: the root.
        found: what discovery found there (``found.pipeline`` is set).
        stack: closes every file opened, as :func:`.model.load_model` owns it.
        options, framework: as for any model.
        variant: the weights variant to read (``"fp16"``); a component without it reads its
            plain files, as diffusers does.

    Raises:
        NotFoundError: a component with weights (by its class) has no weight files.
        AmbiguousModelError: a component has only variant files, of several variants, and
            ``variant`` names none of them.
        and whatever discovery of a component raises.
    """
    manifest = found.pipeline
    assert manifest is not None
    root = redact_url(location).rstrip("/")  # components are named in messages: no secrets
    models: dict[str, AsyncModel] = {}

    async def one(component: PipelineComponent) -> None:
        child = place.child(component.name)
        component_found = await _discover_component(
            f"{root}/{component.name}",
            child,
            component,
            await _folder_files(child, component.name, found.listing),
            stack,
            options=options,
            framework=framework,
            variant=variant,
        )
        model = AsyncModel(
            f"{root}/{component.name}",
            component_found.files,
            component_found.index,
            configs=component_found.configs,
            traffic=child.traffic,
            resources=AsyncExitStack(),  # the pipeline's stack closes its files
        )
        await model._read_logical_shapes()
        models[component.name] = model

    await gather_or_cancel([one(c) for c in manifest.weighted])
    components = {c.name: models[c.name] for c in manifest.weighted}
    return AsyncPipeline(location, components, manifest, traffic=place.traffic, resources=stack)


async def _folder_files(
    child: Place, folder: str, listing: tuple[str, ...] | None
) -> list[str] | None:
    """The files directly in a component's folder: from the root's listing when it is
    recursive (a hub repo's), else the folder's own; None where folders cannot be listed."""
    if listing is None:
        return None
    if any("/" in name for name in listing):
        prefix = f"{folder}/"
        inside = (name[len(prefix) :] for name in listing if name.startswith(prefix))
        return [name for name in inside if "/" not in name]
    return await child.list_files()


async def _discover_component(
    location: str,
    place: Place,
    component: PipelineComponent,
    files: list[str] | None,
    stack: AsyncExitStack,
    *,
    options: ReadOptions,
    framework: str,
    variant: str | None,
) -> Discovered:
    """Discover a component's model at ``place``: the file chosen from its folder's
    ``files``, or where the folder could not be listed (None) the library's names asked for,
    the variant's first."""
    weights = DIFFUSERS if component.library == "diffusers" else TRANSFORMERS
    if files is not None:
        name = _choose(location, component, files, weights, variant)
        return await discover(location, place, name, stack, options=options, framework=framework)
    if variant is not None:
        try:
            with_variant = weights.with_variant(variant)
            return await discover(
                location,
                place,
                None,
                stack,
                options=options,
                framework=framework,
                weights=with_variant,
            )
        except NotFoundError:
            pass  # no such variant here: the plain files, as diffusers does
    return await discover(
        location, place, None, stack, options=options, framework=framework, weights=weights
    )


def _choose(
    location: str,
    component: PipelineComponent,
    files: list[str],
    weights: WeightNames,
    variant: str | None,
) -> str:
    """The weight file (or index) to open among a component's ``files``: the variant's,
    else the plain one, else the only variant there; the component's library's names before
    the other library's, safetensors before pickles.

    Raises:
        NotFoundError: no weight file at all, or none of ``variant`` nor plain ones.
        AmbiguousModelError: only variants, several, and ``variant`` names none of them.
    """
    present = set(files)
    families = (weights, TRANSFORMERS if weights is DIFFUSERS else DIFFUSERS)
    wanted = [variant] if variant is not None else []
    for chosen in [*wanted, None]:
        for family in families:
            for name in family.with_variant(chosen).files():
                if name in present:
                    return name
    variants = sorted({v for family in families for v in family.variants_in(files)})
    what = f"component {component.name} ({component.library} {component.class_name})"
    if variant is None and len(variants) == 1:
        return _choose(location, component, files, weights, variants[0])
    if variant is None and variants:
        raise AmbiguousModelError(
            f"{location}: {what} has only variants of its weights, several: "
            f"{', '.join(variants)}; choose one (variant=, or --variant on the command line)",
            choices=variants,
        )
    expected = ", ".join(weights.with_variant(variant).files())
    also = f" (it has the variants {', '.join(variants)})" if variants else ""
    raise NotFoundError(
        f"{location}: {what} has no weight files: expected one of {expected}"
        f"{' or the plain files' if variant else ''}{also}"
    )

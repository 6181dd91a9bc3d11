"""Sphinx configuration: MyST Markdown pages, furo, the command line from the parser
(sphinx-argparse) and the API reference from the docstrings (autodoc, Google style).

Built by ``.ci/run`` with warnings as errors; ``nitpicky`` makes every unresolved reference a
warning, since a link check cannot run offline."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

project = "remotetensors"
author = "the remotetensors authors"
copyright = "2026, the remotetensors authors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
html_theme = "furo"
html_title = "remotetensors"

autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the docstrings name types and units in words
napoleon_google_docstring = True
napoleon_numpy_docstring = False

nitpicky = True
# Names from other libraries' documentation: no intersphinx offline, so they cannot resolve.
# References the docstrings make today that have no page to point to: other libraries' objects
# (no intersphinx offline), internal modules and names the reference does not document, and
# prose that napoleon reads as a type (a Raises or property line written as a sentence). Listed
# one by one, so a new broken reference still fails the build.
nitpick_ignore = [
    ("py:attr", "remotetensors.AsyncModel.num_active_parameters"),
    ("py:class", "The true parameter count"),
    ("py:class", "What crossed the network for this model so far"),
    ("py:class", "bintensor_rs.BinTensorError"),
    ("py:class", "enum.Enum"),
    ("py:class", "remotetensors.TensorView"),
    ("py:class", "remotetensors.TlsError"),
    ("py:class", "remotetensors.models.scan.ModelSummary"),
    ("py:class", "remotetensors.views.tree.Tree"),
    ("py:class", "safetensors._safetensors_rust.SafetensorError"),
    ("py:class", "ssl.SSLError"),
    ("py:data", "policy.CARRIED_ACROSS_ORIGINS"),
    ("py:data", "remotetensors.sources.http.policy.MAX_REDIRECTS"),
    ("py:exc", "RemoteTensorsError. Those the reference raises as SafetensorError"),
    ("py:exc", "also a safetensors.SafetensorError and bintensors.BintensorError when installed."),
    ("py:exc", "closed file"),
    ("py:exc", "derive from DropInError"),
    ("py:exc", "header"),
    ("py:exc", "unknown tensor/framework/device/backend"),
    ("py:exc", "which is"),
    ("py:exc", "…"),
    ("py:func", "remotetensors.models.model.load_model"),
    ("py:func", "scan_async"),
    ("py:meth", "new_client"),
    ("py:mod", "direct"),
    ("py:mod", "remotetensors.sources.cache"),
    ("py:mod", "tls"),
]
nitpick_ignore_regex = [
    (r"py:.*", r"(numpy|np|torch|httpx|fsspec|zarr|dask|xarray|os|asyncio|collections|typing)\..*"),
    (r"py:.*", r"(Any|Mapping|Sequence|Iterator|Iterable|Callable|Awaitable|AsyncIterator)"),
    (r"py:.*", r"(NDArray|ArrayLike|DTypeLike|PathLike|Path|ModuleType|TracebackType)"),
]


def _by_last_name(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """Resolve a short name in a docstring (``NotFoundError``, ``Model.components``) to the one
    documented object whose dotted name ends with it; anything else stays unresolved (and, being
    nitpicky, fails the build)."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    domain = env.get_domain("py")
    found = [name for name in domain.objects if name == target or name.endswith("." + target)]
    if len(found) != 1:
        return None
    from sphinx.util.nodes import make_refnode

    entry = domain.objects[found[0]]
    return make_refnode(
        app.builder, node["refdoc"], entry.docname, entry.node_id, contnode, found[0]
    )


def setup(app: Any) -> None:
    app.connect("missing-reference", _by_last_name)

"""What a location's text says before anything is opened: its scheme, and whether it names a
file. Pure string work, no IO; :mod:`.resolve` and the hub's paths (:mod:`.hub.repo`) read
locations with these rules and no others.
"""

from __future__ import annotations

from urllib.parse import urlsplit

TORCH_SUFFIXES = (".bin", ".pt", ".pth")
"""Names of PyTorch files (``torch.save``): read from their end, where a zip keeps its index."""

FILE_SUFFIXES = (".safetensors", ".bt", ".json", ".gguf", *TORCH_SUFFIXES)
"""Locations (and hub paths) ending in these name a file; any other names a folder, prefix or
repo: ``hf://gpt2/model.gguf`` is the file ``model.gguf`` of the one-word repo ``gpt2``."""


def names_file(name: str) -> bool:
    """Whether ``name`` (a path or URL's last part, its query ignored) names a file."""
    return name.split("?", 1)[0].endswith(FILE_SUFFIXES)


def names_torch_file(name: str) -> bool:
    """Whether ``name`` (a path or URL, its query ignored) names a PyTorch file."""
    return name.split("?", 1)[0].endswith(TORCH_SUFFIXES)


def scheme_of(location: str) -> str:
    """The scheme of a URL location in lower case (``"https"``, ``"s3"``, ``"file"``,
    ``"simplecache"`` of a chained URL), or ``""`` for a local path.

    Only text with ``://`` is a URL (``C:/models`` and ``C:\\models`` are paths). One letter
    before ``://`` is a Windows drive, never a scheme (``C://models``), as fsspec reads it
    on every system.
    """
    if "://" not in location:
        return ""
    scheme = urlsplit(location).scheme.lower()
    return "" if len(scheme) == 1 else scheme

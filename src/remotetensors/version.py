"""The library's version, in a module of its own so that the IO layers can name it (the
``User-Agent`` of every request) without ``importlib.metadata``, which costs ~50 ms to import
and look up. ``pyproject.toml`` holds the same string; a unit test keeps them equal."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"

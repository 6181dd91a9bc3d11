"""The command line (``remotetensors``, ``python -m remotetensors``): one module per command,
shared options and output beside them. See :mod:`.app` for adding a command."""

from __future__ import annotations

from .app import DEBUG_VARIABLE, main, main_exit, opened, parse_slice

__all__ = ["DEBUG_VARIABLE", "main", "main_exit", "opened", "parse_slice"]

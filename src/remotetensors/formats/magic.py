"""The first bytes that tell a file's format, with nothing else of the formats: every open sniffs
them, and the parsers of GGUF and PyTorch files (tens of milliseconds to import) are imported
only when a file is one.

Pure: bytes in, a verdict out.
"""

from __future__ import annotations

__all__ = [
    "GGUF_MAGIC",
    "TORCH_LEGACY_MAGIC",
    "ZIP_LOCAL_MAGIC",
    "looks_like_gguf",
    "looks_like_legacy",
    "looks_like_torch_file",
    "looks_like_zip",
]

GGUF_MAGIC = b"GGUF"
"""A GGUF file's first four bytes."""

ZIP_LOCAL_MAGIC = b"PK\x03\x04"
"""A zip archive's first local file header (a PyTorch file since torch 1.6)."""

TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"
"""How a file of PyTorch's legacy format (``torch.save`` before 1.6, or with
``_use_new_zipfile_serialization=False``) starts: a protocol-2 pickle of its magic number."""


def looks_like_gguf(first_bytes: bytes | bytearray | memoryview) -> bool:
    """Whether a file starts with the GGUF magic."""
    return bytes(first_bytes[:4]) == GGUF_MAGIC


def looks_like_zip(data: bytes) -> bool:
    """Whether ``data`` (a file's first bytes) starts as a zip archive does."""
    return data.startswith(ZIP_LOCAL_MAGIC)


def looks_like_legacy(data: bytes) -> bool:
    """Whether ``data`` starts as a file of PyTorch's legacy format does."""
    return data.startswith(TORCH_LEGACY_MAGIC)


def looks_like_torch_file(data: bytes) -> bool:
    """Whether a file's first bytes are those of a PyTorch file: a zip, or the legacy format
    (which :func:`.torch_bin.read_bin` then names in its error)."""
    return looks_like_zip(data) or looks_like_legacy(data)

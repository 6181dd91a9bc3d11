"""One file's reader: the header window, the read plan, fetching into buffers, assembly,
slicing, the hub's one-call metadata, GGUF. Above ``formats/``, ``quantization/`` and
``sources/``; below ``models/``."""

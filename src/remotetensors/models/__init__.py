"""Models: discovery (one file, shards, GGUF parts), the model, scans of many, checksums and
the one sync bridge. Above ``reading/``; below ``views/``."""

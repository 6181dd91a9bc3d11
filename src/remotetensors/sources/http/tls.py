"""One TLS context per process.

Building a context (loading the CA bundle) costs 20-40 ms; a model of 72 shards, or a scan of a
thousand files, would pay it again for every client. Contexts are safe to share between clients,
threads and event loops.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.lru_cache(maxsize=1)
def shared_ssl_context() -> ssl.SSLContext:
    """httpx's default verifying context (certifi's CA bundle, ``SSL_CERT_FILE`` honoured)."""
    return httpx.create_ssl_context()

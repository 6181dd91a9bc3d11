"""An S3 source closes the session of a filesystem it made for itself (fsspec does not share
it), so its sockets never wait for the garbage collector (a ``ResourceWarning`` under warnings as
errors, now and then, when s3fs's finalizer ran out of time); a shared one stays open for
others."""

from __future__ import annotations

from typing import Any

import numpy as np

from remotetensors.sources.fsspec import FsspecSource
from tests.integration.test_models import put_s3
from tests.reference import write_reference


def _options(endpoint: str, **more: Any) -> dict[str, Any]:
    return {"endpoint_url": endpoint, "key": "testing", "secret": "testing", **more}


def _http_session_closed(session: Any) -> bool:
    # aiobotocore's client -> its endpoint's AIOHTTPSession -> aiohttp's ClientSessions (one
    # per proxy; None once closed).
    sessions = session._endpoint.http_session._sessions
    return sessions is None or all(one.closed for one in sessions.values())


async def test_a_source_closes_the_s3_session_it_made(moto_endpoint: str) -> None:
    put_s3(moto_endpoint, "sessions-bucket", {"m.safetensors": write_reference({"w": np.ones(2)})})
    options = _options(moto_endpoint, skip_instance_cache=True)
    source = FsspecSource("s3://sessions-bucket/m.safetensors", storage_options=options)
    await source.open_prefix(64)
    session = source._fs._s3
    assert not _http_session_closed(session)
    await source.aclose()
    assert _http_session_closed(session)


async def test_a_shared_s3_filesystem_stays_open(moto_endpoint: str) -> None:
    put_s3(moto_endpoint, "shared-bucket", {"m.safetensors": write_reference({"w": np.ones(2)})})
    options = _options(moto_endpoint, anon=False)
    source = FsspecSource("s3://shared-bucket/m.safetensors", storage_options=options)
    await source.open_prefix(64)
    session = source._fs._s3
    await source.aclose()
    assert not _http_session_closed(session)
    again = FsspecSource("s3://shared-bucket/m.safetensors", storage_options=options)
    assert again._fs is source._fs  # fsspec's cache handed out the same, still usable
    assert (await again.open_prefix(64)).size > 0
    await again.aclose()

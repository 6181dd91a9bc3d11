"""An S3 object's ranges read through a presigned URL by the direct HTTP client
(``sources/s3_direct.py``), against moto's server: the bytes are right, every GET is tied to
the version opened, and any answer that is not exactly the one asked hands the read back to
the S3 path, which gives the right bytes or the error the user would have had."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.errors import RemoteFileChangedError
from remotetensors.sources import fsspec as fsspec_source
from remotetensors.sources.http.direct import RawRangeClient, RawResponse
from remotetensors.sources.http.head import Fields
from remotetensors.sources.s3_direct import S3DirectReads
from tests.integration.test_models import put_s3
from tests.reference import write_reference

pytestmark = pytest.mark.usefixtures("s3_env")


class Seen:
    """The direct client's GETs (URL and headers) and the S3 path's reads, as they happen."""

    def __init__(self) -> None:
        self.direct: list[tuple[str, dict[str, str]]] = []
        self.s3: list[tuple[int, int]] = []


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> Seen:
    record = Seen()
    get_into = RawRangeClient.get_into
    s3_get = fsspec_source.FsspecSource._s3_get

    async def spy_get_into(self: RawRangeClient, url: str, headers: dict[str, str], *a: Any) -> Any:
        record.direct.append((url, dict(headers)))
        return await get_into(self, url, headers, *a)

    async def spy_s3_get(self: Any, start: int, end: int, **kw: Any) -> Any:
        record.s3.append((start, end))
        return await s3_get(self, start, end, **kw)

    monkeypatch.setattr(RawRangeClient, "get_into", spy_get_into)
    monkeypatch.setattr(fsspec_source.FsspecSource, "_s3_get", spy_s3_get)
    return record


def tensors(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"a": rng.standard_normal((256, 64)).astype(np.float32), "b": np.arange(1000.0)}


def test_ranges_go_through_a_presigned_url_tied_to_the_version(s3_env: str, seen: Seen) -> None:
    put_s3(s3_env, "direct-bucket", {"m.safetensors": write_reference(tensors())})
    options = rt.ReadOptions(header_window_bytes=64)  # the tensors lie beyond the first answer
    with rt.safe_open("s3://direct-bucket/m.safetensors", options=options) as f:
        assert np.array_equal(f.get_tensor("a"), tensors()["a"])
        assert np.array_equal(f.get_tensor("b"), tensors()["b"])
    assert seen.direct, "no range went through the direct client"
    for url, headers in seen.direct:
        assert url.startswith(f"{s3_env}/direct-bucket/m.safetensors?")
        assert "Signature=" in url  # signed by botocore as `aws s3 presign` signs (v2 or v4)
        assert headers["If-Match"].startswith('"')  # the ETag opened
        assert headers["Range"].startswith("bytes=")
    # The S3 path asked only for the first bytes (and the header's rest, if any): no tensor.
    assert all(end <= 64 or start < 64 for start, end in seen.s3)


def test_an_answer_that_is_not_the_one_asked_goes_back_to_the_s3_path(
    s3_env: str, seen: Seen, monkeypatch: pytest.MonkeyPatch
) -> None:
    put_s3(s3_env, "refused-bucket", {"m.safetensors": write_reference(tensors(1))})

    async def wrong_url(self: S3DirectReads) -> str:
        return f"{s3_env}/refused-bucket/no-such-key?Signature=x"  # 404 from moto

    monkeypatch.setattr(S3DirectReads, "_signed", wrong_url)
    with rt.safe_open(
        "s3://refused-bucket/m.safetensors", options=rt.ReadOptions(header_window_bytes=64)
    ) as f:
        assert np.array_equal(f.get_tensor("a"), tensors(1)["a"])
    assert seen.direct  # tried, refused (never taken as the bytes), then read the S3 way
    assert any(start >= 64 for start, _ in seen.s3)


def test_a_rewrite_after_opening_is_an_error_never_the_new_bytes(s3_env: str, seen: Seen) -> None:
    put_s3(s3_env, "rewrite-bucket", {"m.safetensors": write_reference(tensors(2))})
    with rt.safe_open(
        "s3://rewrite-bucket/m.safetensors", options=rt.ReadOptions(header_window_bytes=64)
    ) as f:
        # The same layout, other values: only the version check can tell.
        put_s3(s3_env, "rewrite-bucket", {"m.safetensors": write_reference(tensors(3))})
        with pytest.raises(RemoteFileChangedError):
            f.get_tensor("a")
    assert seen.direct


def test_proxies_and_extra_request_arguments_keep_the_s3_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import s3fs

    fs = s3fs.S3FileSystem(key="k", secret="s", skip_instance_cache=True)
    assert S3DirectReads.usable(fs)
    assert not S3DirectReads.usable(
        s3fs.S3FileSystem(key="k", secret="s", requester_pays=True, skip_instance_cache=True)
    )
    assert not S3DirectReads.usable(
        s3fs.S3FileSystem(
            key="k",
            secret="s",
            s3_additional_kwargs={"SSECustomerKey": "x"},
            skip_instance_cache=True,
        )
    )
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    assert not S3DirectReads.usable(fs)


async def test_a_freshly_signed_url_refused_turns_the_direct_reads_off() -> None:
    signed: list[int] = []

    async def sign() -> str:
        signed.append(1)
        return "http://127.0.0.1:9/bucket/key?Signature=x"  # nothing listens: refused below

    reads = S3DirectReads(sign)

    async def refuse(*_: Any) -> RawResponse:
        return RawResponse(403, Fields([]), received=0, body_read=False)

    reads._client = RawRangeClient(connect_timeout_seconds=1, read_timeout_seconds=1)
    reads._client.get_into = refuse  # type: ignore[method-assign,assignment]
    buffer = memoryview(bytearray(4))
    assert not await reads.read_into(0, buffer, size=4, etag='"e"')
    assert not await reads.read_into(0, buffer, size=4, etag='"e"')
    assert signed == [1]  # off after the first refusal: no second request, no second signing
    await reads.aclose()

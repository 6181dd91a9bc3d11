"""The persistent cache over plain HTTP: a kept file is revalidated with one conditional request
(304: no body), a changed file is read anew by that same request, a weak ETag is no validator,
and offline a kept URL opens with no request."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.sources.cache.store import CacheStore
from tests.rawservers import RawServer, Reply, Request, head, partial
from tests.reference import write_reference
from tests.servers import Log


def store() -> CacheStore:
    return CacheStore(os.environ["REMOTETENSORS_CACHE"])


def test_a_kept_http_file_is_revalidated_with_one_conditional_request(
    static: tuple[str, Log, Path],
) -> None:
    base, log, root = static
    tensors: dict[str, np.ndarray[Any, Any]] = {
        "a": np.arange(12, dtype=np.float32).reshape(3, 4),
        "b": np.ones(5, np.int16),
    }
    (root / "kept.safetensors").write_bytes(write_reference(tensors))
    url = f"{base}/kept.safetensors"
    with rt.safe_open(url) as f:
        assert f.keys() == ["a", "b"]
    log.clear()
    with rt.safe_open(url) as f:
        assert f.keys() == ["a", "b"]
        (asked,) = log.entries
        assert asked.status == 304
        assert asked.sent_bytes == 0
        assert "If-None-Match" in asked.headers
        assert f.traffic.requests == 1
        assert f.traffic.bytes == 0
        # Data reads are tied to the version the 304 confirmed (If-Match its ETag).
        np.testing.assert_array_equal(f.get_tensor("a"), tensors["a"])
        assert log.entries[-1].status == 206
        assert log.entries[-1].headers.get("If-Match") == asked.headers["If-None-Match"]


def test_a_changed_http_file_is_read_anew_by_the_same_request(
    static: tuple[str, Log, Path],
) -> None:
    base, log, root = static
    path = root / "changing.safetensors"
    path.write_bytes(write_reference({"a": np.ones(3, np.float32)}))
    url = f"{base}/changing.safetensors"
    rt.safe_open(url).__exit__()
    path.write_bytes(write_reference({"x": np.ones(9, np.int8), "y": np.zeros(2, np.int8)}))
    os.utime(path, ns=(1, 1_000_000_000))  # another mtime, another ETag
    log.clear()
    with rt.safe_open(url) as f:
        assert f.keys() == ["x", "y"]
        assert [e.status for e in log.entries] == [206]
    log.clear()
    with rt.safe_open(url) as f:  # the new version is the one kept now
        assert f.keys() == ["x", "y"]
        assert [e.status for e in log.entries] == [304]


def test_a_model_folder_over_http_costs_one_bodiless_request_per_file(
    static: tuple[str, Log, Path],
) -> None:
    base, log, root = static
    folder = root / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(write_reference({"w": np.ones((4, 4), np.float16)}))
    (folder / "config.json").write_text('{"model_type": "llama"}')
    rt.open_model(f"{base}/model/").close()
    log.clear()
    with rt.open_model(f"{base}/model/") as model:
        assert model.parameter_count() == {"F16": 16}
        assert model.config == {"model_type": "llama"}
    found = [e for e in log.entries if e.status != 404]
    assert [e.status for e in found] == [304, 304]  # the weights and the config
    assert sum(e.sent_bytes for e in log.entries) == 0
    # A plain server's "not found" can change: those probes are asked again.
    missing = sorted(e.path for e in log.entries if e.status == 404)
    assert missing == ["/model/model.safetensors.index.json", "/model/quantization_config.json"]


def _server(data: bytes, fields: list[tuple[str, str]]) -> Callable[[Request, int], Reply]:
    """Serves ``data`` with ``fields``; 304 to a request whose If-None-Match names its ETag or
    whose If-Modified-Since is its Last-Modified."""
    values = dict(fields)

    def handler(request: Request, _: int) -> Reply:
        etag, modified = values.get("ETag"), values.get("Last-Modified")
        if (etag and request.headers.get("if-none-match") == etag) or (
            modified and request.headers.get("if-modified-since") == modified
        ):
            return head("304 Not Modified", [*fields, ("Content-Length", "0")])
        answer, body = partial(data, request, fields=fields)
        return answer + body

    return handler


def test_last_modified_alone_revalidates_and_a_weak_etag_alone_is_not_kept(
    serve: Callable[..., RawServer],
) -> None:
    data = write_reference({"w": np.arange(6, dtype=np.int32)})
    modified = "Wed, 21 Oct 2015 07:28:00 GMT"
    by_date = serve(_server(data, [("Last-Modified", modified)]))
    weak = serve(_server(data, [("ETag", 'W/"v1"')]))
    for server in (by_date, weak):
        for _ in range(2):
            with rt.safe_open(f"{server.url}/m.safetensors") as f:
                assert f.keys() == ["w"]
    assert [r.headers.get("if-modified-since") for r in by_date.requests] == [None, modified]
    # A weak ETag does not promise the same bytes: nothing kept, nothing revalidated with it.
    assert all("if-none-match" not in r.headers for r in weak.requests)
    assert len(weak.requests) == 2
    kinds = sorted(info.kind for info in store().entries())
    assert kinds == ["file", "latest"]  # the Last-Modified file's version and its pointer


def test_offline_a_kept_url_opens_without_a_request(
    static: tuple[str, Log, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, log, root = static
    (root / "off.safetensors").write_bytes(write_reference({"w": np.ones(4, np.float32)}))
    rt.safe_open(f"{base}/off.safetensors").__exit__()
    log.clear()
    monkeypatch.setenv("REMOTETENSORS_OFFLINE", "1")
    with rt.safe_open(f"{base}/off.safetensors") as f:
        assert f.keys() == ["w"]
        with pytest.raises(rt.OfflineError, match=r"off\.safetensors"):
            f.get_tensor("w")  # tensor data is never kept
    with pytest.raises(rt.OfflineError, match=r"never\.safetensors.*run once online"):
        rt.safe_open(f"{base}/never.safetensors")
    assert log.entries == []


def test_a_304_to_a_request_that_named_no_version_is_refused(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(lambda request, _: head("304 Not Modified", [("Content-Length", "0")]))
    with pytest.raises(rt.BadResponseError, match="304 Not Modified to a request that named"):
        rt.safe_open(f"{server.url}/m.safetensors")

"""The persistent cache over plain HTTP: a kept file is revalidated with one conditional request
(304: no body), a changed file is read anew by that same request, a weak ETag is no validator,
and offline a kept URL opens with no request."""

from __future__ import annotations

import os
from collections.abc import Callable
from email.utils import formatdate, parsedate_to_datetime
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
    # Not If-Modified-Since: a server answers it 304 for an older file too (a rollback), so
    # the second request is plain, and its answer's date and size are compared to the kept.
    assert [r.headers.get("if-modified-since") for r in by_date.requests] == [None, None]
    # A weak ETag does not promise the same bytes: nothing kept, nothing revalidated with it.
    assert all("if-none-match" not in r.headers for r in weak.requests)
    assert len(weak.requests) == 2
    kinds = sorted(info.kind for info in store().entries())
    assert kinds == ["file", "latest"]  # the Last-Modified file's version and its pointer


def _by_date(path: Path) -> Callable[[Request, int], Reply]:
    """Serves the file at ``path`` as it is at each request, known by its ``Last-Modified``
    alone (no ETag), and judges the date conditions as servers do (http.server, nginx): by
    order, not by equality. ``If-Modified-Since`` answers 304 for any file not newer than the
    date (an older one too); ``If-Unmodified-Since`` answers 412 only for a newer one."""

    def handler(request: Request, _: int) -> Reply:
        data = path.read_bytes()
        modified = int(path.stat().st_mtime)
        fields = [("Last-Modified", formatdate(modified, usegmt=True))]
        since = request.headers.get("if-modified-since")
        if since and modified <= parsedate_to_datetime(since).timestamp():
            return head("304 Not Modified", [*fields, ("Content-Length", "0")])
        unless = request.headers.get("if-unmodified-since")
        if unless and modified > parsedate_to_datetime(unless).timestamp():
            return head("412 Precondition Failed", [*fields, ("Content-Length", "0")])
        asked = request.range
        if asked is None or asked[0] >= len(data):
            return head(
                "416 Range Not Satisfiable",
                [("Content-Range", f"bytes */{len(data)}"), ("Content-Length", "0")],
            )
        answer, body = partial(data, request, fields=fields)
        return answer + body

    return handler


_NEWER: dict[str, np.ndarray[Any, Any]] = {
    "w": np.arange(20, dtype=np.float32).reshape(4, 5),
    "b": np.ones(7, np.float32),
}  # 27 parameters
_OLDER: dict[str, np.ndarray[Any, Any]] = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}


def _shows(url: str, tensors: dict[str, np.ndarray[Any, Any]]) -> None:
    """The file at ``url`` opens with the header of ``tensors`` and reads their bytes."""
    with rt.safe_open(url) as f:
        assert f.keys() == sorted(tensors)
        assert f.index.num_parameters == sum(t.size for t in tensors.values())
        for name, tensor in tensors.items():
            assert f.get_slice(name).get_shape() == list(tensor.shape)
            np.testing.assert_array_equal(f.get_tensor(name), tensor)


@pytest.mark.parametrize("older_seconds", [500_000_000, 0], ids=["rolled-back", "same-date"])
def test_a_file_known_by_its_date_alone_is_kept_only_for_that_exact_date_and_size(
    serve: Callable[..., RawServer], tmp_path: Path, older_seconds: int
) -> None:
    # A rollback (an older file put back: an older Last-Modified) or a rewrite within one
    # second (the same Last-Modified, another size): If-Modified-Since would be answered 304
    # and the kept header, of another version, served. The date and size must match exactly.
    path = tmp_path / "m.safetensors"
    path.write_bytes(write_reference(_NEWER))
    newer = 2_000_000_000
    os.utime(path, (newer, newer))
    server = serve(_by_date(path))
    url = f"{server.url}/m.safetensors"
    _shows(url, _NEWER)
    _shows(url, _NEWER)  # kept, and confirmed
    path.write_bytes(write_reference(_OLDER))
    os.utime(path, (newer - older_seconds, newer - older_seconds))
    del server.requests[:]
    _shows(url, _OLDER)
    _shows(url, _OLDER)  # the version kept now
    assert all("if-modified-since" not in r.headers for r in server.requests)
    kept = sorted((info.kind, info.shown) for info in store().entries() if info.kind == "file")
    assert len(kept) == 2  # one entry per version, each under its own date and size


def test_a_file_known_by_its_date_alone_costs_one_request_when_unchanged(
    serve: Callable[..., RawServer], tmp_path: Path
) -> None:
    path = tmp_path / "m.safetensors"
    path.write_bytes(write_reference(_NEWER))
    server = serve(_by_date(path))
    url = f"{server.url}/m.safetensors"
    rt.safe_open(url).__exit__()
    del server.requests[:]
    with rt.safe_open(url) as f:
        assert f.keys() == ["b", "w"]
        assert f.traffic.requests == 1
        assert [r.range for r in server.requests] == [(0, 64 * 1024)]
        assert "if-modified-since" not in server.requests[0].headers
        np.testing.assert_array_equal(f.get_tensor("w"), _NEWER["w"])
        # The window that revalidated is the version there now: its bytes serve the tensor.
        assert f.traffic.requests == 1


def test_a_304_that_names_another_etag_confirms_nothing(
    serve: Callable[..., RawServer],
) -> None:
    # If-None-Match compares weakly: a file now served as W/"v1" (other bytes) matches "v1".
    # A 304 that names another ETag than the kept one is no confirmation of that version.
    versions = [
        (write_reference(_NEWER), '"v1"'),
        (write_reference(_OLDER), 'W/"v1"'),
    ]
    current = [0]

    def handler(request: Request, _: int) -> Reply:
        data, etag = versions[current[0]]
        fields = [("ETag", etag)]
        asked = request.headers.get("if-none-match", "")
        if asked and asked.removeprefix("W/") == etag.removeprefix("W/"):
            return head("304 Not Modified", [*fields, ("Content-Length", "0")])
        answer, body = partial(data, request, fields=fields)
        return answer + body

    server = serve(handler)
    url = f"{server.url}/m.safetensors"
    _shows(url, _NEWER)
    current[0] = 1
    del server.requests[:]
    _shows(url, _OLDER)
    assert [r.headers.get("if-none-match") for r in server.requests[:2]] == ['"v1"', None]


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

"""A sharded index names files inside its model only, wherever the model is: a local folder,
an HTTP prefix (on each request path) and a hub repo (its index read, and its one-call
metadata). An entry that climbs out with ``..``, is absolute or carries a URL scheme is refused
with a :class:`~remotetensors.HeaderError` naming it, before any file is opened; a subfolder of
the model stays allowed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.sources.hub import api as hub_api
from tests.hub_standin import HubStandIn
from tests.rawservers import RawServer, Reply, Request, head, partial
from tests.reference import write_reference

INDEX = "model.safetensors.index.json"
FIRST = "model-00001-of-00002.safetensors"
A = np.arange(8, dtype=np.float32)
B = np.arange(4, dtype=np.int32)
SHARD_A = write_reference({"a": A})
SHARD_B = write_reference({"b": B})
FAST = rt.HttpOptions(backoff_initial_seconds=0.001, backoff_max_seconds=0.002)


def index(second: str) -> bytes:
    """An index that puts tensor ``a`` in the model's first shard and ``b`` in ``second``."""
    weight_map = {"a": FIRST, "b": second}
    return json.dumps({"metadata": {"total_size": 48}, "weight_map": weight_map}).encode()


def assert_refused(caught: pytest.ExceptionInfo[rt.HeaderError], entry: str) -> None:
    error = caught.value
    assert error.kind is rt.HeaderErrorKind.FILE_OUTSIDE_MODEL
    assert f"the entry `b` -> {entry!r}" in str(error)


def check(model: rt.Model) -> None:
    assert model.get_tensor("a").tobytes() == A.tobytes()
    assert model.get_tensor("b").tobytes() == B.tobytes()


# --- a local folder ------------------------------------------------------------------------


def local_model(tmp_path: Path, second: str) -> Path:
    """``model/`` with the first shard and an index, ``outside/x.safetensors`` beside it."""
    model, outside = tmp_path / "model", tmp_path / "outside"
    model.mkdir()
    outside.mkdir()
    (outside / "x.safetensors").write_bytes(SHARD_B)
    (model / FIRST).write_bytes(SHARD_A)
    (model / INDEX).write_bytes(index(second))
    return model


@pytest.mark.parametrize(
    "form", ["parent", "absolute path", "file URL", "http URL", "hf URL", "s3 URL"]
)
def test_a_local_index_never_opens_a_file_outside_its_model(tmp_path: Path, form: str) -> None:
    outside = tmp_path / "outside" / "x.safetensors"
    entry = {
        "parent": "../outside/x.safetensors",
        "absolute path": str(outside),
        "file URL": outside.as_uri(),
        "http URL": "http://127.0.0.1:9/x.safetensors",
        "hf URL": "hf://org/other/x.safetensors",
        "s3 URL": "s3://bucket/x.safetensors",
    }[form]
    model = local_model(tmp_path, entry)
    with pytest.raises(rt.HeaderError) as caught:
        rt.open_model(model)
    assert_refused(caught, entry)
    assert str(caught.value).startswith(f"{model / INDEX}: ")


def test_a_local_index_may_name_a_subfolder(tmp_path: Path) -> None:
    model = local_model(tmp_path, "sub/x.safetensors")
    (model / "sub").mkdir()
    (model / "sub" / "x.safetensors").write_bytes(SHARD_B)
    with rt.open_model(model) as opened:
        check(opened)


# --- over HTTP, on each request path -------------------------------------------------------


def site(files: dict[str, bytes]) -> Callable[[Request, int], Reply]:
    """Files by their path on the server (``/m/...``, ``/outside/...``); 404 for the rest."""

    def answer(request: Request, number: int) -> Reply:
        data = files.get(request.target.split("?", 1)[0])
        if data is None:
            return head("404 Not Found", [("Content-Length", "0")])
        reply, body = partial(data, request, fields=[("ETag", f'"{len(data)}"')])
        return reply + body

    return answer


@pytest.mark.usefixtures("data_path")
@pytest.mark.parametrize(
    "form", ["parent", "absolute path", "same server's URL", "hf URL", "s3 URL", "encoded parent"]
)
def test_an_index_over_http_never_opens_a_file_outside_its_model(
    serve: Callable[..., RawServer], form: str
) -> None:
    files = {"/outside/x.safetensors": SHARD_B, f"/m/{FIRST}": SHARD_A}
    server = serve(site(files))
    entry = {
        "parent": "../outside/x.safetensors",
        "absolute path": "/outside/x.safetensors",
        "same server's URL": f"{server.url}/outside/x.safetensors",
        "hf URL": "hf://org/other/x.safetensors",
        "s3 URL": "s3://bucket/x.safetensors",
        "encoded parent": "%2e%2e/outside/x.safetensors",
    }[form]
    files[f"/m/{INDEX}"] = index(entry)
    with pytest.raises(rt.HeaderError) as caught:
        rt.open_model(f"{server.url}/m/{INDEX}", http_options=FAST)
    assert_refused(caught, entry)
    # No shard opened, not even the model's own (its configs are asked alongside the index).
    asked = [r.target for r in server.requests]
    assert not any(t.endswith(".safetensors") for t in asked), asked


@pytest.mark.usefixtures("data_path")
def test_an_index_over_http_may_name_a_subfolder(serve: Callable[..., RawServer]) -> None:
    files = {f"/m/{INDEX}": index("sub/x.safetensors"), f"/m/{FIRST}": SHARD_A}
    files["/m/sub/x.safetensors"] = SHARD_B
    server = serve(site(files))
    with rt.open_model(f"{server.url}/m/", http_options=FAST) as model:
        check(model)


# --- a hub repo ------------------------------------------------------------------------------


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return hub


@pytest.mark.parametrize("metadata_api", [True, False], ids=["one-call metadata", "index read"])
def test_a_hub_index_never_opens_a_file_outside_its_repo(
    hub_env: HubStandIn, metadata_api: bool
) -> None:
    hub = hub_env
    hub.metadata_api = metadata_api
    entry = "../other/x.safetensors"
    # The repo holds a file under that very name, so that the stand-in's metadata route
    # answers with its header, as a hostile hub or mirror would.
    hub.add("org/m", {INDEX: index(entry), FIRST: SHARD_A, entry: SHARD_B})
    hub.add("org/other", {"x.safetensors": SHARD_B})
    # The first open asks for the index and the metadata at once; once the endpoint is known
    # to have the route, the second asks for the metadata alone.
    for _ in range(2):
        with pytest.raises(rt.HeaderError) as caught:
            rt.open_model("hf://org/m", http_options=FAST)
        assert caught.value.kind is rt.HeaderErrorKind.FILE_OUTSIDE_MODEL
        assert entry in str(caught.value)
    paths = [e.path for e in hub.log.entries]
    assert not any("other" in path for path in paths), paths
    assert not hub.cdn_entries()
    if metadata_api:
        assert hub_api.endpoint_support(hub.endpoint)
        assert sum(path.endswith(INDEX) and "/resolve/" in path for path in paths) == 1


@pytest.mark.parametrize("metadata_api", [True, False], ids=["one-call metadata", "index read"])
def test_a_hub_index_may_name_a_subfolder(hub_env: HubStandIn, metadata_api: bool) -> None:
    hub_env.metadata_api = metadata_api
    hub_env.add(
        "org/m", {INDEX: index("sub/x.safetensors"), FIRST: SHARD_A, "sub/x.safetensors": SHARD_B}
    )
    for _ in range(2):  # the second open through the metadata alone, where the hub has it
        with rt.open_model("hf://org/m", http_options=FAST) as model:
            check(model)

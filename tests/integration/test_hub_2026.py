"""The hub's Xet-era data path (2026): signed CDN URLs that expire, CDN refusals, CloudFront's
gzip quirk, and what every request carries.

Against the stand-in in its 2026 shape (``tests/hub_standin.py``, built from
``reference/fourth-round-facts.md``): a large file's resolve answers 302 to a signed URL on
another origin, valid ``url_validity_seconds``; the CDN refuses an expired signature with 403,
answers a ranged request that accepts gzip with 200 and the whole body, and refuses some valid
ranges with ``403 Auth failed: invalid range``. Tests count requests and refusals, never times:
the stand-in's clock is moved on (:meth:`HubStandIn.advance`) instead of sleeping.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import json
import re
from collections.abc import Mapping
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

import remotetensors as rt
from tests.hub_standin import LFS_THRESHOLD, TOKEN, HubStandIn
from tests.integration.test_models import _no_stored_token
from tests.reference import write_reference

FAST = rt.HttpOptions(backoff_initial_seconds=0.001, backoff_max_seconds=0.002)
SMALL_WINDOW = rt.ReadOptions(header_window_bytes=4096, progress=False, cache=False)


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", _no_stored_token)
    hub.url_validity_seconds = 1.0
    return hub


def big_model(hub: HubStandIn, repo: str = "org/big") -> dict[str, np.ndarray]:
    """A single-file model served by the CDN (over the LFS threshold), several tensors."""
    tensors = {
        f"layer{i}": np.arange(LFS_THRESHOLD // 2, dtype=np.float32) * (i + 1) for i in range(4)
    }
    hub.add(repo, {"model.safetensors": write_reference(tensors)})
    return tensors


def resolves(hub: HubStandIn) -> int:
    return sum("/resolve/" in e.path for e in hub.log.entries)


# --- the stand-in speaks the facts ----------------------------------------------------------


def test_the_stand_in_redirects_to_a_signed_url_on_another_origin(hub_env: HubStandIn) -> None:
    tensors = big_model(hub_env)
    size = len(write_reference(tensors))
    commit = hub_env.repos["org/big"].branches["main"]
    seen: dict[str, tuple[int, Mapping[str, str], bytes]] = {}

    async def ask() -> None:
        import aiohttp

        async def get(name: str, url: str, **headers: str) -> None:
            async with session.get(url, headers=headers, allow_redirects=False) as answer:
                seen[name] = (answer.status, answer.headers.copy(), await answer.read())

        async with aiohttp.ClientSession() as session:
            await get("redirect", f"{hub_env.endpoint}/org/big/resolve/main/model.safetensors")
            location = seen["redirect"][1]["Location"]
            await get("cdn", location, Range="bytes=0-7", **{"Accept-Encoding": "identity"})
            await get("gzip", location, Range="bytes=0-7", **{"Accept-Encoding": "gzip"})
            await get("api", f"{hub_env.endpoint}/api/models/org/big/revision/main")
            hub_env.advance(2.0)
            await get("expired", location, Range="bytes=0-7")

    asyncio.run(ask())
    status, redirect, _ = seen["redirect"]
    assert status == 302
    assert redirect["X-Repo-Commit"] == commit
    assert redirect["X-Linked-Size"] == str(size)
    assert re.fullmatch(r"[0-9a-f]{64}", redirect["X-Xet-Hash"])
    assert re.fullmatch(
        rf'<{hub_env.endpoint}/api/models/org/big/xet-read-token/{commit}>; rel="xet-auth"',
        redirect["Link"],
    )
    location = urlsplit(redirect["Location"])
    assert f"{location.scheme}://{location.netloc}" == hub_env.cdn != hub_env.endpoint
    query = parse_qs(location.query)
    assert query["X-Amz-Expires"] == ["1"]
    assert {"Expires", "Policy", "Signature", "Key-Pair-Id", "X-Amz-Date"} <= set(query)
    status, cdn, body = seen["cdn"]
    assert (status, len(body), cdn["Content-Range"]) == (206, 8, f"bytes 0-7/{size}")
    assert not {"X-Repo-Commit", "X-Linked-Size", "X-Linked-Etag", "X-Xet-Hash"} & set(cdn)
    assert cdn["ETag"] not in (redirect["ETag"], redirect["X-Linked-Etag"])
    status, _, body = seen["gzip"]
    assert (status, len(body)) == (200, size)  # CloudFront's whole body (huggingface_hub#3778)
    status, api, body = seen["api"]
    assert json.loads(body) == {"id": "org/big", "sha": commit}
    assert "X-Repo-Commit" not in api
    assert seen["expired"][0] == 403


# --- signed URLs that expire, again and again --------------------------------------------------


@pytest.mark.parametrize("direct_reads", [True, False], ids=["direct", "httpx"])
def test_reads_that_outlive_their_signed_url_again_and_again_re_resolve_each_time(
    hub_env: HubStandIn, direct_reads: bool
) -> None:
    tensors = big_model(hub_env)
    http = rt.HttpOptions(direct_reads=direct_reads)
    with rt.safe_open(
        "hf://org/big/model.safetensors", options=SMALL_WINDOW, http_options=http
    ) as f:
        for lifetime in range(6):  # a notebook keeps the model open for many URL lifetimes
            hub_env.advance(2.0)  # the URL handed out last has expired
            before, refused = resolves(hub_env), hub_env.refused
            name = f"layer{lifetime % 4}"
            assert f.get_tensor(name).tobytes() == tensors[name].tobytes()
            # One refusal of the expired URL, one new resolve, then the bytes.
            assert hub_env.refused - refused == 1
            assert resolves(hub_env) - before == 1
    assert hub_env.signed == 7  # the opening's URL and one per lifetime


def test_a_cdn_refusal_of_a_fresh_url_is_retried_once_after_resolving_again(
    hub_env: HubStandIn,
) -> None:
    tensors = big_model(hub_env)
    with rt.safe_open("hf://org/big/model.safetensors", options=SMALL_WINDOW) as f:
        hub_env.cdn_invalid_range = 1  # us.aws.cdn.hf.co's "invalid range" (xet-core#897)
        before = resolves(hub_env)
        assert f.get_tensor("layer1").tobytes() == tensors["layer1"].tobytes()
        assert resolves(hub_env) - before == 1


@pytest.mark.parametrize("token", [False, TOKEN])
def test_a_cdn_refusal_is_never_reported_as_a_missing_token(
    hub_env: HubStandIn, token: str | bool
) -> None:
    big_model(hub_env)
    with rt.safe_open(
        "hf://org/big/model.safetensors", options=SMALL_WINDOW, token=token, http_options=FAST
    ) as f:
        hub_env.cdn_invalid_range = 2  # the refusal outlives one resolve again
        with pytest.raises(rt.RemoteTensorsError) as caught:
            f.get_tensor("layer2")
    error = caught.value
    assert not isinstance(error, PermissionError)
    assert isinstance(error, rt.BadResponseError)
    message = str(error)
    assert message.startswith("hf://org/big/model.safetensors: ")
    assert "HTTP 403" in message
    assert "needs a token" not in message
    assert "no token can help" in message
    assert "Signature=***" in message or "Signature" not in message  # redacted


def test_an_occasional_cdn_refusal_costs_one_resolve_and_no_error(hub_env: HubStandIn) -> None:
    tensors = big_model(hub_env)
    hub_env.cdn_invalid_range_every = 3
    options = rt.ReadOptions(header_window_bytes=4096, progress=False, cache=False)
    for _ in range(3):
        with rt.safe_open("hf://org/big/model.safetensors", options=options) as f:
            for name, array in tensors.items():
                assert f.get_tensor(name).tobytes() == array.tobytes()
    assert hub_env.refused >= 3


# --- what a request to the CDN carries ---------------------------------------------------------


@pytest.mark.parametrize("direct_reads", [True, False], ids=["direct", "httpx"])
def test_no_request_to_the_cdn_carries_gzip_or_the_token(
    hub_env: HubStandIn, direct_reads: bool
) -> None:
    tensors = big_model(hub_env)
    hub_env.add("org/gated", {"model.safetensors": write_reference(tensors)}, gated=True)
    # A caller's headers that ask for gzip, in either case: CloudFront would answer 200.
    for accept in ({"Accept-Encoding": "gzip"}, {"accept-encoding": "gzip, deflate"}):
        options = rt.HttpOptions(headers=accept, direct_reads=direct_reads)
        for repo in ("org/big", "org/gated"):
            with rt.open_model(
                f"hf://{repo}", token=TOKEN, http_options=options, options=SMALL_WINDOW
            ) as model:
                for name, array in model.get_tensors(list(tensors)).items():
                    assert array.tobytes() == tensors[name].tobytes()
    cdn = hub_env.cdn_entries()
    assert cdn
    for entry in cdn:
        fields = {name.lower(): value for name, value in entry.headers.items()}
        assert fields.get("accept-encoding") == "identity", entry.headers
        assert "authorization" not in fields, entry.headers
        assert entry.status == 206
    hub = [e for e in hub_env.log.entries if "/resolve/" in e.path]
    assert all(e.headers.get("Authorization") == f"Bearer {TOKEN}" for e in hub)


def test_every_request_names_the_library_and_its_version(hub_env: HubStandIn) -> None:
    tensors = big_model(hub_env)
    hub_env.add("org/listed", {"a.gguf": b"x", "model.safetensors": write_reference(tensors)})
    with rt.open_model("hf://org/big", options=SMALL_WINDOW) as model:
        model.get_tensor("layer0")
    asyncio.run(_list(hub_env))
    agent = f"remotetensors/{importlib.metadata.version('remotetensors')}"
    assert hub_env.cdn_entries()
    assert any("/api/" in e.path for e in hub_env.log.entries)
    for entry in hub_env.log.entries:
        assert entry.headers.get("User-Agent") == agent, (entry.path, entry.headers)


async def _list(hub: HubStandIn) -> None:
    from remotetensors.sources.hub.repo import HubPath, HubRepo

    repo = HubRepo(HubPath.parse("hf://org/listed"), endpoint=hub.endpoint, token=False)
    assert "a.gguf" in await repo.list_files()


def test_a_callers_own_user_agent_is_kept(hub_env: HubStandIn) -> None:
    big_model(hub_env)
    options = rt.HttpOptions(headers={"user-agent": "my-app/2.0"})
    with rt.safe_open(
        "hf://org/big/model.safetensors", http_options=options, options=SMALL_WINDOW
    ) as f:
        f.get_tensor("layer3")
    for entry in hub_env.log.entries:
        agents = [v for k, v in entry.headers.items() if k.lower() == "user-agent"]
        assert agents == ["my-app/2.0"], entry.headers

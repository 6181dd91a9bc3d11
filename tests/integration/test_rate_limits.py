"""Rate limits as the Hugging Face Hub announces them: a policy per bucket, each paced alone.

The hub stand-in answers as the real hub does (``RateLimit-Policy: "fixed window";"api";q=..;
w=..`` and ``RateLimit: "api";r=..;t=..``), the API's requests counted against ``api`` and the
``/resolve/`` downloads against ``resolvers``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import remotetensors as rt
from remotetensors.sources import ratelimit
from remotetensors.sources.ratelimit import WaitTally, limiter_for, tally_waits
from tests.hub_standin import LFS_THRESHOLD, HubStandIn
from tests.integration.test_models import _no_stored_token, sharded
from tests.rawservers import RawServer, Reply, Request, head, partial
from tests.reference import write_reference

API_WINDOW_SECONDS = 30  # longer than the test runs, so the api policy stays exhausted
NO_CONFIGS = rt.ReadOptions(read_configs=False, progress=False)


@pytest.fixture
def fresh_limiters(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limiters are the process's: a fresh registry, so that no earlier test's host state
    (a server once on the same port) is in play."""
    monkeypatch.setattr(ratelimit, "_registry", {})


@pytest.fixture
def hub_env(hub: HubStandIn, monkeypatch: pytest.MonkeyPatch) -> HubStandIn:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setattr("remotetensors.sources.hub.repo.resolve_token", _no_stored_token)
    monkeypatch.setattr(ratelimit, "_registry", {})  # as fresh_limiters
    return hub


@pytest.mark.parametrize("direct_reads", [True, False], ids=["direct", "httpx"])
async def test_an_exhausted_api_policy_does_not_hold_back_downloads(
    hub_env: HubStandIn, direct_reads: bool
) -> None:
    files, tensors = sharded(shards=3, layers_per_shard=4)
    assert all(len(data) >= LFS_THRESHOLD for name, data in files.items() if "model-" in name)
    hub_env.add("org/limited", files)  # shards large enough to be redirected to the CDN
    # One API request per window (the one-call metadata), plenty of downloads.
    hub_env.rate_limits = {"api": (1, API_WINDOW_SECONDS), "resolvers": (3000, 300)}
    options = rt.HttpOptions(direct_reads=direct_reads)
    tally = WaitTally()
    with tally_waits(tally):
        async with rt.open_model_async(
            "hf://org/limited", options=NO_CONFIGS, http_options=options
        ) as model:
            arrays: dict[str, Any] = await model.get_tensors(sorted(tensors))
    for name, array in arrays.items():
        assert array.tobytes() == tensors[name].tobytes(), name

    api = [e for e in hub_env.log.entries if e.path.startswith("/api/")]
    downloads = [e for e in hub_env.log.entries if "/resolve/" in e.path]
    assert [e.status for e in api] == [200]  # the api policy's one request, now used up
    assert len(downloads) > 1
    assert hub_env.throttled == 0
    # No download waited for the exhausted api policy (one limiter state per host made every
    # request wait for the api's reset).
    assert (tally.waits, tally.seconds) == (0, 0.0)

    api_limiter = limiter_for(f"{hub_env.endpoint}/api/models/org/limited")
    download_limiter = limiter_for(f"{hub_env.endpoint}/org/limited/resolve/main/x.safetensors")
    # Each route learnt its policy from the answers' own fields (through httpx, from the
    # hub's redirect that httpx followed: the CDN's answer says nothing of limits) ...
    assert api_limiter.policies() == ("api",)
    assert download_limiter.policies() == ("resolvers",)
    # ... and the api route, not the downloads, waits for the api policy's reset.
    assert api_limiter.wait_seconds() > API_WINDOW_SECONDS / 2
    assert download_limiter.wait_seconds() == 0


def test_each_host_of_a_redirect_learns_from_its_own_answer(
    serve: Callable[..., RawServer], data_path: str, fresh_limiters: None
) -> None:
    # As the hub's downloads go: the origin redirects (its answer counts the request against
    # its own policy), the CDN answers with the bytes. httpx follows the redirect itself and
    # shows us the redirect's headers as a hop: they are the origin's, not the CDN's.
    data = write_reference({"w": np.arange(10, dtype=np.float32)})
    cdn_fields = [("ETag", '"v1"'), ("RateLimit", '"cdn";r=0;t=30')]

    def cdn_answer(request: Request, number: int) -> Reply:
        answer, body = partial(data, request, fields=cdn_fields)
        return answer + body

    cdn = serve(cdn_answer)
    origin_fields = [
        ("Location", f"{cdn.url}/m.safetensors"),
        ("RateLimit-Policy", '"fixed window";"resolvers";q=3000;w=300'),
        ("RateLimit", '"resolvers";r=0;t=30'),
        ("Content-Length", "0"),
    ]
    origin = serve(lambda request, number: head("302 Found", origin_fields))
    with rt.safe_open(f"{origin.url}/m.safetensors") as f:
        assert f.keys() == ["w"]
    assert len(origin.requests) == len(cdn.requests) == 1  # the header came in one request
    at_origin = limiter_for(f"{origin.url}/m.safetensors")
    at_cdn = limiter_for(f"{cdn.url}/m.safetensors")
    assert (at_origin.policies(), at_cdn.policies()) == (("resolvers",), ("cdn",))
    assert at_origin.wait_seconds() > 15  # r=0 until 30 s from the answer
    assert at_cdn.wait_seconds() > 15

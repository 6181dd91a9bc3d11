"""Rate limits as the Hugging Face Hub announces them: a policy per bucket, each paced alone.

The hub stand-in answers as the real hub does (``RateLimit-Policy: "fixed window";"api";q=..;
w=..`` and ``RateLimit: "api";r=..;t=..``), the API's requests counted against ``api`` and the
``/resolve/`` downloads against ``resolvers``.
"""

from __future__ import annotations

import re
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


# --- spending the buckets (issue 40) ---------------------------------------------------------

WINDOW = 2  # seconds: the hub's 300, scaled down (its quotas too)
QUOTAS = {"api": (20, WINDOW), "resolvers": (60, WINDOW)}


def _limited_fleet(hub: HubStandIn, count: int) -> tuple[dict[str, dict[str, int]], set[str]]:
    """``count`` small repos, every fifth sharded in two shards: location -> counts, and the
    sharded ones."""
    from tests.integration.test_models import expected_counts

    files, tensors = sharded(shards=2, layers_per_shard=1)
    expected, shards = {}, set()
    for i in range(count):
        location = f"hf://quota/m{i}"
        if i % 5 == 0:
            hub.add(f"quota/m{i}", files)
            expected[location] = expected_counts(tensors)
            shards.add(location)
        else:
            data = write_reference({"w": np.ones(i + 1, np.int8)})
            hub.add(f"quota/m{i}", {"model.safetensors": data})
            expected[location] = {"I8": i + 1}
    return expected, shards


def _quota_bound_seconds(fixed: dict[str, int], flexible: int) -> float:
    """Seconds the quotas allow for ``fixed`` requests per bucket and ``flexible`` ones that
    either bucket may take, sent at the quotas' sustained rates."""
    rates = {name: quota / window for name, (quota, window) in QUOTAS.items()}
    alone = max(fixed[name] / rate for name, rate in rates.items())
    pooled = (sum(fixed.values()) + flexible) / sum(rates.values())
    return max(alone, pooled)


def _per_bucket(hub: HubStandIn) -> dict[str, int]:
    """Requests the hub counted per bucket (the CDN's are in none)."""
    sent = {"api": 0, "resolvers": 0}
    for entry in hub.log.entries:
        if entry.path.startswith("/api/"):
            sent["api"] += 1
        elif "/resolve/" in entry.path:
            sent["resolvers"] += 1
    return sent


def _few_429s(hub: HubStandIn, started: float) -> None:
    """No 429 after the scan's first window (the first is sent before any answer told the
    quotas)."""
    assert _windows_with_429(hub, started) in ([], [0])


def _windows_with_429(hub: HubStandIn, started: float) -> list[int]:
    """The windows (0 from ``started``) in which the hub answered 429."""
    return sorted({int((at - started) // WINDOW) for at in hub.throttled_at if at >= started})


def test_a_scan_spends_both_buckets_and_keeps_within_the_quotas(hub_env: HubStandIn) -> None:
    import time

    count = 100
    expected, sharded_repos = _limited_fleet(hub_env, count)
    hub_env.rate_limits = dict(QUOTAS)
    options = rt.ReadOptions(read_configs=False, progress=False)
    # First scan: each single-file repo needs its file (resolvers); each sharded one its
    # single file's 404, its index (resolvers) and its shards' headers: one api call or two
    # range reads (counted here as the one api call, the cheaper).
    started = time.monotonic()
    first = {r.location: r for r in rt.scan(expected, concurrency=16, options=options)}
    first_seconds = time.monotonic() - started
    assert {k: r.summary.by_dtype for k, r in first.items() if r.summary} == expected
    fixed = {"resolvers": count + len(sharded_repos), "api": 0}
    bound = _quota_bound_seconds(fixed, flexible=len(sharded_repos))
    sent = _per_bucket(hub_env)
    assert first_seconds <= 1.1 * bound, (first_seconds, bound, sent, hub_env.throttled)
    _few_429s(hub_env, started)
    # A re-scan, later (the windows the first scan spent have ended): each repo needs its
    # commit, from either bucket (the revision API, or the X-Repo-Commit of a one-byte
    # resolve read); nothing else.
    time.sleep(WINDOW)
    hub_env.log.clear()
    hub_env.throttled = 0
    started = time.monotonic()
    second = {r.location: r for r in rt.scan(expected, concurrency=16, options=options)}
    second_seconds = time.monotonic() - started
    assert {k: r.summary.by_dtype for k, r in second.items() if r.summary} == expected
    # Each result shows the buckets' room (the command line's bar and summary line show it).
    quotas = {
        key.rsplit(" ", 1)[1]: pair
        for key, pair in second[f"hf://quota/m{count - 1}"].quotas.items()
    }
    assert set(quotas) == {"api", "resolvers"}
    assert quotas["api"][1] == 20
    assert quotas["resolvers"][1] == 60
    assert all(0 <= left <= quota for left, quota in quotas.values())
    buckets = _per_bucket(hub_env)
    assert sum(buckets.values()) <= count  # at most one request per repo
    assert buckets["api"]
    assert buckets["resolvers"]
    bound = _quota_bound_seconds({"api": 0, "resolvers": 0}, flexible=count)
    assert second_seconds <= 1.1 * bound, (second_seconds, bound, buckets)
    _few_429s(hub_env, started)


def test_the_command_line_shows_the_buckets_room(
    hub_env: HubStandIn, capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    from remotetensors.cli.app import main
    from remotetensors.cli.scan import quota_fields

    assert quota_fields(
        {"https://hf.co api": (480, 500), "https://hf.co resolvers": (7, 3000)}
    ) == {
        "api": "480/500",
        "resolvers": "7/3000",
    }
    hub_env.rate_limits = {"api": (500, 300), "resolvers": (3000, 300)}
    for i in range(2):
        data = write_reference({"w": np.ones(i + 1, np.int8)})
        hub_env.add(f"org/m{i}", {"model.safetensors": data})
    listed = tmp_path / "models.txt"
    listed.write_text("hf://org/m0\nhf://org/m1\n")
    assert main(["params", "--from-file", str(listed)]) == 0
    out = capsys.readouterr().out
    # (a scan asks the single files alone: no api request was needed for them)
    assert re.search(r"rate limits left: (api \d+/500, )?resolvers \d+/3000\)", out), out

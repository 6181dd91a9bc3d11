"""The rate limiter (``sources/ratelimit.py``) on an injected clock: the IETF fields as the hub
sends them, one state per policy, and requests sorted into routes; no server, no waiting."""

from __future__ import annotations

import asyncio

import pytest

from remotetensors.sources.ratelimit import (
    MAX_WAIT_SECONDS,
    HostLimiter,
    Policy,
    Remaining,
    WaitTally,
    limiter_for,
    parse_policies,
    parse_remaining,
    route_of,
    tally_waits,
)


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def hub(clock: Clock) -> HostLimiter:
    return HostLimiter("https://huggingface.co", clock=clock)


def hub_answer(bucket: str, quota: int, remaining: int, reset: int) -> dict[str, str]:
    """The fields of an answer of the hub (its own form; see its rate-limit documentation)."""
    return {
        "RateLimit-Policy": f'"fixed window";"{bucket}";q={quota};w=300',
        "RateLimit": f'"{bucket}";r={remaining};t={reset}',
    }


# --- the fields -----------------------------------------------------------------------------


def test_the_hubs_fields_are_read() -> None:
    assert parse_policies('"fixed window";"api";q=500;w=300') == [Policy("api", 500, 300)]
    assert parse_remaining('"api";r=5;t=200') == [Remaining("api", 5, 200)]


def test_the_drafts_fields_are_read() -> None:
    assert parse_policies('"permin";q=50;w=60, burst;q=1000;qu="content-bytes"') == [
        Policy("permin", 50, 60),
        Policy("burst", 1000, None, "content-bytes"),
    ]
    assert parse_remaining('"permin";r=0;t=5, "perhr";r=90') == [
        Remaining("permin", 0, 5),
        Remaining("perhr", 90, None),
    ]


@pytest.mark.parametrize(
    "policy",
    [
        "100;w=60",  # the older drafts' form: an Integer, no name
        '"fixed window"',  # no quota
        '"a";q=-1',
        '"a";q=?1',  # a Boolean is no count
        '"a";q=@100',  # nor a Date
        '"a";q="100"',
        '"a";q=10;w=x',
        '"a";q=10;qu=5',
        ":YQ==:;q=10",  # a Byte Sequence is no name
        "garbage((",
    ],
)
def test_items_that_are_no_policy_are_skipped(policy: str) -> None:
    assert parse_policies(f'{policy}, "ok";q=1') == [Policy("ok", 1)]


@pytest.mark.parametrize(
    "remaining",
    ['"a"', '"a";r=-1', '"a";r=?0', '"a";r=1;t=soon', "5;t=1", 'limit=100, "a";r='],
)
def test_items_that_say_nothing_remaining_are_skipped(remaining: str) -> None:
    assert parse_remaining(f'{remaining}, "ok";r=1') == [Remaining("ok", 1)]


@pytest.mark.parametrize(
    ("url", "route"),
    [
        ("https://huggingface.co/api/models/org/name/tree/main", "api"),
        ("https://huggingface.co/org/name/resolve/main/model.safetensors", "resolve"),
        ("https://huggingface.co/datasets/org/name/resolve/abc/x.gguf", "resolve"),
        ("https://huggingface.co/gpt2/resolve/main/model.safetensors", "resolve"),
        ("https://cdn-lfs.hf.co/repos/ab/cd/0123?X-Amz-Signature=x", ""),
        ("https://example.com/models/api/resolve.safetensors", ""),
    ],
)
def test_routes(url: str, route: str) -> None:
    assert limiter_for(url).route == route


def test_a_hosts_limiter_is_one_whoever_asks_and_named_without_credentials() -> None:
    # Its name is logged while a request waits: a URL's password must not be in it.
    plain = limiter_for("https://limits.example/org/name/resolve/main/x")
    with_user = limiter_for("https://user:s3cr3t@LIMITS.example/org/name/resolve/main/x")
    assert with_user.host is plain.host
    assert plain.host.host == "https://limits.example"


def test_route_of_a_path() -> None:
    assert route_of("/api/") == "api"
    assert route_of("/") == ""


# --- pacing per policy ----------------------------------------------------------------------


def test_a_counted_policy_sends_while_its_window_has_room_then_waits_for_its_end(
    hub: HostLimiter, clock: Clock
) -> None:
    # A named policy whose answers say q, r and t is counted, not paced (issue 40: spend the
    # buckets, not the clock): what remains of the window goes at once, the rest waits for
    # its end and a guard of a second (2% of 300 s, at most 1 s), then the next window's quota.
    hub.observe("api", 200, hub_answer("api", 500, 3, 200))
    assert [hub.reserve("api") for _ in range(3)] == [0, 0, 0]
    assert hub.reserve("api") == pytest.approx(201)
    assert hub.reserve("api") == pytest.approx(201)  # the next window, counted from its quota
    # An answer of the same window that says less remains than counted lowers the count.
    clock.now += 250
    hub.observe("api", 200, hub_answer("api", 500, 0, 250))
    assert hub.wait_seconds("api") == pytest.approx(251)
    clock.now += 252
    assert [hub.reserve("api") for _ in range(2)] == [0, 0]


def test_an_exhausted_api_policy_does_not_hold_back_downloads(hub: HostLimiter) -> None:
    hub.observe("api", 200, hub_answer("api", 500, 0, 200))
    hub.observe("resolve", 302, hub_answer("resolvers", 3000, 2900, 200))
    assert hub.wait_seconds("api") == pytest.approx(201)  # its end, and a second's guard
    assert [hub.reserve("resolve") for _ in range(3)] == [0, 0, 0]
    assert hub.reserve("") == 0  # a route that learnt nothing waits for nothing


def test_an_answer_about_downloads_does_not_reset_the_api_pacing(hub: HostLimiter) -> None:
    hub.observe("api", 200, hub_answer("api", 500, 1, 200))
    hub.observe("resolve", 302, hub_answer("resolvers", 3000, 2900, 200))
    assert [hub.reserve("api") for _ in range(2)] == [0, pytest.approx(201)]
    assert hub.policies_of("api") == ("api",)
    assert hub.policies_of("resolve") == ("resolvers",)


def test_a_route_waits_for_every_policy_its_answer_counted(hub: HostLimiter) -> None:
    headers = {
        "RateLimit-Policy": '"minute";q=60;w=60, "day";q=1000;w=86400',
        "RateLimit": '"minute";r=50;t=30, "day";r=0;t=200',
    }
    hub.observe("", 200, headers)
    assert hub.policies_of("") == ("minute", "day")
    assert hub.wait_seconds("") == pytest.approx(201)  # the day's end, and the guard


def test_a_policy_counted_in_bytes_does_not_pace_requests(hub: HostLimiter) -> None:
    hub.observe(
        "",
        200,
        {"RateLimit-Policy": '"bytes";q=1000000;qu="content-bytes"', "RateLimit": '"bytes";r=0'},
    )
    assert hub.reserve("") == 0
    assert hub.policies_of("") == ()


def test_without_t_the_policy_window_is_the_reset(hub: HostLimiter) -> None:
    hub.observe("", 200, {"RateLimit-Policy": '"p";q=10;w=60', "RateLimit": '"p";r=0'})
    assert hub.wait_seconds("") == pytest.approx(61)  # and the guard (at most a second)


def test_the_older_fields_pace_their_own_route_only(hub: HostLimiter) -> None:
    hub.observe("", 200, {"RateLimit-Remaining": "5", "RateLimit-Reset": "30"})
    assert [hub.reserve("") for _ in range(2)] == [0, 6]
    assert hub.reserve("api") == 0
    hub.observe("", 200, {"RateLimit-Remaining": "soon", "RateLimit-Reset": "30"})  # ignored
    assert hub.reserve("") == pytest.approx(12)


# --- 429 and 503 ----------------------------------------------------------------------------


def test_retry_after_holds_back_what_the_answer_counted_against(hub: HostLimiter) -> None:
    headers = {**hub_answer("api", 500, 0, 10), "Retry-After": "30"}
    hub.observe("api", 429, headers)
    assert hub.throttled == 1
    assert hub.wait_seconds("api") == pytest.approx(30)
    assert hub.wait_seconds("resolve") == 0


def test_retry_after_naming_no_policy_holds_back_its_route_only(
    hub: HostLimiter, clock: Clock
) -> None:
    hub.observe("resolve", 503, {"Retry-After": "3"})
    hub.observe("api", 429, {})  # no Retry-After: a second
    assert hub.throttled == 1
    assert hub.wait_seconds("resolve") == pytest.approx(3)
    assert hub.wait_seconds("api") == pytest.approx(1)
    assert hub.wait_seconds("") == 0
    clock.now += 3
    assert hub.wait_seconds("resolve") == hub.wait_seconds("api") == 0


def test_no_wait_is_longer_than_the_cap(hub: HostLimiter) -> None:
    hub.observe("api", 429, {"Retry-After": "86400"})
    assert hub.wait_seconds("api") == MAX_WAIT_SECONDS


@pytest.mark.parametrize(
    "headers",
    [
        {"RateLimit": "((((", "RateLimit-Policy": '"'},
        {"RateLimit": '"a";r=1e9;t=1', "RateLimit-Policy": "\x00"},
        {"RateLimit-Remaining": "-1", "RateLimit-Reset": "inf"},
        {"RateLimit-Remaining": "nan", "RateLimit-Reset": "1"},
    ],
)
def test_malformed_fields_are_ignored(hub: HostLimiter, headers: dict[str, str]) -> None:
    hub.observe("api", 200, headers)
    assert hub.reserve("api") == 0


async def test_a_wait_is_slept_and_tallied(clock: Clock) -> None:
    limiter = HostLimiter("http://h", clock=clock)
    limiter.observe("", 200, {"RateLimit": '"p";r=1;t=0.01'})
    tally = WaitTally()
    with tally_waits(tally):
        await limiter.acquire("")
        await asyncio.wait_for(limiter.acquire(""), 30)  # 0.01 s, however slow the machine
    assert tally.waits == 1
    assert tally.seconds == pytest.approx(0.01)
    assert limiter.waited_seconds == pytest.approx(0.01)

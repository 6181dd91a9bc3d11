"""Where a redirect may lead and what it carries (``sources/http/policy.headers_for`` and
``sources/http/answer.follow``), without a server: the rules every request path obeys."""

from __future__ import annotations

import pytest

import remotetensors as rt
from remotetensors.sources.http.answer import Failed, Follow, follow
from remotetensors.sources.http.policy import (
    CARRIED_ACROSS_ORIGINS,
    MAX_REDIRECTS,
    carried,
    headers_for,
    origin,
)

SECRETS = {
    "Authorization": "Bearer s3cr3t",
    "Cookie": "session=c00kie",
    "X-Api-Key": "k3y",
    "PRIVATE-TOKEN": "t0ken",
}
HARMLESS = {
    "Range": "bytes=0-9",
    "If-Match": '"v1"',
    "If-Unmodified-Since": "Mon, 23 Nov 2026 08:00:00 GMT",
    "Accept-Encoding": "identity",
    "Accept-Language": "en",
    "User-Agent": "mine/1.0",
}
NAMED = "https://hub.example/org/m/resolve/main/m.safetensors"


def test_origins_compare_scheme_host_and_port_with_default_ports_filled_in() -> None:
    assert origin("http://Host.Example/a") == ("http", "host.example", 80)
    assert origin("http://host.example:80/b") == origin("http://host.example/c")
    assert origin("https://host.example:443/") == origin("https://host.example/x?y")
    assert origin("https://user:pw@host.example/") == origin("https://host.example/")
    assert origin("http://[::1]:8080/a") == ("http", "::1", 8080)
    assert origin("http://host.example:8080/") != origin("http://host.example/")
    assert origin("http://host.example/") != origin("https://host.example/")
    assert origin("http://h:notaport/") == ("http", "h:notaport", None)


def test_the_named_origin_gets_every_header_but_proxy_authorization() -> None:
    given = {**SECRETS, **HARMLESS, "Proxy-Authorization": "Basic cHJveHk="}
    sent = headers_for(given, named=NAMED, url="https://HUB.example:443/org/m/resolve/abc/m")
    assert sent == {**SECRETS, **HARMLESS}


@pytest.mark.parametrize(
    "url",
    [
        "https://cdn.example/blob",  # another host
        "https://hub.example:8443/blob",  # another port
        "http://hub.example/blob",  # another scheme
        "https://hub.example.evil/blob",  # a host that merely starts alike
    ],
)
def test_another_origin_gets_only_the_allow_list(url: str) -> None:
    given = {**SECRETS, **HARMLESS, "proxy-authorization": "Basic cHJveHk="}
    assert headers_for(given, named=NAMED, url=url) == HARMLESS


def test_names_are_matched_in_any_case_and_repeated_fields_keep_their_order() -> None:
    fields = [("range", "bytes=0-1"), ("X-API-KEY", "k"), ("accept", "a"), ("ACCEPT", "b")]
    assert carried(fields, foreign=True) == [
        ("range", "bytes=0-1"),
        ("accept", "a"),
        ("ACCEPT", "b"),
    ]
    assert carried([("PROXY-AUTHORIZATION", "x"), ("X-Api-Key", "k")], foreign=False) == [
        ("X-Api-Key", "k")
    ]
    # The list holds no header that authenticates.
    assert not {"authorization", "cookie", "proxy-authorization"} & CARRIED_ACROSS_ORIGINS


def test_a_chain_that_comes_back_to_the_named_origin_gets_the_credentials_there_again() -> None:
    # The credentials were given for that origin; the hop between never sees them.
    assert "Authorization" not in headers_for(SECRETS, named=NAMED, url="https://cdn.example/x")
    assert headers_for(SECRETS, named=NAMED, url="https://hub.example/other") == SECRETS


def refused(url: str, location: str, visited: tuple[str, ...] = ()) -> rt.RedirectError:
    step = follow(url, location, visited, "m.safetensors")
    assert isinstance(step, Failed), step
    assert isinstance(step.error, rt.RedirectError)
    assert isinstance(step.error, rt.BadResponseError)
    return step.error


def test_redirects_to_http_and_https_are_followed_relative_ones_joined() -> None:
    assert follow("http://a/x/y", "z", (), "f") == Follow("http://a/x/z")
    assert follow("http://a/x", "//b:81/c", (), "f") == Follow("http://b:81/c")
    assert follow("http://a/x", "https://a/x", (), "f") == Follow("https://a/x")  # an upgrade
    assert follow("https://a/x", "https://b/y", (), "f") == Follow("https://b/y")


def test_an_https_request_is_never_downgraded_and_the_error_names_both_urls_redacted() -> None:
    error = refused(
        "https://user:pw@a/m.safetensors?token=t0k",
        "http://b/cdn/m?X-Amz-Signature=s1g&v=1",
    )
    message = str(error)
    assert message.startswith("m.safetensors: ")
    assert "https://user:***@a/m.safetensors?token=***" in message
    assert "http://b/cdn/m?X-Amz-Signature=***&v=1" in message
    assert "downgraded" in message
    for secret in ("pw", "t0k", "s1g"):
        assert secret not in message.replace("https", "")
    # Relative and scheme-relative ones keep the scheme: no downgrade there.
    assert follow("https://a/x", "//b/y", (), "f") == Follow("https://b/y")


@pytest.mark.parametrize(
    "location",
    ["ftp://b/m", "file:///etc/passwd", "data:text/plain,hi", "javascript:alert(1)", "https://?x"],
)
def test_a_redirect_to_another_scheme_or_no_host_is_refused(location: str) -> None:
    assert "only http and https" in str(refused("http://a/m", location))


def test_a_loop_is_refused_at_its_first_repeated_url() -> None:
    assert "redirect loop" in str(refused("http://a/m", "/m"))  # to itself
    assert "redirect loop" in str(refused("http://a/b", "http://a/m", ("http://a/m",)))
    # The same URL as httpx writes it is the same URL.
    assert "redirect loop" in str(refused("http://a/b", "http://a/m%20x", ("http://a/m x",)))


def test_at_most_max_redirects_are_followed() -> None:
    chain = tuple(f"http://a/{n}" for n in range(MAX_REDIRECTS))
    assert follow(chain[-1], "/next", chain[:-1], "f") == Follow("http://a/next")
    message = str(refused("http://a/last", "/next", chain))
    assert f"more than {MAX_REDIRECTS} redirects" in message
    assert "from http://a/last to http://a/next" in message

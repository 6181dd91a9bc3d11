"""A hostile network, round three: where redirects may lead and what they carry.

Rules 1-3 of the round (see the README's "A hostile network"): a redirect to another origin
carries only harmless headers, ``Proxy-Authorization`` reaches no origin, an ``https`` request is
never downgraded, and a redirect elsewhere than http(s), a loop or one hop too many is a
:class:`RedirectError`. Each case runs on every data path (the direct reader, the direct reader
with bodies in threads, httpx) and, where a redirect can come on either, on the first request and
on a later data request; the hub, its API (``sources/http/whole.py``), a caller's own httpx
client, a configured proxy and fsspec's HTTP filesystem have cases of their own.
"""

from __future__ import annotations

import asyncio
import base64
import gc
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import httpx
import pytest

import remotetensors as rt
from remotetensors.models.sync import run_sync
from remotetensors.redact import redact_url
from remotetensors.sources.fsspec import FsspecSource
from remotetensors.sources.http.policy import MAX_REDIRECTS
from remotetensors.sources.http.source import HttpSource
from remotetensors.sources.hub.repo import HubPath, HubRepo
from tests.certificates import ThrowawayCA
from tests.hub_standin import HubStandIn
from tests.integration.conftest import DATA_PATHS, TLS_PATHS, data_paths
from tests.integration.test_hostile_network import (
    FAST,
    OLD,
    OLD_W,
    WINDOW,
    assert_path,
    good,
)
from tests.rawservers import RawServer, Reply, Request, head, partial

SECRETS = {
    "Authorization": "Bearer s3cr3t",
    "X-Api-Key": "k3y",
    "Cookie": "session=c00kie",
    "X-Auth-Token": "t0ken",
}
HARMLESS = {"Accept-Language": "en", "Cache-Control": "no-transform"}
PROXY_AUTH = "Basic " + base64.b64encode(b"caller:pr0xy").decode()
TOKEN = "hf_s3cr3t_token"

# Every case that takes ``data_path`` runs over TLS too: the direct reader's HTTPS bodies,
# in the loop and in worker threads.
data_path = data_paths([*DATA_PATHS, *TLS_PATHS])

Handler = Callable[[Request, int], Reply]

# A redirect on the file's first request, or on a later data request (to a URL that answered).
WHEN = pytest.mark.parametrize("when", ["first", "later"])


@pytest.fixture(autouse=True)
def quiet(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """A refused redirect is an error, never noise on stderr or a warning in the log."""
    yield
    gc.collect()
    time.sleep(0.05)
    err = capfd.readouterr().err
    for noise in ("never retrieved", "Traceback", "Exception ignored", "Task was destroyed"):
        assert noise not in err, err
    assert not [r.getMessage() for r in caplog.records if r.levelno >= 30]


def redirect(location: str, status: str = "302 Found") -> bytes:
    return head(status, [("Location", location), ("Content-Length", "0")])


def redirecting(where: str | Callable[[Request, int], str], when: str) -> Handler:
    """Redirect to ``where`` (a URL, or one made from the request and its number): every
    request (``first``: later reads go straight to where it led), or every request but the
    first, which is answered with the data (``later``)."""

    def answer(request: Request, number: int) -> Reply:
        if when == "later" and number == 0:
            answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
            return answer + body
        return redirect(where if isinstance(where, str) else where(request, number))

    return answer


def requests_before_refusal(when: str, chain: int) -> int:
    """Requests a server sees when a chain of ``chain`` requests is refused (not retried)."""
    return chain if when == "first" else 1 + chain


def without(request: Request, names: dict[str, str] | set[str]) -> bool:
    return not {name.lower() for name in names} & set(request.headers)


def carries(request: Request, headers: dict[str, str]) -> bool:
    return all(request.headers.get(name.lower()) == value for name, value in headers.items())


# --- rule 1: a redirect to another origin carries only harmless headers ------------------------


@WHEN
def test_a_redirect_to_another_origin_carries_only_harmless_headers(
    serve: Callable[..., RawServer], data_path: str, when: str
) -> None:
    target = serve(good())
    origin = serve(redirecting(f"{target.url}/cdn/m.safetensors", when))
    options = replace(FAST, headers={**SECRETS, **HARMLESS})
    with rt.safe_open(f"{origin.url}/m.safetensors", http_options=options) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert origin.requests
    assert all(carries(r, SECRETS) for r in origin.requests)
    assert target.requests
    for request in target.requests:
        assert without(request, SECRETS), request.headers
        assert carries(request, HARMLESS), request.headers
        assert request.range is not None
    assert_path(target, data_path)


@WHEN
def test_a_redirect_within_the_origin_keeps_every_header(
    serve: Callable[..., RawServer], data_path: str, when: str
) -> None:
    def answer(request: Request, number: int) -> Reply:
        if request.target.startswith("/files/") or (when == "later" and number == 0):
            answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
            return answer + body
        return redirect("/files/m.safetensors")

    server = serve(answer)
    options = replace(FAST, headers=SECRETS)
    with rt.safe_open(f"{server.url}/m.safetensors", http_options=options) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert any(r.target == "/files/m.safetensors" for r in server.requests)
    assert all(carries(r, SECRETS) for r in server.requests)


def test_the_hub_token_and_the_callers_headers_go_to_the_hub_only(
    hub: HubStandIn, data_path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
    hub.add("org/big", {"model.safetensors": OLD})  # large: the hub redirects it to its CDN
    options = replace(FAST, headers={"X-Api-Key": "k3y", **HARMLESS})
    with rt.safe_open("hf://org/big/model.safetensors", token=TOKEN, http_options=options) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    seen = [(e.path, {k.lower(): v for k, v in e.headers.items()}) for e in hub.log.entries]
    cdn = {e.path for e in hub.cdn_entries()}
    at_hub = [headers for path, headers in seen if path not in cdn]
    at_cdn = [headers for path, headers in seen if path in cdn]
    assert at_hub
    assert len(at_cdn) == 2  # the first read after the redirect, then the data read
    for headers in at_hub:
        assert headers["authorization"] == f"Bearer {TOKEN}"
        assert headers["x-api-key"] == "k3y"
    for headers in at_cdn:
        assert "authorization" not in headers
        assert "x-api-key" not in headers
        assert headers["accept-language"] == "en"


def test_the_hubs_api_follows_a_redirect_by_the_same_rules(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    listing = b'[{"type": "file", "path": "model.safetensors"}]'
    target = serve(
        lambda request, number: head("200 OK", [("Content-Length", str(len(listing)))]) + listing
    )
    api = serve(lambda request, number: redirect(f"{target.url}/mirror/listing", "307 Moved"))
    options = replace(FAST, headers={"X-Api-Key": "k3y", "Proxy-Authorization": PROXY_AUTH})
    # At a commit: a branch would first be asked for its commit (the listing names none).
    at = HubPath.parse(f"hf://org/m@{'c' * 40}")
    repo = HubRepo(at, endpoint=api.url, token=TOKEN, http_options=options)
    assert asyncio.run(repo.list_files()) == ["model.safetensors"]
    (asked,) = api.requests
    assert carries(asked, {"Authorization": f"Bearer {TOKEN}", "X-Api-Key": "k3y"})
    (followed,) = target.requests
    assert followed.target == "/mirror/listing"
    for request in (asked, followed):
        assert "proxy-authorization" not in request.headers
    assert without(followed, {"Authorization", "X-Api-Key"}), followed.headers


def test_a_listing_page_linked_on_another_origin_gets_no_token(
    serve: Callable[..., RawServer], data_path: str
) -> None:
    def page(body: bytes, *fields: tuple[str, str]) -> bytes:
        return head("200 OK", [("Content-Length", str(len(body))), *fields]) + body

    second = page(b'[{"type": "file", "path": "b.safetensors"}]')
    elsewhere = serve(lambda request, number: second)
    link = ("Link", f'<{elsewhere.url}/page/2>; rel="next"')
    first = page(b'[{"type": "file", "path": "a.safetensors"}]', link)
    api = serve(lambda request, number: first)
    options = replace(FAST, headers={"X-Api-Key": "k3y"})
    at = HubPath.parse(f"hf://org/m@{'c' * 40}")  # at a commit, as above
    repo = HubRepo(at, endpoint=api.url, token=TOKEN, http_options=options)
    assert asyncio.run(repo.list_files()) == ["a.safetensors", "b.safetensors"]
    (asked,) = api.requests
    assert carries(asked, {"Authorization": f"Bearer {TOKEN}", "X-Api-Key": "k3y"})
    (linked,) = elsewhere.requests
    assert without(linked, {"Authorization", "X-Api-Key"}), linked.headers


def test_a_callers_client_keeps_its_own_credentials_home(serve: Callable[..., RawServer]) -> None:
    target = serve(good())
    origin = serve(lambda request, number: redirect(f"{target.url}/cdn/m.safetensors"))

    async def first_bytes() -> bytes:
        async with httpx.AsyncClient(
            headers={"X-Api-Key": "k3y", "Proxy-Authorization": PROXY_AUTH},
            auth=("user", "pa55"),
            cookies={"session": "c00kie"},
        ) as client:
            source = HttpSource(f"{origin.url}/m.safetensors", client=client, options=FAST)
            try:
                return (await source.open_prefix(WINDOW)).data
            finally:
                await source.aclose()

    assert asyncio.run(first_bytes()) == OLD[:WINDOW]
    # The first request goes through the caller's client, with all it adds for its origin.
    (asked,) = origin.requests
    assert asked.headers["x-api-key"] == "k3y"
    assert asked.headers["authorization"] == "Basic " + base64.b64encode(b"user:pa55").decode()
    assert asked.headers["cookie"] == "session=c00kie"
    (followed,) = target.requests
    assert followed.headers["host"] == f"127.0.0.1:{target.port}"
    for request in (asked, followed):
        assert "proxy-authorization" not in request.headers
    assert without(followed, {"X-Api-Key", "Authorization", "Cookie"}), followed.headers


# --- rule 2: Proxy-Authorization goes to a configured proxy, never to an origin ----------------


@WHEN
def test_proxy_authorization_never_reaches_an_origin(
    serve: Callable[..., RawServer], data_path: str, when: str
) -> None:
    target = serve(good())
    origin = serve(redirecting(f"{target.url}/cdn/m.safetensors", when))
    options = replace(FAST, headers={"Proxy-Authorization": PROXY_AUTH, "X-Api-Key": "k3y"})
    with rt.safe_open(f"{origin.url}/m.safetensors", http_options=options) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    everything = origin.requests + target.requests
    assert len(everything) == 3
    assert all("proxy-authorization" not in r.headers for r in everything)
    assert all(r.headers["x-api-key"] == "k3y" for r in origin.requests)


def test_a_proxy_gets_the_credentials_of_its_configuration_not_the_callers_header(
    serve: Callable[..., RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = serve(good())  # a forward proxy that answers for the origin itself
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.setenv("http_proxy", proxy.url.replace("http://", "http://puser:ppass@"))
    url = "http://origin.invalid:8080/m.safetensors"  # never resolved: the proxy is asked
    options = replace(FAST, headers={"Proxy-Authorization": PROXY_AUTH})
    with rt.safe_open(url, http_options=options) as f:
        assert f.get_tensor("w").tobytes() == OLD_W.tobytes()
    assert [r.target for r in proxy.requests] == [url, url]  # through the proxy, absolute-form
    configured = "Basic " + base64.b64encode(b"puser:ppass").decode()
    assert [r.headers["proxy-authorization"] for r in proxy.requests] == [configured] * 2


# --- rule 3: no downgrade, http(s) only, no loop, a bounded number of hops ---------------------


@WHEN
def test_https_is_never_downgraded_to_http(
    serve: Callable[..., RawServer], tls: ThrowawayCA, data_path: str, when: str
) -> None:
    target = serve(good(), tls=None)
    leads_to = f"{target.url}/cdn/m.safetensors?X-Amz-Signature=s1gnature"
    origin = serve(redirecting(leads_to, when), tls=tls.server)
    url = f"{origin.url}/m.safetensors?token=t0ken"
    options = replace(FAST, headers=SECRETS)
    with (
        pytest.raises(rt.RedirectError, match="never downgraded") as caught,
        rt.safe_open(url, http_options=options) as f,
    ):
        f.get_tensor("w")
    message = str(caught.value)
    assert message.startswith(f"{redact_url(url)}: ")
    assert f"from {redact_url(url)} to {target.url}/cdn/m.safetensors?X-Amz-Signature=***" in (
        message
    )
    for secret in ("t0ken", "s1gnature"):
        assert secret not in message
    assert target.requests == []
    assert len(origin.requests) == requests_before_refusal(when, 1)


def test_the_hubs_api_is_never_downgraded_to_http(
    serve: Callable[..., RawServer], tls: ThrowawayCA, data_path: str
) -> None:
    target = serve(
        lambda request, number: head("200 OK", [("Content-Length", "2")]) + b"[]", tls=None
    )
    api = serve(lambda request, number: redirect(f"{target.url}/listing"), tls=tls.server)
    repo = HubRepo(HubPath.parse("hf://org/m"), endpoint=api.url, token=TOKEN, http_options=FAST)
    with pytest.raises(rt.RedirectError, match=f"to {target.url}/listing"):
        # On the library's own loop, as a model's discovery lists files: a loop that ends at
        # once (asyncio.run) may close before a TLS connection's closing handshake is done.
        run_sync(repo.list_files())
    assert target.requests == []
    assert len(api.requests) == 1


@WHEN
@pytest.mark.parametrize("location", ["ftp://127.0.0.1/m.safetensors", "file:///etc/passwd"])
def test_a_redirect_to_another_scheme_is_refused(
    serve: Callable[..., RawServer], data_path: str, when: str, location: str
) -> None:
    server = serve(redirecting(location, when))
    with (
        pytest.raises(rt.RedirectError, match="only http and https"),
        rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f,
    ):
        f.get_tensor("w")
    assert len(server.requests) == requests_before_refusal(when, 1)


@WHEN
def test_a_redirect_loop_is_refused_at_its_first_repeated_url(
    serve: Callable[..., RawServer], data_path: str, when: str
) -> None:
    def back_and_forth(request: Request, number: int) -> str:
        return "/b" if request.target.startswith("/m") else "/m.safetensors?token=t0k"

    server = serve(redirecting(back_and_forth, when))
    url = f"{server.url}/m.safetensors?token=t0k"
    with (
        pytest.raises(rt.RedirectError, match="redirect loop") as caught,
        rt.safe_open(url, http_options=FAST) as f,
    ):
        f.get_tensor("w")
    assert "t0k" not in str(caught.value)
    assert len(server.requests) == requests_before_refusal(when, 2)


@WHEN
def test_more_than_max_redirects_are_refused(
    serve: Callable[..., RawServer], data_path: str, when: str
) -> None:
    server = serve(redirecting(lambda request, number: f"/hop/{number + 1}", when))  # no repeat
    with (
        pytest.raises(rt.RedirectError, match=f"more than {MAX_REDIRECTS} redirects"),
        rt.safe_open(f"{server.url}/m.safetensors", http_options=FAST) as f,
    ):
        f.get_tensor("w")
    assert len(server.requests) == requests_before_refusal(when, MAX_REDIRECTS + 1)


# --- fsspec's HTTP filesystem: the requests we make it send obey the same rules ----------------


def served_file(request: Request, number: int) -> Reply:
    """``OLD`` with a strong ETag: a HEAD (fsspec's ``info``) or a ranged GET."""
    if request.method == "HEAD":
        return head("200 OK", [("Content-Length", str(len(OLD))), ("ETag", '"v1"')])
    answer, body = partial(OLD, request, fields=[("ETag", '"v1"')])
    return answer + body


def read_through_fsspec(url: str, **storage_options: object) -> bytes:
    async def read() -> bytes:
        source = FsspecSource(url, storage_options=storage_options)
        try:
            prefix = await source.open_prefix(WINDOW)
            rest = bytearray(len(OLD) - WINDOW)
            await source.read_into(WINDOW, memoryview(rest))
            return prefix.data + bytes(rest)
        finally:
            await source.aclose()

    return asyncio.run(read())


def test_fsspec_http_carries_only_harmless_headers_to_another_origin(
    serve: Callable[..., RawServer],
) -> None:
    target = serve(served_file)
    origin = serve(lambda request, number: redirect(f"{target.url}/cdn/m.safetensors"))
    headers = {**SECRETS, **HARMLESS, "Proxy-Authorization": PROXY_AUTH}
    assert read_through_fsspec(f"{origin.url}/m.safetensors", headers=headers) == OLD
    assert {r.method for r in origin.requests} == {"HEAD", "GET"}  # info, then reads
    assert all(carries(r, SECRETS) for r in origin.requests)
    assert {r.method for r in target.requests} == {"HEAD", "GET"}
    for request in target.requests:
        assert without(request, SECRETS), request.headers
        assert carries(request, HARMLESS), request.headers
    for request in origin.requests + target.requests:
        assert "proxy-authorization" not in request.headers


def test_fsspec_http_is_never_downgraded(serve: Callable[..., RawServer], tls: ThrowawayCA) -> None:
    target = serve(served_file, tls=None)
    origin = serve(lambda request, number: redirect(f"{target.url}/m.safetensors"), tls=tls.server)
    trusting = ssl.create_default_context(cafile=str(tls.ca_file))
    with pytest.raises(rt.RedirectError, match="never downgraded"):
        read_through_fsspec(f"{origin.url}/m.safetensors", ssl=trusting)
    assert target.requests == []

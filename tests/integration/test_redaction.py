"""No secret of a URL in any error, repr or log line, whatever the server answers.

A caller's URL with a ``?token=`` (and a password), and a redirect to a signed URL
(``?X-Amz-Signature=…&Key-Pair-Id=…``, as a CDN's): every status class a server may answer, on
the first request of a file and on a later one, on each data path (the direct reader, with
bodies in the loop or in threads, and httpx). The error must name the location with its
secrets masked, and no secret may appear in its text, its repr or the log.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import numpy as np
import pytest

import remotetensors as rt
from tests.integration.test_direct_requests import files_handler
from tests.rawservers import RawServer, Reply, Request, head, partial
from tests.reference import write_reference

FAST = rt.HttpOptions(
    backoff_initial_seconds=0.001,
    backoff_max_seconds=0.002,
    read_timeout_seconds=3.0,
    max_attempts=3,
)
W = np.arange(64 * 1024, dtype=np.float32)  # 256 KiB: mostly beyond the first window
DATA = write_reference({"w": W})
assert len(DATA) > rt.ReadOptions().header_window_bytes

SECRETS = ("s3cr3t", "tok123", "sig456", "kp789")
OWN = "/m.safetensors?token=tok123&v=1"  # the caller's URL (with user:s3cr3t@)
SIGNED = "/cdn/m?X-Amz-Signature=sig456&Key-Pair-Id=kp789&Expires=9"  # where it redirects

EMPTY = [("Content-Length", "0")]
STATUSES = {
    "400": head("400 Bad Request", EMPTY),
    "405": head("405 Method Not Allowed", EMPTY),
    "416": head("416 Range Not Satisfiable", [("Content-Range", f"bytes */{len(DATA)}"), *EMPTY]),
    "302 without Location": head("302 Found", EMPTY),
    "300 without Location": head("300 Multiple Choices", EMPTY),
    "401": head("401 Unauthorized", EMPTY),
    "403": head("403 Forbidden", EMPTY),
    "404": head("404 Not Found", EMPTY),
    "410": head("410 Gone", EMPTY),
    "500 after retries": head("500 Internal Server Error", EMPTY),
    "503 after retries": head("503 Service Unavailable", EMPTY),
}


def file_then(status: str, *, first: bool) -> Callable[[Request, int], Reply]:
    """A file whose first request (bytes from 0) is answered with its bytes and every later
    one with ``status``; with ``first``, every request is answered with ``status``."""

    def answer(request: Request, number: int) -> Reply:
        asked = request.range
        if not first and asked is not None and asked[0] == 0:
            reply, body = partial(DATA, request, fields=[("ETag", '"v1"')])
            return reply + body
        return STATUSES[status]

    return answer


def secret_url(
    serve: Callable[..., RawServer], status: str, *, signed: bool, first: bool
) -> tuple[str, str]:
    """The URL to open (with its secrets) and how messages must name it."""
    files = serve(file_then(status, first=first))
    if signed:
        target = f"{files.url}{SIGNED}"
        origin = serve(lambda request, number: head("302 Found", [("Location", target), *EMPTY]))
    else:
        origin = files
    url = origin.url.replace("http://", "http://user:s3cr3t@") + OWN
    shown = f"http://user:***@127.0.0.1:{origin.port}/m.safetensors?token=***&v=1"
    return url, shown


def assert_no_secret(error: BaseException, caplog: pytest.LogCaptureFixture) -> None:
    # Our log lines only: httpx logs every request's full URL on its own logger at INFO.
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("remotetensors")]
    for text in (str(error), repr(error), *ours):
        for secret in SECRETS:
            assert secret not in text, text


# Each case runs on each data path (see conftest.py).
@pytest.mark.usefixtures("data_path")
@pytest.mark.parametrize("status", list(STATUSES))
@pytest.mark.parametrize("signed", [False, True], ids=["own URL", "signed redirect"])
@pytest.mark.parametrize("first", [True, False], ids=["first request", "later request"])
def test_a_refusal_names_the_url_without_its_secrets(
    serve: Callable[..., RawServer],
    caplog: pytest.LogCaptureFixture,
    status: str,
    signed: bool,
    first: bool,
) -> None:
    caplog.set_level(logging.DEBUG, logger="remotetensors")
    url, shown = secret_url(serve, status, signed=signed, first=first)
    error = refusal(url, shown, first=first)
    assert str(error).startswith(shown)
    assert_no_secret(error, caplog)


def refusal(url: str, shown: str, *, first: bool) -> BaseException:
    """The error of opening ``url`` (``first``), or of reading a tensor once it is open."""
    if first:
        with pytest.raises(rt.RemoteTensorsError) as opening:
            rt.safe_open(url, http_options=FAST)
        return opening.value
    with rt.safe_open(url, http_options=FAST) as f:
        assert shown in repr(f)
        with pytest.raises(rt.RemoteTensorsError) as reading:
            f.get_tensor("w")
    return reading.value


def test_a_model_at_a_prefix_with_a_password_names_no_secret(
    serve: Callable[..., RawServer], caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing there: the model, the index and the configs all answer 404; every location that
    # discovery names is built from the prefix with its password.
    caplog.set_level(logging.DEBUG, logger="remotetensors")
    server = serve(lambda request, number: STATUSES["404"])
    prefix = server.url.replace("http://", "http://user:s3cr3t@") + "/models"
    with pytest.raises(rt.NotFoundError) as caught:
        rt.open_model(prefix, http_options=FAST)
    assert str(caught.value).startswith(f"http://user:***@127.0.0.1:{server.port}/models: ")
    assert_no_secret(caught.value, caplog)


def test_a_config_warning_at_a_prefix_with_a_password_names_no_secret(
    serve: Callable[..., RawServer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="remotetensors")
    server = serve(files_handler({"model.safetensors": DATA, "config.json": b"not json"}))
    prefix = server.url.replace("http://", "http://user:s3cr3t@") + "/files"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with rt.open_model(prefix, http_options=FAST) as model:
            assert model.get_tensor("w").tobytes() == W.tobytes()
    messages = [str(w.message) for w in caught if issubclass(w.category, rt.ConfigWarning)]
    assert messages
    shown = f"http://user:***@127.0.0.1:{server.port}/files/config.json: not JSON"
    assert all(message.startswith(shown) for message in messages), messages
    for text in messages:
        for secret in SECRETS:
            assert secret not in text


def test_an_fsspec_location_is_named_without_its_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="remotetensors")
    with pytest.raises(rt.NotFoundError) as caught:
        rt.safe_open("memory://bucket/m.safetensors?token=tok123&v=1")
    # The backend's own words quote the path with its query: masked too.
    assert str(caught.value).startswith("memory://bucket/m.safetensors?token=***&v=1: ")
    assert_no_secret(caught.value, caplog)


def test_a_scan_and_info_print_locations_without_their_secrets(
    serve: Callable[..., RawServer], capsys: pytest.CaptureFixture[str]
) -> None:
    from remotetensors.cli import main

    server = serve(files_handler({"m.safetensors": DATA}, queries=True))
    good = (
        server.url.replace("http://", "http://user:s3cr3t@") + "/files/m.safetensors?token=tok123"
    )
    bad = server.url + "/files/gone.safetensors?X-Amz-Signature=sig456"
    results = {r.ok: r for r in rt.scan([good, bad], http_options=FAST)}
    assert results[True].location == redact(good)
    assert results[False].location == redact(bad)
    for result in results.values():
        assert not any(secret in repr(result) for secret in SECRETS)
    assert main(["info", good]) == 0
    assert main(["info", good, "--json"]) == 0
    out = capsys.readouterr().out
    assert redact(good) in out
    assert not any(secret in out for secret in SECRETS)


def redact(url: str) -> str:
    return url.replace("s3cr3t", "***").replace("tok123", "***").replace("sig456", "***")


def test_a_checksum_mismatch_names_the_url_without_its_secrets(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(files_handler({"m.safetensors": DATA}, queries=True))
    url = server.url.replace("http://", "http://user:s3cr3t@") + f"/files/{OWN[1:]}"
    with pytest.raises(rt.ChecksumMismatchError) as caught:
        rt.verify_checksum(url, "00" * 20, http_options=FAST)
    shown = f"http://user:***@127.0.0.1:{server.port}/files/m.safetensors?token=***&v=1"
    assert str(caught.value).startswith(f"{shown}: checksum mismatch")
    for secret in SECRETS:
        assert secret not in str(caught.value)


def test_an_fsspec_backend_quoting_the_password_alone_is_masked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # fsspec's memory filesystem takes "user:s3cr3t@b" for a folder and names it so, without
    # the scheme that would make it a URL to redact.
    caplog.set_level(logging.DEBUG, logger="remotetensors")
    location = "memory://user:s3cr3t@bucket/m.safetensors?token=tok123"
    with pytest.raises(rt.NotFoundError) as caught:
        rt.safe_open(location)
    assert str(caught.value).startswith("memory://user:***@bucket/m.safetensors?token=***: ")
    assert_no_secret(caught.value, caplog)
    (result,) = rt.scan([location])
    assert not any(secret in repr(result) for secret in SECRETS)


def test_a_scan_masks_the_secrets_in_another_librarys_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A bug's words (or a library's) may quote the location's pieces: the result masks them.
    async def failing(location: str, **kwargs: object) -> None:
        raise RuntimeError(f"cannot read {location}; password s3cr3t, token tok123")

    monkeypatch.setattr("remotetensors.models.scan.summarise", failing)
    (result,) = rt.scan(["http://user:s3cr3t@h/m.safetensors?token=tok123"])
    assert result.error == (
        "cannot read http://user:***@h/m.safetensors?token=***; password ***, token ***"
    )


def test_the_command_line_masks_urls_in_an_unexpected_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from remotetensors.cli import main

    def failing(args: object) -> int:
        raise RuntimeError("at https://user:s3cr3t@h/m?X-Amz-Signature=sig456: boom")

    monkeypatch.setattr("remotetensors.cli.info.run", failing)
    assert main(["info", "x"]) == 1
    err = capsys.readouterr().err
    assert "RuntimeError: at https://user:***@h/m?X-Amz-Signature=***: boom (unexpected" in err

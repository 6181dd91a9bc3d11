"""Secrets out of every message: the redacting helpers, the one status-to-error mapping, and
the request-head errors of the direct reader. No server."""

from __future__ import annotations

import pytest

import remotetensors as rt
from remotetensors.redact import redact_text, redact_url, url_secrets
from remotetensors.sources.http.answer import status_error
from remotetensors.sources.http.head import HeadError, request_head

SIGNED = "https://cdn.example/m?X-Amz-Signature=sig456&Key-Pair-Id=kp789&Expires=9"
SHOWN = "https://cdn.example/m?X-Amz-Signature=***&Key-Pair-Id=***&Expires=9"


def test_redact_url_keeps_an_empty_authority() -> None:
    # "memory:///x" and "memory:/x" name different files to fsspec.
    assert redact_url("memory:///b/m?token=t") == "memory:///b/m?token=***"
    assert redact_url("file:///tmp/m?sig=s#f") == "file:///tmp/m?sig=***#f"


def test_redact_text_masks_urls_and_targets_anywhere_in_a_message() -> None:
    text = f"GET /m.safetensors?token=tok123&v=1 failed: '{SIGNED}' (https://u:pw@h/x)"
    assert redact_text(text) == (
        f"GET /m.safetensors?token=***&v=1 failed: '{SHOWN}' (https://u:***@h/x)"
    )
    assert redact_text("no secrets: a=b, [Errno 111]") == "no secrets: a=b, [Errno 111]"


@pytest.mark.parametrize("status", [300, 302, 304, 400, 401, 403, 404, 405, 410, 416, 418, 500])
def test_every_status_names_its_url_redacted(status: int) -> None:
    error = status_error(status, SIGNED, None, "hf://org/m/model.safetensors")
    assert isinstance(error, rt.RemoteTensorsError)
    assert SHOWN in str(error)
    for secret in ("sig456", "kp789"):
        assert secret not in str(error)
        assert secret not in repr(error)


def test_a_head_that_cannot_be_sent_quotes_neither_target_nor_value() -> None:
    with pytest.raises(HeadError) as target:
        request_head("/m?token=tok 123", [])
    with pytest.raises(HeadError) as value:
        request_head("/m", [("Authorization", "Bearer tok123\n")])
    for error in (target.value, value.value):
        assert "tok" not in str(error)
    assert "' '" in str(target.value)  # the offending character is named
    assert "Authorization" in str(value.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # Every URL of an fsspec chain, not the chain's first protocol taken for a scheme.
        (
            "simplecache::https://user:s3cr3t@h/m?token=tok123",
            "simplecache::https://user:***@h/m?token=***",
        ),
        (
            "blockcache::simplecache::s3://b/m?X-Amz-Signature=sig456",
            "blockcache::simplecache::s3://b/m?X-Amz-Signature=***",
        ),
        ("http://[::1]:8/m::x?token=tok123", "http://[::1]:8/m::x?token=***"),  # IPv6, no chain
        ("https://h/m;jsessionid=tok123;v=1/x", "https://h/m;jsessionid=***;v=1/x"),
        ("https://h/m#access_token=tok123&state=1", "https://h/m#access_token=***&state=1"),
        ("https://h/m#section-2", "https://h/m#section-2"),
    ],
)
def test_redact_url_masks_chains_path_parameters_and_fragments(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_text_leaves_the_punctuation_of_the_sentence() -> None:
    # A message of ours, redacted already, passes through again on the command line.
    said = "memory://b/m?token=***: not found (/b/m?token=tok123), see http://h/m?sig=a.b.c."
    assert redact_text(said) == (
        "memory://b/m?token=***: not found (/b/m?token=***), see http://h/m?sig=***."
    )


def test_the_secrets_of_a_url_are_masked_wherever_a_message_quotes_them() -> None:
    url = "simplecache::memory://user:p%40ss@b/m?token=tok123&v=1"
    assert url_secrets(url) == ("p%40ss", "p@ss", "tok123")
    assert url_secrets("https://tok123@h/m") == ("tok123",)  # a user name alone: a token
    said = "[Errno 2] No such file: '/user:p@ss@b/m' (token tok123; v 1; ab)"
    assert redact_text(said, secrets=[*url_secrets(url), "ab"]) == (
        "[Errno 2] No such file: '/user:***@b/m' (token ***; v 1; ab)"  # "ab": too short
    )


def test_http_options_show_their_headers_without_values() -> None:
    options = rt.HttpOptions(headers={"X-Api-Key": "key111", "Cookie": "session=ck222"})
    assert "headers={'X-Api-Key': '***', 'Cookie': '***'}" in repr(options)
    assert "key111" not in repr(options)
    assert "ck222" not in repr(options)
    assert "max_attempts=5" in repr(options)


@pytest.mark.parametrize(
    "value",
    ["Bearer tok123\r\nX-Injected: 1", "Bearer tok123\n", " tok123", "Bearer\x00tok123", "tök123"],
)
def test_http_options_refuse_a_header_they_cannot_send_without_quoting_it(value: str) -> None:
    with pytest.raises(ValueError, match="header 'Authorization'") as caught:
        rt.HttpOptions(headers={"Authorization": value})
    assert "tok" not in str(caught.value)


def test_a_place_shows_no_credential() -> None:
    from remotetensors.sources.resolve import split_location

    http, _ = split_location(
        "http://user:s3cr3t@h/models/m.safetensors?token=tok123",
        http_options=rt.HttpOptions(headers={"X-Api-Key": "key111"}),
    )
    s3, _ = split_location(
        "s3://b/models/m.safetensors?X-Amz-Signature=sig456",
        storage_options={"key": "AKIDkey111", "secret": "s3cr3t"},
    )
    assert repr(http) == "HttpPlace('http://user:***@h/models')"
    assert repr(s3) == "FsspecPlace('s3://b/models')"
    for place in (http, s3):
        assert not any(s in repr(place) for s in ("s3cr3t", "tok123", "key111", "sig456"))

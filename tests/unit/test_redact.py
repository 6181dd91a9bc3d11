"""Secrets out of every message: the redacting helpers, the one status-to-error mapping, and
the request-head errors of the direct reader. No server."""

from __future__ import annotations

import pytest

import remotetensors as rt
from remotetensors.redact import redact_text, redact_url
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

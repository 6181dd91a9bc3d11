"""URLs without their secrets, for messages, reprs, log lines and progress labels.

Pure string work, no IO. A URL's password (``http://user:secret@host/``) and the values of
query parameters whose names look like credentials (``token``, ``sig``, ``X-Amz-Signature``,
``Key-Pair-Id``, ...) are replaced by ``***``; everything else is kept so the message still
names the location.

:func:`redact_url` takes one URL (every message, repr and log line that names a URL we hold
passes it through); :func:`redact_text` applies the same rules to free text that may hold URLs
or request targets somewhere inside it, such as the message of another library's exception.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

REDACTED = "***"

# Query parameter names that carry credentials in signed URLs (S3, CloudFront, GCS, Azure SAS,
# the hub's CDN) and in hand-written ones (?token=, ?api_key=, ?access_token=, ?password=).
_SECRET_NAME = re.compile(
    r"(token|sig|signature|secret|password|passwd|pwd|key|auth|credential|session|jwt|policy"
    r"|code|sas)",
    re.IGNORECASE,
)


def redact_url(url: str) -> str:
    """``url`` with its password and credential-like query values replaced by ``***``.

    Strings that are not URLs with a scheme and a host are returned unchanged, except that a
    ``user:password@`` before a host is still masked.
    """
    if "://" not in url or ("@" not in url and "?" not in url):
        return url  # not a URL, or nowhere for a secret to be (most URLs: no parsing)
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an invalid IPv6 literal: mask everything after the scheme
        scheme = url.split("://", 1)[0]
        return f"{scheme}://{REDACTED}"
    netloc = parts.netloc
    user, at, host = netloc.rpartition("@")
    if at:
        name = user.split(":", 1)[0]
        netloc = f"{name}:{REDACTED}@{host}" if ":" in user else f"{REDACTED}@{host}"
    query = parts.query
    if query:
        query = "&".join(_redact_pair(pair) for pair in query.split("&"))
    # Joined by hand: urlunsplit drops the "//" of an empty authority for schemes it does not
    # know ("memory:///x" would come back as "memory:/x", naming another file).
    text = f"{parts.scheme}://{netloc}{parts.path}"
    if query:
        text += f"?{query}"
    return f"{text}#{parts.fragment}" if parts.fragment else text


# A URL inside free text: a scheme and "://" up to the next space or quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
# A query parameter inside free text (a request target "/m?token=x", a path with its query).
_PAIR_IN_TEXT = re.compile(r"([?&;])([^=&#?\s'\"<>]+)=([^&#\s'\"<>]*)")


def redact_text(text: str) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`, and the value of every
    credential-like query parameter outside a URL (``/m.safetensors?token=x``) masked too.

    For messages written by other libraries (an exception's text), which may quote a URL or a
    request target anywhere; a message of ours names its URLs through :func:`redact_url`.
    """
    if "://" not in text and "=" not in text:
        return text  # nothing that could carry a secret (most messages: no regex)
    text = _URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)), text)
    return _PAIR_IN_TEXT.sub(_redact_pair_match, text)


def _redact_pair_match(match: re.Match[str]) -> str:
    return match.group(1) + _redact_pair(f"{match.group(2)}={match.group(3)}")


def _redact_pair(pair: str) -> str:
    name, eq, value = pair.partition("=")
    if eq and value and _SECRET_NAME.search(name):
        return f"{name}={REDACTED}"
    return pair

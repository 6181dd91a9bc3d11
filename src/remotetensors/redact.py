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
from collections.abc import Iterable
from urllib.parse import unquote, urlsplit

REDACTED = "***"

# Query parameter names that carry credentials in signed URLs (S3, CloudFront, GCS, Azure SAS,
# the hub's CDN) and in hand-written ones (?token=, ?api_key=, ?access_token=, ?password=).
_SECRET_NAME = re.compile(
    r"(token|sig|signature|secret|password|passwd|pwd|key|auth|credential|session|jwt|policy"
    r"|code|sas)",
    re.IGNORECASE,
)


# Where an fsspec chain (``simplecache::s3://...``) passes to its next URL: "::" before a
# scheme, not the "::" of an IPv6 literal (``http://[::1]:8/``).
_CHAIN = re.compile(r"::(?=[A-Za-z][A-Za-z0-9+.-]*://)")
# A path parameter (``/m.safetensors;jsessionid=...``), which servers read as a query's.
_PATH_PAIR = re.compile(r";([^;/=]+)=([^;/]*)")


def redact_url(url: str) -> str:
    """``url`` with its password and credential-like query values replaced by ``***``.

    The same goes for credential-like path parameters (``;jsessionid=``) and pairs in the
    fragment (``#access_token=``), and for every URL of an fsspec chain
    (``simplecache::https://user:password@host/...``).

    Strings that are not URLs with a scheme and a host are returned unchanged, except that a
    ``user:password@`` before a host is still masked.
    """
    if "://" not in url or not any(mark in url for mark in "@?#;"):
        return url  # not a URL, or nowhere for a secret to be (most URLs: no parsing)
    if "::" in url and _CHAIN.search(url):
        return "::".join(_redact_one(link) for link in _CHAIN.split(url))
    return _redact_one(url)


def _redact_one(url: str) -> str:
    """:func:`redact_url` of a URL that is no chain."""
    if "://" not in url:
        return url  # a chain's protocol without a URL of its own ("simplecache")
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
    path = parts.path
    if ";" in path:
        path = _PATH_PAIR.sub(lambda m: ";" + _redact_pair(f"{m.group(1)}={m.group(2)}"), path)
    # Joined by hand: urlunsplit drops the "//" of an empty authority for schemes it does not
    # know ("memory:///x" would come back as "memory:/x", naming another file).
    text = f"{parts.scheme}://{netloc}{path}"
    if query:
        text += f"?{query}"
    fragment = parts.fragment
    if "=" in fragment:  # an OAuth answer's "#access_token=...&state=..."
        fragment = "&".join(_redact_pair(pair) for pair in fragment.split("&"))
    return f"{text}#{fragment}" if fragment else text


# Punctuation that ends a URL or a value in prose ("...?token=x: not found", "(at ...?sig=y).")
# belongs to the sentence: a URL or a value in text stops before it (and a space or quote).
_PROSE_TAIL = r"[.,:;!?)\]]*(?:[\s'\"<>]|$)"
# A URL inside free text: a scheme and "://" up to the next space or quote.
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+?(?=" + _PROSE_TAIL + ")")
# A query parameter inside free text (a request target "/m?token=x", a path with its query).
_PAIR_IN_TEXT = re.compile(r"([?&;])([^=&#?\s'\"<>]+)=([^&#\s'\"<>]*?)(?=[&#]|" + _PROSE_TAIL + ")")


def redact_text(text: str, *, secrets: Iterable[str] = ()) -> str:
    """``text`` with every URL in it passed through :func:`redact_url`, and the value of every
    credential-like query parameter outside a URL (``/m.safetensors?token=x``) masked too.

    For messages written by other libraries (an exception's text), which may quote a URL or a
    request target anywhere; a message of ours names its URLs through :func:`redact_url`.

    Args:
        text: the message.
        secrets: strings known to be secret (:func:`url_secrets` of the URL the message is
            about), masked wherever they appear: a backend may quote a URL's pieces without
            the URL around them (fsspec's memory filesystem names ``/user:password@b/x``).
            Secrets shorter than :data:`MIN_SECRET_CHARS` are left: masking every ``a`` of a
            message would garble it, to hide a password that hides nothing.
    """
    for secret in secrets:
        if len(secret) >= MIN_SECRET_CHARS:
            text = text.replace(secret, REDACTED)
    if "://" not in text and "=" not in text:
        return text  # nothing that could carry a secret (most messages: no regex)
    text = _URL_IN_TEXT.sub(lambda match: redact_url(match.group(0)), text)
    return _PAIR_IN_TEXT.sub(_redact_pair_match, text)


MIN_SECRET_CHARS = 3
"""The shortest secret :func:`redact_text` masks wherever it appears."""


def url_secrets(url: str) -> tuple[str, ...]:
    """The secrets :func:`redact_url` masks in ``url`` (the password, a user name standing
    alone, credential-like query values, of every URL of a chain), each as written and
    percent-decoded, for :func:`redact_text`."""
    found: list[str] = []
    for link in _CHAIN.split(url) if "::" in url else (url,):
        found += _secrets_of_one(link)
    return tuple(dict.fromkeys(form for secret in found for form in (secret, unquote(secret))))


def _secrets_of_one(url: str) -> list[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found: list[str] = []
    user, at, _ = parts.netloc.rpartition("@")
    if at:
        name, colon, password = user.partition(":")
        found.append(password if colon else name)
    for pair in parts.query.split("&"):
        name, eq, value = pair.partition("=")
        if eq and value and _SECRET_NAME.search(name):
            found.append(value)
    return [secret for secret in found if secret]


def _redact_pair_match(match: re.Match[str]) -> str:
    return match.group(1) + _redact_pair(f"{match.group(2)}={match.group(3)}")


def _redact_pair(pair: str) -> str:
    name, eq, value = pair.partition("=")
    if eq and value and _SECRET_NAME.search(name):
        return f"{name}={REDACTED}"
    return pair

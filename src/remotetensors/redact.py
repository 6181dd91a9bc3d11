"""URLs without their secrets, for messages, reprs, log lines and progress labels.

Pure string work, no IO. A URL's password (``http://user:secret@host/``) and the values of
query parameters whose names look like credentials (``token``, ``sig``, ``X-Amz-Signature``,
``Key-Pair-Id``, ...) are replaced by ``***``; everything else is kept so the message still
names the location.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit, urlunsplit

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
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _redact_pair(pair: str) -> str:
    name, eq, value = pair.partition("=")
    if eq and value and _SECRET_NAME.search(name):
        return f"{name}={REDACTED}"
    return pair

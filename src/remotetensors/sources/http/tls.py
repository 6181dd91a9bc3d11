"""TLS: the verifying contexts, and what a failed handshake means.

Building a context (loading the CA bundle) costs 20-40 ms; a model of 72 shards, or a scan of a
thousand files, would pay it again for every client. So one context is built per CA bundle and
kept for the process; contexts are safe to share between clients, threads and event loops.

Which CAs are trusted, first found wins: ``HttpOptions(ca_bundle=...)``, then the variables
``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` (as httpx and OpenSSL read them), ``REQUESTS_CA_BUNDLE``
and ``CURL_CA_BUNDLE`` (as requests and huggingface_hub users set them), else certifi's bundle.
The variables are read each time a context is asked for (a few microseconds), so a variable set
after the first request counts from the next connection on.

A handshake that fails for a reason another attempt cannot mend (:func:`handshake_failure`) is
one :class:`~remotetensors.errors.TlsError` at once (:func:`tls_error`), never retried: an
untrusted, expired or misnamed certificate, a fatal alert from the server, a server that answers
in plain HTTP. A connection cut in the middle of a handshake is a network failure like any
other, and retried.
"""

from __future__ import annotations

import functools
import os
import ssl

from ...errors import TlsError, TlsErrorKind

CA_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
"""The environment variables that name CAs to trust, in the order they are looked at."""

CA_HINT = (
    "To trust a private or corporate CA, point SSL_CERT_FILE or REQUESTS_CA_BUNDLE at a PEM "
    "file that holds it, or pass HttpOptions(ca_bundle=...) (on the command line --ca-bundle)"
)
"""How to trust a CA, said by every error about a certificate."""


def shared_ssl_context(ca_bundle: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """The verifying context that trusts ``ca_bundle`` (a PEM file or a folder of hashed
    certificates), else the CAs the environment names (see the module), else certifi's.

    Raises:
        TlsError: the bundle named cannot be loaded (``kind=CA_BUNDLE``; the message names
            where the path came from).
    """
    if ca_bundle is not None:
        path = os.fspath(ca_bundle)
        return _context(f"HttpOptions(ca_bundle={path!r})", path)
    for name in CA_VARIABLES:
        path = os.environ.get(name, "")
        if path:
            return _context(f"{name}={path!r}", path)
    return _context("", None)


@functools.lru_cache(maxsize=8)
def _context(named_by: str, path: str | None) -> ssl.SSLContext:
    """A verifying context for the bundle at ``path`` (certifi's when None), built once;
    ``named_by`` says where the path came from."""
    if path is None:
        import certifi  # a dependency of httpx

        return ssl.create_default_context(cafile=certifi.where())
    try:
        if os.path.isdir(path):
            return ssl.create_default_context(capath=path)
        return ssl.create_default_context(cafile=path)
    except (OSError, ValueError) as exc:  # missing, unreadable, or no certificate in it
        raise TlsError(
            f"{named_by}: cannot load this CA bundle to verify HTTPS servers ({exc}); "
            "name a PEM file of CA certificates, or a folder of them prepared with "
            "'openssl rehash'",
            kind=TlsErrorKind.CA_BUNDLE,
        ) from None


# OpenSSL's X509_V_ERR_* codes, as ssl.SSLCertVerificationError.verify_code carries them.
_VERIFY_KINDS = {
    2: TlsErrorKind.UNKNOWN_ISSUER,  # unable to get issuer certificate
    18: TlsErrorKind.UNKNOWN_ISSUER,  # self-signed certificate
    19: TlsErrorKind.UNKNOWN_ISSUER,  # self-signed certificate in certificate chain
    20: TlsErrorKind.UNKNOWN_ISSUER,  # unable to get local issuer certificate
    21: TlsErrorKind.UNKNOWN_ISSUER,  # unable to verify the first certificate
    9: TlsErrorKind.NOT_YET_VALID,
    10: TlsErrorKind.EXPIRED,
    62: TlsErrorKind.WRONG_HOST,  # hostname mismatch
    64: TlsErrorKind.WRONG_HOST,  # IP address mismatch
}

# What OpenSSL says when the bytes that came back are no TLS record: a plain HTTP answer
# ("HTTP/1.1 400") read as a record header gives a version or a length that cannot be.
_NOT_TLS_REASONS = frozenset(
    {
        "WRONG_VERSION_NUMBER",
        "UNKNOWN_PROTOCOL",
        "PACKET_LENGTH_TOO_LONG",
        "RECORD_LAYER_FAILURE",
        "HTTP_REQUEST",
        "HTTPS_PROXY_REQUEST",
    }
)

# Failures of the connection, not of TLS: the peer went away mid-handshake (a restart, an
# overloaded balancer). Another attempt may well succeed.
_CUT = (ssl.SSLEOFError, ssl.SSLZeroReturnError, ssl.SSLSyscallError)


def handshake_failure(exc: BaseException) -> ssl.SSLError | None:
    """The TLS error in ``exc`` or its causes that another attempt cannot mend (see the
    module), or None: no TLS error, or a connection cut mid-handshake (to be retried)."""
    seen: BaseException | None = exc
    for _ in range(8):  # httpx wraps httpcore's error, which wraps the ssl module's
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLError):
            return None if isinstance(seen, _CUT) else seen
        seen = seen.__cause__ or seen.__context__
    return None


def origin_of(host: str, port: int) -> str:
    """``host:port`` as a message names a server (an IPv6 literal in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def tls_error(shown: str, origin: str, failure: ssl.SSLError) -> TlsError:
    """The error for ``failure`` (see :func:`handshake_failure`) in the handshake with
    ``origin`` (``host:port``, no secrets), reading the file ``shown``: what failed and what
    to do about it; never a suggestion to turn verification off."""
    kind, remedy = _explain(failure, origin)
    said = _openssl_words(failure)
    return TlsError(
        f"{shown}: TLS handshake with {origin} failed: {kind.value} ({said}); not retried. "
        f"{remedy}",
        kind=kind,
    )


def _explain(failure: ssl.SSLError, origin: str) -> tuple[TlsErrorKind, str]:
    """The kind of ``failure`` and what the user can do about it."""
    if isinstance(failure, ssl.SSLCertVerificationError):
        kind = _VERIFY_KINDS.get(failure.verify_code, TlsErrorKind.UNTRUSTED)
        if kind is TlsErrorKind.WRONG_HOST:
            return kind, (
                "Use a host name that the server's certificate names; if a proxy re-signs "
                f"certificates on the way, trust its CA. {CA_HINT}."
            )
        if kind in (TlsErrorKind.EXPIRED, TlsErrorKind.NOT_YET_VALID):
            return kind, (
                "The server's certificate must be renewed, or this machine's clock is wrong. "
                f"{CA_HINT}."
            )
        return kind, f"{CA_HINT}."
    reason = failure.reason or ""
    if reason in _NOT_TLS_REASONS:
        port = origin.rpartition(":")[2]
        return TlsErrorKind.NOT_TLS, (
            f"The server answered in something other than TLS on port {port}: if it serves "
            "plain HTTP there, use an http:// URL; else check the port."
        )
    if "ALERT" in reason:  # the server sent a fatal alert
        return TlsErrorKind.REFUSED, (
            "The server ended the handshake: it may want a client certificate, or a TLS "
            f"version or cipher that this Python's {ssl.OPENSSL_VERSION} does not offer."
        )
    return TlsErrorKind.HANDSHAKE, (
        f"This Python's {ssl.OPENSSL_VERSION} and the server share no TLS version or cipher, or "
        "the server's TLS is broken."
    )


def _openssl_words(failure: ssl.SSLError) -> str:
    """What OpenSSL said, without the source line it adds (``(_ssl.c:1006)``)."""
    if isinstance(failure, ssl.SSLCertVerificationError) and failure.verify_message:
        return str(failure.verify_message).rstrip(".")
    text = str(failure.args[1] if len(failure.args) > 1 else failure)
    return text.split(" (_ssl.c:")[0]

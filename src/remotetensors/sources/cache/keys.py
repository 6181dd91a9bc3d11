"""The cache's keys: each names one version of what it holds, and an entry serves only that
version (the backends check that the version read is the one a key names, see below).

- On a hub: a file at a commit is ``(endpoint, repo type, repo, commit, path)``; its bytes are
  also kept by content (``(endpoint, LFS sha256 or git blob id)``), so a new commit that changes
  one shard finds every other file under its unchanged content id. A revision name's commit
  (``main`` -> a sha) is the one entry that moves: it is asked for once per visit
  (:func:`hub_ref`). Small answers of the hub's API at a commit (a folder's listing, the one-call
  metadata) are keyed by the commit too.
- Over HTTP: ``(URL, validator, size)``, the validator being a strong ``ETag`` or else
  ``Last-Modified`` (:func:`strong_validator`); a weak ETag is not a validator (RFC 9110 8.8.1:
  it does not promise the same bytes), so a file that has only one is not kept. The URL's latest
  version (:func:`http_latest`, the other entry that moves) says what to revalidate with: a
  strong ETag by a conditional request, a ``Last-Modified`` alone by an answer that shows
  exactly that date and size (see ``http/cached.py``). A date has a resolution of one second:
  a file rewritten within the second at the same size, and served without an ETag, is a
  version that no client can tell apart from the one before.
- On S3: ``(endpoint, bucket, key, VersionId or ETag, size)``; the object's latest version is
  revalidated as an HTTP file's is (``IfNoneMatch``), and an object named by its VersionId
  cannot change at all.
- On GCS and Azure Blob: ``(service, endpoint, bucket or container, key, generation or ETag (a
  version id where the location names one), size)``; the object's latest version is revalidated
  by one metadata request (no bytes), and an object named by its version cannot change
  (``sources/object_cached.py``).
- Local files are not cached: reading them costs less than reading an entry; nor are other
  fsspec filesystems, whose versions are not named firmly enough (see ``sources/fsspec.py``).

A key is a JSON array of strings, so no two different tuples make one key. Keys may hold
secrets (a signed URL's query); the store keeps only their SHA-256 (:mod:`.store`).
"""

from __future__ import annotations

import json

__all__ = [
    "http_latest",
    "http_version",
    "hub_blob",
    "hub_file",
    "hub_listing",
    "hub_onecall",
    "hub_ref",
    "hub_support",
    "link",
    "object_latest",
    "object_version",
    "strong_validator",
]


_ENCODER = json.JSONEncoder(separators=(",", ":"))
"""``json.dumps(parts, separators=...)`` builds an encoder per call; every file opened asks for
a few keys."""


def _key(*parts: str) -> str:
    return _ENCODER.encode(parts)


def hub_ref(endpoint: str, repo_type: str, repo_id: str, revision: str) -> str:
    """The commit that a revision name pointed to when last asked (the one entry that moves)."""
    return _key("hub-ref", endpoint, repo_type, repo_id, revision)


def hub_file(endpoint: str, repo_type: str, repo_id: str, commit: str, path: str) -> str:
    """File ``path`` of a repo at ``commit``: its kept bytes, a pointer to its content
    (:func:`hub_blob`), or the record that no such file exists at that commit."""
    return _key("hub-file", endpoint, repo_type, repo_id, commit, path)


def hub_blob(endpoint: str, content_id: str, size: int) -> str:
    """A hub file's kept bytes by content: its LFS sha256, or the git blob id of a small file
    (what the hub sends as ``X-Linked-Etag`` or ``ETag``, and lists as ``lfs.oid`` or ``oid``),
    and its size."""
    return _key("hub-blob", endpoint, content_id, str(size))


def hub_listing(
    endpoint: str, repo_type: str, repo_id: str, commit: str, folder: str, recursive: str
) -> str:
    """The files in ``folder`` (and below it, when ``recursive`` is ``"True"``) of a repo at
    ``commit``, with sizes and ids."""
    return _key("hub-listing", endpoint, repo_type, repo_id, commit, folder, recursive)


def hub_onecall(endpoint: str, repo_id: str, commit: str, index_path: str) -> str:
    """The one-call safetensors-metadata answer for the model of ``index_path`` at ``commit``."""
    return _key("hub-onecall", endpoint, repo_id, commit, index_path)


def hub_support(endpoint: str) -> str:
    """Whether an endpoint has the one-call metadata route (learnt once, kept)."""
    return _key("hub-onecall-route", endpoint)


def link(origin: str) -> str:
    """The streams and part size the link to ``origin`` taught the reader last (see
    ``reading/links.py``)."""
    return _key("link", origin)


def http_version(url: str, validator: str, size: int) -> str:
    """One version of the file at ``url``: its strong validator and size."""
    return _key("http-file", url, validator, str(size))


def http_latest(url: str) -> str:
    """The validators of the latest version of ``url`` seen, to revalidate with."""
    return _key("http-latest", url)


def strong_validator(etag: str | None, last_modified: str | None) -> str | None:
    """What names a version of an HTTP file: a strong ``ETag``, else ``Last-Modified``, else
    None (a weak ETag alone names none: the file is then not kept)."""
    if etag and not etag.startswith("W/"):
        return f"etag {etag}"
    if last_modified:
        return f"last-modified {last_modified}"
    return None


def s3_version(endpoint: str, bucket: str, key: str, version: str, size: int) -> str:
    """One version of an S3 object: its VersionId (or, unversioned, its ETag) and size."""
    return _key("s3-object", endpoint, bucket, key, version, str(size))


def s3_latest(endpoint: str, bucket: str, key: str, version_id: str | None) -> str:
    """The latest version of an S3 object seen (of the VersionId named, if one is)."""
    return _key("s3-latest", endpoint, bucket, key, version_id or "")


def object_version(
    service: str, endpoint: str, container: str, key: str, version: str, size: int
) -> str:
    """One version of a GCS object or Azure blob (``service`` ``"gs"`` or ``"az"``): its
    generation, ETag or version id, and its size."""
    return _key("object", service, endpoint, container, key, version, str(size))


def object_latest(service: str, endpoint: str, container: str, key: str, named: str | None) -> str:
    """The latest version of a GCS object or Azure blob seen (of the version named, if one is)."""
    return _key("object-latest", service, endpoint, container, key, named or "")

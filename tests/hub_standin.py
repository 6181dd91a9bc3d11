"""A hub stand-in on loopback that speaks the resolve protocol, as the hub does in 2026 (the
default) or as it did before the Xet-era CDN (``shape="2025"``, kept for the tests of that
shape).

``/{repo}/resolve/{revision}/{path}`` (and ``/datasets/...``): small files are served directly
with byte ranges and ``X-Repo-Commit``; large ones answer 302 to a CDN on another origin, with
``X-Repo-Commit``, ``ETag``, ``X-Linked-Size`` and ``X-Linked-Etag`` as the real hub sends them.

The 2026 shape (``reference/fourth-round-facts.md``, "The hub's data path"): the 302 also
carries ``X-Xet-Hash`` and ``Link: <.../xet-read-token/{rev}>; rel="xet-auth"``, and its
``Location`` is a signed URL on the CDN's origin
(``/xet-bridge-us/{id}/{sha256}?X-Amz-...&X-Amz-Expires=N&Expires=T&Policy=...&Signature=...
&Key-Pair-Id=...``) valid ``url_validity_seconds`` (3600 as on the hub; tests set a few
seconds, or move the stand-in's clock with :meth:`HubStandIn.advance`). The CDN answers an
expired or unknown signature with 403, honours ``Range`` with 206 and an ETag of its own (an
MD5, as S3 names an object), sends none of the hub's headers (``X-Repo-Commit``,
``X-Linked-*``, ``X-Xet-Hash``), answers a ranged request that says ``Accept-Encoding: gzip``
with 200 and the whole body (CloudFront's quirk, huggingface_hub#3778), and refuses some valid
ranges with ``403 Auth failed: invalid range`` (xet-core#897) when asked to
(``cdn_invalid_range``, ``cdn_invalid_range_every``). No answer of the hub's API carries
``X-Repo-Commit`` (the hub documents it for resolve answers only): the revision API's commit is
its body's ``sha``. Missing repos, revisions and
files are 404 with ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``,
``EntryNotFound``; a missing repo is 401 to a caller without a token, as on the real hub); a
gated repo without a token is 401 ``GatedRepo``. One-word legacy repo names (``gpt2``) work.

``/api/{models|datasets|spaces}/{repo}/tree/{revision}[/{path}]?recursive=true`` lists files as
``huggingface_hub.list_repo_tree`` expects (``[{"type": "file", "path", "size", "oid"}, ...]``,
with ``"lfs": {"oid": sha256, "size"}`` for the files served by the CDN), in pages of
``TREE_PAGE`` entries linked by ``Link: <...>; rel="next"`` (``cursor=`` is the offset here).
``/api/{models|datasets|spaces}/{repo}/revision/{revision}`` answers the revision's commit as
``{"id", "sha"}`` (what ``huggingface_hub.model_info(...).sha`` reads); in the 2025 shape every
API answer also carries ``X-Repo-Commit``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import math
import re
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import unquote, urlencode

from aiohttp import web

from tests.servers import Entry, Log, _range_of, _Running

LFS_THRESHOLD = 10_000
TREE_PAGE = 1000
TOKEN = "hf_test_token"
SHAPES = ("2026", "2025")
"""The hub's shapes the stand-in speaks: today's (Xet-era CDN, API answers without commits)
and the one before it."""
_SIGNING_KEY = b"stand-in CloudFront key"


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]]  # commit id -> files
    branches: dict[str, str]  # branch -> commit id
    gated: bool = False


class HubStandIn:
    """Repos in memory; ``log`` records every request (resolve, API and CDN).

    Knobs (set them on the instance): ``metadata_api`` (False: the one-call metadata route is
    unknown, a plain 404); ``latency_seconds`` added before every answer of the hub and the CDN;
    ``rate_limit = (quota, window_seconds)`` makes the hub count requests in fixed windows, send
    ``RateLimit``/``RateLimit-Policy`` on every answer and 429 with ``Retry-After`` over the
    quota (``throttled`` counts those). ``rate_limits = {"api": (quota, window_seconds), ...}``
    does so per bucket as the real hub does: ``api`` for ``/api/...``, ``resolvers`` for
    ``/resolve/`` URLs, ``pages`` for the rest, each answer carrying its bucket's fields in the
    hub's form (``RateLimit-Policy: "fixed window";"api";q=500;w=300``,
    ``RateLimit: "api";r=499;t=300``); a bucket not in the mapping is not limited.
    ``faults`` (:meth:`fail`) answers chosen requests with an error instead; ``before`` is
    awaited with each request's path before the hub answers it (a test pushes a commit there,
    between two reads of one discovery). ``listed_sizes`` (path -> bytes) makes the hub list a
    size other than the file's (in ``X-Linked-Size`` and the tree listing), as a hub whose
    record and bytes disagree would.

    The 2026 shape's knobs: ``url_validity_seconds`` (how long a signed CDN URL is valid),
    :meth:`advance` (moves the stand-in's clock, so that URLs expire without a test sleeping),
    ``cdn_invalid_range`` (the next n ranged CDN requests are refused with ``403 Auth failed:
    invalid range``) and ``cdn_invalid_range_every`` (every n-th ranged CDN request is; 0:
    none). ``signed`` counts the signed URLs handed out, ``refused`` the CDN's 403s.

    Args:
        shape: ``"2026"`` (the default) or ``"2025"`` (see the module).
        url_validity_seconds: the signed URLs' validity, in seconds (the hub's: 3600).

    Raises:
        ValueError: an unknown ``shape`` or a validity that is not positive.
    """

    def __init__(self, shape: str = "2026", *, url_validity_seconds: float = 3600.0) -> None:
        if shape not in SHAPES:
            raise ValueError(f"HubStandIn(shape=...): expected one of {SHAPES}, got {shape!r}")
        if not url_validity_seconds > 0:
            raise ValueError(
                "HubStandIn(url_validity_seconds=...): expected a positive number of seconds, "
                f"got {url_validity_seconds!r}"
            )
        self.shape = shape
        self.url_validity_seconds = url_validity_seconds
        self.cdn_invalid_range = 0
        self.cdn_invalid_range_every = 0
        self.signed = 0
        self.refused = 0
        self._cdn_ranged = 0
        self._skew_seconds = 0.0
        self._signatures: dict[str, float] = {}  # signature -> expiry (the stand-in's clock)
        self.repos: dict[str, Repo] = {}
        self.log = Log()
        self.metadata_api = True
        self.latency_seconds = 0.0
        self.rate_limit: tuple[int, float] | None = None
        self.rate_limits: dict[str, tuple[int, float]] = {}
        self.throttled = 0
        self.throttled_at: list[float] = []  # time.monotonic() of each 429
        self._windows: dict[str, tuple[float, int]] = {}  # bucket -> (start, requests counted)
        self.faults: list[tuple[str, int, dict[str, str]]] = []
        self.before: Callable[[str], Awaitable[None]] | None = None
        self.listed_sizes: dict[str, int] = {}
        self.listed_sha256: dict[str, str] = {}
        self.size_etags = False
        self._blobs: dict[str, bytes] = {}
        # Digests of the files pushed, by identity (each entry holds its bytes, so an id is
        # never reused while it is here): a large file is hashed once, not on every request.
        self._digests: dict[tuple[str, int], tuple[bytes, str]] = {}
        app = web.Application()
        app.router.add_route("*", "/{tail:.+}", self._resolve)
        self._running = _Running(app)
        self.endpoint = f"http://127.0.0.1:{self._running.port}"
        # The CDN is another origin, as on the real hub: credentials must not follow redirects.
        cdn = web.Application()
        cdn.router.add_route("*", "/cdn/{sha}", self._cdn)
        cdn.router.add_route("*", "/xet-bridge-us/{id}/{sha}", self._cdn)
        self._cdn_running = _Running(cdn)
        self.cdn = f"http://127.0.0.1:{self._cdn_running.port}"

    @property
    def modern(self) -> bool:
        """Whether the stand-in speaks the 2026 shape."""
        return self.shape == "2026"

    def now(self) -> float:
        """The stand-in's clock (Unix seconds), moved on by :meth:`advance`."""
        return time.time() + self._skew_seconds

    def advance(self, seconds: float) -> None:
        """Move the stand-in's clock ``seconds`` ahead: signed URLs expire as if that much time
        had passed."""
        self._skew_seconds += seconds

    def cdn_entries(self) -> list[Entry]:
        """The requests the CDN saw."""
        return [e for e in self.log.entries if e.path.startswith(("/cdn/", "/xet-bridge-us/"))]

    def cdn_ranges(self) -> list[tuple[int, int]]:
        """(start, end exclusive) of each ranged request the CDN saw, in order (its paths name
        blobs, not files: in a test of one file, that file's reads)."""
        found = []
        for entry in self.cdn_entries():
            match = re.match(r"bytes=(\d+)-(\d+)", entry.range or "")
            if match:
                found.append((int(match.group(1)), int(match.group(2)) + 1))
        return found

    def _signed_location(self, sha: str) -> str:
        """A CDN URL for blob ``sha``, signed and valid ``url_validity_seconds`` from now, in
        the form of the hub's 2026 redirects."""
        issued = self.now()
        expires = issued + self.url_validity_seconds
        whole_seconds = math.ceil(self.url_validity_seconds)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(issued))
        self.signed += 1
        policy = json.dumps(
            {"Statement": [{"Condition": {"DateLessThan": {"AWS:EpochTime": int(expires)}}}]}
        )
        path = f"/xet-bridge-us/{sha[:24]}/{sha}"
        nonce = f"{path}|{expires!r}|{self.signed}"
        signature = hmac.new(_SIGNING_KEY, nonce.encode(), hashlib.sha256).hexdigest()
        self._signatures[signature] = expires
        query = {
            "X-Amz-Algorithm": "AWS4-HMAC-SHA256",
            "X-Amz-Content-Sha256": "UNSIGNED-PAYLOAD",
            "X-Amz-Credential": f"cas/{stamp[:8]}/us-east-1/s3/aws4_request",
            "X-Amz-Date": stamp,
            "X-Amz-Expires": str(whole_seconds),
            "X-Amz-Signature": signature[:32],
            "X-Amz-SignedHeaders": "host",
            "x-id": "GetObject",
            "Expires": str(int(expires)),
            "Policy": base64.urlsafe_b64encode(policy.encode()).decode("ascii"),
            "Signature": signature,
            "Key-Pair-Id": "K2L8F4GPSG1IFC",
        }
        return f"{self.cdn}{path}?{urlencode(query)}"

    def _digest(self, kind: str, data: bytes) -> str:
        """``hashlib.<kind>(data).hexdigest()``, computed once per pushed file."""
        held = self._digests.get((kind, id(data)))
        if held is None or held[0] is not data:
            held = (data, hashlib.new(kind, data).hexdigest())
            self._digests[(kind, id(data))] = held
        return held[1]

    def stop(self) -> None:
        self._running.stop()
        self._cdn_running.stop()

    def add(self, repo_id: str, files: dict[str, bytes], *, gated: bool = False) -> str:
        """Create a repo whose main branch holds ``files``; returns the commit id."""
        self.repos[repo_id] = Repo({}, {}, gated)
        return self.push(repo_id, files)

    def push(self, repo_id: str, files: dict[str, bytes]) -> str:
        """A new commit on main holding ``files``; older commits stay readable."""
        repo = self.repos[repo_id]
        commit = hashlib.sha1(
            repo_id.encode() + str(len(repo.commits)).encode() + b"".join(sorted(files.values()))
        ).hexdigest()
        repo.commits[commit] = dict(files)
        repo.branches["main"] = commit
        for data in files.values():
            self._blobs[self._digest("sha256", data)] = data
        return commit

    def fail(self, fragment: str, status: int, times: int = 1, **headers: str) -> None:
        """Answer the next ``times`` hub requests whose path holds ``fragment`` with ``status``
        and ``headers`` (underscores in a name become dashes), before any other rule."""
        fields = {name.replace("_", "-"): value for name, value in headers.items()}
        self.faults += [(fragment, status, fields)] * times

    def _fault(self, entry: Entry) -> web.Response | None:
        for i, (fragment, status, headers) in enumerate(self.faults):
            if fragment in entry.path:
                del self.faults[i]
                entry.status = status
                return web.Response(status=status, headers=headers, text="injected")
        return None

    def _lookup(
        self, request: web.Request, entry: Entry, repo_id: str, revision: str
    ) -> tuple[str, dict[str, bytes]] | web.Response:
        """(commit, files) of a repo at a revision, or the error answer (404, gated 401)."""
        repo = self.repos.get(repo_id)
        if repo is None:
            # As the hub does: 401 to anonymous callers (the repo may be private), else 404.
            anonymous = "Authorization" not in request.headers
            return self._error(entry, 401 if anonymous else 404, "RepoNotFound")
        if repo.gated and request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self._error(entry, 401, "GatedRepo")
        found = self._find(repo, revision)
        if found is None:
            return self._error(entry, 404, "RevisionNotFound")
        return found

    def _find(self, repo: Repo, revision: str) -> tuple[str, dict[str, bytes]] | None:
        commit = repo.branches.get(revision, revision)
        files = repo.commits.get(commit)
        return None if files is None else (commit, files)

    async def _resolve(self, request: web.Request) -> web.StreamResponse:
        tail = request.match_info["tail"]
        entry = Entry("/" + tail, request.headers.get("Range"), 0, 0, dict(request.headers))
        self.log.entries.append(entry)
        if self.latency_seconds:
            await asyncio.sleep(self.latency_seconds)
        if self.before is not None:
            await self.before(entry.path)
        fault = self._fault(entry)
        if fault is not None:
            return fault
        limit_headers = self._count_request(tail)
        if limit_headers is not None and limit_headers.get("Retry-After"):
            entry.status = 429
            return web.Response(status=429, headers=limit_headers, text="rate limited")
        response = self._route(request, entry, tail)
        if limit_headers:
            response.headers.update(limit_headers)
        return response

    def _count_request(self, tail: str) -> dict[str, str] | None:
        """Fixed-window accounting: the RateLimit headers of this answer (with Retry-After
        when over the quota), or None when no limit applies."""
        if self.rate_limit is not None:
            quota, window = self.rate_limit
            return self._count("hub", quota, window, policy=f'"hub";q={quota};w={window:g}')
        bucket = (
            "api"
            if tail.startswith("api/")
            else "resolvers"
            if "/resolve/" in f"/{tail}"
            else "pages"
        )
        if bucket not in self.rate_limits:
            return None
        quota, window = self.rate_limits[bucket]
        policy = f'"fixed window";"{bucket}";q={quota};w={window:g}'
        return self._count(bucket, quota, window, policy=policy, whole_seconds=True)

    def _count(
        self, bucket: str, quota: int, window: float, *, policy: str, whole_seconds: bool = False
    ) -> dict[str, str]:
        now = time.monotonic()
        start, used = self._windows.get(bucket, (0.0, 0))
        if now - start >= window:
            start, used = now, 0
        reset = max(0.0, start + window - now)
        headers = {"RateLimit-Policy": policy}
        if used >= quota:
            self.throttled += 1
            self.throttled_at.append(now)
            headers["RateLimit"] = f'"{bucket}";r=0;t={math.ceil(reset)}'
            headers["Retry-After"] = str(math.ceil(reset))
            return headers
        used += 1
        self._windows[bucket] = (start, used)
        shown = str(math.ceil(reset)) if whole_seconds else f"{reset:.3f}"
        headers["RateLimit"] = f'"{bucket}";r={quota - used};t={shown}'
        return headers

    def _route(self, request: web.Request, entry: Entry, tail: str) -> web.Response:
        if tail.startswith("api/") and "/safetensors-metadata/" in tail and self.metadata_api:
            return self._sharded_metadata(request, entry, tail)
        if tail.startswith("api/") and "/revision/" in tail:
            return self._revision(request, entry, tail)
        if tail.startswith("api/"):
            return self._tree(request, entry, tail)
        # Legacy repos have one-word names (``gpt2``), and the hub still serves them.
        match = re.fullmatch(
            r"(?:(datasets|spaces)/)?((?:[^/]+/)?[^/]+)/resolve/([^/]+)/(.+)", tail
        )
        if match is None:
            entry.status = 404
            return web.Response(status=404, text="unknown route")
        repo_id, revision, path = match.group(2), match.group(3), match.group(4)
        if match.group(1):
            repo_id = f"{match.group(1)}/{repo_id}"
        found = self._lookup(request, entry, repo_id, revision)
        if isinstance(found, web.Response):
            return found
        commit, files = found
        data = files.get(path)
        if data is None:
            return self._error(entry, 404, "EntryNotFound", commit=commit)
        sha = self._digest("sha256", data)
        headers = {"X-Repo-Commit": commit}
        if len(data) >= LFS_THRESHOLD:
            entry.status = 302
            headers.update(
                {
                    "Location": self._signed_location(sha)
                    if self.modern
                    else f"{self.cdn}/cdn/{sha}",
                    "ETag": f'"{sha}"',
                    "X-Linked-Etag": f'"{sha}"',
                    "X-Linked-Size": str(self.listed_sizes.get(path, len(data))),
                }
            )
            if self.modern:
                kind = match.group(1) or "models"
                token_url = f"{self.endpoint}/api/{kind}/{repo_id}/xet-read-token/{commit}"
                headers["X-Xet-Hash"] = self._digest("sha3_256", data)
                headers["Link"] = f'<{token_url}>; rel="xet-auth"'
            return web.Response(status=302, headers=headers)
        headers["ETag"] = f'"{len(data) if self.size_etags else self._digest("sha1", data)}"'
        return self._ranged(request, entry, data, headers)

    def _sharded_metadata(self, request: web.Request, entry: Entry, tail: str) -> web.Response:
        """``/api/models/{repo}/safetensors-metadata/{index path}``: every shard header of the
        model on main, as ``{"index": {...without weight_map}, "headers": {shard: header}}``."""
        match = re.fullmatch(r"api/models/([^/]+/[^/]+)/safetensors-metadata/(.+)", tail)
        if match is None:
            entry.status = 404
            return web.Response(status=404, text="unknown route")
        repo_id, index_path = match.group(1), unquote(match.group(2))
        found = self._lookup(request, entry, repo_id, "main")
        if isinstance(found, web.Response):
            return found
        commit, files = found
        data = files.get(index_path)
        if data is None:
            return self._error(entry, 404, "EntryNotFound", commit=None if self.modern else commit)
        try:
            index = json.loads(data)
        except ValueError:
            entry.status = 400
            return web.Response(status=400, text="the index is not JSON")
        folder = index_path.rpartition("/")[0]
        headers = {}
        for shard in dict.fromkeys(index["weight_map"].values()):
            blob = files[f"{folder}/{shard}" if folder else shard]
            (n,) = struct.unpack_from("<Q", blob)
            headers[shard] = json.loads(blob[8 : 8 + n])
        body = {"index": {k: v for k, v in index.items() if k != "weight_map"}, "headers": headers}
        entry.status = 200
        return web.json_response(body, headers=self._api_headers(commit))

    def _tree(self, request: web.Request, entry: Entry, tail: str) -> web.Response:
        match = re.fullmatch(
            r"api/(models|datasets|spaces)/([^/]+/[^/]+)/tree/([^/]+)(?:/(.+))?", tail
        )
        if match is None:
            entry.status = 404
            return web.Response(status=404, text="unknown route")
        kind, repo_id, revision, folder = match.groups()
        if kind != "models":
            repo_id = f"{kind}/{repo_id}"
        found = self._lookup(request, entry, repo_id, revision)
        if isinstance(found, web.Response):
            return found
        commit, files = found
        recursive = request.query.get("recursive", "false").lower() == "true"
        prefix = f"{folder}/" if folder else ""
        listed = []
        for path in sorted(files):
            if not path.startswith(prefix):
                continue
            rest = path[len(prefix) :]
            if "/" in rest and not recursive:
                continue
            data = files[path]
            size = self.listed_sizes.get(path, len(data))
            item: dict[str, object] = {
                "type": "file",
                "path": path,
                "size": size,
                "oid": self._digest("sha1", data),
            }
            if len(data) >= LFS_THRESHOLD:
                sha = self.listed_sha256.get(path, self._digest("sha256", data))
                item["lfs"] = {"oid": sha, "size": size}
            listed.append(item)
        start = int(request.query.get("cursor", "0"))
        page = listed[start : start + TREE_PAGE]
        headers = self._api_headers(commit)
        if start + TREE_PAGE < len(listed):
            query = dict(request.query, cursor=str(start + TREE_PAGE))
            headers["Link"] = f'<{request.url.with_query(query)}>; rel="next"'
        entry.status = 200
        return web.json_response(page, headers=headers)

    def _revision(self, request: web.Request, entry: Entry, tail: str) -> web.Response:
        match = re.fullmatch(
            r"api/(models|datasets|spaces)/((?:[^/]+/)?[^/]+)/revision/([^/]+)", tail
        )
        if match is None:
            entry.status = 404
            return web.Response(status=404, text="unknown route")
        kind, repo_id, revision = match.groups()
        if kind != "models":
            repo_id = f"{kind}/{repo_id}"
        found = self._lookup(request, entry, repo_id, unquote(revision))
        if isinstance(found, web.Response):
            return found
        commit, _ = found
        entry.status = 200
        return web.json_response({"id": repo_id, "sha": commit}, headers=self._api_headers(commit))

    def _api_headers(self, commit: str) -> dict[str, str]:
        """The headers of an API answer about ``commit``: none of the commit in 2026."""
        return {} if self.modern else {"X-Repo-Commit": commit}

    async def _cdn(self, request: web.Request) -> web.StreamResponse:
        sha = request.match_info["sha"]
        entry = Entry(request.path, request.headers.get("Range"), 0, 0, dict(request.headers))
        self.log.entries.append(entry)
        if self.latency_seconds:
            await asyncio.sleep(self.latency_seconds)
        if "id" in request.match_info:  # the 2026 CDN: a signed URL
            return self._cdn_2026(request, entry, sha)
        data = self._blobs.get(sha)
        if data is None:
            entry.status = 404
            return web.Response(status=404)
        return self._ranged(request, entry, data, {"ETag": f'"{sha}"'})

    def _cdn_2026(self, request: web.Request, entry: Entry, sha: str) -> web.Response:
        """The Xet-era CDN: a valid signature or 403; its own ETag and no hub headers; 200 and
        the whole body to a ranged request that accepts gzip; the refusals asked for."""
        expires = self._signatures.get(request.query.get("Signature", ""))
        if expires is None or self.now() >= expires:
            return self._refuse(entry, "Request has expired" if expires else "Access denied")
        data = self._blobs.get(sha)
        if data is None:
            entry.status = 404
            return web.Response(status=404, text="NoSuchKey")
        headers = {
            "ETag": f'"{self._digest("md5", data)}"',
            "Content-Type": "application/octet-stream",
            "X-Cache": "Miss from cloudfront",
            "Via": "1.1 stand-in.cloudfront.net (CloudFront)",
        }
        ranged = "Range" in request.headers
        if ranged:
            self._cdn_ranged += 1
            every = self.cdn_invalid_range_every
            if self.cdn_invalid_range > 0 or (every and self._cdn_ranged % every == 0):
                self.cdn_invalid_range = max(0, self.cdn_invalid_range - 1)
                return self._refuse(entry, "Auth failed: invalid range")
        if ranged and "gzip" in request.headers.get("Accept-Encoding", "").lower():
            entry.status = 200
            entry.sent_bytes = len(data) if request.method == "GET" else 0
            return web.Response(status=200, body=data, headers=headers)
        return self._ranged(request, entry, data, headers)

    def _refuse(self, entry: Entry, reason: str) -> web.Response:
        self.refused += 1
        entry.status = 403
        return web.Response(status=403, text=reason)

    def _error(
        self, entry: Entry, status: int, code: str, *, commit: str | None = None
    ) -> web.Response:
        entry.status = status
        headers = {"X-Error-Code": code}
        if commit:
            headers["X-Repo-Commit"] = commit
        return web.Response(status=status, headers=headers, text=code)

    def _ranged(
        self, request: web.Request, entry: Entry, data: bytes, headers: dict[str, str]
    ) -> web.Response:
        rng = re.fullmatch(r"bytes=(\d*)-(\d*)", request.headers.get("Range", ""))
        headers["Accept-Ranges"] = "bytes"
        if rng is None or rng.group(0) == "bytes=-":
            entry.status = 200
            entry.sent_bytes = len(data) if request.method == "GET" else 0
            return web.Response(status=200, body=data, headers=headers)
        start, last = _range_of(rng, len(data))
        if start >= len(data):
            entry.status = 416
            headers["Content-Range"] = f"bytes */{len(data)}"
            return web.Response(status=416, headers=headers)
        body = data[start : last + 1]
        headers["Content-Range"] = f"bytes {start}-{last}/{len(data)}"
        entry.status = 206
        entry.sent_bytes = len(body) if request.method == "GET" else 0
        return web.Response(status=206, body=body, headers=headers)

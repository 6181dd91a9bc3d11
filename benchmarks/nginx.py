"""nginx as the loopback static file server of the large-tensor tables, when it is installed.

The issue behind these tables names "a loopback static server (nginx or aiohttp in another
process)". nginx serves a range with ``sendfile`` for a few tens of microseconds of CPU, where
aiohttp's static handler spends about a millisecond per request on ``stat`` and ``open`` in its
thread pool: with nginx, a reader's request count costs what it costs on a real CDN.

One worker process, ``sendfile on``, keep-alive without a request limit, and an access log of
method, status and body bytes that :meth:`Nginx.stats` reads to count requests and bytes as the
aiohttp server's ``/__stats`` does. Install it with ``apt-get install nginx-light`` (Debian).

Two shapes of link besides plain loopback: ``limit_rate`` caps each connection's send rate
(bytes per second, nginx's ``limit_rate``), the shape of a WAN or of S3, where one connection
carries a fraction of the link and clients open many; ``tls`` (a certificate and its key, PEM
files) serves HTTPS, its CA given to the clients (``SSL_CERT_FILE``, ``curl --cacert``).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CONFIG = """\
{user}worker_processes 1;
daemon off;
pid {state}/nginx.pid;
error_log {state}/error.log;
events {{ worker_connections 1024; }}
http {{
    log_format counts '$request_method $status $body_bytes_sent';
    access_log {state}/access.log counts;
    sendfile on;
    tcp_nopush on;
    keepalive_requests 1000000;
    client_body_temp_path {state}/body;
    proxy_temp_path {state}/proxy;
    fastcgi_temp_path {state}/fastcgi;
    uwsgi_temp_path {state}/uwsgi;
    scgi_temp_path {state}/scgi;
    server {{
        listen 127.0.0.1:{port}{ssl};
        root {root};
{extra}    }}
}}
"""


def binary() -> str | None:
    """The nginx executable (PATH, then /usr/sbin), or None when it is not installed."""
    return shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/usr/local/sbin")


class Nginx:
    """A running nginx serving ``root`` on a free loopback port."""

    name = "nginx"

    def __init__(
        self,
        executable: str,
        root: Path,
        state: Path,
        *,
        limit_rate: int | None = None,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self._log = state / "access.log"
        # As root, nginx runs its worker as `nobody`, which cannot enter a private temporary
        # folder; keep the worker as root there.
        user = "user root;\n" if os.geteuid() == 0 else ""
        config = state / "nginx.conf"
        extra = ""
        if limit_rate is not None:
            extra += f"        limit_rate {limit_rate};\n"
        if tls is not None:
            extra += f"        ssl_certificate {tls[0]};\n        ssl_certificate_key {tls[1]};\n"
        config.write_text(
            CONFIG.format(
                user=user,
                state=state,
                port=port,
                root=root,
                ssl=" ssl" if tls else "",
                extra=extra,
            )
        )
        self.process = subprocess.Popen(
            [executable, "-c", str(config), "-e", str(state / "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log = (state / "error.log").read_text()
                    raise RuntimeError(f"nginx did not start: {log}") from None
                time.sleep(0.02)
        self._read = 0

    def stats(self) -> dict[str, int]:
        """Requests and GET body bytes logged since the last call."""
        with self._log.open("rb") as log:
            log.seek(self._read)
            lines = log.read().decode().splitlines()
            self._read = log.tell()
        gets = [line.split() for line in lines if line.startswith("GET ")]
        return {"requests": len(lines), "bytes": sum(int(fields[2]) for fields in gets)}

    def worker_cpu_seconds(self) -> float:
        """CPU (user and system) that nginx's processes have used so far, from /proc."""
        pids = [self.process.pid]
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children")
        pids += [int(pid) for pid in children.read_text().split()]
        total = 0.0
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)


@contextmanager
def serving(
    root: Path, *, limit_rate: int | None = None, tls: tuple[Path, Path] | None = None
) -> Iterator[Nginx | None]:
    """nginx serving ``root`` (see :class:`Nginx` for ``limit_rate`` and ``tls``), or None when
    nginx is not installed."""
    executable = binary()
    if executable is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="nginx-") as state:
        server = Nginx(executable, root, Path(state), limit_rate=limit_rate, tls=tls)
        try:
            yield server
        finally:
            server.stop()

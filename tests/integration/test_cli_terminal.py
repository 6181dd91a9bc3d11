"""The command line in a pseudo-terminal of 80 columns: tables that never cut a name, and the
status line that shows a wait."""

from __future__ import annotations

import fcntl
import os
import re
import select
import socket
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import numpy as np

from tests.reference import write_reference
from tests.servers import FaultyServer

COLUMNS = 80
_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def in_terminal(*argv: str, columns: int = COLUMNS, timeout: float = 60) -> tuple[int, str]:
    """Run ``python -m remotetensors ARGV`` with stdin, stdout and stderr on a pty of
    ``columns`` columns; returns the exit status and everything it wrote (CRLF as in a tty)."""
    primary, secondary = os.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["TERM"] = "xterm"
    process = subprocess.Popen(
        [sys.executable, "-m", "remotetensors", *argv],
        stdin=secondary,
        stdout=secondary,
        stderr=secondary,
        env=env,
        close_fds=True,
    )
    os.close(secondary)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.1)
            if ready:
                try:
                    data = os.read(primary, 65536)
                except OSError:  # EIO: the other side is closed
                    break
                if not data:
                    break
                chunks.append(data)
            elif process.poll() is not None:
                break
        status = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(primary)
    return status, b"".join(chunks).decode()


def screen_lines(output: str) -> list[str]:
    """What stays on the screen line by line: escapes removed, each ``\\r`` redraw resolved."""
    lines = []
    for raw in output.replace("\r\n", "\n").split("\n"):
        lines.append(_ESCAPE.sub("", raw.split("\r")[-1]))
    return lines


def test_ls_never_cuts_names_in_80_columns(faulty: FaultyServer) -> None:
    names = [
        f"model.layers.{i}.self_attn.{p}_proj.weight" for i in (0, 17) for p in ("q", "k", "v", "o")
    ]
    names += [f"model.layers.17.mlp.experts.{i}.gate_up_proj.weight_scale_inv" for i in range(3)]
    tensors = {name: np.ones((4096, 512), np.float16)[:8] for name in names}
    url = faulty.put("very-long-shard-name-00001-of-00009.safetensors", write_reference(tensors))
    status, output = in_terminal("ls", url)
    assert status == 0, output
    lines = screen_lines(output)
    assert all(len(line) <= COLUMNS for line in lines), lines
    for name in names:
        assert any(re.search(rf"(^|\s){re.escape(name)}(\s|$)", line) for line in lines), name
    header = next(line for line in lines if line.startswith("name"))
    assert "file" not in header  # dropped to make room, before any name is cut
    assert "shape" in header
    # A name longer than the terminal: each gets a line of its own, still whole.
    long_name = "model." + ".".join(f"block{i}" for i in range(12)) + ".weight"
    assert len(long_name) > COLUMNS
    url = faulty.put("long.safetensors", write_reference({long_name: np.ones(3, np.float32)}))
    status, output = in_terminal("ls", url)
    assert status == 0, output
    assert long_name in screen_lines(output)


def test_numbers_are_right_aligned(faulty: FaultyServer) -> None:
    tensors: dict[str, np.ndarray[Any, Any]] = {
        "big": np.ones((1000, 100), np.float32),
        "small": np.ones(3, np.float16),
    }
    url = faulty.put("m.safetensors", write_reference(tensors))
    status, output = in_terminal("params", url)
    assert status == 0, output
    lines = [line for line in screen_lines(output) if line]
    table = lines[lines.index(next(line for line in lines if line.startswith("dtype"))) :]
    # Right-aligned: every row of the table (header included) ends in the same column.
    assert len({len(line) for line in table}) == 1, table
    assert re.match(r"dtype +parameters +human", table[0])


def test_a_silent_server_shows_a_status_line_then_one_error() -> None:
    with socket.socket() as listener:  # accepts, never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/x.safetensors"
        status, output = in_terminal("info", url, "--timeout", "1.5", "--retries", "1")
    assert status == 1
    assert "remotetensors: waiting" in output
    assert "retry 1 of 1 after: request timed out" in output
    final = [line for line in screen_lines(output) if line.strip()]
    assert final == [
        f"remotetensors: error: {url}: request timed out (no data for 1.5 s) (gave up after 2 "
        "attempts)"
    ]


def test_a_slow_download_shows_a_moving_bar(tmp_path: Path) -> None:
    from tests.integration.test_cli_first_contact import TrickleServer

    # 8 MiB at about 3 MB/s, one request at a time (the streams would otherwise share it out
    # and be done before the bar shows): a few seconds; the bar moves while it runs.
    server = TrickleServer(write_reference({"big": np.zeros((2048, 1024), np.float32)}))
    try:
        status, output = in_terminal(
            "get", server.url, "big", "-o", str(tmp_path / "big.npy"), "--concurrency", "1"
        )
    finally:
        server.stop()
    assert status == 0, output
    shown = {int(p) for p in re.findall(r"big\.safetensors: +(\d+)%\|", output)}
    assert len(shown - {0, 100}) >= 2, output  # several steps in between, not one jump

"""Run aiohttp's static file handler on a free loopback port in its own process.

Usage: python -m tests.serve_static FOLDER  -> prints the port on the first line, serves until
stdin closes. Benchmarks use it so that server and client do not share a GIL.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.servers import static_server


def main() -> None:
    with static_server(Path(sys.argv[1])) as (url, _):
        print(url.rsplit(":", 1)[1], flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()

"""Coming back: a 300-repo parameter scan a first and a second time, with the persistent header
cache, against a loop over huggingface_hub's ``get_safetensors_metadata`` (which caches no
metadata), on the loopback hub of ``benchmarks/server.py`` at 50 ms per request.

Usage:  python benchmarks/cache.py [--repos 300] [--latency-ms 50] [--rounds 3]

Every scan runs in a fresh process (a leaderboard refreshing next week, a job on another day),
so what a second scan saves comes from the cache folder alone, not from the process's memory;
the time reported is the scan's own (imports and start-up left out). Each round gives each tool
a fresh cache folder, then scans twice with it (first, second); remotetensors also scans a third
time offline (``HF_HUB_OFFLINE=1``). The tools take turns from round to round, and the table
shows medians over the rounds, with the server's requests, body bytes and the files' share of
them. Two thirds of the repos hold one file, one third a 4-shard checkpoint (see
``benchmarks/scan.py``); remotetensors reads ``config.json`` beside the weights (absent here:
a 404 it keeps as such), as ``rt.scan`` does by default.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import machine, serving, table
from scan import write_repos

HERE = Path(__file__).resolve()


def scan_here(tool: str, url: str, repos: list[str]) -> dict[str, object]:
    """One scan in this process (the child's side): seconds and counts."""
    if tool == "remotetensors":
        import remotetensors as rt

        list(rt.scan([]))  # its modules imported before the clock, as huggingface_hub's are
        started = time.perf_counter()
        counts = {}
        for result in rt.scan([f"hf://{r}" for r in repos], concurrency=16, token=False):
            assert result.summary is not None, result.error
            counts[result.location[len("hf://") :]] = result.summary.stored_parameters
    else:
        from huggingface_hub import HfApi

        api = HfApi(endpoint=url, token=False)
        started = time.perf_counter()
        counts = {r: sum(api.get_safetensors_metadata(r).parameter_count.values()) for r in repos}
    return {"seconds": time.perf_counter() - started, "counts": counts}


def scan_in_child(tool: str, url: str, repos_file: Path, env: dict[str, str]) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, str(HERE), "--child", tool, url, str(repos_file)],
        env={**os.environ, **env, "HF_ENDPOINT": url, "HF_HUB_DISABLE_PROGRESS_BARS": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repos", type=int, default=300)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--child", nargs=3, metavar=("TOOL", "URL", "REPOS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.child:
        tool, url, repos_file = args.child
        print(json.dumps(scan_here(tool, url, json.loads(Path(repos_file).read_text()))))
        return
    rows: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        repos = write_repos(root, args.repos)
        (root / "files").mkdir()
        repos_file = root / "repos.json"
        repos_file.write_text(json.dumps(repos))
        expected: dict[str, object] | None = None
        with serving(root, args.latency_ms) as server:
            for round_ in range(args.rounds):
                tools = ["remotetensors", "huggingface_hub"]
                for tool in tools if round_ % 2 == 0 else tools[::-1]:
                    cache = root / f"cache-{tool}-{round_}"
                    env = {"REMOTETENSORS_CACHE": str(cache), "HF_HUB_CACHE": str(cache)}
                    visits = ["first", "second"]
                    if tool == "remotetensors":
                        visits.append("offline")
                    for visit in visits:
                        extra = {"HF_HUB_OFFLINE": "1"} if visit == "offline" else {}
                        server.stats()
                        result = scan_in_child(tool, server.url, repos_file, {**env, **extra})
                        stats = server.stats()
                        if expected is None:
                            expected = result["counts"]  # type: ignore[assignment]
                        assert result["counts"] == expected, f"{tool} {visit}: counts differ"
                        rows.setdefault(f"{tool} | {visit}", []).append(
                            {
                                "seconds": float(result["seconds"]),  # type: ignore[arg-type]
                                "requests": stats["requests"],
                                "bytes": stats["bytes"],
                                "file_bytes": stats["file_bytes"],
                            }
                        )
    print(f"{machine()}\n")
    print(
        f"{args.repos} repos at {args.latency_ms:g} ms per request; medians of {args.rounds} "
        "rounds (tools alternating); each scan in a fresh process\n"
    )
    lines = []
    first: dict[str, float] = {}
    for name, runs in rows.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        tool = name.split(" | ")[0]
        first.setdefault(tool, med["seconds"])
        lines.append(
            [
                *name.split(" | "),
                f"{med['seconds']:.2f}",
                f"{med['seconds'] / first[tool]:.2f}x",
                f"{med['requests']:.0f}",
                f"{med['requests'] / args.repos:.2f}",
                f"{med['bytes']:,.0f}",
                f"{med['file_bytes']:,.0f}",
            ]
        )
    print(
        table(
            [
                "tool",
                "scan",
                "time (s)",
                "vs its first",
                "requests",
                "per repo",
                "bytes",
                "file bytes",
            ],
            lines,
        )
    )


if __name__ == "__main__":
    main()

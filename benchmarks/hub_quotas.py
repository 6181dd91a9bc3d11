"""Spending the hub's rate-limit buckets (issue 40, point 3): a scan and a re-scan of many repos
against the 2026 hub stand-in with scaled quotas, timed against the bound the quotas allow.

Usage:  python benchmarks/hub_quotas.py [--repos 1000] [--api 50] [--resolvers 300] [--window 5]

The stand-in (``tests/hub_standin.py``, its own process) counts ``/api/`` requests against
``api`` and ``/resolve/`` ones against ``resolvers`` in fixed windows and answers in the hub's
form (``RateLimit-Policy: "fixed window";"api";q=50;w=5``, ``RateLimit: "api";r=..;t=..``,
429 with ``Retry-After`` past the quota). Every fifth repo is a 2-shard checkpoint, the rest one
file; ``rt.scan(concurrency=16, read_configs=False)``.

The bound is the time the quotas' sustained rates allow for the requests each repo needs: on
the first scan a single-file repo needs its file (``resolvers``), a sharded one its single
file's 404, its index (``resolvers``) and its shards' headers (one ``api`` call, or two range
reads); on the re-scan each repo needs its commit, from either bucket. The re-scan starts once
the first scan's windows have ended.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.hub_standin import HubStandIn

import remotetensors as rt
from remotetensors.sources.hub import repo as hub_repo


def _serve(pipe: Any, repos: int, quotas: dict[str, tuple[int, float]]) -> None:
    hub = HubStandIn("2026")
    expected = {}
    rng = np.random.default_rng(0)
    for i in range(repos):
        name = f"quota/m{i}"
        if i % 5 == 0:
            shards, weight_map, total = {}, {}, 0
            for s in range(2):
                part = {f"l{s}.w": rng.standard_normal((8, 8)).astype(np.float32)}
                shard = f"model-{s + 1:05d}-of-00002.safetensors"
                shards[shard] = save(part)
                weight_map.update(dict.fromkeys(part, shard))
                total += sum(t.size for t in part.values())
            index = {"metadata": {}, "weight_map": weight_map}
            hub.add(name, {**shards, "model.safetensors.index.json": json.dumps(index).encode()})
            expected[f"hf://{name}"] = total
        else:
            hub.add(name, {"model.safetensors": save({"w": np.ones(i + 1, np.int8)})})
            expected[f"hf://{name}"] = i + 1
    hub.rate_limits = dict(quotas)
    pipe.send((hub.endpoint, expected))
    while True:
        command = pipe.recv()
        if command == "counts":
            sent = {"api": 0, "resolvers": 0}
            for entry in hub.log.entries:
                if entry.path.startswith("/api/"):
                    sent["api"] += 1
                elif "/resolve/" in entry.path:
                    sent["resolvers"] += 1
            pipe.send((sent, list(hub.throttled_at)))
            hub.log.clear()
        elif command == "now":
            pipe.send(time.monotonic())
        else:
            hub.stop()
            pipe.send(None)
            return


def main() -> None:
    import multiprocessing

    parser = argparse.ArgumentParser()
    parser.add_argument("--repos", type=int, default=1000)
    parser.add_argument("--api", type=int, default=50)
    parser.add_argument("--resolvers", type=int, default=300)
    parser.add_argument("--window", type=float, default=5.0)
    args = parser.parse_args()
    quotas = {"api": (args.api, args.window), "resolvers": (args.resolvers, args.window)}
    os.environ["REMOTETENSORS_CACHE"] = tempfile.mkdtemp(prefix="rt-quotas-")
    os.environ.pop("HF_TOKEN", None)
    hub_repo.resolve_token = lambda token: None
    context = multiprocessing.get_context("spawn")
    pipe, theirs = context.Pipe()
    server = context.Process(target=_serve, args=(theirs, args.repos, quotas))
    server.start()
    endpoint, expected = pipe.recv()
    os.environ["HF_ENDPOINT"] = endpoint
    sharded = sum(1 for i in range(args.repos) if i % 5 == 0)
    rates = {name: quota / window for name, (quota, window) in quotas.items()}
    needs = {
        "first": ({"resolvers": args.repos + sharded, "api": 0}, sharded),
        "re-scan": ({"resolvers": 0, "api": 0}, args.repos),
    }
    print(
        f"## {args.repos} repos, api {args.api} and resolvers {args.resolvers} per "
        f"{args.window:g} s\n"
    )
    print("| scan | time (s) | bound (s) | ratio | api | resolvers | 429s | windows with 429s |")
    print("|---|---|---|---|---|---|---|---|")
    options = rt.ReadOptions(read_configs=False, progress=False)
    try:
        for label, (fixed, flexible) in needs.items():
            if label == "re-scan":
                time.sleep(args.window)  # the first scan's windows have ended
            pipe.send("now")
            started_there = pipe.recv()
            started = time.monotonic()
            results = list(rt.scan(expected, concurrency=16, options=options))
            seconds = time.monotonic() - started
            counts = {r.location: r.summary.stored_parameters for r in results if r.summary}
            assert counts == expected, label
            pipe.send("counts")
            sent, throttled = pipe.recv()
            throttled = [at - started_there for at in throttled if at >= started_there]
            windows = sorted({int(at // args.window) for at in throttled})
            alone = max(fixed[name] / rate for name, rate in rates.items())
            bound = max(alone, (sum(fixed.values()) + flexible) / sum(rates.values()))
            print(
                f"| {label} | {seconds:.2f} | {bound:.2f} | {seconds / bound:.2f}x | "
                f"{sent['api']} | {sent['resolvers']} | {len(throttled)} | {windows} |"
            )
    finally:
        pipe.send("stop")
        pipe.recv()
        server.join(10)


if __name__ == "__main__":
    main()
